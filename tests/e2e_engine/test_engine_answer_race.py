"""Several clients answer the same waiting (INPUT_REQUIRED) task at once: exactly one answer may
resume the turn; the others are refused, and the turn runs once.

Run on the in-memory stores and on Redis stores (one replica): the refusal must not depend on the
store's timing.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.e2e.harness import RpcClient, ServerProcess, send_params
from tests.e2e.wire import message_text
from tests.e2e_engine.conftest import BASE_ENV
from tests.e2e_engine.engine_helpers import validated_task
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(120)

REDIS_URL = "redis://127.0.0.1:6379/0"
ANSWERS = 6
ROUNDS = 4


def _redis_or_fail():
    from redis import Redis
    from redis.exceptions import ConnectionError as RedisConnectionError

    client = Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except RedisConnectionError as exc:
        client.close()
        pytest.fail(f"this test needs a Redis at {REDIS_URL} ({exc})")
    return client


@pytest.fixture(scope="module", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def server(request, fake_llm):
    env = dict(BASE_ENV)
    redis = None
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    if request.param == "redis":
        redis = _redis_or_fail()
        env.update({"REDIS_URL": REDIS_URL, "REDIS_KEY_PREFIX": prefix})
    proc = ServerProcess(fake_llm.base_url, env=env)
    try:
        proc.start()
        yield proc
    finally:
        proc.cleanup()
        if redis is not None:
            keys = list(redis.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                redis.delete(*keys)
            redis.close()


def _answer_at_once(url: str, task: dict) -> list[tuple[int, dict]]:
    """ANSWERS clients send their answer to the waiting task at the same moment."""
    clients = [RpcClient(url, timeout=60.0) for _ in range(ANSWERS)]
    barrier = threading.Barrier(ANSWERS)
    replies: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def answer(i: int, client: RpcClient) -> None:
        params = send_params(f"answer-{i}", task_id=task["id"], context_id=task["contextId"])
        barrier.wait(timeout=10)
        body = client.call("SendMessage", params)
        with lock:
            replies.append((i, body))

    threads = [threading.Thread(target=answer, args=(i, c)) for i, c in enumerate(clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        for c in clients:
            c.close()
    return replies


def test_concurrent_answers_resume_the_turn_once(rpc, server, fake_llm, marker):
    for n in range(ROUNDS):
        mk = f"{marker}-r{n}"
        fake_llm.script(
            tool_calls([("ask_user", {"question": "Your name?"})], when_user_contains=mk),
            text("Hello!", delay=0.3, when_user_contains=mk, times=None),
        )
        first = f"ask me {mk}"
        task = rpc.send(first)
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]

        replies = _answer_at_once(server.url, task)
        assert len(replies) == ANSWERS, replies

        accepted = [i for i, body in replies if "result" in body]
        refused = [body["error"] for _, body in replies if "error" in body]
        final = validated_task(rpc.wait_for_state(task["id"], timeout=20))
        users = [message_text(m) for m in final.get("history") or [] if m["role"] == "ROLE_USER"]
        model_calls = len(fake_llm.requests_for(mk))
        assert len(accepted) == 1, (
            f"round {n}: {len(accepted)} of {ANSWERS} concurrent answers were accepted "
            f"(answers {sorted(accepted)}); the model was called {model_calls} times "
            f"(want 2); user messages in history: {users}; refusals: {refused}"
        )
        assert all(e["code"] == -32004 for e in refused), refused
        assert final["status"]["state"] == "TASK_STATE_COMPLETED", final["status"]
        assert model_calls == 2, f"round {n}: the turn was resumed {model_calls - 1} times"
        assert users == [first, f"answer-{accepted[0]}"], users
