"""Redis killed (-9) under load and restarted from its AOF: nothing a client was told is lost.

A private redis-server with `appendonly yes` and `appendfsync always` (tests/e2e_redis/support
RedisServer(persistent=True)): Redis fsyncs every write before it answers, so whatever a replica
was told was written is on disk. Two replicas (A, B) on it, LEASE_TTL_S=2. Each round:

* DONE turns completed before the crash (blocking SendMessage, half on each replica);
* FLIGHT turns streaming when Redis dies (SendStreamingMessage, half on each replica, each a few
  chunks in), and a load of blocking sends on both replicas going on through the crash;
* Redis is killed with SIGKILL and started again from its AOF (same directory, same port).

Then: every task a client was told is COMPLETED (the DONE turns, and every send of the load that
answered COMPLETED, before or after the crash) reads back COMPLETED with its answer, over the wire
and from Redis, its journal whole (one terminal status, last; tests/e2e_chaos/redis_view); every
turn in flight reaches a terminal state within the lease plus RECOVERY_BOUND_S of the restart,
and its client, resubscribing with the last id it had, gets every event once and, if it
completed, the whole answer; no task is left active without a live lease; and no conversation
stays locked: a new message on the context of every turn is accepted and completes. A send of
the load that failed did so with the clean store-unavailable error. Two rounds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.harness import RpcClient
from tests.e2e_chaos.crash_rounds import (
    LOADERS,
    Load,
    after_crash_problems,
    complete_turns,
    send_on_every_context,
    start_flights,
    stop_load,
    wait_flights_ended,
)
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.targets import Target, redis_replicas, wait_until
from tests.e2e_redis.support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.timeout(150)]

LEASE_TTL_S = 2
RECOVERY_BOUND_S = 25.0  # past the lease: reconnects, a sweep, the rest of the answer, a slow CI
ROUNDS = 2


@pytest.fixture(scope="module")
def aof_redis() -> Iterator[RedisServer]:
    with RedisServer(persistent=True) as server:  # appendonly yes, appendfsync always
        yield server


@pytest.fixture(scope="module")
def crashing(
    gated_llm: GatedLLM, aof_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    workdir = tmp_path_factory.mktemp("crash")
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with redis_replicas(
        gated_llm.base_url, workdir, name="crash", env=env, redis_url=aof_redis.url
    ) as (target, _):
        yield target


@pytest.fixture
def target(crashing: Target) -> Target:
    return crashing  # its servers' logs are attached to a failure (conftest)


def crash_and_restart(redis: RedisServer) -> None:
    """SIGKILL (no shutdown, no last write), then a new process on the same AOF and port."""
    assert redis.proc is not None
    redis.proc.kill()
    redis.proc.wait(timeout=10)
    time.sleep(1.0)  # the replicas find it gone: refused connections, failed writes
    redis.start()


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_redis_killed_under_load_loses_nothing_a_client_was_told_and_leaves_nothing_locked(
    target: Target, aof_redis: RedisServer, gated_llm: GatedLLM, marker: str, round_: int
) -> None:
    a, b = target.servers
    view = target.view
    assert view is not None
    rpcs = [RpcClient(a.url, timeout=30), RpcClient(b.url, timeout=30)]
    target.mark_logs()
    try:
        done = complete_turns(rpcs, marker)
        flights = start_flights(target, gated_llm, marker, round_)
        load = Load(target.urls, marker)
        loaders = load.run()
        time.sleep(0.5)  # the load is under way
        crash_and_restart(aof_redis)
        restarted, before = time.monotonic(), len(load.completed)
        wait_until(  # and goes on against the restarted Redis
            lambda: len(load.completed) >= before + LOADERS, 20, "the load to get through again"
        )
        stop_load(load, loaders)

        ended = wait_flights_ended(rpcs[0], flights, LEASE_TTL_S + RECOVERY_BOUND_S, restarted)
        told = {**done, **load.completed}
        problems = [f"load: {p}" for p in load.unclean]
        problems += after_crash_problems(target, rpcs, told, flights, ended)
        wait_until(lambda: not view.active(), RECOVERY_BOUND_S, "every task to settle")
        problems += [f"stuck: {t}" for t in view.stuck()]
        assert not problems, f"after the crash ({len(told)} told COMPLETED):\n" + "\n".join(
            problems
        )

        contexts = [ctx for _, ctx in told.values()]
        contexts += [ended[t]["contextId"] for t in flights.streams]
        send_on_every_context(rpcs, contexts, marker)
        assert not target.new_tracebacks(), target.new_tracebacks()
    finally:
        for rpc in rpcs:
            rpc.close()
