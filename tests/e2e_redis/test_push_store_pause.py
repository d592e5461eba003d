"""Push delivery outlives a store that pauses mid-turn: a replica against a private redis-server
that is frozen (SIGSTOP: nothing answers) for 3 seconds while the turn streams and the webhook is
being told. The delivery waits for the store and goes on from its stored cursor, so the webhook
gets every event through the terminal one, at least once (docs/push.md), in the journal's order.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.webhook import WebhookReceiver
from tests.e2e_redis.support import Cluster, RedisServer
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

PAUSE_S = 3.0


@pytest.fixture(scope="module")
def own_redis():
    with RedisServer(persistent=False) as srv:
        yield srv


@pytest.fixture(scope="module")
def cluster(fake_llm, own_redis, prefix, tool_log):
    env = {"A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1", "A2A_PUSH_BACKOFF_S": "0.2"}
    with Cluster(
        fake_llm.base_url, redis_url=own_redis.url, prefix=prefix, tool_log=tool_log, extra_env=env
    ) as c:
        yield c


@pytest.fixture(scope="module")
def rpc(cluster):
    (server,) = cluster.spawn(1)
    return cluster.client(server, timeout=30)


@pytest.fixture(scope="module")
def webhook():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def chunk_texts(bodies) -> list[str]:
    return [
        part["text"]
        for body in bodies
        if "artifactUpdate" in body
        for part in body["artifactUpdate"]["artifact"]["parts"]
    ]


def states(bodies) -> list[str]:
    return [body["statusUpdate"]["status"]["state"] for body in bodies if "statusUpdate" in body]


def test_the_webhook_gets_every_event_through_the_last_after_a_store_pause(
    rpc, own_redis, fake_llm, webhook, marker
):
    chunks = [f"c{n:02d} " for n in range(40)]
    fake_llm.script(text(chunks, chunk_delay=0.15, when_user_contains=marker))
    path = f"/paused/{marker}"
    config = {"url": webhook.url(path), "token": "tok"}
    task = rpc.send(
        f"talk through a pause {marker}",
        configuration={"returnImmediately": True, "taskPushNotificationConfig": config},
    )
    webhook.wait_for(path, lambda got: len(chunk_texts(item.body for item in got)) >= 4)
    own_redis.freeze()
    try:
        time.sleep(PAUSE_S)  # the model streams on into the pause
    finally:
        own_redis.thaw()

    done = rpc.wait_for_state(task["id"], timeout=60)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    got = webhook.wait_for(
        path, lambda got: "TASK_STATE_COMPLETED" in states(item.body for item in got), timeout=60
    )
    bodies = [item.body for item in got]
    # Every chunk at least once, each first seen in the answer's order; the terminal event last.
    seen = list(dict.fromkeys(chunk_texts(bodies)))
    assert seen == chunks, seen
    assert states(bodies)[-1] == "TASK_STATE_COMPLETED", states(bodies)
    assert "TASK_STATE_WORKING" in states(bodies)
    assert all(item.headers["x-a2a-notification-token"] == "tok" for item in got)
