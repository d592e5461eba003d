"""Redis trouble: a replica against a private redis-server that goes away and comes back.

While Redis is down, requests fail fast with the store-unavailable error (JSON-RPC -32603, REST
503 with an AIP-193 body), /readyz says 503 and /healthz 200. The same holds while Redis is frozen
(SIGSTOP: connections stay open and nothing answers), which only command timeouts can notice. When it is back (AOF on, so its data
survives the restart), /readyz recovers within seconds, tasks written before the outage are
readable and new turns run. A turn streaming through a short outage finishes, and a client that
lost its stream resumes it with Last-Event-ID. Finally, a Redis that comes back empty makes old
tasks "not found" (not an internal error).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, ERROR_INFO_TYPE, check_error_object, send_params
from tests.e2e_redis.support import (
    Cluster,
    RedisServer,
    assert_contiguous,
    describe_events,
    ids,
    open_sse,
    rebuild_answer,
    result_of,
    rpc_body,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

FAIL_FAST_S = 2.0
FROZEN_FAIL_S = 4.0  # a generous bound on REDIS_COMMAND_TIMEOUT_S (1.5 s) + a short pool wait
RECOVERY_S = 5.0


@pytest.fixture(scope="module")
def own_redis():
    with RedisServer(persistent=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def outage_cluster(fake_llm, own_redis, prefix, tool_log):
    with Cluster(fake_llm.base_url, redis_url=own_redis.url, prefix=prefix, tool_log=tool_log) as c:
        yield c


@pytest.fixture(scope="module")
def server(outage_cluster, own_redis):
    (srv,) = outage_cluster.spawn(1)
    return srv


@pytest.fixture(scope="module")
def rpc(outage_cluster, server):
    return outage_cluster.client(server, timeout=15)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=15) as client:
        yield client


@pytest.fixture
def cluster(outage_cluster):  # makes the failure hook attach this module's replica logs
    return outage_cluster


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t0


def wait_ready(http, timeout=RECOVERY_S) -> float:
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        r = http.get("/readyz")
        if r.status_code == 200:
            return time.monotonic() - t0
        last = (r.status_code, r.text)
        time.sleep(0.1)
    raise AssertionError(f"/readyz not 200 within {timeout}s after Redis came back: {last}")


def assert_store_unavailable_rpc(err):
    check_error_object(err)
    assert err["code"] == -32603, err
    assert "unavailable" in err["message"].lower() and "store" in err["message"].lower(), err


def assert_store_unavailable_rest(r: httpx.Response):
    assert r.status_code == 503, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"}, body
    e = body["error"]
    assert e["code"] == 503 and e["status"] == "UNAVAILABLE", e
    assert "unavailable" in e["message"].lower(), e
    infos = [d for d in e.get("details") or [] if d.get("@type") == ERROR_INFO_TYPE]
    assert infos and infos[0]["reason"] == "STORE_UNAVAILABLE", e
    assert "Traceback" not in r.text


def test_outage_fails_fast_and_recovers(server, rpc, http, own_redis, fake_llm, marker):
    fake_llm.script(text(["before ", "the outage"], when_user_contains=marker))
    before = rpc.send(f"first {marker}")
    assert before["status"]["state"] == "TASK_STATE_COMPLETED", before["status"]
    assert wait_ready(http) < RECOVERY_S

    own_redis.stop()
    try:
        err, dt = timed(rpc.error, "GetTask", {"id": before["id"]})
        assert_store_unavailable_rpc(err)
        assert dt < FAIL_FAST_S, f"GetTask took {dt:.2f}s with Redis down"

        err, dt = timed(rpc.error, "SendMessage", send_params(f"during {marker}"))
        assert_store_unavailable_rpc(err)
        assert dt < FAIL_FAST_S, f"SendMessage took {dt:.2f}s with Redis down"

        with open_sse(server.url, "/", rpc_body("SendStreamingMessage",
                      send_params(f"during {marker}"), "s")) as s:  # fmt: skip
            if s.is_sse:
                events = list(s.sse_events())
                assert len(events) == 1 and "error" in events[0].data, describe_events(events)
                assert_store_unavailable_rpc(events[0].data["error"])
            else:
                assert_store_unavailable_rpc(s.json()["error"])

        r, dt = timed(http.get, f"/tasks/{before['id']}", headers=A2A_HEADERS)
        assert_store_unavailable_rest(r)
        assert dt < FAIL_FAST_S, f"REST GET took {dt:.2f}s with Redis down"

        r, dt = timed(http.post, "/message:send", json=send_params(f"rest {marker}"),
                      headers=A2A_HEADERS)  # fmt: skip
        assert_store_unavailable_rest(r)
        assert dt < FAIL_FAST_S

        r, dt = timed(http.get, "/readyz")
        assert r.status_code == 503, (r.status_code, r.text)
        assert dt < FAIL_FAST_S, f"/readyz took {dt:.2f}s with Redis down"
        assert http.get("/healthz").status_code == 200
    finally:
        own_redis.start()

    took = wait_ready(http)
    print(f"/readyz back {took:.2f}s after Redis restarted")
    again = rpc.get_task(before["id"])
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task_text(again) == "before the outage"
    r = http.get(f"/tasks/{before['id']}", headers=A2A_HEADERS)
    assert r.status_code == 200 and task_text(r.json()) == "before the outage", r.text

    fake_llm.script(text("after", when_user_contains=f"after {marker}"))
    after = rpc.send(f"after {marker}", context_id=before["contextId"])
    assert after["status"]["state"] == "TASK_STATE_COMPLETED", after["status"]
    assert task_text(after) == "after"


def test_a_frozen_redis_gives_clean_errors_fast_and_recovers(
    server, rpc, http, own_redis, fake_llm, marker
):
    fake_llm.script(text("before the freeze", when_user_contains=f"first {marker}"))
    before = rpc.send(f"first {marker}")
    assert before["status"]["state"] == "TASK_STATE_COMPLETED", before["status"]
    wait_ready(http)

    own_redis.freeze()
    try:
        for method, params in [
            ("GetTask", {"id": before["id"]}),
            ("SendMessage", send_params(f"frozen {marker}")),
            ("ListTasks", {}),
        ]:
            err, dt = timed(rpc.error, method, params)
            assert_store_unavailable_rpc(err)
            assert dt < FROZEN_FAIL_S, f"{method} took {dt:.2f}s with Redis frozen"

        for method, path, body in [
            ("GET", f"/tasks/{before['id']}", None),
            ("POST", "/message:send", send_params(f"frozen rest {marker}")),
            ("GET", "/tasks", None),
        ]:
            r, dt = timed(http.request, method, path, json=body, headers=A2A_HEADERS)
            assert_store_unavailable_rest(r)
            assert dt < FROZEN_FAIL_S, f"REST {method} {path} took {dt:.2f}s with Redis frozen"

        r, dt = timed(http.get, "/readyz")
        assert r.status_code == 503, (r.status_code, r.text)
        assert dt < FROZEN_FAIL_S, f"/readyz took {dt:.2f}s with Redis frozen"
        assert http.get("/healthz").status_code == 200
    finally:
        own_redis.thaw()

    wait_ready(http)
    again = rpc.get_task(before["id"])
    assert task_text(again) == "before the freeze"
    listed = rpc.result("ListTasks", {"contextId": before["contextId"]})
    assert [t["id"] for t in listed["tasks"]] == [before["id"]]
    fake_llm.script(text("after the freeze", when_user_contains=f"after {marker}"))
    after = rpc.send(f"after {marker}", context_id=before["contextId"])
    assert after["status"]["state"] == "TASK_STATE_COMPLETED", after["status"]
    assert task_text(after) == "after the freeze"


def test_turn_streams_through_a_short_outage(server, rpc, http, own_redis, fake_llm, marker):
    chunks = [f"o{i:02d} " for i in range(40)]
    fake_llm.script(text(chunks, chunk_delay=0.1, when_user_contains=marker))
    first = []
    body = rpc_body("SendStreamingMessage", send_params(f"long {marker}"), "s1")
    with open_sse(server.url, "/", body, request_id="s1", read_timeout=30) as s:
        assert s.is_sse
        for ev in s.sse_events():
            first.append(ev)
            if len(first) == 6:
                own_redis.stop()
                time.sleep(2.0)  # the model goes on streaming into the outage
                own_redis.start()
            if "error" in ev.data or state_of_event(ev) == "TASK_STATE_COMPLETED":
                break
    seq = describe_events(first)
    task_id = result_of(first[0])["task"]["id"]
    wait_ready(http)
    done = rpc.wait_for_state(task_id, timeout=20)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    full = "".join(chunks)
    assert task_text(done) == full, "the answer lost or repeated chunks across the outage"

    # The stream may have ended with an error event; resume from the last id it delivered.
    delivered = [ev for ev in first if ev.id is not None]
    with open_sse(server.url, "/", rpc_body("SubscribeToTask", {"id": task_id}, "s2"),
                  headers={"Last-Event-ID": delivered[-1].id}, request_id="s2") as s:  # fmt: skip
        rest = list(s.sse_events()) if s.is_sse else []
    seq += "\nresumed:" + describe_events(rest)
    union = delivered + rest
    assert_contiguous(ids(union), "stream + resumed stream across the outage")
    assert state_of_event(union[-1]) == "TASK_STATE_COMPLETED", seq
    assert rebuild_answer(union) == full, seq


def test_redis_back_empty_means_not_found(server, rpc, http, own_redis, fake_llm, marker):
    fake_llm.script(text("soon forgotten", when_user_contains=marker))
    task = rpc.send(f"forget me {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    own_redis.stop()
    own_redis.persistent = False  # comes back without its AOF: every key is gone
    own_redis.start()
    wait_ready(http)
    err = rpc.error("GetTask", {"id": task["id"]})
    assert err["code"] == -32001, err
    r = http.get(f"/tasks/{task['id']}", headers=A2A_HEADERS)
    assert r.status_code == 404, r.text
    fake_llm.script(text("fresh", when_user_contains=f"new {marker}"))
    new = rpc.send(f"new {marker}", context_id=task["contextId"])
    assert new["status"]["state"] == "TASK_STATE_COMPLETED", new["status"]
