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

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, TERMINAL_STATES, RpcClient, send_params
from tests.e2e_chaos.client import error_reason, task_answer
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.redis_view import journal_problems
from tests.e2e_chaos.takeovers import (
    chunks_seen,
    positioned,
    resubscribe,
    stream_turn,
    task_id_of,
)
from tests.e2e_chaos.targets import Target, redis_replicas, wait_until
from tests.e2e_redis.support import (
    BackgroundStream,
    RedisServer,
    assert_contiguous,
    ids,
    rebuild_answer,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(150)]

LEASE_TTL_S = 2
RECOVERY_BOUND_S = 25.0  # past the lease: reconnects, a sweep, the rest of the answer, a slow CI
DONE, FLIGHT, LOADERS = 6, 6, 4
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


@dataclass
class Load:
    """Blocking sends on every replica, from a few threads, until `stop`; what each answered."""

    urls: list[str]
    marker: str
    completed: dict[str, tuple[str, str]] = field(default_factory=dict)  # task: (answer, context)
    settled_otherwise: list[str] = field(default_factory=list)
    unclean: list[str] = field(default_factory=list)
    store_errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _numbers: Iterator[int] = field(default_factory=itertools.count)

    def run(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(LOADERS)]
        for thread in threads:
            thread.start()
        return threads

    def _loop(self) -> None:
        with httpx.Client(trust_env=False, timeout=30) as http:
            while not self.stop.is_set():
                n = next(self._numbers)
                self._send(http, self.urls[n % len(self.urls)], f"load {n} {self.marker}")

    def _send(self, http: httpx.Client, url: str, said: str) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params(said)}
        try:
            r = http.post(url + "/", json=body, headers=A2A_HEADERS)
            answer = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            with self._lock:
                self.unclean.append(f"{said}: {exc!r}")
            return
        with self._lock:
            if "error" in answer:
                err = answer["error"]
                if err.get("code") == -32603 and error_reason(err.get("data")) == (
                    "STORE_UNAVAILABLE"
                ):
                    self.store_errors += 1
                else:
                    self.unclean.append(f"{said}: {err}")
                return
            task = answer["result"]["task"]
            if task["status"]["state"] == "TASK_STATE_COMPLETED":
                self.completed[task["id"]] = (task_answer(task), task["contextId"])
                if task_answer(task) != f"echo: {said}":
                    self.unclean.append(f"{said}: answered {task_answer(task)!r}")
            else:
                self.settled_otherwise.append(task["id"])


def crash_and_restart(redis: RedisServer) -> None:
    """SIGKILL (no shutdown, no last write), then a new process on the same AOF and port."""
    assert redis.proc is not None
    redis.proc.kill()
    redis.proc.wait(timeout=10)
    time.sleep(1.0)  # the replicas find it gone: refused connections, failed writes
    redis.start()


def readback_problems(target: Target, rpcs: list[RpcClient], task_id: str, want: str) -> list[str]:
    """A task a client was told is COMPLETED, read back over the wire and from Redis."""
    view = target.view
    assert view is not None
    problems = []
    for rpc in rpcs:
        task = rpc.get_task(task_id)
        if task["status"]["state"] != "TASK_STATE_COMPLETED" or task_text(task) != want:
            problems.append(f"GetTask on {rpc.base_url}: {task['status']} {task_text(task)!r}")
    stored = view.task(task_id)
    if view.task_state(task_id) != "TASK_STATE_COMPLETED" or task_text(stored or {}) != want:
        problems.append(f"in Redis: {view.task_state(task_id)} {task_text(stored or {})!r}")
    problems += journal_problems(view.journal(task_id), want)
    return [f"{task_id}: {p}" for p in problems]


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
        crash_and_restart(aof_redis)
        restarted, before = time.monotonic(), len(load.completed)
        wait_until(  # and goes on against the restarted Redis
            lambda: len(load.completed) >= before + LOADERS, 20, "the load to get through again"
        )
        load.stop.set()
        for thread in loaders:
            thread.join(40)

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
            before = positioned(stream.join(30))
            rest = resubscribe(target.urls[n % 2], task_id, before[-1].id or "", f"again-{n}")
            union = before + rest
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
        assert not problems, f"after the crash ({len(told)} told COMPLETED):\n" + "\n".join(
            problems
        )

        # No conversation stays locked: each context takes a new message, which completes.
        contexts = [ctx for _, ctx in told.values()]
        contexts += [ended[t]["contextId"] for t in streams]
        for n, context_id in enumerate(contexts):
            task = rpcs[n % 2].send(f"next {n} {marker}", context_id=context_id)
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", (context_id, task["status"])
        assert not target.new_tracebacks(), target.new_tracebacks()
    finally:
        for rpc in rpcs:
            rpc.close()
