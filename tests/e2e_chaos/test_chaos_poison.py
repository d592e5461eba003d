"""Poison inputs on both bindings and both stores: refused cleanly, and nothing stays broken.

Each hostile body goes to JSON-RPC (`POST /`, as SendMessage) and to REST (`POST /message:send`):
data parts and metadata nested far deeper than A2A_MAX_JSON_DEPTH, 100,000 levels of `[` (cut
short, and balanced), a lone UTF-16 surrogate, NaN / Infinity / -Infinity, 1e400 and a 401-digit
integer, bytes that are not UTF-8, and a JSON-RPC notification (no id).

Counted, per input:
* JSON-RPC answers with a JSON-RPC error -32700 or -32602 (never -32603, never a result);
  REST with a 4xx and an AIP-193 error body; never a 5xx, a plain-text body or a traceback;
* a notification gets no response body (HTTP 204, or an empty 200);
* the servers' stderr holds no traceback;
* afterwards ListTasks (JSON-RPC and REST) still works on every replica, and every task it lists
  can be read with GetTask: nothing one client sent can break another client's reads.

The servers are this module's own (one in-memory, two Redis replicas): a poison that is stored by
mistake breaks them for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, send_params
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.targets import Target, list_all_tasks, memory_server, redis_replicas, rpc

pytestmark = [pytest.mark.timeout(60)]

DEPTH_LIMIT_ENV = {"A2A_MAX_JSON_DEPTH": "32"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def params_with(part: str = '{"text": "poison"}', metadata: str | None = None) -> str:
    """SendMessage params (returnImmediately) as raw JSON text, with raw fragments spliced in."""
    meta = f', "metadata": {metadata}' if metadata is not None else ""
    message = f'{{"messageId": "{uuid.uuid4().hex}", "role": "ROLE_USER", "parts": [{part}]{meta}}}'
    return f'{{"message": {message}, "configuration": {{"returnImmediately": true}}}}'


# name -> the SendMessage params as raw text (bytes where the bytes themselves are the poison);
# None means "the whole body is given by WHOLE_BODIES".
CASES: dict[str, str | bytes | None] = {
    "100k-open-brackets": None,
    "lone-surrogate": params_with(part='{"text": "a \\ud800 b"}'),
    "lone-low-surrogate-in-metadata": params_with(metadata='{"k": "\\udc00"}'),
    "nan": params_with(metadata='{"x": NaN}'),
    "infinity": params_with(metadata='{"x": Infinity}'),
    "minus-infinity": params_with(metadata='{"x": -Infinity}'),
    "1e400": params_with(metadata='{"x": 1e400}'),
    "401-digit-integer": params_with(metadata='{"x": 1' + "0" * 400 + "}"),
    "invalid-utf8": params_with(part='{"text": "caf__"}').encode().replace(b"__", b"\xff\xfe"),
    "100k-deep-balanced-data": params_with(part=f'{{"data": {nested(100_000)}}}'),
    "metadata-200-deep": params_with(metadata=f'{{"x": {nested(200)}}}'),
    "data-200-deep": params_with(part=f'{{"data": {nested(200)}}}'),
    "data-300-deep": params_with(part=f'{{"data": {nested(300)}}}'),
}
WHOLE_BODIES = {"100k-open-brackets": b"[" * 100_000}


def rpc_body(name: str) -> bytes:
    if name in WHOLE_BODIES:
        return WHOLE_BODIES[name]
    params = CASES[name]
    raw = params if isinstance(params, bytes) else str(params).encode()
    return b'{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": ' + raw + b"}"


def rest_body(name: str) -> bytes:
    if name in WHOLE_BODIES:
        return WHOLE_BODIES[name]
    params = CASES[name]
    return params if isinstance(params, bytes) else str(params).encode()


@pytest.fixture(scope="module", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def poisoned(
    request: pytest.FixtureRequest, gated_llm: GatedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    if request.param == "memory":
        with memory_server(gated_llm.base_url, DEPTH_LIMIT_ENV) as target:
            yield target
        return
    request.getfixturevalue("main_redis")  # fails clearly without a Redis
    workdir = tmp_path_factory.mktemp("poison")
    with redis_replicas(
        gated_llm.base_url, workdir, name="poison", env=DEPTH_LIMIT_ENV
    ) as replicas:
        yield replicas[0]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def bystander(poisoned: Target, http: httpx.Client) -> str:
    """Another client's task, stored before any poison: every read of it must keep working."""
    params = send_params("a bystander's task", configuration={"returnImmediately": True})
    body = rpc(http, poisoned.urls[0], "SendMessage", params)
    return str(body["result"]["task"]["id"])


@pytest.fixture
def target(poisoned: Target, bystander: str) -> Iterator[Target]:
    poisoned.mark_logs()
    yield poisoned


def clean_json(r: httpx.Response, what: str) -> Any:
    assert r.status_code < 500, f"{what}: HTTP {r.status_code}: {r.text[:500]}"
    assert "Traceback" not in r.text, f"{what}: traceback in the body: {r.text[:1000]}"
    ctype = r.headers.get("content-type", "")
    assert ctype.startswith(("application/json", "application/a2a+json")), (
        f"{what}: HTTP {r.status_code} {ctype!r}: {r.text[:300]!r}"
    )
    return r.json()


def still_readable(target: Target, http: httpx.Client, what: str, bystander: str) -> None:
    """The bystander's task is still listed (both bindings) and readable on every server."""
    for url in target.urls:
        listed = [task["id"] for task in list_all_tasks(http, url)]
        assert bystander in listed, f"after {what}: JSON-RPC ListTasks on {url} lost it: {listed}"
        r = http.get(url + "/tasks", params={"pageSize": 100}, headers=A2A_HEADERS)
        assert r.status_code == 200, (
            f"after {what}: REST ListTasks on {url}: {r.status_code} {r.text[:300]}"
        )
        rest_listed = [
            task["id"] for task in clean_json(r, f"REST ListTasks after {what}")["tasks"]
        ]
        assert bystander in rest_listed, f"after {what}: REST ListTasks on {url}: {rest_listed}"
        body = rpc(http, url, "GetTask", {"id": bystander})
        assert "result" in body, f"after {what}: GetTask {bystander} on {url}: {body}"
        r = http.get(f"{url}/tasks/{bystander}", headers=A2A_HEADERS)
        assert r.status_code == 200, f"after {what}: REST GetTask on {url}: {r.text[:300]}"
    tracebacks = target.new_tracebacks()
    assert not tracebacks, f"after {what}, tracebacks in stderr:\n" + "\n".join(tracebacks[:2])


@pytest.mark.parametrize("name", list(CASES))
def test_poison_over_jsonrpc_is_a_clean_parse_or_params_error(
    target: Target, http: httpx.Client, bystander: str, name: str
) -> None:
    r = http.post(
        target.urls[0] + "/",
        content=rpc_body(name),
        headers={**A2A_HEADERS, "Content-Type": "application/json"},
    )
    body = clean_json(r, f"JSON-RPC {name}")
    assert r.status_code in (200, 400), f"JSON-RPC {name}: HTTP {r.status_code}"
    assert isinstance(body, dict) and body.get("jsonrpc") == "2.0", body
    assert "error" in body, f"JSON-RPC {name} was accepted: {str(body)[:500]}"
    assert body["error"]["code"] in (-32700, -32602), f"JSON-RPC {name}: {body['error']}"
    assert body.get("id") in (None, 7), body
    still_readable(target, http, f"JSON-RPC {name}", bystander)


@pytest.mark.parametrize("name", list(CASES))
def test_poison_over_rest_is_a_clean_4xx(
    target: Target, http: httpx.Client, bystander: str, name: str
) -> None:
    r = http.post(
        target.urls[-1] + "/message:send",
        content=rest_body(name),
        headers={**A2A_HEADERS, "Content-Type": "application/json"},
    )
    body = clean_json(r, f"REST {name}")
    assert 400 <= r.status_code < 500, f"REST {name}: HTTP {r.status_code}: {str(body)[:500]}"
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict) and error.get("code") == r.status_code, (
        f"REST {name}: not an AIP-193 error body: {body}"
    )
    assert isinstance(error.get("status"), str) and error.get("message"), error
    still_readable(target, http, f"REST {name}", bystander)


@pytest.mark.parametrize(
    "notification",
    [
        {"jsonrpc": "2.0", "method": "ListTasks", "params": {}},
        {"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "no-such-task"}},
        {"jsonrpc": "2.0", "method": "NoSuchMethod"},
    ],
    ids=["ListTasks", "GetTask-unknown", "unknown-method"],
)
def test_a_jsonrpc_notification_gets_no_response_body(
    target: Target, http: httpx.Client, bystander: str, notification: dict[str, Any]
) -> None:
    r = http.post(target.urls[0] + "/", json=notification, headers=A2A_HEADERS)
    assert r.status_code == 204, f"notification: HTTP {r.status_code}: {r.text[:300]}"
    assert r.content == b"", f"a notification was answered with a body: {r.text[:300]}"
    still_readable(target, http, "a notification", bystander)
