"""Reasoning and prompt caching end to end: a real server, LiteLLM over HTTP, the Anthropic fake
(which refuses a tool round whose thinking block is missing or altered, and more than 4 cache
breakpoints) and the OpenAI fake.

One server, five agents (AGENTS_FILE): `aloud` (thinking on, AGENT_REASONING=stream), `quiet`
(thinking on, hide: the default), `uncached` (LLM_PROMPT_CACHING=false), `crowded` (LLM_PARAMS
asking LiteLLM for breakpoints of its own) and `gpt` (the OpenAI fake). Thinking is turned on with LLM_PARAMS, as a user does.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.e2e.harness import RpcClient, ServerProcess, send_params, stream_results
from tests.e2e.wire import artifact_text
from tests.fakes.fake_llm import text as openai_text
from tests.fakes.fake_llm import tool_calls as openai_tool_calls
from tests.fakes.providers.anthropic import AnthropicFake, cache_breakpoints
from tests.fakes.providers.script import text, tool_calls

pytestmark = pytest.mark.timeout(120)

SYSTEM = "PROMPT-REASONING: you add numbers."
THINKING = {"type": "enabled", "budget_tokens": 1024}
ROUND_THOUGHT = "Two sums: I will call add twice, at once."
ANSWER_THOUGHT = "Both results are in; 3 and 7."
CACHE = {"cache_read_input_tokens": 40, "cache_creation_input_tokens": 12}
EPHEMERAL = {"type": "ephemeral"}
CROWD = [{"location": "message", "role": "user"}] * 3
"""LLM_PARAMS asking LiteLLM for breakpoints of its own: 3 counted, room for 1 of ours."""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def anthropic():
    with AnthropicFake() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(fake_llm, anthropic, tmp_path_factory):
    claude = {
        "model": "anthropic/claude-sonnet-4-5",
        "api_base": anthropic.base_url,
        "api_key": "sk-test",
        "system_prompt": SYSTEM,
    }
    thinking = {"thinking": THINKING}
    agents = [
        {"name": "aloud", **claude, "params": thinking, "reasoning": "stream"},
        {"name": "quiet", **claude, "params": thinking},
        {"name": "uncached", **claude, "prompt_caching": False},
        {"name": "crowded", **claude, "params": {"cache_control_injection_points": CROWD}},
        {"name": "gpt", "system_prompt": SYSTEM},  # the environment's model: the OpenAI fake
    ]
    path = tmp_path_factory.mktemp("agents") / "agents.json"
    path.write_text(json.dumps({"agents": agents}))
    with ServerProcess(fake_llm.base_url, env={"AGENTS_FILE": str(path)}).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def clients(server):
    made = {
        name: RpcClient(server.url, endpoint=f"/{name}/", timeout=60.0)
        for name in ("aloud", "quiet", "uncached", "crowded", "gpt")
    }
    yield made
    for client in made.values():
        client.close()


def script_thinking_round(anthropic: AnthropicFake, marker: str) -> None:
    anthropic.script(
        tool_calls(
            [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})],
            thinking=ROUND_THOUGHT,
            usage=CACHE,
            when_user_contains=marker,
        ),
        text(
            ["Sums: 3 ", "and 7."], thinking=ANSWER_THOUGHT, usage=CACHE, when_user_contains=marker
        ),
    )


def streamed(client: RpcClient, message: str, **fields: Any) -> list[dict[str, Any]]:
    params = send_params(message, **fields)
    events = client.stream_all("SendStreamingMessage", params, id=7)
    return stream_results(events, 7)


def thoughts(results: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(index in the stream, text) of each thought part of a status update."""
    found = []
    for index, result in enumerate(results):
        message = (result.get("statusUpdate") or {}).get("status", {}).get("message") or {}
        for part in message.get("parts") or []:
            if (part.get("metadata") or {}).get("thought") is True:
                found.append((index, part["text"]))
    return found


def final_task(client: RpcClient, results: list[dict[str, Any]]) -> dict[str, Any]:
    update = next(r["statusUpdate"] for r in reversed(results) if "statusUpdate" in r)
    assert update["status"]["state"] == "TASK_STATE_COMPLETED", update
    return client.get_task(update["taskId"])


def assistant_contents(body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [m["content"] for m in body["messages"] if m["role"] == "assistant"]


def test_stream_shows_the_thinking_before_the_answer_and_sends_it_back_signed(
    clients, anthropic, marker
):
    script_thinking_round(anthropic, marker)
    results = streamed(clients["aloud"], f"add 1+2 and 3+4 {marker}")

    first_round, second = anthropic.requests_for(marker)
    assert first_round.refused is None and second.refused is None, second.refused
    assert first_round.body["thinking"] == THINKING
    # the tool round goes back with its thinking block first, its signature exactly the fake's
    (round_content,) = assistant_contents(second.body)
    assert round_content[0] == {
        "type": "thinking",
        "thinking": ROUND_THOUGHT,
        "signature": anthropic.sign(ROUND_THOUGHT),
    }
    assert [block["type"] for block in round_content[1:]] == ["tool_use", "tool_use"]

    shown = thoughts(results)
    assert "".join(t for _, t in shown) == ROUND_THOUGHT + ANSWER_THOUGHT
    first_chunk = next(i for i, r in enumerate(results) if "artifactUpdate" in r)
    assert shown[0][0] < first_chunk
    assert all(
        results[i]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING" for i, _ in shown
    )
    task = final_task(clients["aloud"], results)
    assert artifact_text(task) == "Sums: 3 and 7."
    answer = task["history"][-1]
    assert [p["text"] for p in answer["parts"]] == ["Sums: 3 and 7."]
    usage = task["metadata"]["usage"]
    assert usage["reasoningTokens"] > 0
    assert (usage["cacheReadTokens"], usage["cacheWriteTokens"]) == (80, 24)


def test_hide_shows_none_and_a_follow_up_turn_sends_the_history_with_its_thinking(
    clients, anthropic, marker
):
    script_thinking_round(anthropic, marker)
    results = streamed(clients["quiet"], f"add 1+2 and 3+4 {marker}")
    assert thoughts(results) == []
    task = final_task(clients["quiet"], results)
    assert artifact_text(task) == "Sums: 3 and 7."
    assert ROUND_THOUGHT not in json.dumps(results) and ANSWER_THOUGHT not in json.dumps(results)

    follow = f"and now? {marker}-2"
    anthropic.script(text("Still 3 and 7.", when_user_contains=follow))
    again = streamed(clients["quiet"], follow, context_id=task["contextId"])
    assert artifact_text(final_task(clients["quiet"], again)) == "Still 3 and 7."
    (request,) = anthropic.requests_for(follow)
    assert request.refused is None
    round_content, answer_content = assistant_contents(request.body)
    assert round_content[0]["signature"] == anthropic.sign(ROUND_THOUGHT)
    assert answer_content[0] == {
        "type": "thinking",
        "thinking": ANSWER_THOUGHT,
        "signature": anthropic.sign(ANSWER_THOUGHT),
    }


def test_the_system_prompt_and_the_tools_are_cache_breakpoints(clients, anthropic, marker):
    script_thinking_round(anthropic, marker)
    streamed(clients["quiet"], f"cache me {marker}")
    for request in anthropic.requests_for(marker):
        assert request.body["system"] == [
            {"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}
        ]
        assert [t.get("cache_control") for t in request.body["tools"]][-1] == EPHEMERAL
        assert cache_breakpoints(request.body) == 2


def test_with_caching_off_no_breakpoint_is_sent(clients, anthropic, marker):
    anthropic.script(
        tool_calls([("add", {"a": 1, "b": 2})], when_user_contains=marker),
        text("3", when_user_contains=marker),
    )
    results = streamed(clients["uncached"], f"no cache {marker}")
    assert artifact_text(final_task(clients["uncached"], results)) == "3"
    requests = anthropic.requests_for(marker)
    assert len(requests) == 2
    assert all(cache_breakpoints(r.body) == 0 for r in requests)
    assert all("cache_control" not in json.dumps(r.body) for r in requests)
    assert "thinking" not in requests[0].body


def test_breakpoints_the_params_bring_leave_room_for_the_system_prompts_only(
    clients, anthropic, marker
):
    anthropic.script(
        tool_calls([("add", {"a": 1, "b": 2})], when_user_contains=marker),
        text("3", when_user_contains=marker),
    )
    results = streamed(clients["crowded"], f"crowded {marker}")
    assert artifact_text(final_task(clients["crowded"], results)) == "3"
    requests = anthropic.requests_for(marker)
    assert len(requests) == 2 and all(r.refused is None for r in requests)
    for request in requests:
        assert request.body["system"][-1]["cache_control"] == EPHEMERAL
        assert all("cache_control" not in tool for tool in request.body["tools"])
        assert cache_breakpoints(request.body) <= 4


def test_the_openai_fake_sees_no_cache_control(clients, fake_llm, marker):
    fake_llm.script(
        openai_tool_calls([("add", {"a": 1, "b": 2})], when_user_contains=marker),
        openai_text("3", when_user_contains=marker),
    )
    results = streamed(clients["gpt"], f"plain {marker}")
    task = final_task(clients["gpt"], results)
    assert artifact_text(task) == "3"
    bodies = fake_llm.requests_for(marker)
    assert len(bodies) == 2
    for body in bodies:
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert "cache_control" not in json.dumps(body)
        assert not any("thinking_blocks" in m or "reasoning_content" in m for m in body["messages"])
    assert not {"reasoningTokens", "cacheReadTokens", "cacheWriteTokens"} & set(
        task["metadata"]["usage"]
    )


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_console_shows_the_thinking_folded_apart_from_the_answer(server, anthropic, marker):
    from playwright.sync_api import sync_playwright

    script_thinking_round(anthropic, marker)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{server.url}/console?agent=aloud")
            page.wait_for_function(
                "() => document.querySelector('#agent-name').textContent === 'aloud'"
            )
            page.fill("#input", f"add 1+2 and 3+4 {marker}")
            page.press("#input", "Enter")
            page.wait_for_function(
                "() => document.querySelector('.message.agent:last-child .usage')", timeout=60_000
            )
            turn = page.locator(".message.agent").last
            folded = turn.locator("details.thinking")
            assert folded.count() == 2  # one run before the tool calls, one after them
            assert [d.get_attribute("open") for d in folded.all()] == [None, None]  # folded
            assert folded.first.locator(".thought").text_content() == ROUND_THOUGHT
            assert folded.last.locator(".thought").text_content() == ANSWER_THOUGHT
            assert folded.first.locator(".thought").is_hidden()
            assert turn.locator(".answer").inner_text() == "Sums: 3 and 7."
            assert "reasoning:" in turn.locator(".usage").inner_text()
            folded.first.locator("summary").click()
            assert folded.first.locator(".thought").is_visible()
            assert not errors, errors
        finally:
            browser.close()
