"""An idle stream is kept alive: after each A2A_STREAM_KEEPALIVE_S without an event the client
gets an SSE comment (proxies and load balancers close connections that carry nothing), and the
stream goes on to deliver the task's next events as usual; on either store."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, ServerProcess, send_params
from tests.e2e_redis.support import REDIS_URL, connect, delete_prefix

KEEPALIVE_S = 0.3


@pytest.fixture(scope="module", params=["memory", "redis"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    stores: dict[str, str] = {}
    if request.param == "redis":  # its reads wait in Redis (a blocking XREAD) instead
        prefix = f"a2a-e2e-keepalive-{uuid.uuid4().hex[:10]}"
        stores = {"REDIS_URL": REDIS_URL, "REDIS_KEY_PREFIX": prefix}
    env = {
        **stores,
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": "3",
        "SCRIPTED_DELAY_MS": "1500",  # each chunk comes after 1.5 s: five keep-alives' time
        "A2A_STREAM_KEEPALIVE_S": str(KEEPALIVE_S),
    }
    process = ServerProcess("http://127.0.0.1:9", env=env)
    process.start()
    try:
        yield process
    finally:
        process.cleanup()
        if stores:
            client = connect()
            delete_prefix(client, stores["REDIS_KEY_PREFIX"])
            client.close()


def stream_lines(url: str) -> Iterator[tuple[float, str]]:
    """Each line of a SendStreamingMessage stream, with when it arrived."""
    payload = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
    payload["params"] = send_params("keep me company")
    with httpx.stream(
        "POST", url + "/", json=payload, headers=A2A_HEADERS, timeout=30, trust_env=False
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            yield time.monotonic(), line


def test_an_idle_stream_gets_keepalives_between_events_and_all_its_events(
    server: ServerProcess,
) -> None:
    lines = list(stream_lines(server.url))
    keepalives = [at for at, line in lines if line.startswith(":")]
    events = [json.loads(line[5:]) for _, line in lines if line.startswith("data:")]
    # ~4.5 s of waiting for the model, in 1.5 s gaps: several keep-alives in each gap.
    assert len(keepalives) >= 6, lines
    gaps = [later - earlier for earlier, later in itertools.pairwise(keepalives)]
    assert max(gaps) < 1.4, gaps  # shorter than the model's pauses: one in every pause
    results = [event["result"] for event in events]
    chunks = [result for result in results if "artifactUpdate" in result]
    assert len(chunks) == 3
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
