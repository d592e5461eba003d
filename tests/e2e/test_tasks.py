"""ListTasks: filters, pagination, artifacts on demand, ordering."""

from __future__ import annotations

import pytest

from tests.e2e.harness import assert_error
from tests.e2e.wire import assert_valid

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def three_tasks(rpc):
    """Three completed tasks in one fresh context, oldest first."""
    t1 = rpc.send("list me one")
    ctx = t1["contextId"]
    t2 = rpc.send("list me two", context_id=ctx)
    t3 = rpc.send("list me three", context_id=ctx)
    for t in (t1, t2, t3):
        assert t["status"]["state"] == "TASK_STATE_COMPLETED", t["status"]
    return ctx, [t1, t2, t3]


def _list(rpc, **params):
    res = rpc.result("ListTasks", params)
    assert_valid("list_tasks_response", res)
    res.setdefault("tasks", [])
    for t in res["tasks"]:
        assert_valid("task", t)
    return res


def test_list_by_context(rpc, three_tasks):
    ctx, tasks = three_tasks
    res = _list(rpc, contextId=ctx)
    assert res["totalSize"] == 3, res
    assert res["nextPageToken"] == "", res
    assert sorted(t["id"] for t in res["tasks"]) == sorted(t["id"] for t in tasks)
    assert all(t["contextId"] == ctx for t in res["tasks"])
    for t in res["tasks"]:
        assert "artifacts" not in t, f"artifacts must be omitted without includeArtifacts: {t}"


def test_list_is_newest_first(rpc, three_tasks):
    ctx, tasks = three_tasks
    res = _list(rpc, contextId=ctx)
    assert [t["id"] for t in res["tasks"]] == [t["id"] for t in reversed(tasks)], (
        "ListTasks must sort by status timestamp, newest first"
    )


def test_list_include_artifacts(rpc, three_tasks):
    ctx, tasks = three_tasks
    res = _list(rpc, contextId=ctx, includeArtifacts=True)
    by_id = {t["id"]: t for t in res["tasks"]}
    for t in tasks:
        assert by_id[t["id"]].get("artifacts") == t.get("artifacts"), by_id[t["id"]]


def test_list_pagination(rpc, three_tasks):
    ctx, tasks = three_tasks
    p1 = _list(rpc, contextId=ctx, pageSize=2)
    assert len(p1["tasks"]) == 2 and p1["pageSize"] == 2 and p1["totalSize"] == 3, p1
    assert p1["nextPageToken"], f"first of two pages needs a nextPageToken: {p1}"
    p2 = _list(rpc, contextId=ctx, pageSize=2, pageToken=p1["nextPageToken"])
    assert len(p2["tasks"]) == 1 and p2["nextPageToken"] == "", p2
    assert p2["totalSize"] == 3, p2
    ids = [t["id"] for t in p1["tasks"] + p2["tasks"]]
    assert ids == [t["id"] for t in reversed(tasks)], ids


def test_list_status_filter(rpc, three_tasks):
    ctx, tasks = three_tasks
    done = _list(rpc, contextId=ctx, status="TASK_STATE_COMPLETED")
    assert done["totalSize"] == 3 and len(done["tasks"]) == 3, done
    none = _list(rpc, contextId=ctx, status="TASK_STATE_CANCELED")
    assert none["totalSize"] == 0 and none["tasks"] == [] and none["nextPageToken"] == "", none


def test_list_unknown_context_is_empty(rpc):
    res = _list(rpc, contextId="no-such-context-xyz")
    assert res["tasks"] == [] and res["totalSize"] == 0 and res["nextPageToken"] == "", res


def test_list_without_filters(rpc, three_tasks):
    _, tasks = three_tasks
    res = _list(rpc, pageSize=100)
    ids = {t["id"] for t in res["tasks"]}
    assert {t["id"] for t in tasks} <= ids, res
    assert res["totalSize"] >= 3


def test_list_history_length(rpc, three_tasks):
    ctx, _ = three_tasks
    res = _list(rpc, contextId=ctx, historyLength=1)
    for t in res["tasks"]:
        assert len(t.get("history", [])) <= 1, t
    res0 = _list(rpc, contextId=ctx, historyLength=0)
    assert all("history" not in t for t in res0["tasks"]), res0


@pytest.mark.parametrize(
    "params",
    [
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageSize": -1},
        {"status": "DONE"},
        {"historyLength": -1},
    ],
)
def test_list_invalid_params(rpc, params):
    assert_error(rpc.error("ListTasks", params), -32602)
