"""Double writers: a replica frozen past its lease must not write once it wakes up.

Two replicas on Redis with LEASE_TTL_S=2. Replica A runs turns; the test freezes A (SIGSTOP)
until B has taken every turn over (B called the model again, or ran the tool again), then thaws A
(SIGCONT) while B is still at work. A wakes with the model's chunks (or a tool's result) in hand
and leases it believes it holds. Whatever A does next must not reach the journals. In each task's
journal (read from Redis):

* the writer epoch never goes down (a smaller epoch after a larger one is a write by a replica
  that had lost the lease), and the entries the turn wrote carry one;
* exactly one terminal status, the last entry;
* the answer rebuilt from the artifact chunks (append semantics) is the model's answer, whole;
* the stored conversation holds the turn once (user, assistant; or user, assistant asking for
  the tool, tool, assistant) ending with that answer; GetTask shows it, COMPLETED.

A runs many turns when it is frozen: on waking it renews their leases one after another, so
the later ones have time to write if nothing fences them. Frozen once while the answers stream,
once while tools run.
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

from tests.e2e.harness import RpcClient, ServerProcess
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.redis_view import RedisView, journal_problems
from tests.e2e_chaos.targets import Target, redis_replicas, wait_until
from tests.e2e_redis.support import Cluster, task_text
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 2
TAKEOVER_S = LEASE_TTL_S * 3 + 15  # expiry + a sweep + a loaded machine
STREAMING_TURNS = 12  # A renews its leases one by one on waking: the last ones write longest
TOOL_TURNS = 6


@pytest.fixture(scope="module")
def fenced(
    gated_llm: GatedLLM, main_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Target, Cluster]]:
    workdir = tmp_path_factory.mktemp("fencing")
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with redis_replicas(gated_llm.base_url, workdir, name="fencing", env=env) as replicas:
        yield replicas


@pytest.fixture
def target(fenced: tuple[Target, Cluster]) -> Target:
    return fenced[0]


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


def artifacts(view: RedisView, task_id: str) -> int:
    return sum(1 for r in view.journal(task_id) if r.event.get("kind") == "artifact")


def after_thaw(a: ServerProcess) -> None:
    """Once A serves HTTP again its event loop runs: give a late writer one lease period to show
    itself (this wait bounds the test; nothing is asserted about time)."""
    with httpx.Client(trust_env=False, timeout=5) as http:
        wait_until(lambda: http.get(a.url + "/healthz").status_code == 200, 20, "A to wake up")
    time.sleep(LEASE_TTL_S)


def check(target: Target, rpc: RpcClient, task_ids: list[str], want: str, roles: list[str]) -> None:
    """Every task's journal, snapshot and conversation hold one writer's work (see the module)."""
    view = target.view
    assert view is not None
    report, shown = [], ""
    for task_id in task_ids:
        rows = view.journal(task_id)
        problems = journal_problems(rows, want)
        task = rpc.get_task(task_id)
        if task["status"]["state"] != "TASK_STATE_COMPLETED" or task_text(task) != want:
            problems.append(f"GetTask: {task['status']['state']} with {task_text(task)!r}")
        convo = view.conversation(task["contextId"])
        said = [(m["role"], m.get("content")) for m in convo]
        if [r for r, _ in said] != roles or said[-1][1] != want:
            problems.append(f"stored conversation: {said}")
        if problems:
            report.append(f"task {task_id}:\n  " + "\n  ".join(problems))
            shown = shown or f"journal of {task_id}:\n  " + "\n  ".join(r.describe() for r in rows)
    assert not report, f"{len(report)} of {len(task_ids)} tasks:\n" + "\n".join([*report, shown])


def start_turns(rpc: RpcClient, marker: str, count: int) -> dict[str, str]:
    """`count` turns (each its own context), all running on the replica `rpc` talks to."""
    return {
        rpc.send(f"go {marker}-t{k:02d}", configuration={"returnImmediately": True})["id"]: (
            f"{marker}-t{k:02d}"
        )
        for k in range(count)
    }


def test_a_replica_frozen_while_answers_stream_writes_nothing_after_the_takeover(
    fenced: tuple[Target, Cluster], target: Target, gated_llm: GatedLLM, marker: str
) -> None:
    (a, b), view = fenced[1].servers, target.view
    assert view is not None
    chunks = [f"w{i:02d} " for i in range(40)]
    for k in range(STREAMING_TURNS):
        gated_llm.script(
            text(chunks, chunk_delay=0.1, when_user_contains=f"{marker}-t{k:02d}", times=3)
        )
    rpc_a, rpc_b = RpcClient(a.url), RpcClient(b.url)
    try:
        turns = start_turns(rpc_a, marker, STREAMING_TURNS)
        wait_until(
            lambda: all(
                f"-{pid_of(a)}-" in view.holder(t) and artifacts(view, t) >= 2 for t in turns
            ),
            60,  # the turns start together; a loaded machine needs the room (seen at 30 s)
            "A to stream a few chunks of every answer",
        )
        with frozen(a):
            # B took a turn over once it calls the model for it again.
            wait_until(
                lambda: all(gated_llm.waiting(m) >= 2 for m in turns.values()),
                TAKEOVER_S,
                "B to take every turn over",
            )
        for task_id in turns:
            rpc_b.wait_for_state(task_id, timeout=30)
        after_thaw(a)
        check(target, rpc_b, list(turns), "".join(chunks), ["user", "assistant"])
    finally:
        rpc_a.close()
        rpc_b.close()


def test_a_replica_frozen_while_tools_run_writes_nothing_after_the_takeover(
    fenced: tuple[Target, Cluster], target: Target, gated_llm: GatedLLM, marker: str
) -> None:
    cluster = fenced[1]
    (a, b), view = cluster.servers, target.view
    assert view is not None
    for k in range(TOOL_TURNS):
        tag = f"{marker}-t{k:02d}"
        gated_llm.script(
            tool_calls([("slow_tool", {"seconds": 3, "tag": tag})], when_user_contains=tag),
            text(["tool ", "done"], chunk_delay=0.2, when_user_contains=tag, times=3),
        )
    rpc_a, rpc_b = RpcClient(a.url), RpcClient(b.url)
    try:
        turns = start_turns(rpc_a, marker, TOOL_TURNS)
        ran_on = lambda server, tag: str(pid_of(server)) in cluster.tool_runs(tag)[0]  # noqa: E731
        wait_until(lambda: all(ran_on(a, tag) for tag in turns.values()), 30, "A's tool calls")
        with frozen(a):
            wait_until(
                lambda: all(ran_on(b, tag) for tag in turns.values()),
                TAKEOVER_S,
                "B to take every turn over and run its tool again",
            )
        for task_id in turns:
            rpc_b.wait_for_state(task_id, timeout=30)
        after_thaw(a)
        check(target, rpc_b, list(turns), "tool done", ["user", "assistant", "tool", "assistant"])
    finally:
        rpc_a.close()
        rpc_b.close()
