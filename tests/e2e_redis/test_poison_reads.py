"""Input that can be stored can be read, and stored data that cannot be read breaks nobody's reads.

One replica on the shared Redis (a prefix of its own) with A2A_MAX_JSON_DEPTH at its maximum:

* a data part nested exactly to the limit is stored, read back (GetTask, ListTasks) and streamed
  (its journal snapshot) over both bindings; one level deeper is refused and nothing is stored;
* unreadable tasks written straight into Redis under the store's key layout (nested deeper than
  the stores read, not JSON, not a task, broken listing fields) are left out of ListTasks and
  logged once at WARNING with their id; GetTask answers them as not found in each binding's shape;
  neither logs an ERROR or a traceback.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from tests.e2e.harness import A2A_HEADERS, check_error_object, new_id
from tests.e2e_redis.support import open_sse, rpc_body

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

DEPTH = 128  # Settings.a2a_max_json_depth's maximum
SERVER_ENV = {"A2A_MAX_JSON_DEPTH": str(DEPTH)}
REST_DATA_LEVELS = DEPTH - 4  # body, message, parts, parts[0] are the levels above `data`


def nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(scope="module")
def server(cluster):
    (srv,) = cluster.spawn(1)
    return srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture
def quiet_log(server):
    """The server's log lines written during the test; none may be an ERROR or a traceback."""
    mark = server.log_mark()

    def written() -> str:
        # Lines go out once per pass of the server's loop: those of the last answer may still
        # be waiting when the client has it.
        server.settle_log()
        return server.log_since(mark)

    yield written
    log = written()
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]


def rpc(http: httpx.Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = http.post("/", json=rpc_body(method, params), headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    return response.json()


def send_body(context_id: str, data: Any) -> dict[str, Any]:
    return {
        "message": {
            "messageId": new_id("msg-"),
            "role": "ROLE_USER",
            "contextId": context_id,
            "parts": [{"data": data}],
        },
        "configuration": {"returnImmediately": True},
    }


def test_data_nested_to_the_limit_is_stored_read_back_and_streamed(http, server, quiet_log):
    context_id = new_id("ctx-")
    fits = nested(REST_DATA_LEVELS)
    response = http.post("/message:send", json=send_body(context_id, fits), headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    task_id = response.json()["task"]["id"]

    got = rpc(http, "GetTask", {"id": task_id})["result"]
    assert got["history"][0]["parts"][0]["data"] == fits
    rest = http.get(f"/tasks/{task_id}", headers=A2A_HEADERS)
    assert rest.json()["history"][0]["parts"][0]["data"] == fits
    listed = rpc(http, "ListTasks", {"contextId": context_id})["result"]["tasks"]
    assert [t["id"] for t in listed] == [task_id]

    # The journal's snapshot (one level deeper in Redis) reads back too: stream a fresh task.
    stream_context = new_id("ctx-")
    params = send_body(stream_context, nested(DEPTH - 5))
    with open_sse(server.url, "/", rpc_body("SendStreamingMessage", params)) as stream:
        events = [event.data for event in stream.sse_events()]
    assert "error" not in events[-1], events[-1]
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert events[0]["result"]["task"]["history"][0]["parts"][0]["data"] == nested(DEPTH - 5)

    too_deep = send_body(context_id, nested(REST_DATA_LEVELS + 1))
    refused = http.post("/message:send", json=too_deep, headers=A2A_HEADERS)
    assert refused.status_code == 400, refused.text
    assert "message.parts[0].data" in refused.json()["error"]["message"]
    listed = rpc(http, "ListTasks", {"contextId": context_id})["result"]["tasks"]
    assert [t["id"] for t in listed] == [task_id], "a refused request must store nothing"


def _poison(redis_client, prefix: str, context_id: str) -> dict[str, dict[str, Any]]:
    """Unreadable tasks written under the store's key layout, indexed like real ones."""
    keys = RedisKeys(prefix)
    now_ms = int(time.time() * 1000)

    def snapshot(task_id: str, data: Any) -> str:
        return json.dumps(
            {
                "id": task_id,
                "contextId": context_id,
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2030-01-01T00:00:00Z"},
                "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}],
            }
        )

    deep, garbage, alien, fields = (new_id(f"poison-{kind}-") for kind in "dgaf")
    records = {
        deep: {"task": snapshot(deep, nested(250))},  # beyond what pydantic's JSON reader takes
        garbage: {"task": "{not json"},
        alien: {"task": json.dumps({"id": 7, "status": "fine"})},
        fields: {"task": snapshot(fields, "ok"), "ms": "soon"},
    }
    for n, (task_id, record) in enumerate(records.items()):
        hash_fields = {
            "seq": 1,
            "pos": 1,
            "state": "TASK_STATE_COMPLETED",
            "ms": now_ms + 1000 + n,  # newest: the first thing a list would load
            "us": (now_ms + 1000 + n) * 1000,
            **record,
        }
        redis_client.hset(keys.task(ANONYMOUS, task_id), mapping=hash_fields)
        redis_client.pexpire(keys.task(ANONYMOUS, task_id), 600_000)
        score = {task_id: now_ms + 1000 + n}
        redis_client.zadd(keys.owner_tasks(ANONYMOUS), score)
        redis_client.zadd(keys.context_tasks(ANONYMOUS, context_id), score)
    return records


def test_unreadable_tasks_are_left_out_of_lists_and_not_found(
    http, redis_client, prefix, quiet_log
):
    context_id = new_id("ctx-")
    response = http.post("/message:send", json=send_body(context_id, {"a": 1}), headers=A2A_HEADERS)
    good = response.json()["task"]["id"]
    poison = _poison(redis_client, prefix, context_id)

    for params in ({"contextId": context_id}, {}):
        listed = rpc(http, "ListTasks", params)
        assert "result" in listed, listed
        ids = [t["id"] for t in listed["result"]["tasks"]]
        assert good in ids and not set(ids) & set(poison), ids
        rest = http.get("/tasks", params=params, headers=A2A_HEADERS)
        assert rest.status_code == 200, rest.text
        assert [t["id"] for t in rest.json()["tasks"]] == ids

    log = quiet_log()
    for task_id in poison:  # once per list (2 queries x 2 bindings), one line, no traceback
        logged = [line for line in log.splitlines() if task_id in line]
        assert len(logged) == 4 and all(" WARNING " in line for line in logged), logged

    # Broken listing fields keep a task out of lists only: its snapshot reads as it is.
    (fields,) = [t for t in poison if t.startswith("poison-f")]
    assert rpc(http, "GetTask", {"id": fields})["result"]["id"] == fields
    assert http.get(f"/tasks/{fields}", headers=A2A_HEADERS).json()["id"] == fields

    for task_id in [t for t in poison if t != fields]:
        body = rpc(http, "GetTask", {"id": task_id})
        check_error_object(body["error"])
        assert body["error"]["code"] == -32001, body
        rest = http.get(f"/tasks/{task_id}", headers=A2A_HEADERS)
        assert rest.status_code == 404, rest.text
        assert rest.json()["error"]["details"][0]["metadata"] == {"taskId": task_id}
        cancel = http.post(f"/tasks/{task_id}:cancel", headers=A2A_HEADERS)
        assert cancel.status_code == 404, cancel.text
