"""GET /metrics: every family, with the labels and counts a scraper sees after real traffic."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.events import Usage
from agent.runtime.supervisor import TurnSupervisor
from app.main import create_app
from app.ops.metrics import Metrics
from app.settings import Settings
from stores.base import StoreUnavailable
from stores.models import TaskState

from .engine_helpers import Stores, make_loop, orphan_without_a_turn
from .scripted_llm import ScriptedLLM, call, fail, text, tools


def lookup(city: str) -> str:
    """Look a city up."""
    if city == "nowhere":
        raise ValueError("no such city")
    return f"{city}: sunny"


def message(text_: str) -> dict[str, Any]:
    return {"messageId": f"m-{text_}", "role": "ROLE_USER", "parts": [{"text": text_}]}


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def samples(body: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(body: str, name: str, **labels: str) -> float:
    """The sample's value; a missing sample fails (a family that is gone is not a zero)."""
    return samples(body)[(name, frozenset(labels.items()))]


async def scrape(client: httpx.AsyncClient) -> str:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


async def test_metrics_count_requests_turns_model_and_tool_calls_and_streams(
    llm: ScriptedLLM,
) -> None:
    settings = Settings(llm_model="openai/not-called", agent_tool_failure_mode="continue")
    app = create_app(settings, llm=llm, tools=[lookup])
    other = create_app(settings, llm=ScriptedLLM(), tools=[lookup])  # its own registry
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        before = await scrape(client)
        assert value(before, "a2a_open_streams") == 0

        # A blocking send: one model call with usage, a completed turn.
        llm.script(text("hello", usage=Usage(prompt_tokens=7, completion_tokens=3)))
        reply = await client.post("/", json=rpc("SendMessage", {"message": message("hi")}))
        assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

        # A stream over REST: a tool that works, one that fails, one the model made up.
        llm.script(
            tools(
                call("c1", "lookup", {"city": "Paris"}),
                call("c2", "lookup", {"city": "nowhere"}),
                call("c3", "made_up_tool"),
            ),
            text("done"),
        )
        streamed = await client.post("/message:stream", json={"message": message("weather")})
        assert streamed.status_code == 200 and "TASK_STATE_COMPLETED" in streamed.text

        # A model failure, and a request error.
        llm.script(fail("provider exploded"))
        failed = await client.post("/", json=rpc("SendMessage", {"message": message("boom")}))
        assert failed.json()["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"
        missing = await client.post("/", json=rpc("GetTask", {"id": "no-such-task"}))
        assert missing.json()["error"]["code"] == -32001

        body = await scrape(client)
    requests = "a2a_requests_total"
    assert value(body, requests, binding="jsonrpc", method="SendMessage", outcome="ok") == 2
    assert value(body, requests, binding="rest", method="SendStreamingMessage", outcome="ok") == 1
    assert value(body, requests, binding="jsonrpc", method="GetTask", outcome="TASK_NOT_FOUND") == 1
    assert value(body, "a2a_task_state_changes_total", state="TASK_STATE_COMPLETED") == 2
    assert value(body, "a2a_task_state_changes_total", state="TASK_STATE_FAILED") == 1
    assert value(body, "a2a_task_state_changes_total", state="TASK_STATE_WORKING") == 3
    assert value(body, "a2a_turn_duration_seconds_count", state="TASK_STATE_COMPLETED") == 2
    assert value(body, "a2a_turn_duration_seconds_count", state="TASK_STATE_FAILED") == 1
    assert value(body, "a2a_model_call_duration_seconds_count", outcome="ok") == 3
    assert value(body, "a2a_model_call_duration_seconds_count", outcome="error") == 1
    assert value(body, "a2a_model_tokens_total", type="prompt") == 7
    assert value(body, "a2a_model_tokens_total", type="completion") == 3
    assert value(body, "a2a_tool_calls_total", tool="lookup") == 2
    assert value(body, "a2a_tool_errors_total", tool="lookup") == 1
    assert value(body, "a2a_tool_calls_total", tool="unknown") == 1
    assert value(body, "a2a_tool_errors_total", tool="unknown") == 1
    assert value(body, "a2a_open_streams") == 0  # the stream ended
    assert value(body, "a2a_journal_lag_seconds_count") >= 1  # the stream's live status updates
    for family in ("a2a_store_errors", "a2a_takeovers"):
        assert f"# TYPE {family}_total counter" in body

    # The other app's registry saw none of it.
    other_transport = httpx.ASGITransport(app=other)
    async with httpx.AsyncClient(transport=other_transport, base_url="http://localhost") as client:
        other_samples = samples(await scrape(client))
    assert not [key for key in other_samples if key[0] == "a2a_requests_total"], other_samples


async def test_takeovers_and_store_errors_are_counted(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = Stores()
    metrics = Metrics()
    never_started = await orphan_without_a_turn(stores, TaskState.SUBMITTED)
    without_checkpoint = await orphan_without_a_turn(stores, TaskState.WORKING)
    runner = stores.runner(make_loop(llm), holder="process-2", observer=metrics)
    save = stores.checkpoints.save
    failures = [StoreUnavailable("redis went away")]

    async def flaky_save(*args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        await save(*args, **kwargs)

    monkeypatch.setattr(stores.checkpoints, "save", flaky_save)
    llm.script(text("Started late."))
    try:
        await TurnSupervisor(
            runner, tasks=stores.tasks, checkpoints=stores.checkpoints, leases=stores.leases
        ).recover_orphans()
        await stores.journal_until_end(never_started.id)
    finally:
        await runner.shutdown()
    assert (await stores.snapshot(without_checkpoint.id)).status.state == TaskState.FAILED
    body = generate_latest(metrics.registry).decode()
    assert value(body, "a2a_takeovers_total", outcome="restarted") == 1
    assert value(body, "a2a_takeovers_total", outcome="failed") == 1
    assert value(body, "a2a_store_errors_total", operation="checkpoint save") == 1


async def test_cost_and_the_answering_model_by_agent(tmp_path: Any, llm: ScriptedLLM) -> None:
    """Each call's cost counted under the model that answered it and the agent of the task; the
    task's usage sums the turn's calls, and has no cost once one call had no price."""
    path = tmp_path / "agents.yaml"
    path.write_text("agents:\n  - name: first\n  - name: second\n")
    app = create_app(Settings(redis_url=None, agents_file=str(path)), llm=llm, tools=[lookup])
    priced = Usage(prompt_tokens=5, completion_tokens=1, cost_usd=0.125, model="primary")
    fallback = Usage(prompt_tokens=9, completion_tokens=2, cost_usd=0.25, model="fallback")
    unpriced = Usage(prompt_tokens=3, completion_tokens=1, model="local")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        llm.script(tools(call("c1", "lookup", {"city": "Oslo"}), usage=priced))
        llm.script(text("sunny", usage=fallback))
        reply = await client.post("/second/", json=rpc("SendMessage", {"message": message("a")}))
        usage = reply.json()["result"]["task"]["metadata"]["usage"]
        assert usage["model"] == "fallback"
        assert usage["costUsd"] == pytest.approx(0.375)
        assert (usage["promptTokens"], usage["completionTokens"]) == (14, 3)

        llm.script(tools(call("c2", "lookup", {"city": "Rome"}), usage=priced))
        llm.script(text("warm", usage=unpriced))
        reply = await client.post("/", json=rpc("SendMessage", {"message": message("b")}))
        usage = reply.json()["result"]["task"]["metadata"]["usage"]
        assert usage["model"] == "local"
        assert "costUsd" not in usage, "one call without a price: no cost for the turn"
        body = await scrape(client)
    assert value(body, "a2a_model_calls_total", model="primary", agent="second") == 1
    assert value(body, "a2a_model_calls_total", model="fallback", agent="second") == 1
    assert value(body, "a2a_model_calls_total", model="primary", agent="first") == 1
    assert value(body, "a2a_model_calls_total", model="local", agent="first") == 1
    assert value(body, "a2a_model_cost_usd_total", model="primary", agent="second") == 0.125
    assert value(body, "a2a_model_cost_usd_total", model="fallback", agent="second") == 0.25
    assert value(body, "a2a_model_cost_usd_total", model="primary", agent="first") == 0.125
    assert (
        "a2a_model_cost_usd_total",
        frozenset({("model", "local"), ("agent", "first")}),
    ) not in (samples(body))
