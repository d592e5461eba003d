"""Push notifications on shared stores: a webhook registered through replica B for a turn running
on replica A gets every event after it, once the config is stored (the configs and the delivery
cursor are in the stores, beside the task: Redis here, PostgreSQL in tests/e2e_postgres)."""

from __future__ import annotations

import pytest

from tests.e2e.webhook import WebhookReceiver
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

SERVER_ENV = {"A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1"}
HEADERS = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def webhook():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def _states(items) -> list[str]:
    return [i.body["statusUpdate"]["status"]["state"] for i in items if "statusUpdate" in i.body]


def test_a_config_made_on_b_follows_the_turn_on_a(
    replicas, rpc_a, rpc_b, fake_llm, marker, webhook, store_view
):
    fake_llm.script(tool_calls([("ask_user", {"question": "Colour?"})], when_user_contains=marker))
    task = rpc_a.send(f"paint {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    path = f"/replicas/{marker}"
    config = {"taskId": task["id"], "id": "hook-1", "url": webhook.url(path), "token": "t"}
    assert rpc_b.result("CreateTaskPushNotificationConfig", config)["id"] == "hook-1"
    assert "hook-1" in store_view.push_config_ids(task["id"])

    # The answer goes to A; the turn resumes there and its events reach the webhook.
    fake_llm.script(text("Red it is.", when_user_contains="red please"))
    answer = {
        "message": {
            "messageId": f"answer-{marker}",
            "role": "ROLE_USER",
            "parts": [{"text": "red please"}],
            "taskId": task["id"],
        }
    }
    done = rpc_a.result("SendMessage", answer)["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    got = webhook.wait_for(path, lambda items: "TASK_STATE_COMPLETED" in _states(items))
    # Only what happened after the config was made: not the first turn's events.
    assert "TASK_STATE_INPUT_REQUIRED" not in _states(got)
    assert all(item.headers["x-a2a-notification-token"] == "t" for item in got)
    assert store_view.push_cursor(task["id"]) >= 5
