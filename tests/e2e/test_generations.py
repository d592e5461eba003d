"""A2A 1.1 task generations against a real server (memory stores), on JSON-RPC and HTTP+JSON.

The generation is the task's journal position: contiguous in streams and replays, on every Task;
GetTask with `currentGeneration` long-polls; `ifGenerationMatch` guards a follow-up (one of two
racing answers wins). Under 1.0, no version, and 0.3, no payload has a `generation` anywhere.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.e2e.harness import new_id
from tests.e2e.webhook import WebhookReceiver
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

LONG_POLL_S = 2.0
SERVER_ENV = {
    "A2A_LONG_POLL_MAX_S": str(LONG_POLL_S),
    "A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1",
    "A2A_PUSH_BACKOFF_S": "0.1",
}
V11 = {"A2A-Version": "1.1"}
V10 = {"A2A-Version": "1.0"}
BINDINGS = ["jsonrpc", "rest"]


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


def user(text_: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": new_id("m-"), "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def rpc(http: httpx.Client, method: str, params: Any, headers: dict[str, str]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = http.post("/", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def send(
    http: httpx.Client, binding: str, params: dict[str, Any], headers: dict[str, str] = V11
) -> httpx.Response:
    """SendMessage on either binding: the raw response (JSON-RPC's is 200 whatever happened)."""
    if binding == "rest":
        return http.post("/message:send", json=params, headers=headers)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    return http.post("/", json=body, headers=headers)


def sent_task(response: httpx.Response, binding: str) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload = response.json()
    result = payload if binding == "rest" else payload.get("result")
    assert result is not None and "task" in result, payload
    return result["task"]


def get_task(
    http: httpx.Client, binding: str, task_id: str, headers: dict[str, str] = V11, **params: Any
) -> httpx.Response:
    if binding == "rest":
        return http.get(f"/tasks/{task_id}", params=params, headers=headers)
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id, **params}}
    return http.post("/", json=body, headers=headers)


def got_task(response: httpx.Response, binding: str) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload = response.json()
    return payload if binding == "rest" else payload["result"]


def sse(
    http: httpx.Client,
    binding: str,
    *,
    send_params: dict[str, Any] | None = None,
    subscribe: str | None = None,
    headers: dict[str, str] = V11,
) -> list[tuple[str | None, dict[str, Any]]]:
    """A whole stream (a streaming send, or a subscribe): (SSE id, StreamResponse) pairs."""
    headers = {**headers, "Accept": "text/event-stream"}
    if binding == "rest":
        if subscribe:
            request = http.build_request("GET", f"/tasks/{subscribe}:subscribe", headers=headers)
        else:
            request = http.build_request(
                "POST", "/message:stream", json=send_params, headers=headers
            )
    else:
        method = "SubscribeToTask" if subscribe else "SendStreamingMessage"
        params = {"id": subscribe} if subscribe else send_params
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        request = http.build_request("POST", "/", json=body, headers=headers)
    response = http.send(request, stream=True)
    try:
        assert response.status_code == 200, response.read()
        events, event_id, data = [], None, []
        for line in response.iter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                payload = json.loads("\n".join(data))
                events.append((event_id, payload if binding == "rest" else payload["result"]))
                event_id, data = None, []
        return events
    finally:
        response.close()


def generation_of(result: dict[str, Any]) -> int:
    (kind,) = result.keys()
    value = result[kind]["generation"]
    assert isinstance(value, str) and value.isdigit(), result  # ProtoJSON int64: a string
    return int(value)


def waiting_task(http: httpx.Client, fake_llm, marker: str, binding: str = "rest") -> dict:
    """A task waiting for the user's answer; its answer will be answered with text."""
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    fake_llm.script(text("Answered.", when_user_contains=marker))
    task = sent_task(send(http, binding, {"message": user(f"ask me {marker}")}), binding)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    return task


def answer(task: dict[str, Any], marker: str, **configuration: Any) -> dict[str, Any]:
    message = user(f"this one {marker}", taskId=task["id"], contextId=task["contextId"])
    params: dict[str, Any] = {"message": message}
    if configuration:
        params["configuration"] = configuration
    return params


# --- the card -------------------------------------------------------------------------------


def test_the_card_lists_the_11_interfaces_to_a_client_asking_in_11(http):
    asked = http.get("/.well-known/agent-card.json", headers=V11).json()
    listed = [(i["protocolBinding"], i["protocolVersion"]) for i in asked["supportedInterfaces"]]
    assert ("JSONRPC", "1.1") in listed and ("HTTP+JSON", "1.1") in listed, listed
    assert ("GRPC", "1.1") not in listed
    assert listed.index(("JSONRPC", "1.0")) < listed.index(("JSONRPC", "1.1"))
    for headers in ({}, V10):
        card = http.get("/.well-known/agent-card.json", headers=headers).json()
        versions = {i["protocolVersion"] for i in card["supportedInterfaces"]}
        assert "1.1" not in versions, card["supportedInterfaces"]


# --- generations in payloads ------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_stream_carries_contiguous_generations_and_the_task_the_last(
    http, fake_llm, marker, binding
):
    fake_llm.script(text(["a", "b", "c", "d"], chunk_delay=0.05, when_user_contains=marker))
    events = sse(http, binding, send_params={"message": user(f"stream {marker}")})
    generations = [generation_of(result) for _, result in events]
    assert generations == list(range(1, len(generations) + 1)), events
    assert [int(event_id or 0) for event_id, _ in events] == generations  # the SSE ids
    assert "task" in events[0][1] and len(events) >= 4
    task_id = events[0][1]["task"]["id"]
    task = got_task(get_task(http, binding, task_id), binding)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert int(task["generation"]) == generations[-1]
    # A replay from Last-Event-ID: the events after it, generations still contiguous.
    replayed = sse(http, binding, subscribe=task_id, headers={**V11, "Last-Event-ID": "2"})
    assert [generation_of(result) for _, result in replayed] == generations[2:]
    assert [result for _, result in replayed] == [result for _, result in events[2:]]


@pytest.mark.parametrize("binding", BINDINGS)
def test_every_task_an_operation_returns_has_its_generation(http, fake_llm, marker, binding):
    fake_llm.script(text("Done.", when_user_contains=marker))
    task = sent_task(send(http, binding, {"message": user(f"send {marker}")}), binding)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    got = got_task(get_task(http, binding, task["id"]), binding)
    assert task["generation"] == got["generation"] and int(got["generation"]) >= 3, got
    if binding == "rest":
        listed = http.get("/tasks", params={"contextId": task["contextId"]}, headers=V11).json()
    else:
        listed = rpc(http, "ListTasks", {"contextId": task["contextId"]}, V11)["result"]
    assert [t["generation"] for t in listed["tasks"]] == [got["generation"]]
    waiting = waiting_task(http, fake_llm, f"{marker}-w", binding)
    if binding == "rest":
        canceled = http.post(f"/tasks/{waiting['id']}:cancel", headers=V11).json()
    else:
        canceled = rpc(http, "CancelTask", {"id": waiting["id"]}, V11)["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert int(canceled["generation"]) == int(waiting["generation"]) + 1


@pytest.mark.parametrize("headers", [V10, {}], ids=["1.0", "no-version"])
@pytest.mark.parametrize("binding", BINDINGS)
def test_under_10_no_payload_has_a_generation(http, fake_llm, marker, binding, headers):
    fake_llm.script(text(["x", "y"], when_user_contains=marker))
    events = sse(http, binding, send_params={"message": user(f"old {marker}")}, headers=headers)
    task_id = events[0][1]["task"]["id"]
    bodies = [json.dumps(result) for _, result in events]
    bodies.append(get_task(http, binding, task_id, headers=headers, currentGeneration="1").text)
    fake_llm.script(text("z", when_user_contains=f"{marker}-2"))
    bodies.append(send(http, binding, {"message": user(f"{marker}-2")}, headers).text)
    bodies.append(http.get("/tasks", headers=headers).text)
    bodies.append(http.get("/.well-known/agent-card.json", headers=headers).text)
    assert len(events) >= 3
    for body in bodies:
        assert '"generation"' not in body, body[:300]


def test_under_03_no_payload_has_a_generation(http, fake_llm, marker):
    fake_llm.script(text("Old.", when_user_contains=marker))
    message = {
        "kind": "message",
        "messageId": new_id("m-"),
        "role": "user",
        "parts": [{"kind": "text", "text": f"v03 {marker}"}],
    }
    sent = rpc(http, "message/send", {"message": message}, {})
    assert sent["result"]["status"]["state"] == "completed", sent
    got = rpc(http, "tasks/get", {"id": sent["result"]["id"]}, {})
    assert '"generation"' not in json.dumps(sent) + json.dumps(got)


def test_a_webhook_registered_in_11_gets_generations(http, webhook, fake_llm, marker):
    fake_llm.script(text(["Hel", "lo."], when_user_contains=marker))
    path = f"/hook/{marker}"
    config = {"taskPushNotificationConfig": {"url": webhook.url(path)}}
    sent = http.post(
        "/message:send",
        json={"message": user(f"push {marker}"), "configuration": config},
        headers=V11,
    )
    task = sent.json()["task"]
    got = webhook.wait_for(
        path, lambda items: any("TASK_STATE_COMPLETED" in json.dumps(i.body) for i in items)
    )
    generations = [generation_of(item.body) for item in got]
    assert generations == list(range(generations[0], generations[0] + len(generations)))
    assert generations[-1] == int(task["generation"])


# --- the long poll ----------------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_long_poll_behind_the_task_answers_at_once(http, fake_llm, marker, binding):
    task = waiting_task(http, fake_llm, marker, binding)
    started = time.monotonic()
    got = got_task(get_task(http, binding, task["id"], currentGeneration=0), binding)
    assert time.monotonic() - started < 1.0
    assert got["generation"] == task["generation"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_long_poll_at_the_tasks_generation_answers_at_the_timeout(
    http, fake_llm, marker, binding
):
    task = waiting_task(http, fake_llm, marker, binding)
    started = time.monotonic()
    got = got_task(
        get_task(http, binding, task["id"], currentGeneration=task["generation"]), binding
    )
    waited = time.monotonic() - started
    assert LONG_POLL_S - 0.2 <= waited < LONG_POLL_S + 2, waited
    assert got["generation"] == task["generation"]
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_long_poll_answers_when_the_task_moves_on(http, fake_llm, marker, binding):
    task = waiting_task(http, fake_llm, marker, binding)
    polled: dict[str, Any] = {}

    def poll() -> None:
        started = time.monotonic()
        response = get_task(http, binding, task["id"], currentGeneration=task["generation"])
        polled.update(task=got_task(response, binding), waited=time.monotonic() - started)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.5)
    sent_task(send(http, binding, answer(task, marker, returnImmediately=True)), binding)
    poller.join(10)
    assert 0.4 <= polled["waited"] < LONG_POLL_S, polled
    assert int(polled["task"]["generation"]) > int(task["generation"])


@pytest.mark.parametrize("value", [-1, "-1", "abc", 1.5, True, [3]])
def test_a_current_generation_that_is_no_generation_is_invalid_params(http, marker, value):
    error = rpc(http, "GetTask", {"id": "whatever", "currentGeneration": value}, V11)["error"]
    assert error["code"] == -32602, error
    if not isinstance(value, list | bool | float):
        response = http.get("/tasks/whatever", params={"currentGeneration": value}, headers=V11)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"


# --- ifGenerationMatch ------------------------------------------------------------------------


def test_a_stale_generation_is_refused_on_jsonrpc(http, fake_llm, marker):
    task = waiting_task(http, fake_llm, marker)
    current = int(task["generation"])
    reply = send(http, "jsonrpc", answer(task, marker, ifGenerationMatch=current - 1)).json()
    assert reply["error"] == {
        "code": -32010,
        "message": f"Task generation mismatch: expected {current - 1}"
        f" but current generation is {current}",
        "data": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_GENERATION_MISMATCH",
                "domain": "a2a-protocol.org",
                "metadata": {
                    "taskId": task["id"],
                    "expectedGeneration": str(current - 1),
                    "currentGeneration": str(current),
                },
            }
        ],
    }
    still = got_task(get_task(http, "rest", task["id"]), "rest")
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert still["generation"] == task["generation"]


def test_a_stale_generation_is_refused_on_rest_with_409(http, fake_llm, marker):
    task = waiting_task(http, fake_llm, marker)
    current = int(task["generation"])
    response = send(http, "rest", answer(task, marker, ifGenerationMatch=str(current + 2)))
    assert response.status_code == 409, response.text
    assert response.json() == {
        "error": {
            "code": 409,
            "status": "ABORTED",
            "message": f"Task generation mismatch: expected {current + 2}"
            f" but current generation is {current}",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "TASK_GENERATION_MISMATCH",
                    "domain": "a2a-protocol.org",
                    "metadata": {
                        "taskId": task["id"],
                        "expectedGeneration": str(current + 2),
                        "currentGeneration": str(current),
                    },
                }
            ],
        }
    }


def test_a_stale_generation_on_a_streaming_send_is_409_before_the_stream_and_as_documented(
    http, fake_llm, marker
):
    task = waiting_task(http, fake_llm, marker)
    params = answer(task, marker, ifGenerationMatch=int(task["generation"]) + 1)
    response = http.post(
        "/message:stream", json=params, headers={**V11, "Accept": "text/event-stream"}
    )
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/json")
    documented = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    conflict = documented["paths"]["/message:stream"]["post"]["responses"]["409"]
    schema = conflict["content"]["application/json"]["schema"]
    Draft202012Validator({**schema, "components": documented["components"]}).validate(
        response.json()
    )


@pytest.mark.parametrize("binding", BINDINGS)
def test_the_current_generation_is_accepted_and_a_new_task_ignores_it(
    http, fake_llm, marker, binding
):
    task = waiting_task(http, fake_llm, marker, binding)
    params = answer(task, marker, ifGenerationMatch=int(task["generation"]))
    assert sent_task(send(http, binding, params), binding)["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    fake_llm.script(text("New.", when_user_contains=f"{marker}-new"))
    new = {"message": user(f"{marker}-new"), "configuration": {"ifGenerationMatch": 99}}
    assert sent_task(send(http, binding, new), binding)["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )


def test_under_10_if_generation_match_is_not_read(http, fake_llm, marker):
    task = waiting_task(http, fake_llm, marker)
    params = answer(task, marker, ifGenerationMatch=12345)
    assert sent_task(send(http, "rest", params, V10), "rest")["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )


@pytest.mark.parametrize("binding", BINDINGS)
def test_of_two_answers_at_the_same_generation_exactly_one_is_taken(
    http, fake_llm, marker, binding
):
    task = waiting_task(http, fake_llm, marker, binding)
    generation = int(task["generation"])
    barrier = threading.Barrier(2)
    outcomes: list[httpx.Response] = []

    def answer_it(n: int) -> None:
        params = answer(task, f"{marker} {n}", ifGenerationMatch=generation, returnImmediately=True)
        with httpx.Client(base_url=str(http.base_url), trust_env=False, timeout=30) as client:
            barrier.wait()
            outcomes.append(send(client, binding, params))

    threads = [threading.Thread(target=answer_it, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    bodies = [response.json() for response in outcomes]
    if binding == "rest":
        accepted = [b for r, b in zip(outcomes, bodies, strict=True) if r.status_code == 200]
        refused = [
            (r.status_code, b["error"]["status"])
            for r, b in zip(outcomes, bodies, strict=True)
            if r.status_code != 200
        ]
        assert refused == [(409, "ABORTED")], bodies
    else:
        accepted = [b for b in bodies if "result" in b]
        refused = [b["error"]["code"] for b in bodies if "error" in b]
        assert refused == [-32010], bodies
    assert len(accepted) == 1, bodies


# --- the client -------------------------------------------------------------------------------


def test_the_cli_speaks_11_and_get_wait_long_polls(server, http, fake_llm, marker):
    """`a2a get --wait` on a task that waits: it returns once the task is answered, at once,
    woken by the long poll (not after a poll interval), with the task at its new generation."""
    import subprocess
    import sys
    from pathlib import Path

    task = waiting_task(http, fake_llm, marker)
    # The CLI of this tree (the venv's `a2a` script may be another checkout's).
    a2a = [sys.executable, "-c", "import sys; from app.client.cli import main; sys.exit(main())"]
    root = str(Path(__file__).resolve().parents[2])
    # The task waits for input: --wait returns at once for it; answer, then wait for the end.
    params = answer(task, marker, returnImmediately=True)
    waiting = subprocess.Popen(
        [*a2a, "get", server.url, task["id"], "--wait", "--json"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert json.loads(out)["generation"] == task["generation"]  # 1.1: it carries generations
    sent_task(send(http, "rest", params), "rest")
    done = subprocess.run(
        [*a2a, "get", server.url, task["id"], "--wait", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert int(final["generation"]) > int(task["generation"])


async def test_the_client_long_polls_and_reads_the_task_again_after_a_gap(server, http, fake_llm):
    from app.client.a2a_client import A2AClient
    from app.client.generations import GapWatcher

    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        agent = await A2AClient.connect(client, server.url, binding="HTTP+JSON")
        assert agent.task_generations and agent.endpoint.binding == "HTTP+JSON"
        marker = new_id("gap-")
        task = waiting_task(http, fake_llm, marker)
        started = time.monotonic()
        got = await agent.get_task(task["id"], current_generation=int(task["generation"]))
        assert time.monotonic() - started >= LONG_POLL_S - 0.2  # held: the task did not move
        assert got["generation"] == task["generation"]
    gaps = GapWatcher()
    assert [gaps.missed({"generation": g}) for g in ("1", "2", "4", "5")] == [
        False,
        False,
        True,
        False,
    ]
    assert not gaps.missed({"generation": "5"}) and not gaps.trusted  # a repeat: not trusted
