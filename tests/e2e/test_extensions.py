"""A2A extensions over real servers, on both HTTP bindings and both protocol generations.

One server declares an extension in A2A_EXTENSIONS and runs the timestamp example hook
(examples/timestamp_extension.py), which declares its own; another requires one. What a client
sees: the card's `capabilities.extensions`, the `A2A-Extensions` header it sends (0.3:
`X-A2A-Extensions`) and gets back naming exactly the activated ones, the answers' metadata the
hooks add under an extension's URI, and -32008 / 400 without a required one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from examples.timestamp_extension import TIMESTAMP_URI
from tests.e2e.extension_plugins import SEEN_KEY
from tests.e2e.harness import (
    ERROR_INFO_TYPE,
    RpcClient,
    ServerProcess,
    check_error_object,
    new_id,
    send_params,
)
from tests.e2e.wire import assert_valid
from tests.e2e.wire_v03 import assert_valid_v03
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

TRACE_URI = "https://ext.example/traceability/v1"
REQUIRED_URI = "https://ext.example/required/v1"
OPTIONAL_URI = "https://ext.example/optional/v1"
UNDECLARED_URI = "https://ext.example/undeclared/v1"
HOOKS = "examples.timestamp_extension:TimestampExtension,tests.e2e.extension_plugins:ExtensionsSeen"
TOOLS = "tests.e2e.extension_plugins:active_extensions"
TRACE_DECLARATION = {
    "uri": TRACE_URI,
    "description": "Carries a trace id in message metadata under this URI.",
    "params": {"idFormat": "uuid"},
}
V03 = {"A2A-Version": "0.3"}


def _server(fake_llm: Any, **env: str) -> Iterator[ServerProcess]:
    with ServerProcess(fake_llm.base_url, env=env).running() as process:
        yield process


@pytest.fixture(scope="module")
def agent(fake_llm):
    """Declares TRACE_URI (A2A_EXTENSIONS) and TIMESTAMP_URI (the example hook's own)."""
    yield from _server(
        fake_llm,
        AGENT_NAME="Stamp Agent",
        A2A_EXTENSIONS=json.dumps([TRACE_DECLARATION]),
        AGENT_HOOKS=HOOKS,
        AGENT_TOOLS=TOOLS,
    )


@pytest.fixture(scope="module")
def strict(fake_llm):
    """Requires REQUIRED_URI; OPTIONAL_URI is optional."""
    declared = [{"uri": REQUIRED_URI, "required": True}, {"uri": OPTIONAL_URI}]
    yield from _server(fake_llm, A2A_EXTENSIONS=json.dumps(declared), AGENT_HOOKS=HOOKS)


@pytest.fixture(scope="module")
def http(agent):
    with httpx.Client(base_url=agent.url, trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def strict_http(strict):
    with httpx.Client(base_url=strict.url, trust_env=False, timeout=30) as client:
        yield client


def rpc(
    http: httpx.Client, method: str, params: Any, headers: Any = (), version: str = "1.0"
) -> httpx.Response:
    payload = {"jsonrpc": "2.0", "id": 5, "method": method, "params": params}
    listed = list(headers.items()) if isinstance(headers, dict) else list(headers)
    all_headers = [("A2A-Version", version)] if version else []
    response = http.post("/", json=payload, headers=all_headers + listed)
    assert response.status_code == 200, response.text
    return response


def echoed(response: httpx.Response) -> str | None:
    return response.headers.get("A2A-Extensions")


def both(*uris: str) -> str:
    return ", ".join(sorted(uris))


def answer_metadata(task: dict[str, Any]) -> dict[str, Any]:
    """The answer's metadata, the same on the artifact and on the agent's message."""
    artifact = task["artifacts"][0].get("metadata") or {}
    message = task["history"][-1].get("metadata") or {}
    assert artifact == message, (artifact, message)
    return artifact


def message03(text_: str) -> dict[str, Any]:
    parts = [{"kind": "text", "text": text_}]
    return {"kind": "message", "role": "user", "messageId": new_id("m-"), "parts": parts}


def message03_proto(text_: str) -> dict[str, Any]:
    return {"message_id": new_id("m-"), "role": "ROLE_USER", "content": [{"text": text_}]}


# --- the card ------------------------------------------------------------------------------------


def test_the_card_declares_the_configured_and_the_hooks_extensions(http, strict_http):
    timestamp = {
        "uri": TIMESTAMP_URI,
        "description": "Stamps the agent's answer with the time it was completed"
        " (metadata under this URI: `timestamp`, RFC 3339, UTC).",
        "required": False,
        "params": {"timestampFormat": "RFC 3339"},
    }
    strict_1 = http.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}).json()
    assert_valid("agent_card", strict_1)
    assert strict_1["capabilities"]["extensions"] == [
        TRACE_DECLARATION | {"required": False},
        timestamp,
    ]
    both_generations = http.get("/.well-known/agent-card.json").json()  # 0.3 clients read this
    assert_valid_v03("AgentCard", both_generations)
    assert both_generations["capabilities"]["extensions"] == strict_1["capabilities"]["extensions"]
    # The card stays open to a client that lists none: it is how a client learns what to list.
    card = strict_http.get("/.well-known/agent-card.json").json()
    assert card["capabilities"]["extensions"][:2] == [
        {"uri": REQUIRED_URI, "required": True},
        {"uri": OPTIONAL_URI, "required": False},
    ]


# --- activation and the echo, JSON-RPC 1.0 -------------------------------------------------------


def test_declared_ones_are_activated_echoed_and_seen_by_hooks_and_tools(http, fake_llm, marker):
    fake_llm.script(
        tool_calls([("active_extensions", {})], when_user_contains=marker),
        text("Stamped.", when_user_contains=marker),
    )
    headers = [
        ("A2A-Extensions", f"{TIMESTAMP_URI} ,,  {UNDECLARED_URI},"),
        ("A2A-Extensions", TRACE_URI),  # repeated: the lists add up
    ]
    response = rpc(http, "SendMessage", send_params(f"stamp {marker}"), headers)
    task = response.json()["result"]["task"]
    assert_valid("send_message_response", response.json()["result"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert echoed(response) == both(TIMESTAMP_URI, TRACE_URI)  # not the undeclared one
    assert "X-A2A-Extensions" not in response.headers  # a 1.0 client used the 1.0 name
    metadata = answer_metadata(task)
    assert metadata[SEEN_KEY] == sorted([TIMESTAMP_URI, TRACE_URI])
    assert json.loads(fake_llm.tool_result(marker)) == sorted([TIMESTAMP_URI, TRACE_URI])
    assert metadata[TIMESTAMP_URI]["timestamp"].endswith("Z")
    stored = rpc(http, "GetTask", {"id": task["id"]}).json()["result"]
    assert answer_metadata(stored) == metadata


def test_none_requested_or_none_declared_no_header_and_no_extension_at_work(http, fake_llm, marker):
    for n, headers in enumerate(
        [{}, {"A2A-Extensions": UNDECLARED_URI}, {"A2A-Extensions": ", ,"}]
    ):
        fake_llm.script(text("Plain.", when_user_contains=f"{marker}-{n}"))
        response = rpc(http, "SendMessage", send_params(f"plain {marker}-{n}"), headers)
        assert "A2A-Extensions" not in response.headers, headers
        metadata = answer_metadata(response.json()["result"]["task"])
        assert metadata == {SEEN_KEY: []}, headers


def test_metadata_under_an_extensions_uri_passes_through_untouched(http, fake_llm, marker):
    ours = {TRACE_URI: {"traceId": "7f1c", "hops": [1, {"snake_case": None}], "Ünï": "ok"}}
    fake_llm.script(text("Traced.", when_user_contains=marker))
    params = send_params(f"trace {marker}", metadata=ours)
    response = rpc(http, "SendMessage", params, {"A2A-Extensions": TRACE_URI})
    task = response.json()["result"]["task"]
    assert task["history"][0]["metadata"] == ours
    fake_llm.script(text("Traced.", when_user_contains=f"v03 {marker}"))
    message = message03(f"v03 {marker}") | {"metadata": ours}
    v03 = rpc(http, "message/send", {"message": message}, {"X-A2A-Extensions": TRACE_URI}, "")
    assert v03.json()["result"]["history"][0]["metadata"] == ours


def test_a_stream_carries_the_header_and_its_final_update_the_answers_metadata(
    http, fake_llm, marker
):
    fake_llm.script(text(["Str", "eamed."], when_user_contains=marker))
    payload = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "SendStreamingMessage",
        "params": send_params(f"stream {marker}"),
    }
    headers = {"A2A-Version": "1.0", "A2A-Extensions": TIMESTAMP_URI}
    with http.stream("POST", "/", json=payload, headers=headers) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert echoed(response) == TIMESTAMP_URI
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    final = json.loads(lines[-1][len("data: ") :])["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert set(final["metadata"]) == {TIMESTAMP_URI, SEEN_KEY, "usage"}
    assert final["metadata"][SEEN_KEY] == [TIMESTAMP_URI]


def test_an_error_after_activation_echoes_it_too(http):
    response = rpc(http, "GetTask", {"id": "no-such-task"}, {"A2A-Extensions": TRACE_URI})
    assert response.json()["error"]["code"] == -32001
    assert echoed(response) == TRACE_URI
    rest = http.get("/tasks/no-such-task", headers={"A2A-Extensions": TRACE_URI})
    assert rest.status_code == 404
    assert echoed(rest) == TRACE_URI


# --- HTTP+JSON 1.0 -------------------------------------------------------------------------------


def test_rest_send_stream_and_get_echo_the_activated_ones(http, fake_llm, marker):
    fake_llm.script(
        text("Sent.", when_user_contains=f"send {marker}"),
        text("Streamed.", when_user_contains=f"stream {marker}"),
    )
    headers = {"A2A-Version": "1.0", "A2A-Extensions": f"{TIMESTAMP_URI}, {UNDECLARED_URI}"}
    sent = http.post("/message:send", json=send_params(f"send {marker}"), headers=headers)
    assert sent.status_code == 200, sent.text
    assert echoed(sent) == TIMESTAMP_URI
    task = sent.json()["task"]
    assert TIMESTAMP_URI in answer_metadata(task)
    got = http.get(f"/tasks/{task['id']}", headers=headers)
    assert echoed(got) == TIMESTAMP_URI
    assert "A2A-Extensions" not in http.get(f"/tasks/{task['id']}").headers
    body = send_params(f"stream {marker}")
    with http.stream("POST", "/message:stream", json=body, headers=headers) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert echoed(response) == TIMESTAMP_URI
        events = [json.loads(line[6:]) for line in response.iter_lines() if line[:6] == "data: "]
    assert TIMESTAMP_URI in events[-1]["statusUpdate"]["metadata"]


# --- the 0.3 generation: X-A2A-Extensions --------------------------------------------------------


def test_a_03_jsonrpc_client_is_answered_under_both_names(http, fake_llm, marker):
    fake_llm.script(text("Old.", when_user_contains=marker))
    headers = {"X-A2A-Extensions": f"{TIMESTAMP_URI},{UNDECLARED_URI}"}
    response = rpc(http, "message/send", {"message": message03(f"old {marker}")}, headers, "")
    task = response.json()["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert response.headers["X-A2A-Extensions"] == TIMESTAMP_URI
    assert echoed(response) == TIMESTAMP_URI
    assert answer_metadata(task)[SEEN_KEY] == [TIMESTAMP_URI]
    fake_llm.script(text("Old stream.", when_user_contains=f"stream {marker}"))
    payload = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "message/stream",
        "params": {"message": message03(f"stream {marker}")},
    }
    with http.stream("POST", "/", json=payload, headers=headers) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["X-A2A-Extensions"] == TIMESTAMP_URI
        events = [json.loads(line[6:]) for line in stream.iter_lines() if line[:6] == "data: "]
    final = events[-1]["result"]
    assert final["kind"] == "status-update" and final["final"] is True
    assert TIMESTAMP_URI in final["metadata"]


def test_a_03_rest_client_is_answered_under_both_names(http, fake_llm, marker):
    fake_llm.script(
        text("Old.", when_user_contains=f"send {marker}"),
        text("Old stream.", when_user_contains=f"stream {marker}"),
    )
    headers = {"X-A2A-Extensions": TRACE_URI}
    body = {"request": message03_proto(f"send {marker}"), "configuration": {"blocking": True}}
    sent = http.post("/v1/message:send", json=body, headers=headers)
    assert sent.status_code == 200, sent.text
    assert sent.headers["X-A2A-Extensions"] == TRACE_URI and echoed(sent) == TRACE_URI
    assert answer_metadata(sent.json()["task"])[SEEN_KEY] == [TRACE_URI]
    body = {"request": message03_proto(f"stream {marker}")}
    with http.stream("POST", "/v1/message:stream", json=body, headers=headers) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["X-A2A-Extensions"] == TRACE_URI
        response.read()


# --- a required extension ------------------------------------------------------------------------


def assert_extension_required(error: dict[str, Any]) -> None:
    check_error_object(error)  # -32008 carries an ErrorInfo whose reason is EXTENSION_SUPPORT_...
    assert error["code"] == -32008
    [info] = [detail for detail in error["data"] if detail["@type"] == ERROR_INFO_TYPE]
    assert info == {
        "@type": ERROR_INFO_TYPE,
        "reason": "EXTENSION_SUPPORT_REQUIRED",
        "domain": "a2a-protocol.org",
        "metadata": {"extensions": REQUIRED_URI},
    }
    assert REQUIRED_URI in error["message"]


def assert_rest_extension_required(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert "A2A-Extensions" not in response.headers
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "FAILED_PRECONDITION")
    assert error["details"][0]["reason"] == "EXTENSION_SUPPORT_REQUIRED"
    assert error["details"][0]["metadata"] == {"extensions": REQUIRED_URI}


@pytest.mark.parametrize("listed", [None, OPTIONAL_URI, f"{UNDECLARED_URI}, {OPTIONAL_URI}"])
def test_without_a_required_one_every_binding_refuses(strict_http, listed):
    headers = {"A2A-Extensions": listed} if listed else {}
    for method in ("SendMessage", "GetTask", "ListTasks"):
        params = send_params("hi") if method == "SendMessage" else {"id": "t"}
        response = rpc(strict_http, method, params if method != "ListTasks" else {}, headers)
        assert_extension_required(response.json()["error"])
        assert "A2A-Extensions" not in response.headers  # none was activated
    rest = {"A2A-Version": "1.0", **headers}
    assert_rest_extension_required(
        strict_http.post("/message:send", json=send_params("hi"), headers=rest)
    )
    assert_rest_extension_required(strict_http.get("/tasks", headers=rest))
    legacy = {"X-A2A-Extensions": listed} if listed else {}
    old = rpc(strict_http, "message/send", {"message": message03("hi")}, legacy, "")
    assert_extension_required(old.json()["error"])
    body = {"request": message03_proto("hi")}
    assert_rest_extension_required(strict_http.post("/v1/message:send", json=body, headers=legacy))


def test_with_the_required_one_the_request_is_served(strict_http, fake_llm, marker):
    fake_llm.script(
        text("Served.", when_user_contains=f"new {marker}"),
        text("Served old.", when_user_contains=f"old {marker}"),
    )
    headers = {"A2A-Extensions": f"{REQUIRED_URI}, {OPTIONAL_URI}"}
    response = rpc(strict_http, "SendMessage", send_params(f"new {marker}"), headers)
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert echoed(response) == both(REQUIRED_URI, OPTIONAL_URI)
    old = rpc(
        strict_http,
        "message/send",
        {"message": message03(f"old {marker}")},
        {"X-A2A-Extensions": REQUIRED_URI},
        "",
    )
    assert old.json()["result"]["status"]["state"] == "completed"
    assert old.headers["X-A2A-Extensions"] == REQUIRED_URI


# --- remote agents -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def caller(agent, fake_llm):
    """Has `agent` as a tool; declares TRACE_URI, as `agent` does, and OPTIONAL_URI, which
    `agent` does not."""
    declared = [{"uri": TRACE_URI}, {"uri": OPTIONAL_URI}]
    yield from _server(
        fake_llm,
        A2A_EXTENSIONS=json.dumps(declared),
        AGENT_REMOTE_AGENTS=f"{agent.url}/.well-known/agent-card.json",
        AGENT_HOOKS="tests.e2e.extension_plugins:ExtensionsSeen",
    )


def test_a_remote_agent_gets_the_callers_extensions_it_declares(caller, agent, fake_llm, marker):
    sub = f"sub {marker}"
    fake_llm.script(
        tool_calls([("stamp_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        text("From afar.", when_user_contains=sub),
        text("Relayed.", when_user_contains=f"ask {marker}"),
    )
    client = RpcClient(caller.url)
    try:
        headers = {"A2A-Extensions": f"{TRACE_URI}, {OPTIONAL_URI}, {TIMESTAMP_URI}"}
        task = client.result("SendMessage", send_params(f"ask {marker}"), headers=headers)["task"]
    finally:
        client.close()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert answer_metadata(task)[SEEN_KEY] == sorted([TRACE_URI, OPTIONAL_URI])
    assert fake_llm.tool_result(f"ask {marker}") == "From afar."
    # The remote agent's turn had the one both declare that the caller activated: not
    # OPTIONAL_URI (it does not declare it), nor TIMESTAMP_URI (our caller did not activate it).
    remote = RpcClient(agent.url)
    try:
        tasks = remote.result("ListTasks", {"includeArtifacts": True})["tasks"]
    finally:
        remote.close()
    [remote_task] = [t for t in tasks if sub in str(t["history"][0])]
    assert answer_metadata(remote_task) == {SEEN_KEY: [TRACE_URI]}
