"""PostgreSQL killed (-9) under load and restarted: nothing a client was told is lost, nothing stays
locked. tests/e2e_chaos/test_chaos_redis_crash.py on PostgreSQL.

A private PostgreSQL (tests/e2e_chaos/private_postgres.py: `fsync` and `synchronous_commit` on,
so a COMMIT is answered only once it is in the WAL on disk), two replicas (A, B) on it through
DATABASE_URL, LEASE_TTL_S=2. Each round:

* DONE turns completed before the crash (blocking SendMessage, half on each replica);
* FLIGHT turns streaming when the database dies (SendStreamingMessage, half on each replica, each
  a few chunks in), and a load of blocking sends on both replicas going on through the crash;
* the postmaster and every backend are killed with SIGKILL at once (no checkpoint, no shutdown);
  it stays down until both replicas' /readyz say 503, then starts again on the same directory
  (crash recovery: the WAL is replayed), and both are ready again (/readyz 200) by themselves.

Then, as after the Redis crash: every task a client was told is COMPLETED reads back COMPLETED with
its answer over the wire (GetTask on both replicas) and from the rows (its snapshot, its journal
whole: contiguous, one terminal status, last); every turn in flight reaches a terminal state
within the lease plus RECOVERY_BOUND_S of the restart and its client, resubscribing with the last
id it had, gets every event once and, if it completed, the whole answer; no task is left active
without a live lease; a new message on the context of every turn (and of every claim the crash
left naming a task that ended: its release failed) is accepted and completes, and no claim is left
naming an ended task after that. A send of the load that failed did so with the
clean store-unavailable error. Two rounds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
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
from tests.e2e_chaos.postgres_view import PostgresView
from tests.e2e_chaos.private_postgres import PrivatePostgres
from tests.e2e_chaos.targets import Target, wait_until
from tests.e2e_redis.support import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

LEASE_TTL_S = 2
RECOVERY_BOUND_S = 30.0  # past the lease: WAL replay, new pools, a sweep, the rest, a slow CI
DOWN_BOUND_S = 15.0  # the replicas find the database gone (a ping times out at most)
ROUNDS = 2


@pytest.fixture(scope="module")
def database() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as server:
        yield server


@pytest.fixture(scope="module")
def crashing(
    gated_llm: GatedLLM, database: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    tool_log = Path(tmp_path_factory.mktemp("pg-crash")) / "tools.log"
    env = {"LEASE_TTL_S": str(LEASE_TTL_S), "DATABASE_COMMAND_TIMEOUT_S": "1.5"}
    with Cluster(
        gated_llm.base_url, database_url=database.url, tool_log=tool_log, extra_env=env
    ) as cluster:
        cluster.spawn(2)
        yield Target("postgres", cluster.servers, PostgresView(database.url))  # type: ignore[arg-type]


@pytest.fixture
def target(crashing: Target) -> Target:
    return crashing  # its servers' logs are attached to a failure (conftest)


def readiness(urls: list[str]) -> list[int | None]:
    out: list[int | None] = []
    with httpx.Client(trust_env=False, timeout=10) as http:
        for url in urls:
            try:
                out.append(http.get(url + "/readyz").status_code)
            except httpx.HTTPError:
                out.append(None)
    return out


def crash_and_restart(database: PrivatePostgres, urls: list[str]) -> float:
    """SIGKILL of every process of the database; down until every replica says it is not ready,
    then started again from its WAL. When it was (monotonic)."""
    database.kill9()
    wait_until(
        lambda: readiness(urls) == [503] * len(urls), DOWN_BOUND_S, "/readyz 503 on every replica"
    )
    database.start()
    return time.monotonic()


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_postgres_killed_under_load_loses_nothing_a_client_was_told_and_leaves_nothing_locked(
    target: Target, database: PrivatePostgres, gated_llm: GatedLLM, marker: str, round_: int
) -> None:
    view = target.view
    assert isinstance(view, PostgresView)
    rpcs = [RpcClient(s.url, timeout=30) for s in target.servers]
    target.mark_logs()
    try:
        done = complete_turns(rpcs, marker)
        flights = start_flights(target, gated_llm, marker, round_)
        load = Load(target.urls, marker)
        loaders = load.run()
        time.sleep(0.5)  # the load is under way
        restarted = crash_and_restart(database, target.urls)
        before = len(load.completed)
        wait_until(  # and goes on against the restarted database
            lambda: len(load.completed) >= before + LOADERS, 30, "the load to get through again"
        )
        stop_load(load, loaders)
        wait_until(
            lambda: readiness(target.urls) == [200] * len(target.urls), 30, "/readyz 200 again"
        )

        ended = wait_flights_ended(rpcs[0], flights, LEASE_TTL_S + RECOVERY_BOUND_S, restarted)
        told = {**done, **load.completed}
        problems = [f"load: {p}" for p in load.unclean]
        problems += after_crash_problems(target, rpcs, told, flights, ended)
        wait_until(lambda: not view.active(), RECOVERY_BOUND_S, "every task to settle")
        problems += [f"stuck: {t}" for t in view.stuck()]
        stale = view.stale_claims()  # turns ended while the database was down: freed next
        assert not problems, f"after the crash ({len(told)} told COMPLETED):\n" + "\n".join(
            problems
        )

        # A stale claim the crash left (its release failed) is replaced by the next turn in its
        # context, then released.
        contexts = [ctx for _, ctx in told.values()]
        contexts += [ended[t]["contextId"] for t in flights.streams]
        contexts = list(dict.fromkeys([*contexts, *stale]))
        send_on_every_context(rpcs, contexts, marker)
        left = [c for c in view.stale_claims() if c in contexts]
        assert not left, f"claims still stale after a turn in their context: {left}"
        tracebacks = target.new_tracebacks()
        assert not tracebacks, "\n\n".join(tracebacks)
    finally:
        for rpc in rpcs:
            rpc.close()
