"""A replica cut off from Redis (a black-holed network) for several lease periods, then healed.

Replica A reaches Redis through a TCP proxy the test black-holes (tests/e2e_chaos/blackhole.py:
connections stay open, nothing crosses, new ones are accepted and answered by nobody); replica B
reaches Redis directly. LEASE_TTL_S=2. A client streams a turn from A (SendStreamingMessage,
JSON-RPC) and another follows it on A over HTTP+JSON (POST /tasks/{id}:subscribe). Then the cut:

* A answers its clients with the clean store-unavailable error within seconds (GetTask,
  SendMessage, GET /tasks/{id}, POST /message:send) and fails /readyz (outage_probes.py);
* both streams open on A end within STREAM_END_BOUND_S with an error their clients can act on:
  JSON-RPC's last event a -32603 error with ErrorInfo STORE_UNAVAILABLE, REST's an `event: error`
  with the AIP-193 503 (not keep-alives for the whole cut while B runs the turn);
* each client resubscribes on B with the last id it has (Last-Event-ID, its own binding) and
  gets the rest of the turn, which B took over: every event once, the answer whole;
* the cut lasts until B has finished the turn and at least CUT_LEASES lease periods.

Healed (the held connections dropped, or in one round let through late, so what A wrote during
the cut reaches Redis after B took the turn): A's writes are refused by the fence and it stops its
copy of the turn (it logs the lost lease), it is ready again by itself and completes a new
streamed turn. The journal, the task and the conversation are checked as after a pause
(tests/e2e_chaos/takeovers.turn_problems). Three rounds on the same replicas.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess, send_params
from tests.e2e_chaos.blackhole import Blackhole
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.outage_probes import probe_outage
from tests.e2e_chaos.redis_view import RedisView
from tests.e2e_chaos.takeovers import (
    chunks_seen,
    positioned,
    resubscribe,
    stream_error,
    stream_turn,
    task_id_of,
    turn_problems,
)
from tests.e2e_chaos.targets import Target, new_prefix, wait_until
from tests.e2e_redis.support import (
    REDIS_URL,
    BackgroundStream,
    Cluster,
    assert_contiguous,
    delete_prefix,
    ids,
    open_sse,
    rebuild_answer,
    state_of_event,
    wait_ready,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 2
CUT_LEASES = 3  # the cut lasts at least this many lease periods
STREAM_END_BOUND_S = 10.0  # REDIS_COMMAND_TIMEOUT_S is 1.5: a ping every 1.5 s, 3 s to answer
TAKEOVER_S = LEASE_TTL_S * 3 + 15
ROUNDS = 3


@pytest.fixture(scope="module")
def partitioned(
    gated_llm: GatedLLM, main_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Target, Blackhole]]:
    """(A through the proxy, B direct) as a Target, and the proxy."""
    redis_port = int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    prefix = new_prefix("partition")
    tool_log = Path(tmp_path_factory.mktemp("partition")) / "tools.log"
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with (
        Blackhole(redis_port) as proxy,
        Cluster(
            gated_llm.base_url, redis_url=REDIS_URL, prefix=prefix, tool_log=tool_log, extra_env=env
        ) as cluster,
    ):
        a = ServerProcess(gated_llm.base_url, env={**cluster.env, "REDIS_URL": proxy.url})
        cluster.servers.append(a)
        with ThreadPoolExecutor(max_workers=1) as pool:  # A and B start together
            starting = pool.submit(lambda: wait_ready(a.start()))
            (b,) = cluster.spawn(1)
            starting.result()
        try:
            yield Target("redis", [a, b], RedisView(main_redis, prefix)), proxy
        finally:
            proxy.heal()
            cluster.close()
            delete_prefix(main_redis, prefix)


@pytest.fixture
def target(partitioned: tuple[Target, Blackhole]) -> Target:
    return partitioned[0]  # its servers' logs are attached to a failure (conftest)


def rest_subscription(url: str, task_id: str) -> BackgroundStream:
    """POST /tasks/{id}:subscribe (HTTP+JSON) on `url`, read in a thread."""
    return BackgroundStream(
        lambda: open_sse(url, f"/tasks/{task_id}:subscribe", None, read_timeout=120)
    ).start()


def rest_resubscribe(url: str, task_id: str, last_id: str) -> list[Any]:
    with open_sse(
        url, f"/tasks/{task_id}:subscribe", None, headers={"Last-Event-ID": last_id}
    ) as s:
        return list(s.sse_events())


def ended_within(stream: BackgroundStream, bound: float, what: str) -> list[str]:
    """[] if `stream` ended within `bound` with the store-unavailable error; else what is wrong."""
    if not stream.done.wait(bound):
        return [f"{what}: still open {bound}s into the cut"]
    if stream.error is not None:
        return [f"{what}: cut without an error event ({stream.error!r})"]
    wrong = stream_error(stream.snapshot())
    return [f"{what}: {wrong}"] if wrong else []


def lease_lost_logged(server: ServerProcess, mark: int, task_id: str) -> bool:
    server.settle_log()
    return any(
        "lease lost" in line and task_id in line for line in server.log_since(mark).splitlines()
    )


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_replica_cut_off_from_redis_ends_its_streams_fails_fast_and_recovers(
    partitioned: tuple[Target, Blackhole],
    target: Target,
    gated_llm: GatedLLM,
    marker: str,
    round_: int,
) -> None:
    (a, b), proxy, view = target.servers, partitioned[1], target.view
    assert view is not None
    chunks = [f"p{round_}c{i:02d} " for i in range(40)]
    want = "".join(chunks)
    gated_llm.script(text(chunks, chunk_delay=0.1, when_user_contains=marker, times=2))
    target.mark_logs()
    a_mark = a.log_mark()

    on_a = stream_turn(a.url, f"go {marker}", "on-a")
    task_id = task_id_of(on_a)
    rest_on_a = rest_subscription(a.url, task_id)
    wait_until(
        lambda: chunks_seen(on_a) >= 3 and chunks_seen(rest_on_a) >= 1,
        30,
        "both streams on A to get chunks",
    )
    resume = round_ == 1  # once, what A sent during the cut reaches Redis after it
    proxy.cut()
    cut_at = time.monotonic()
    try:
        problems = probe_outage(a.url, task_id, marker)
        problems += ended_within(on_a, STREAM_END_BOUND_S, "A's JSON-RPC stream")
        problems += ended_within(rest_on_a, STREAM_END_BOUND_S, "A's HTTP+JSON stream")
        assert not problems, "while A was cut off:\n" + "\n".join(problems)
        seen, rest_seen = positioned(on_a.snapshot()), positioned(rest_on_a.snapshot())
        # Each client resubscribes on B, in its binding, from the last event it has.
        rest = resubscribe(b.url, task_id, seen[-1].id or "", "on-b")
        rest_rest = rest_resubscribe(b.url, task_id, rest_seen[-1].id or "")
        assert gated_llm.waiting(marker) >= 2, "B finished the turn without calling the model"
        left = CUT_LEASES * LEASE_TTL_S - (time.monotonic() - cut_at)
        if left > 0:
            time.sleep(left)  # the cut lasts several lease periods whatever B's pace
    finally:
        proxy.heal(resume=resume)

    rpc_a, rpc_b = RpcClient(a.url, timeout=30), RpcClient(b.url, timeout=30)
    try:
        assert state_of_event(rest[-1]) == "TASK_STATE_COMPLETED", "JSON-RPC resubscription"
        problems = turn_problems(view, rpc_b, task_id, want, seen + rest)
        assert not problems, "\n".join(problems)
        union = rest_seen + rest_rest
        assert_contiguous(ids(union), "HTTP+JSON stream on A, then resubscribed on B")
        assert state_of_event(union[-1]) == "TASK_STATE_COMPLETED"
        assert rebuild_answer(union) == want, "HTTP+JSON stream on A, then resubscribed on B"

        # Healed: A finds out it lost the turn, is ready again by itself and serves.
        wait_until(
            lambda: lease_lost_logged(a, a_mark, task_id), 20, "A to stop its copy of the turn"
        )
        with httpx.Client(trust_env=False, timeout=10) as http:
            wait_until(lambda: http.get(a.url + "/readyz").status_code == 200, 20, "A ready")
        assert rpc_a.get_task(task_id)["status"]["state"] == "TASK_STATE_COMPLETED"
        again = rpc_a.stream_all("SendStreamingMessage", send_params(f"again {marker}"))
        assert state_of_event(again[-1]) == "TASK_STATE_COMPLETED", again[-1].raw
        assert rebuild_answer(again) == f"echo: again {marker}"
        time.sleep(1)  # anything A still had to write has been written (or refused)
        assert not turn_problems(view, rpc_b, task_id, want, seen + rest)
        assert not target.new_tracebacks(), target.new_tracebacks()
        assert not view.stuck(), view.stuck()
    finally:
        rpc_a.close()
        rpc_b.close()
