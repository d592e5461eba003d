"""`LLM_MODEL=scripted`: `a2a-server` streams a fixed answer of SCRIPTED_CHUNKS chunks of 20
characters, with no model server at all (what bench/ and load tests drive)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.scripted_model import scripted_chunk
from tests.e2e.harness import RpcClient, ServerProcess, kind_of, send_params, stream_results

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
