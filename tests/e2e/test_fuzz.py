"""Fuzzing the running server, bounded and repeatable: schemathesis against the served OpenAPI
document (HTTP+JSON) and hypothesis-made JSON-RPC bodies posted to `/`. No answer is a 5xx, every
JSON-RPC answer is a well-formed response (or 204 for a notification), and the server's log has
no traceback."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(120)

SERVER_ENV = {"LLM_MODEL": "", "A2A_MAX_PARTS": "8"}  # the offline demo model answers

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def rest_cases(server: Any) -> Any:
    """A strategy of cases over every operation of the OpenAPI document the server serves."""
    document = httpx.get(f"{server.url}/openapi.json", timeout=10, trust_env=False).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations, "the served OpenAPI document has no operations"
    return st.one_of([operation.as_strategy() for operation in operations])


def test_rest_fuzz_never_5xx(server: Any, rest_cases: Any) -> None:
    @FUZZ
    @given(case=rest_cases)
    def run(case: Any) -> None:
        response = case.call(base_url=server.url, timeout=10)
        assert response.status_code < 500, (
            case.method,
            case.path,
            response.status_code,
            response.text,
        )

    run()
    assert_no_traceback(server)


METHODS = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "Nope",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
parts = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "text": st.text(max_size=30) | values,
            "raw": st.sampled_from(["aGk=", "!!", ""]) | values,
            "data": values,
            "url": st.text(max_size=10),
            "mediaType": st.sampled_from(["text/plain", "image/png", "", "x"]) | values,
            "metadata": values,
        },
    ),
    max_size=10,
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "messageId": st.text(max_size=10) | values,
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", ""]) | values,
        "parts": parts | values,
        "taskId": st.text(max_size=10) | values,
        "contextId": st.text(max_size=10) | values,
        "metadata": values,
    },
)
params = st.fixed_dictionaries(
    {},
    optional={
        "message": messages | values,
        "id": st.text(max_size=12) | values,
        "configuration": st.fixed_dictionaries(
            {},
            optional={
                "returnImmediately": st.just(True) | values,
                "historyLength": st.integers(-5, 5000) | values,
            },
        )
        | values,
        "historyLength": st.integers(-5, 5000) | values,
        "pageSize": st.integers(-5, 500) | values,
        "pageToken": st.text(max_size=12) | values,
        "metadata": values,
    },
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | values,
        "id": st.integers(-(2**40), 2**40) | st.text(max_size=8) | st.none() | values,
        "method": st.sampled_from(METHODS) | values,
        "params": params | values,
    },
)
bodies = envelopes | values


def test_jsonrpc_fuzz_answers_well_formed(server: Any) -> None:
    @FUZZ
    @given(body=bodies)
    def run(body: Any) -> None:
        post_and_check(server, body)

    run()
    assert_no_traceback(server)


def post_and_check(server: Any, body: Any) -> None:
    if isinstance(body, dict) and body.get("method") in ("SendMessage", "SendStreamingMessage"):
        params = body.get("params")
        if isinstance(params, dict):  # a send that would wait for its turn answers at once
            params.setdefault("configuration", {"returnImmediately": True})
    try:
        content = json.dumps(body)
    except ValueError:
        return
    with httpx.Client(base_url=server.url, timeout=10, trust_env=False) as client:
        with client.stream(
            "POST", "/", content=content, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status_code < 500, response.status_code
            if response.status_code == 204:
                return
            assert response.status_code == 200, response.status_code
            if response.headers["content-type"].startswith("text/event-stream"):
                first = next(line for line in response.iter_lines() if line.startswith("data:"))
                answer = json.loads(first[5:])
            else:
                answer = json.loads(response.read())
    assert answer.get("jsonrpc") == "2.0", answer
    assert ("result" in answer) != ("error" in answer), answer
    if "error" in answer:
        assert isinstance(answer["error"]["code"], int) and answer["error"]["message"], answer
        assert answer["error"]["code"] != -32603 or "OVERLOADED" in json.dumps(answer), answer


def assert_no_traceback(server: Any) -> None:
    server.settle_log()
    assert "Traceback" not in server.logs(limit=1_000_000)
