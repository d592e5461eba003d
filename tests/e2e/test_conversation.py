"""Multi-turn conversations: contextId carries history to the model; the system prompt stays private."""

from __future__ import annotations

import json

import pytest

from tests.e2e.harness import send_params
from tests.e2e.wire import artifact_text
from tests.fakes.fake_llm import message_text as llm_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)

SYSTEM_PROMPT = "You are the e2e test agent. Secret marker SYSPROMPT-7f3a."
SERVER_ENV = {"AGENT_SYSTEM_PROMPT": SYSTEM_PROMPT}


def _convo(body):
    return [(m["role"], llm_text(m)) for m in body["messages"]]


def test_second_turn_sees_first_turn(rpc, fake_llm, marker):
    m1, m2 = f"first question {marker}-one", f"second question {marker}-two"
    fake_llm.script(
        text("First answer.", when_user_contains=f"{marker}-one"),
        text("Second answer.", when_user_contains=f"{marker}-two"),
    )
    t1 = rpc.send(m1)
    assert t1["status"]["state"] == "TASK_STATE_COMPLETED"
    ctx = t1["contextId"]

    t2 = rpc.send(m2, context_id=ctx)
    assert t2["status"]["state"] == "TASK_STATE_COMPLETED", t2["status"]
    assert t2["contextId"] == ctx
    assert t2["id"] != t1["id"], "a follow-up after a terminal task must be a new task"
    assert artifact_text(t2) == "Second answer."

    (req1,) = fake_llm.requests_for(f"{marker}-one")
    (req2,) = fake_llm.requests_for(f"{marker}-two")
    assert _convo(req1) == [("system", SYSTEM_PROMPT), ("user", m1)], _convo(req1)
    assert _convo(req2) == [
        ("system", SYSTEM_PROMPT),
        ("user", m1),
        ("assistant", "First answer."),
        ("user", m2),
    ], _convo(req2)


def test_third_turn_and_isolation_between_contexts(rpc, fake_llm, marker):
    a1, a2, a3 = (f"A{i} {marker}-a{i}" for i in (1, 2, 3))
    b1 = f"B1 {marker}-b1"
    ta = rpc.send(a1)
    tb = rpc.send(b1)
    assert ta["contextId"] != tb["contextId"]
    rpc.send(a2, context_id=ta["contextId"])
    rpc.send(a3, context_id=ta["contextId"])

    (req_b,) = fake_llm.requests_for(f"{marker}-b1")
    assert _convo(req_b) == [("system", SYSTEM_PROMPT), ("user", b1)], (
        f"context B leaked context A's messages: {_convo(req_b)}"
    )
    (req_a3,) = fake_llm.requests_for(f"{marker}-a3")
    assert _convo(req_a3) == [
        ("system", SYSTEM_PROMPT),
        ("user", a1),
        ("assistant", f"echo: {a1}"),
        ("user", a2),
        ("assistant", f"echo: {a2}"),
        ("user", a3),
    ], _convo(req_a3)


def test_system_prompt_is_never_stored_or_echoed(rpc, fake_llm, marker):
    t1 = rpc.send(f"secret? {marker}-s1")
    ctx = t1["contextId"]
    with rpc.stream("SendStreamingMessage", send_params(f"again {marker}-s2", context_id=ctx)) as s:
        raw_events = [ev.raw for ev in s.sse_events()]
    tasks = rpc.result("ListTasks", {"contextId": ctx, "includeArtifacts": True})
    got = [rpc.get_task(t["id"]) for t in tasks["tasks"]]
    assert len(got) == 2, tasks
    blob = json.dumps([t1, tasks, got]) + "\n".join(raw_events)
    assert "SYSPROMPT-7f3a" not in blob, "system prompt leaked into task data"
    for t in got:
        assert all(m["role"] in ("ROLE_USER", "ROLE_AGENT") for m in t.get("history", [])), t
    # ... but the model did get it
    (req,) = fake_llm.requests_for(f"{marker}-s2")
    assert req["messages"][0]["role"] == "system"
    assert "SYSPROMPT-7f3a" in llm_text(req["messages"][0])
