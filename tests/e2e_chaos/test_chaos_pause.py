"""A replica paused (SIGSTOP) past its lease in the middle of a streamed turn, then resumed.

Replicas A and B on Redis, LEASE_TTL_S=2. A client streams a turn from A (SendStreamingMessage);
a few chunks in, A is frozen. B sees A's heartbeat lapse and takes the turn over (it calls the
model again); the client, hearing nothing from A, resubscribes on B with the last id it has and
reads the turn to its end. Then A is thawed, with the model's chunks, its turn and leases it
believes it holds in hand: its in-flight and later writes are refused by the fence, it stops its
copy of the turn without an error, and it serves again. Each round checks
(tests/e2e_chaos/takeovers.turn_problems): the journal holds every position once, one terminal
status and nothing after it, epochs never going down; the client's events (from A, then from B)
are those positions once each and rebuild the answer whole; GetTask and the conversation hold the
turn once. The stream the client left open on A, once A is back, ends cleanly (the rest of the
turn, or the store-unavailable error), never with a duplicate. Then A is ready and completes a
new streamed turn. Three rounds on the same replicas.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess, send_params
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.takeovers import (
    chunks_seen,
    positioned,
    resubscribe,
    stream_error,
    stream_turn,
    task_id_of,
    turn_problems,
)
from tests.e2e_chaos.targets import Target, redis_replicas, wait_until
from tests.e2e_redis.support import (
    Cluster,
    assert_contiguous,
    ids,
    lease_holder,
    rebuild_answer,
    state_of_event,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 2
TAKEOVER_S = LEASE_TTL_S * 3 + 15  # the heartbeat's lapse + a sweep + a loaded machine
ROUNDS = 3


@pytest.fixture(scope="module")
def replicas(
    gated_llm: GatedLLM, main_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Target, Cluster]]:
    workdir = tmp_path_factory.mktemp("pause")
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with redis_replicas(gated_llm.base_url, workdir, name="pause", env=env) as pair:
        yield pair


@pytest.fixture
def target(replicas: tuple[Target, Cluster]) -> Target:
    return replicas[0]  # its servers' logs are attached to a failure (conftest)


def pid_of(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


@contextlib.contextmanager
def frozen(server: ServerProcess) -> Iterator[None]:
    os.kill(pid_of(server), signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid_of(server), signal.SIGCONT)


def held_by(target: Target, task_id: str, server: ServerProcess) -> bool:
    assert target.view is not None
    holder = lease_holder(target.view.r, target.view.prefix, task_id) or ""
    return f"-{pid_of(server)}-" in holder


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_replica_paused_mid_stream_loses_the_turn_to_the_fence_and_serves_again(
    replicas: tuple[Target, Cluster], target: Target, gated_llm: GatedLLM, marker: str, round_: int
) -> None:
    (a, b), view = replicas[1].servers, target.view
    assert view is not None
    chunks = [f"r{round_}c{i:02d} " for i in range(40)]
    want = "".join(chunks)
    # Answered twice: to A, and to B when it takes the turn over from the checkpoint before it.
    gated_llm.script(text(chunks, chunk_delay=0.1, when_user_contains=marker, times=2))
    target.mark_logs()
    a_mark = a.log_mark()

    on_a = stream_turn(a.url, f"go {marker}", "on-a")
    task_id = task_id_of(on_a)
    wait_until(lambda: chunks_seen(on_a) >= 3, 30, "a few chunks streamed from A")
    with frozen(a):
        wait_until(
            lambda: gated_llm.waiting(marker) >= 2 and held_by(target, task_id, b),
            TAKEOVER_S,
            "B to take the turn over",
        )
        seen = positioned(on_a.snapshot())  # all the client will get from A: it gives up on it
        rest = resubscribe(b.url, task_id, seen[-1].id or "", "on-b")
    # A is back: its stream goes on (or ends with the store error); its turn is stopped quietly.
    with httpx.Client(trust_env=False, timeout=5) as http:
        wait_until(lambda: http.get(a.url + "/healthz").status_code == 200, 20, "A to wake up")
    left_on_a = on_a.join(30)
    time.sleep(LEASE_TTL_S)  # a late writer on A has a lease period to show itself

    rpc_b, rpc_a = RpcClient(b.url, timeout=30), RpcClient(a.url, timeout=30)
    try:
        problems = turn_problems(view, rpc_b, task_id, want, seen + rest)
        assert state_of_event(rest[-1]) == "TASK_STATE_COMPLETED", "resubscribed stream's end"
        a_events = positioned(left_on_a)
        assert_contiguous(ids(a_events), "the stream left open on A")
        if len(a_events) < len(left_on_a):
            assert stream_error(left_on_a) is None, stream_error(left_on_a)
        else:
            assert state_of_event(a_events[-1]) == "TASK_STATE_COMPLETED"
            assert rebuild_answer(a_events) == want, "the stream left open on A"
        assert not problems, "\n".join(problems)
        assert not target.new_tracebacks(), target.new_tracebacks()
        a.settle_log()
        noticed = [ln for ln in a.log_since(a_mark).splitlines() if "lease lost" in ln]
        assert any(task_id in ln for ln in noticed), f"A never noticed it lost the turn: {noticed}"

        # A serves again: ready, and a new streamed turn completes on it.
        with httpx.Client(trust_env=False, timeout=10) as http:
            wait_until(lambda: http.get(a.url + "/readyz").status_code == 200, 20, "A ready")
        again = rpc_a.stream_all("SendStreamingMessage", send_params(f"again {marker}"))
        assert state_of_event(again[-1]) == "TASK_STATE_COMPLETED", again[-1].raw
        assert rebuild_answer(again) == f"echo: again {marker}"
    finally:
        rpc_a.close()
        rpc_b.close()
