"""The web console on a server that hosts two agents (AGENTS_FILE), in a real browser: a person
picks an agent, talks to it at `/{name}/` (its system prompt reaches the model), sees only its
conversations in the sidebar, keeps the pick across a reload, and a turn left streaming when
another agent is picked is followed again, whole, when its agent is picked back.

`UPDATE_DOCS=1` makes the screenshot test write docs/console.png (it is committed)."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.e2e.harness import ROOT, ServerProcess
from tests.e2e.test_cli_agents import AGENTS, system_prompt_of
from tests.e2e.test_console import CHROMIUM, browser, say, until_answer_shows  # noqa: F401
from tests.fakes.fake_llm import text

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)"),
]


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    agents_file = tmp_path_factory.mktemp("agents") / "agents.yaml"
    agents_file.write_text(yaml.safe_dump({"agents": AGENTS}))
    env = {"AGENTS_FILE": str(agents_file)}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture
def page(browser, server):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    posted: list[str] = []
    page.on("request", lambda request: request.method == "POST" and posted.append(request.url))
    page.posted = posted
    yield page
    context.close()
    assert not errors, errors


def open_console(page, server, query: str = "") -> None:
    page.goto(f"{server.url}/console{query}")
    page.wait_for_selector("#agent-name:not(:text('A2A console'))")
    page.wait_for_selector("#agent-picker:not([hidden])")


def pick(page, name: str) -> None:
    page.select_option("#agent-picker", name)
    page.wait_for_function(
        "(name) => document.querySelector('#agent-name').textContent === name", arg=name
    )


def sidebar(page, agent: str) -> list[str]:
    """The conversations listed, once the sidebar is the agent's (its ListTasks answered)."""
    page.wait_for_selector(f"#conversations[data-agent='{agent}']", state="attached")
    return page.locator("#conversations li").all_inner_texts()


def test_a_person_picks_an_agent_and_sees_its_conversations_only(page, server, fake_llm, marker):
    open_console(page, server)
    options = page.locator("#agent-picker option")
    assert options.all_inner_texts() == ["triage", "writer"]
    assert options.nth(1).get_attribute("title") == "Writes short answers."
    assert page.inner_text("#agent-name") == "triage"  # the first agent, as at /
    assert page.url.endswith("/console?agent=triage")

    fake_llm.script(
        text("triage here", when_user_contains=f"t {marker}"),
        text("writer here", when_user_contains=f"w {marker}"),
    )
    say(page, f"t {marker}")
    until_answer_shows(page, "triage here")
    (request,) = fake_llm.requests_for(f"t {marker}")
    assert "You are the TRIAGE agent." in system_prompt_of(request)

    pick(page, "writer")
    assert page.url.endswith("/console?agent=writer")
    assert page.locator(".message").count() == 0
    assert f"t {marker}" not in sidebar(page, "writer")
    page.posted.clear()
    say(page, f"w {marker}")
    until_answer_shows(page, "writer here")
    (request,) = fake_llm.requests_for(f"w {marker}")
    assert "You are the WRITER agent." in system_prompt_of(request)
    assert page.posted and all(url == f"{server.url}/writer/" for url in page.posted)
    page.wait_for_selector("#cancel", state="hidden")
    page.wait_for_selector(f"#conversations li:has-text('w {marker}')")
    assert f"t {marker}" not in sidebar(page, "writer")

    pick(page, "triage")
    listed = sidebar(page, "triage")
    assert f"t {marker}" in listed and f"w {marker}" not in listed
    page.locator("#conversations li", has_text=f"t {marker}").click()
    page.wait_for_function("() => document.body.innerText.includes('triage here')")

    # The pick is in the address: a reload (or a shared link) opens the same agent.
    open_console(page, server, "?agent=writer")
    assert page.inner_text("#agent-name") == "writer"
    assert f"w {marker}" in sidebar(page, "writer")


def test_a_turn_left_streaming_is_followed_again_when_its_agent_is_picked_back(
    page, server, fake_llm, marker
):
    pieces = [f"s{n:02d} " for n in range(10)]
    fake_llm.script(text(pieces, chunk_delay=0.3, when_user_contains=marker))
    open_console(page, server, "?agent=writer")
    say(page, f"long {marker}")
    until_answer_shows(page, "s01")
    pick(page, "triage")
    assert page.is_hidden("#cancel")
    pick(page, "writer")
    until_answer_shows(page, "s09")
    page.wait_for_selector("#cancel", state="hidden")
    answer = page.locator(".message.agent .answer").last.inner_text().strip()
    assert answer == "".join(pieces).strip()
    assert page.locator(".message.user", has_text=f"long {marker}").count() == 1


def test_an_unknown_agent_in_the_address_says_so_and_shows_the_first(page, server):
    page.goto(f"{server.url}/console?agent=nobody")
    page.wait_for_selector("#notice:not([hidden])")
    assert 'no agent named "nobody"' in page.inner_text("#notice")
    assert page.inner_text("#agent-name") == "triage"


def test_screenshot(page, server, fake_llm, tmp_path):
    """docs/console.png: the agent picker on a server of two agents, a conversation with one."""
    fake_llm.script(
        text("Sorted: it goes to **billing**.", when_user_contains="invoice 17 go?"),
        text(
            "It goes to **billing**:\n\n- an invoice question\n- account `4711`",
            when_user_contains="account 4711 go?",
        ),
    )
    open_console(page, server, "?agent=triage")
    say(page, "Where does a question about invoice 17 go?")
    until_answer_shows(page, "billing")
    page.wait_for_selector("#cancel", state="hidden")
    page.click("#new-conversation")
    say(page, "And where does one about account 4711 go?")
    until_answer_shows(page, "4711")
    page.wait_for_selector("#cancel", state="hidden")
    assert page.locator("#agent-picker option").all_inner_texts() == ["triage", "writer"]
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length >= 2")
    target = ROOT / "docs" / "console.png" if os.environ.get("UPDATE_DOCS") else tmp_path / "c.png"
    page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000
