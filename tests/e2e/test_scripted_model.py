"""`LLM_MODEL=scripted`: `a2a-server` streams a fixed answer of SCRIPTED_CHUNKS chunks of 20
characters, with no model server at all (what bench/ and load tests drive)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.llm.scripted import scripted_chunk
from tests.e2e.harness import (
    A2A_HEADERS,
    RpcClient,
    ServerProcess,
    kind_of,
    send_params,
    stream_results,
)

pytestmark = pytest.mark.timeout(60)

CHUNKS = 5


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[ServerProcess]:
    # No fake model: the base URL points nowhere, and the scripted model never calls it.
    env = {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": str(CHUNKS), "AGENT_TOOLS": ""}
    server = ServerProcess("http://127.0.0.1:9", env=env).start()
    try:
        yield server
    finally:
        server.cleanup()


def test_a_streamed_send_gets_the_scripted_chunks_then_completed(
    scripted_server: ServerProcess,
) -> None:
    rpc = RpcClient(scripted_server.url)
    try:
        events = rpc.stream_all("SendStreamingMessage", send_params("load me"))
    finally:
        rpc.close()
    results = stream_results(events, events[0].data["id"])
    kinds = [kind_of(result) for result in results]
    chunks = [
        result["artifactUpdate"]["artifact"]["parts"][0]["text"]
        for result in results
        if kind_of(result) == "artifactUpdate"
    ]
    # The last chunk travels with lastChunk (it may be empty: the model's stream has ended).
    assert "".join(chunks) == "".join(scripted_chunk(i) for i in range(CHUNKS)), kinds
    assert all(len(chunk) in (0, 20) for chunk in chunks), chunks
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED", kinds
    assert "scripted" in scripted_server.logs(limit=None)


def _collector_passes(rpc: RpcClient) -> dict[str, float]:
    """`python_gc_collections_total` by generation, as /metrics shows it."""
    body = rpc.get("/metrics").text
    family = next(
        f for f in text_string_to_metric_families(body) if f.name == "python_gc_collections"
    )
    return {sample.labels["generation"]: sample.value for sample in family.samples}


async def _send_concurrently(url: str, *, sends: int, concurrency: int) -> list[str]:
    """`sends` SendMessages over `concurrency` connections; the states the replies carry."""
    states: list[str] = []
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:

        async def sender(count: int) -> None:
            for _ in range(count):
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": send_params("collect me")}  # fmt: skip
                reply = await http.post("/", json=body, headers=A2A_HEADERS)
                states.append(reply.json()["result"]["task"]["status"]["state"])

        await asyncio.gather(*(sender(sends // concurrency) for _ in range(concurrency)))
    return states


def test_the_collector_runs_seldom_under_load(scripted_server: ServerProcess) -> None:
    """A collector pass walks objects the process keeps, for nothing: the server makes almost no
    cyclic garbage. With CPython's default thresholds a young pass came every ~30 sends (16 at
    once) and a full one (every stored task) every ~0.4 s under load: the latency tail. With young
    passes every 5,000 objects, 64 sends at once kept about that many alive and the passes
    walked them for nothing (this fails then: 10-11 young passes for these sends, checked).
    With the server's thresholds: at most one young pass, no full one."""
    rpc = RpcClient(scripted_server.url)
    try:
        before = _collector_passes(rpc)
        states = asyncio.run(_send_concurrently(scripted_server.url, sends=2048, concurrency=64))
        after = _collector_passes(rpc)
    finally:
        rpc.close()
    assert states == ["TASK_STATE_COMPLETED"] * 2048
    assert before["0"] > 0, before  # the counter is live: startup made young passes
    young = after["0"] - before["0"]
    assert young <= 1, (before, after)
    assert after["2"] == before["2"], (before, after)


def test_a_request_a_binding_serves_has_one_log_line(scripted_server: ServerProcess) -> None:
    """The binding's line (method, outcome, owner, duration) and no second one from uvicorn's
    access log; a route no binding serves (the card) keeps uvicorn's access line."""
    rpc = RpcClient(scripted_server.url)
    try:
        mark = scripted_server.log_mark()
        rpc.result("SendMessage", send_params("log me once"))
        assert rpc.get("/.well-known/agent-card.json").status_code == 200
        deadline = time.monotonic() + 5
        while "agent-card.json" not in scripted_server.log_since(mark):
            assert time.monotonic() < deadline, scripted_server.log_since(mark)
            time.sleep(0.02)
        lines = scripted_server.log_since(mark).splitlines()
    finally:
        rpc.close()
    sends = [line for line in lines if "SendMessage" in line]
    assert len(sends) == 1 and "outcome=<ok>" in sends[0], lines
    access = [line for line in lines if "uvicorn.access" in line]
    assert len(access) == 1 and "agent-card.json" in access[0], lines
