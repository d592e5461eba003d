"""The web console and A2A extensions, in a real browser, on a server whose agents declare their
own (AGENTS_FILE's `extensions`): `strict` requires one (a console that did not send it was
refused every request: locked out), `open` declares one optional, which a person toggles; the
toggle is remembered per agent across a reload."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.harness import ServerProcess
from tests.e2e.test_console import CHROMIUM, browser, say, until_answer_shows  # noqa: F401
from tests.e2e.test_console_agents import open_console, pick, sidebar
from tests.fakes.fake_llm import text

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)"),
]

REQUIRED_URI = "https://ext.example/console/required/v1"
OPTIONAL_URI = "https://ext.example/console/optional/v1"
AGENTS = [
    {
        "name": "strict",
        "system_prompt": "You are the STRICT agent.",
        "extensions": [{"uri": REQUIRED_URI, "required": True, "description": "Must be on."}],
    },
    {
        "name": "open",
        "system_prompt": "You are the OPEN agent.",
        "extensions": [{"uri": OPTIONAL_URI, "description": "On when asked for."}],
    },
]


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    agents_file = tmp_path_factory.mktemp("agents") / "agents.yaml"
    agents_file.write_text(yaml.safe_dump({"agents": AGENTS}))
    with ServerProcess(fake_llm.base_url, env={"AGENTS_FILE": str(agents_file)}).running() as proc:
        yield proc


@pytest.fixture
def page(browser, server):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sent: list[tuple[str, str | None, str]] = []  # (url, A2A-Extensions, JSON-RPC method)
    echoed: list[str | None] = []  # the A2A-Extensions the server answered with

    def on_request(request) -> None:
        if request.method == "POST":
            body = request.post_data_json or {}
            sent.append((request.url, request.headers.get("a2a-extensions"), body.get("method")))

    page.on("request", on_request)
    page.on(
        "response",
        lambda response: (
            response.request.method == "POST"
            and echoed.append(response.headers.get("a2a-extensions"))
        ),
    )
    page.sent, page.echoed = sent, echoed
    yield page
    context.close()
    assert not errors, errors


def test_a_required_extension_is_always_sent_and_the_console_works(page, server, fake_llm, marker):
    fake_llm.script(text("strict answered", when_user_contains=marker))
    open_console(page, server)
    assert page.inner_text("#agent-name") == "strict"
    box = page.locator(f"#extensions input[data-uri='{REQUIRED_URI}']")
    assert box.is_checked() and box.is_disabled()
    assert sidebar(page, "strict") == []  # ListTasks answered (it was refused: -32008)
    say(page, f"hello {marker}")
    until_answer_shows(page, "strict answered")
    page.wait_for_selector("#cancel", state="hidden")
    assert page.is_hidden("#notice")
    assert page.sent and all(header == REQUIRED_URI for _, header, _ in page.sent), page.sent
    assert REQUIRED_URI in page.echoed  # activated: the server names it back


def test_an_optional_extension_is_sent_once_toggled_and_remembered(page, server, fake_llm, marker):
    fake_llm.script(
        text("without it", when_user_contains=f"a {marker}"),
        text("with it", when_user_contains=f"b {marker}"),
    )
    open_console(page, server, "?agent=open")
    box = page.locator(f"#extensions input[data-uri='{OPTIONAL_URI}']")
    assert not box.is_checked() and not box.is_disabled()
    sidebar(page, "open")
    page.sent.clear()
    say(page, f"a {marker}")
    until_answer_shows(page, "without it")
    assert page.sent and all(header is None for _, header, _ in page.sent), page.sent

    box.check()
    page.wait_for_selector("#cancel", state="hidden")
    page.sent.clear()
    page.echoed.clear()
    say(page, f"b {marker}")
    until_answer_shows(page, "with it")
    sends = [header for _, header, method in page.sent if method == "SendStreamingMessage"]
    assert sends == [OPTIONAL_URI], page.sent
    assert OPTIONAL_URI in page.echoed

    # Remembered for this agent (a reload finds it on), and for this agent only.
    open_console(page, server, "?agent=open")
    assert page.locator(f"#extensions input[data-uri='{OPTIONAL_URI}']").is_checked()
    pick(page, "strict")
    assert page.locator("#extensions input").count() == 1
    pick(page, "open")
    box = page.locator(f"#extensions input[data-uri='{OPTIONAL_URI}']")
    assert box.is_checked()
    box.uncheck()
    page.sent.clear()
    open_console(page, server, "?agent=open")
    assert not page.locator(f"#extensions input[data-uri='{OPTIONAL_URI}']").is_checked()
    sidebar(page, "open")
    assert page.sent and all(header is None for _, header, _ in page.sent), page.sent
