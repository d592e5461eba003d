"""What a turn costs Redis, counted on `a2a-server` as it ships (the scripted model streaming 20
chunks at once, a private Redis, its INFO commandstats): a burst of answer chunks goes out in one
script call, not one per chunk, and every event still reaches the journal in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from agent.llm.scripted import scripted_chunk
from tests.e2e.harness import RpcClient, ServerProcess, kind_of, send_params, stream_results
from tests.e2e_redis.support import RedisServer, open_sse, rpc_body

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

CHUNKS = 20
TURNS = 5


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    with RedisServer(persistent=False) as server:
        yield server


@pytest.fixture(scope="module")
def scripted_on_redis(own_redis: RedisServer) -> Iterator[ServerProcess]:
    # LEASE_TTL_S: no lease renewal nor orphan sweep falls between the counts.
    env = {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": str(CHUNKS), "AGENT_TOOLS": "",
           "REDIS_URL": own_redis.url, "LEASE_TTL_S": "600"}  # fmt: skip
    server = ServerProcess("http://127.0.0.1:9", env=env).start()
    try:
        yield server
    finally:
        server.cleanup()


def script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def test_a_burst_of_chunks_is_one_script_call(
    own_redis: RedisServer, scripted_on_redis: ServerProcess
) -> None:
    rpc = RpcClient(scripted_on_redis.url)
    observer = redis.Redis.from_url(own_redis.url)
    try:
        rpc.result("SendMessage", send_params("warm up"))  # scripts loaded, connections open
        before = script_calls(observer)
        tasks = [rpc.result("SendMessage", send_params(f"turn {n}"))["task"] for n in range(TURNS)]
        per_turn = (script_calls(observer) - before) / TURNS
        replay = rpc_body("SubscribeToTask", {"id": tasks[-1]["id"]}, request_id=7)
        with open_sse(scripted_on_redis.url, "/", replay, headers={"Last-Event-ID": "0"}) as sse:
            journal = stream_results(list(sse.sse_events()), 7)
    finally:
        rpc.close()
        observer.close()
    answer = "".join(scripted_chunk(index) for index in range(CHUNKS))
    for task in tasks:
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert task["artifacts"][0]["parts"][0]["text"] == answer
    # One call per chunk made 29 a turn (20 chunks and 9 others); a burst is 1, and the chunk
    # held back for `lastChunk` goes in the COMPLETED event's own call: 10 (11 when it was a
    # call of its own). Then 11: the context's claim is a script since it carries its task's
    # fence (CLAIM_CONTEXT writes the claim and its fence in one step; it was a SET NX GET): the
    # same commands and round trips a turn, one of them a script.
    assert per_turn <= 11, per_turn
    # The whole journal of the last one, replayed: every event, in the order the turn made them.
    kinds = [kind_of(result) for result in journal]
    assert kinds == ["task", "statusUpdate", *["artifactUpdate"] * CHUNKS, "statusUpdate"], kinds
    texts = [result["artifactUpdate"]["artifact"]["parts"][0]["text"] for result in journal[2:-1]]
    assert texts == [scripted_chunk(index) for index in range(CHUNKS)]
