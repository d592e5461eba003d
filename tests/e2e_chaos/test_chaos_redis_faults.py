"""Redis frozen (SIGSTOP) and killed (SIGKILL) under a replica with a turn in flight.

A private redis-server (AOF, fsync always) so it can be frozen and killed. While Redis does not
answer (probes: tests/e2e_chaos/outage_probes.py), each of GetTask and SendMessage (JSON-RPC) and GET /tasks/{id} and POST /message:send
(REST), started at once, must fail with the clean store-unavailable error (JSON-RPC -32603 with
ErrorInfo STORE_UNAVAILABLE; REST 503 with the same) within FAIL_BOUND_S, and /readyz must say
503 within READY_BOUND_S; /healthz stays 200. Meanwhile the turn in flight is let go on into the
outage.

When Redis is back (thawed, or restarted from its AOF): /readyz 200 again, the task written
before the outage reads back, a new turn completes, and no task is left stuck: every task under
the prefix, including any a failed request half-wrote, ends up settled, never SUBMITTED/WORKING
without a live lease.

The bounds are generous on purpose (the issue asks for errors within 2 s); they bound a fault's
time to an error, they are not speed measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.e2e.harness import RpcClient
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.outage_probes import probe_outage
from tests.e2e_chaos.targets import (
    SETTLED_STATES,
    Target,
    redis_replicas,
    wait_until,
)
from tests.e2e_redis.support import RedisServer, task_text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(150)]

LEASE_TTL_S = 3
RECOVERY_S = 4 * LEASE_TTL_S + 20  # lease expiry + sweeps + reconnects on a loaded machine


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    with RedisServer(persistent=True) as server:  # cleanup thaws a frozen server first
        yield server


@pytest.fixture(scope="module")
def faulty(
    gated_llm: GatedLLM, own_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    workdir = tmp_path_factory.mktemp("faults")
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with redis_replicas(
        gated_llm.base_url, workdir, name="faults", env=env, replicas=1, redis_url=own_redis.url
    ) as replicas:
        yield replicas[0]


@pytest.fixture
def target(faulty: Target) -> Target:
    return faulty


def recovered(target: Target, gated_llm: GatedLLM, task_id: str, marker: str) -> None:
    """Ready again, the task readable and settled, a new turn completes, nothing stuck."""
    url, view = target.urls[0], target.view
    assert view is not None
    with httpx.Client(trust_env=False, timeout=10) as http:
        wait_until(lambda: http.get(url + "/readyz").status_code == 200, 20, "/readyz 200 again")
    rpc = RpcClient(url, timeout=30)
    try:
        task = rpc.wait_for_state(task_id, SETTLED_STATES, timeout=RECOVERY_S)
        assert task["status"]["state"] in SETTLED_STATES, task["status"]
        after = rpc.send(f"after {marker}")
        assert after["status"]["state"] == "TASK_STATE_COMPLETED", after["status"]
        assert task_text(after) == f"echo: after {marker}"

        try:
            wait_until(lambda: not view.active(), RECOVERY_S, "every task to settle")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: still active {view.active()}") from None
        assert not view.stuck(), f"tasks stuck after the outage: {view.stuck()}"
    finally:
        rpc.close()


def report(problems: list[str], what: str, recovery: Callable[[], None]) -> None:
    """Check the recovery too, whatever happened during the outage; then report everything."""
    try:
        recovery()
    except AssertionError as exc:
        problems = [*problems, f"after Redis came back: {exc}"]
    assert not problems, f"while Redis was {what}:\n" + "\n".join(problems)


def start_turn(target: Target, gated_llm: GatedLLM, marker: str) -> str:
    rpc = RpcClient(target.urls[0], timeout=30)
    try:
        task_id = rpc.send(f"running {marker}", configuration={"returnImmediately": True})["id"]
    finally:
        rpc.close()
    wait_until(lambda: gated_llm.waiting(marker) >= 1, 20, "the turn to call the model")
    return task_id


def test_a_frozen_redis_gives_clean_errors_fast_and_nothing_stays_stuck(
    target: Target, own_redis: RedisServer, gated_llm: GatedLLM, marker: str
) -> None:
    with gated_llm.gate(marker) as gate:
        task_id = start_turn(target, gated_llm, marker)
        own_redis.freeze()
        try:
            problems = probe_outage(target.urls[0], task_id, marker)
            gate.open()  # the turn goes on into the outage
            time.sleep(1)  # let it try to write while Redis is frozen
        finally:
            own_redis.thaw()
    report(problems, "frozen", lambda: recovered(target, gated_llm, task_id, marker))


def test_a_killed_redis_gives_clean_errors_fast_and_nothing_stays_stuck(
    target: Target, own_redis: RedisServer, gated_llm: GatedLLM, marker: str
) -> None:
    assert own_redis.proc is not None
    with gated_llm.gate(marker) as gate:
        task_id = start_turn(target, gated_llm, marker)
        own_redis.proc.kill()
        own_redis.proc.wait(timeout=10)
        try:
            problems = probe_outage(target.urls[0], task_id, marker)
            gate.open()
            time.sleep(1)
        finally:
            own_redis.start()
    report(problems, "down", lambda: recovered(target, gated_llm, task_id, marker))
