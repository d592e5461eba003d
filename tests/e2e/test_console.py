"""The web console in a real browser: Playwright driving Debian's chromium (headless) against the
server, the way a person uses it: streamed answers, tool rows, approvals, cancel, a reload in the
middle of a turn, an answer that tries to run script, and credentials. (docs/console.png is made
by tests/e2e/test_console_agents.py, on a server of two agents: it shows the picker.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from app.console_routes import FILES
from tests.e2e.harness import ROOT, ServerProcess
from tests.fakes.fake_llm import text, tool_calls

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)"),
]
SERVER_ENV = {"AGENT_TOOLS_REQUIRING_APPROVAL": "add"}
STATIC = ROOT / "app" / "console"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server.url + "/console")
    page.wait_for_selector("#agent-name:not(:text('A2A console'))")
    yield page
    context.close()
    assert not errors, errors


def say(page, message: str) -> None:
    page.wait_for_selector("#cancel", state="hidden")  # as a person would: the last turn ended
    page.fill("#input", message)
    page.press("#input", "Enter")


def last_answer(page):
    return page.locator(".message.agent .answer").last


def until_answer_shows(page, text: str, *, timeout_ms: float = 30_000) -> None:
    page.wait_for_function(
        "(text) => document.querySelector('.message.agent:last-child .answer')"
        "?.textContent.includes(text)",
        arg=text,
        timeout=timeout_ms,
    )


def test_the_page_is_served_offline_under_a_strict_policy(server):
    response = httpx.get(server.url + "/console", timeout=10)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert {path.name for path in STATIC.iterdir()} == set(FILES)  # every file is served
    for name in FILES:
        source = (STATIC / name).read_text()
        assert "//cdn" not in source and "https://" not in source.replace("https?:", ""), name
        assert httpx.get(f"{server.url}/console/{name}", timeout=10).status_code == 200
    assert httpx.get(server.url + "/console/../app/main.py", timeout=10).status_code == 404


def test_a_server_of_one_agent_offers_no_agent_to_pick(page, server):
    """Without an agents file, /agents lists the one agent: no picker, the console talks to `/`."""
    (listed,) = httpx.get(server.url + "/agents", timeout=10).json()["agents"]
    assert listed["url"] == server.url + "/.well-known/agent-card.json"
    assert page.is_hidden("#agent-picker")
    card = httpx.get(server.url + "/.well-known/agent-card.json", timeout=10).json()
    assert page.inner_text("#agent-name") == card["name"]
    assert "?agent=" not in page.url


def test_a_streamed_answer_shows_before_the_turn_ends(page, fake_llm, marker):
    pieces = [f"part{n} " for n in range(6)]
    fake_llm.script(text(pieces, chunk_delay=0.4, when_user_contains=marker))
    say(page, f"stream {marker}")
    until_answer_shows(page, "part1")
    assert page.is_visible("#cancel"), "the turn had already ended"
    page.wait_for_selector("#cancel", state="hidden")
    assert last_answer(page).inner_text().strip() == "".join(pieces).strip()


def test_a_tool_call_shows_with_its_arguments_and_result(page, fake_llm, marker):
    fake_llm.script(
        tool_calls([("slow_echo", {"text": "echoed", "seconds": 0.2})], when_user_contains=marker),
        text("**Done.**", when_user_contains=marker),
    )
    say(page, f"tool {marker}")
    row = page.locator(".tool[data-tool='slow_echo']").last
    row.locator("pre.result").wait_for()
    assert '"text":"echoed"' in row.locator("pre.arguments").inner_text()
    assert row.locator("pre.result").inner_text() == "echoed"
    assert "done in" in row.locator(".outcome").inner_text()
    assert last_answer(page).locator("strong").inner_text() == "Done."
    page.wait_for_selector(".message.agent:last-child .usage")
    assert "tokens:" in page.locator(".usage").last.inner_text()


def test_approve_and_deny_round_trips(page, fake_llm, marker):
    fake_llm.script(
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=f"yes {marker}"),
        text("The sum is 5.", when_user_contains=f"yes {marker}"),
        tool_calls([("add", {"a": 1, "b": 1})], when_user_contains=f"no {marker}"),
        text("You said no.", when_user_contains=f"no {marker}"),
    )
    say(page, f"yes {marker}")
    page.locator(".question button", has_text="Approve").last.click()
    page.wait_for_function("() => document.body.innerText.includes('The sum is 5.')")
    answered = page.locator(".question").first
    assert "answered" in (answered.get_attribute("class") or "")
    assert answered.locator("button", has_text="Deny").is_disabled()
    say(page, f"no {marker}")
    # The second question (the first one's box stays on the page, answered).
    page.locator(".question pre.pending").nth(1).wait_for()
    assert "add(" in page.locator(".question pre.pending").nth(1).inner_text()
    page.locator(".question").nth(1).locator("button", has_text="Deny").click()
    page.wait_for_function("() => document.body.innerText.includes('You said no.')")
    denied = [r for r in fake_llm.requests_for(f"no {marker}") if "denied" in str(r["messages"])]
    assert denied, "the model was not told of the denial"


def test_cancel_stops_the_running_turn(page, rpc, fake_llm, marker):
    fake_llm.script(text("never", delay=30, when_user_contains=marker))
    say(page, f"slow {marker}")
    fake_llm.wait_for_requests(marker, 1, timeout=15)
    page.click("#cancel")
    page.wait_for_selector(".message.agent:last-child .state")
    assert "canceled" in page.locator(".state").last.inner_text()
    tasks = rpc.result("ListTasks", {"historyLength": 1})["tasks"]
    [task] = [t for t in tasks if marker in str(t["history"])]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"


def test_a_reload_mid_turn_resumes_without_repeating_text(page, fake_llm, marker):
    pieces = [f"w{n:02d} " for n in range(12)]
    fake_llm.script(text(pieces, chunk_delay=0.3, when_user_contains=marker))
    say(page, f"reload {marker}")
    until_answer_shows(page, "w02")
    page.reload()
    until_answer_shows(page, "w11")
    page.wait_for_selector("#cancel", state="hidden")
    assert last_answer(page).inner_text().strip() == "".join(pieces).strip()
    assert page.locator(".message.user", has_text=f"reload {marker}").count() == 1


def test_a_cut_stream_is_followed_again_without_repeating_text(page, fake_llm, marker):
    """The connection drops after three events (a proxy, a replica draining): the console
    subscribes again from the last event it saw, and the answer ends whole, once."""
    pieces = [f"c{n:02d} " for n in range(8)]
    fake_llm.script(text(pieces, chunk_delay=0.1, when_user_contains=marker))
    subscribed: list[str | None] = []

    def cut_the_first_stream(route):
        request = route.request
        if "SubscribeToTask" in (request.post_data or ""):
            subscribed.append(request.headers.get("last-event-id"))
        if "SendStreamingMessage" not in (request.post_data or ""):
            return route.continue_()
        response = route.fetch()  # the whole stream, of which the browser gets a part
        events = response.body().split(b"\r\n\r\n")
        route.fulfill(response=response, body=b"\r\n\r\n".join(events[:3]) + b"\r\n\r\n")

    page.route("**/*", cut_the_first_stream)
    say(page, f"cut {marker}")
    until_answer_shows(page, "c07")
    page.wait_for_selector("#cancel", state="hidden")
    assert last_answer(page).inner_text().strip() == "".join(pieces).strip()
    assert subscribed == ["3"], "it did not follow the task again from the third event"
    assert page.is_hidden("#notice"), page.inner_text("#notice")
    page.unroute("**/*")


def test_an_answer_with_markup_runs_nothing(page, fake_llm, marker):
    attack = (
        'Look: <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'
        " [click](javascript:window.__xss=3)"
    )
    fake_llm.script(text(attack, when_user_contains=marker))
    say(page, f"xss {marker}")
    until_answer_shows(page, "Look")
    answer = last_answer(page)
    assert answer.locator("img, script").count() == 0
    assert answer.locator("a").count() == 0  # a javascript: link stays text
    assert "<img src=x" in answer.inner_text()
    page.wait_for_timeout(300)
    assert page.evaluate("() => window.__xss") is None


def test_raw_mode_and_export(page, fake_llm, marker):
    fake_llm.script(text("raw answer", when_user_contains=marker))
    page.check("#raw-toggle")
    say(page, f"raw {marker}")
    page.wait_for_selector("#cancel", state="hidden")
    raw = page.inner_text("#raw-log")
    assert "SendStreamingMessage" in raw and "artifactUpdate" in raw
    with page.expect_download() as download:
        page.click("#export")
    exported = Path(download.value.path()).read_text()
    assert '"TASK_STATE_COMPLETED"' in exported and marker in exported


def test_conversations_are_listed_and_reopen_with_their_history(page, fake_llm, marker):
    fake_llm.script(text("first answer", when_user_contains=marker))
    say(page, f"history {marker}")
    page.wait_for_selector("#cancel", state="hidden")
    page.click("#new-conversation")
    assert page.locator(".message").count() == 0
    page.locator("#conversations li", has_text=f"history {marker}").click()
    page.wait_for_function("() => document.body.innerText.includes('first answer')")


def test_credentials_are_asked_for_and_used(browser, fake_llm, marker):
    locked = ServerProcess(fake_llm.base_url, env={"A2A_API_KEYS": "alice:key-0123456789abcdef"})
    locked.start()
    context = browser.new_context()
    try:
        page = context.new_page()
        looks = []  # the page's looks at /agents: the second, with credentials, is held back

        def hold_the_second(route):
            looks.append(route)
            if len(looks) == 1:
                route.continue_()

        page.route("**/agents", hold_the_second)
        page.goto(locked.url + "/console")
        page.wait_for_selector("#auth-dialog[open]")
        assert "401" in page.inner_text("#notice")
        page.fill("#auth-secret", "key-0123456789abcdef")
        page.click("#auth-save")
        page.wait_for_selector("#agent-name:not(:text('A2A console'))")
        fake_llm.script(text("let in", when_user_contains=marker))
        say(page, f"auth {marker}")
        page.wait_for_function("() => document.body.innerText.includes('let in')")
        # The page re-reading the agents meanwhile (a slow answer) leaves the conversation be.
        assert len(looks) == 2
        looks[1].continue_()
        page.wait_for_load_state("networkidle")
        assert page.locator(".message.agent .answer", has_text="let in").count() == 1
    finally:
        context.close()
        locked.cleanup()


def test_the_console_can_be_turned_off(fake_llm):
    off = ServerProcess(fake_llm.base_url, env={"A2A_CONSOLE": "false"})
    off.start()
    try:
        assert httpx.get(off.url + "/console", timeout=10).status_code == 404
    finally:
        off.cleanup()
