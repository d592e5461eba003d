"""A replica cut off from Redis at one exact command, its held write let through late (issue 48,
defects 2 to 4): the fences refuse it, whatever ran meanwhile.

Replica A reaches Redis through a TCP proxy that cuts at the first command carrying a pattern
(tests/e2e_chaos/blackhole.py, `cut_on`): that command and everything after it wait in the proxy,
and are delivered when the cut heals (`resume`), late, after replica B (direct) went on.

* A turn's prompt append held: B fails that turn (no checkpoint: the client is told to send
  again), the next turn of the conversation runs on B; then A's append lands. It is refused: the
  conversation read from Redis holds the second turn alone, in order.
* A task's creation held: the client's retry on B is accepted at once (no -32004 naming a task
  nobody can read) and completes; then A's creation lands. It is refused: the context has one task.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import RpcClient, ServerProcess, send_params
from tests.e2e_chaos.blackhole import Blackhole
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.redis_view import RedisView
from tests.e2e_chaos.targets import Target, new_prefix, wait_until
from tests.e2e_redis.support import REDIS_URL, Cluster, delete_prefix, wait_ready
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3  # A's heartbeat lapses after 2 s: B takes its turns over within seconds
TAKEOVER_S = 40.0


@pytest.fixture(scope="module")
def cut_replicas(
    gated_llm: GatedLLM, main_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Target, Blackhole]]:
    """(A through the proxy, B direct) as a Target, and the proxy."""
    redis_port = int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    prefix = new_prefix("fences")
    tool_log = Path(tmp_path_factory.mktemp("fences")) / "tools.log"
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with (
        Blackhole(redis_port) as proxy,
        Cluster(
            gated_llm.base_url, redis_url=REDIS_URL, prefix=prefix, tool_log=tool_log, extra_env=env
        ) as cluster,
    ):
        a = ServerProcess(gated_llm.base_url, env={**cluster.env, "REDIS_URL": proxy.url})
        cluster.servers.append(a)
        with ThreadPoolExecutor(max_workers=1) as pool:
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
def target(cut_replicas: tuple[Target, Blackhole]) -> Target:
    return cut_replicas[0]  # its servers' logs are attached to a failure (conftest)


def _state(rpc: RpcClient, task_id: str) -> str:
    return str(rpc.result("GetTask", {"id": task_id})["status"]["state"])


def _a_ready_again(a: ServerProcess) -> None:
    wait_ready(a, timeout=60)


def _contents(view: RedisView, context_id: str) -> list[str]:
    return [str(message.get("content")) for message in view.conversation(context_id)]


def test_a_stale_turns_prompt_landing_late_is_refused(
    cut_replicas: tuple[Target, Blackhole], target: Target, gated_llm: GatedLLM
) -> None:
    (a, b), proxy, view = target.servers, cut_replicas[1], target.view
    assert view is not None
    context_id = f"ctx-{uuid.uuid4().hex[:10]}"
    first, second = f"first-{uuid.uuid4().hex[:8]}", f"second-{uuid.uuid4().hex[:8]}"
    gated_llm.script(text(f"answer to {second}", when_user_contains=second))
    on_a, on_b = RpcClient(a.url, timeout=60), RpcClient(b.url, timeout=60)
    try:
        proxy.cut_on(f'"role":"user","content":"{first}"'.encode())  # the turn's prompt append
        sent = on_a.result(
            "SendMessage",
            send_params(first, context_id=context_id, configuration={"returnImmediately": True}),
        )
        stale = sent["task"]["id"]
        assert proxy.tripped.wait(30), "A's turn never sent its prompt"
        # B takes the turn over: it started (WORKING) and saved nothing to go on from: failed.
        wait_until(lambda: _state(on_b, stale) == "TASK_STATE_FAILED", TAKEOVER_S, "B fails it")
        task = on_b.send(second, context_id=context_id)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert _contents(view, context_id) == [second, f"answer to {second}"]

        a_mark = a.log_mark()
        proxy.heal(resume=True)  # A's held append (and its retries) reach Redis now
        wait_until(lambda: "lease lost" in a.log_since(a_mark), 30, "A to stop its stale turn")
        _a_ready_again(a)
        time.sleep(1.0)  # anything else A held has landed by now
        assert _contents(view, context_id) == [second, f"answer to {second}"], (
            "the stale turn's prompt was written into the conversation"
        )
        assert _state(on_b, stale) == "TASK_STATE_FAILED"
    finally:
        on_a.close()
        on_b.close()


def test_a_creation_landing_late_leaves_no_ghost_and_never_holds_the_retry_up(
    cut_replicas: tuple[Target, Blackhole], target: Target, gated_llm: GatedLLM
) -> None:
    (a, b), proxy, view = target.servers, cut_replicas[1], target.view
    assert view is not None
    context_id = f"ctx-{uuid.uuid4().hex[:10]}"
    prompt = f"create-{uuid.uuid4().hex[:8]}"
    gated_llm.script(text(f"answer to {prompt}", when_user_contains=prompt))
    on_a, on_b = RpcClient(a.url, timeout=60), RpcClient(b.url, timeout=60)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        proxy.cut_on(f'"text":"{prompt}"'.encode())  # the task's creation: its first message
        held = pool.submit(on_a.call, "SendMessage", send_params(prompt, context_id=context_id))
        assert proxy.tripped.wait(30), "A never sent the creation"
        # The client retries on B while A's creation is held (A's lease and claim are live).
        retry = on_b.call("SendMessage", send_params(prompt, context_id=context_id))
        assert "error" not in retry, f"the retry on B was refused: {retry['error']!r}"
        task = retry["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        answered = held.result(timeout=60)
        error = answered.get("error") or {}
        reason = (error.get("data") or [{}])[0].get("reason")
        assert error.get("code") == -32603 and reason == "STORE_UNAVAILABLE", answered

        proxy.heal(resume=True)  # A's held creation reaches Redis now
        _a_ready_again(a)
        time.sleep(2 * LEASE_TTL_S)  # a sweep or two: a ghost would have been started by now
        listed = on_b.result("ListTasks", {"contextId": context_id})["tasks"]
        assert [t["id"] for t in listed] == [task["id"]], f"a second task appeared: {listed}"
        in_redis = [
            t for t in view.task_ids() if (view.task(t) or {}).get("contextId") == context_id
        ]
        assert in_redis == [task["id"]], f"tasks of the context in Redis: {in_redis}"
        assert _contents(view, context_id) == [prompt, f"answer to {prompt}"]
    finally:
        pool.shutdown(wait=False)
        on_a.close()
        on_b.close()
