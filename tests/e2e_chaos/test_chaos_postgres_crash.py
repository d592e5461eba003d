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

from tests.e2e.harness import TERMINAL_STATES, RpcClient
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.postgres_view import PostgresView
from tests.e2e_chaos.private_postgres import PrivatePostgres
from tests.e2e_chaos.redis_view import journal_problems
from tests.e2e_chaos.takeovers import chunks_seen, positioned, resubscribe, stream_turn, task_id_of
from tests.e2e_chaos.targets import Target, wait_until
from tests.e2e_chaos.test_chaos_redis_crash import LOADERS, Load, readback_problems
from tests.e2e_redis.support import (
    BackgroundStream,
    Cluster,
    assert_contiguous,
    ids,
    rebuild_answer,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

LEASE_TTL_S = 2
RECOVERY_BOUND_S = 30.0  # past the lease: WAL replay, new pools, a sweep, the rest, a slow CI
DOWN_BOUND_S = 15.0  # the replicas find the database gone (a ping times out at most)
DONE, FLIGHT = 6, 6
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
        done: dict[str, tuple[str, str]] = {}
        for k in range(DONE):
            task = rpcs[k % 2].send(f"done {k} {marker}")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
            done[task["id"]] = (task_text(task), task["contextId"])

        answers: dict[str, str] = {}
        streams: dict[str, BackgroundStream] = {}
        for k in range(FLIGHT):
            said = f"flight {k} {marker}"
            chunks = [f"r{round_}f{k}c{i:02d} " for i in range(40)]
            gated_llm.script(text(chunks, chunk_delay=0.1, when_user_contains=said, times=3))
            stream = stream_turn(target.urls[k % 2], said, f"flight-{k}")
            task_id = task_id_of(stream)
            streams[task_id], answers[task_id] = stream, "".join(chunks)
        wait_until(
            lambda: all(chunks_seen(s) >= 3 for s in streams.values()),
            30,
            "every turn in flight to stream a few chunks",
        )
        load = Load(target.urls, marker)
        loaders = load.run()
        time.sleep(0.5)  # the load is under way
        restarted = crash_and_restart(database, target.urls)
        before = len(load.completed)
        wait_until(  # and goes on against the restarted database
            lambda: len(load.completed) >= before + LOADERS, 30, "the load to get through again"
        )
        load.stop.set()
        for thread in loaders:
            thread.join(40)
        wait_until(
            lambda: readiness(target.urls) == [200] * len(target.urls), 30, "/readyz 200 again"
        )

        # Every turn in flight ends, within the lease plus a bound of the restart.
        bound = LEASE_TTL_S + RECOVERY_BOUND_S
        ended = {
            task_id: rpcs[0].wait_for_state(task_id, TERMINAL_STATES, timeout=bound)
            for task_id in streams
        }
        took = time.monotonic() - restarted
        assert took < bound, f"the turns in flight took {took:.1f}s to end"

        problems = [f"load: {p}" for p in load.unclean]
        told = {**done, **load.completed}
        for task_id, (want, _) in told.items():
            problems += readback_problems(target, rpcs, task_id, want)
        for n, (task_id, stream) in enumerate(streams.items()):
            before_cut = positioned(stream.join(30))
            last_id = before_cut[-1].id or ""
            rest = resubscribe(target.urls[n % 2], task_id, last_id, f"again-{n}")
            union = before_cut + rest
            assert_contiguous(ids(union), f"turn in flight {task_id}, resubscribed")
            state = ended[task_id]["status"]["state"]
            if state_of_event(union[-1]) != state:
                problems.append(f"{task_id}: its stream ended at {union[-1].raw[:200]}")
            if state == "TASK_STATE_COMPLETED" and rebuild_answer(union) != answers[task_id]:
                problems.append(f"{task_id}: the client rebuilt {rebuild_answer(union)!r}")
            want = answers[task_id] if state == "TASK_STATE_COMPLETED" else None
            problems += [f"{task_id}: {p}" for p in journal_problems(view.journal(task_id), want)]
        wait_until(lambda: not view.active(), RECOVERY_BOUND_S, "every task to settle")
        problems += [f"stuck: {t}" for t in view.stuck()]
        stale = view.stale_claims()  # turns ended while the database was down: freed next
        assert not problems, f"after the crash ({len(told)} told COMPLETED):\n" + "\n".join(
            problems
        )

        # No conversation stays locked: each context takes a new message, which completes (and
        # frees it: a stale claim left by the crash is replaced, then released).
        contexts = [ctx for _, ctx in told.values()]
        contexts += [ended[t]["contextId"] for t in streams]
        contexts = list(dict.fromkeys([*contexts, *stale]))
        for n, context_id in enumerate(contexts):
            task = rpcs[n % 2].send(f"next {n} {marker}", context_id=context_id)
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", (context_id, task["status"])
        left = [c for c in view.stale_claims() if c in contexts]
        assert not left, f"claims still stale after a turn in their context: {left}"
        tracebacks = target.new_tracebacks()
        assert not tracebacks, "\n\n".join(tracebacks)
    finally:
        for rpc in rpcs:
            rpc.close()
