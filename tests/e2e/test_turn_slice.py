"""`A2A_TURN_SLICE_MS`: with a slice so small that nearly every turn waits for a later loop pass,
many concurrent streams and blocking sends still get every event of their turns, in order, and
every task completes (no turn starves in the gate's queue, none is lost on its way out of it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from agent.llm.scripted import scripted_chunk
from tests.e2e.harness import A2A_HEADERS, ServerProcess, send_params

pytestmark = pytest.mark.timeout(120)

CHUNKS = 20
STREAMS = 32
ROUNDS = 5


@pytest.fixture(scope="module")
def sliced_server() -> Iterator[ServerProcess]:
    env = {
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": str(CHUNKS),
        "A2A_TURN_SLICE_MS": "0.01",  # 10 us: a second turn step in a pass already waits
    }
    server = ServerProcess("http://127.0.0.1:9", env=env).start()
    try:
        yield server
    finally:
        server.cleanup()


def _results(body: str) -> list[dict[str, object]]:
    return [
        json.loads(line[len("data: ") :])["result"]
        for line in body.splitlines()
        if line.startswith("data: ")
    ]


async def _streams_and_sends(url: str) -> tuple[list[list[dict[str, object]]], list[str]]:
    streamed: list[list[dict[str, object]]] = []
    states: list[str] = []
    limits = httpx.Limits(max_connections=2 * STREAMS)
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=60, limits=limits) as http:

        async def streamer() -> None:
            for _ in range(ROUNDS):
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                        "params": send_params("stream me")}  # fmt: skip
                reply = await http.post("/", json=body, headers=A2A_HEADERS)
                streamed.append(_results(reply.text))

        async def sender() -> None:
            for _ in range(ROUNDS):
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": send_params("send me")}  # fmt: skip
                reply = await http.post("/", json=body, headers=A2A_HEADERS)
                states.append(reply.json()["result"]["task"]["status"]["state"])

        await asyncio.gather(*(streamer() for _ in range(STREAMS)),
                             *(sender() for _ in range(STREAMS)))  # fmt: skip
    return streamed, states


def test_every_turn_behind_the_gate_streams_all_its_events_and_completes(
    sliced_server: ServerProcess,
) -> None:
    streamed, states = asyncio.run(_streams_and_sends(sliced_server.url))
    held = httpx.get(f"{sliced_server.url}/metrics", trust_env=False).text
    # The gate held turns (streams' ones: blocking sends never wait there), and the server says so.
    (count,) = [float(line.split()[1]) for line in held.splitlines()
                if line.startswith("a2a_turns_held_total ")]  # fmt: skip
    assert count > 0
    assert states == ["TASK_STATE_COMPLETED"] * (STREAMS * ROUNDS)
    assert len(streamed) == STREAMS * ROUNDS
    answer = "".join(scripted_chunk(i) for i in range(CHUNKS))
    for results in streamed:
        assert "task" in results[0], results[0]
        chunks = [
            r["artifactUpdate"]["artifact"]["parts"][0]["text"]  # type: ignore[index]
            for r in results
            if "artifactUpdate" in r
        ]
        assert "".join(chunks) == answer
        states_seen = [r["statusUpdate"]["status"]["state"] for r in results if "statusUpdate" in r]  # type: ignore[index]
        assert states_seen == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], states_seen
