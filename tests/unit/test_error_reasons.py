"""Every ErrorInfo reason, checked against the spec's list and its naming rule, on every binding.

The rule (A2A 1.0.1, sections 10.6 and 11.6): "The A2A error type in UPPER_SNAKE_CASE without the
"Error" suffix". The spec's error types and their mappings are copied below from
specification-v1.0.1.md (section 5.4, and section 9.5 for JSON-RPC's own errors), so that the
test reads no file outside the repository.
"""

from __future__ import annotations

import re

import grpc
import pytest
from google.rpc import error_details_pb2

from app import errors
from app.errors import A2AError
from app.grpc.calls import status_of
from app.http import errors as edge_errors  # noqa: F401  (its rows join the table)

# (A2A error type, JSON-RPC code, gRPC status, HTTP status): section 5.4, A2A 1.0.1.
SPEC_ERRORS = [
    ("TaskNotFoundError", -32001, "NOT_FOUND", 404),
    ("TaskNotCancelableError", -32002, "FAILED_PRECONDITION", 400),
    ("PushNotificationNotSupportedError", -32003, "FAILED_PRECONDITION", 400),
    ("UnsupportedOperationError", -32004, "FAILED_PRECONDITION", 400),
    ("ContentTypeNotSupportedError", -32005, "INVALID_ARGUMENT", 400),
    ("InvalidAgentResponseError", -32006, "INTERNAL", 500),
    ("ExtendedAgentCardNotConfiguredError", -32007, "FAILED_PRECONDITION", 400),
    ("ExtensionSupportRequiredError", -32008, "FAILED_PRECONDITION", 400),
    ("VersionNotSupportedError", -32009, "FAILED_PRECONDITION", 400),
]
CLIENT_SIDE = {"InvalidAgentResponseError"}
"""What a client concludes about an agent's response: a server never sends it."""

# (error name, JSON-RPC code, the JSON-RPC 2.0 name): section 9.5. Their reasons are JSON-RPC's
# names in UPPER_SNAKE_CASE, as a2a-python's and a2a-go's servers send them and their clients
# read them (a2a-python `A2A_ERROR_MAPPING`, a2a-go `errorReason`).
JSONRPC_ERRORS = [
    ("JSONParseError", -32700, "Parse error"),
    ("InvalidRequestError", -32600, "Invalid Request"),
    ("MethodNotFoundError", -32601, "Method not found"),
    ("InvalidParamsError", -32602, "Invalid params"),
    ("InternalError", -32603, "Internal error"),
]


def by_the_rule(type_name: str) -> str:
    """The spec's rule: `TaskNotFoundError` -> `TASK_NOT_FOUND`."""
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z][a-z]*", type_name.removesuffix("Error"))
    return "_".join(word.upper() for word in words)


def upper_snake(words: str) -> str:
    return "_".join(words.upper().split())


def every_error() -> list[type[A2AError]]:
    found, pending = [], [A2AError]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return sorted(found, key=lambda kind: kind.__name__)


def reason_owner(kind: type[A2AError]) -> type[A2AError]:
    """The class whose row gives `kind` its reason (itself, or the type it is a case of)."""
    return next(base for base in kind.__mro__ if "reason" in vars(base))


def test_the_rule_reads_as_the_spec_examples() -> None:
    assert by_the_rule("TaskNotFoundError") == "TASK_NOT_FOUND"
    assert by_the_rule("TaskNotCancelableError") == "TASK_NOT_CANCELABLE"
    assert by_the_rule("JSONParseError") == "JSON_PARSE"


@pytest.mark.parametrize(("name", "code", "grpc_status", "http_status"), SPEC_ERRORS)
def test_each_spec_error_is_a_row_with_the_spec_mapping(name, code, grpc_status, http_status):
    if name in CLIENT_SIDE:
        assert not hasattr(errors, name)
        return
    kind = getattr(errors, name)
    assert (kind.code, kind.status, kind.http_status) == (code, grpc_status, http_status)
    assert kind.reason == by_the_rule(name)


@pytest.mark.parametrize(("name", "code", "jsonrpc_name"), JSONRPC_ERRORS)
def test_each_jsonrpc_error_is_a_row_named_as_jsonrpc_names_it(name, code, jsonrpc_name):
    kind = getattr(errors, name)
    assert (kind.code, kind.reason) == (code, upper_snake(jsonrpc_name))


def test_invalid_params_is_the_reason_the_official_clients_know() -> None:
    # Not INVALID_ARGUMENT (the gRPC status): a2a-go's client turned that into an internal error.
    assert errors.InvalidParamsError.reason == "INVALID_PARAMS"
    assert errors.InvalidParamsError.status == "INVALID_ARGUMENT"


@pytest.mark.parametrize("kind", every_error(), ids=lambda kind: kind.__name__)
def test_every_reason_follows_the_rule(kind: type[A2AError]) -> None:
    """Our own errors too (STORE_UNAVAILABLE, RATE_LIMITED, ...): the reason is the name of the
    error type it is; a class with no reason of its own is a case of its parent's type."""
    owner = reason_owner(kind)
    jsonrpc_names = {name: upper_snake(words) for name, _, words in JSONRPC_ERRORS}
    expected = jsonrpc_names.get(owner.__name__, by_the_rule(owner.__name__))
    if owner is A2AError:
        expected = "INTERNAL_ERROR"  # the base: an error with no type of its own is internal
    assert kind.reason == expected


def test_no_two_types_share_a_reason() -> None:
    owners: dict[str, str] = {}
    for kind in every_error():
        owner = reason_owner(kind)
        if owner is A2AError:
            continue
        assert owners.setdefault(owner.reason, owner.__name__) == owner.__name__, owner.reason


def concrete(kind: type[A2AError]) -> A2AError:
    if issubclass(kind, errors.RetryLaterError):
        return kind(retry_after_s=2)
    return kind()


@pytest.mark.parametrize(
    "kind",
    [kind for kind in every_error() if kind not in (A2AError, errors.RetryLaterError)],
    ids=lambda kind: kind.__name__,
)
def test_every_binding_carries_the_reason(kind: type[A2AError]) -> None:
    error = concrete(kind)
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "domain": "a2a-protocol.org"}
    jsonrpc = error.jsonrpc_error(1)["error"]["data"][0]
    rest = error.rest_body()["error"]["details"][0]
    assert jsonrpc == rest == info | {"reason": kind.reason, "metadata": error.metadata}
    status = status_of(error)
    unpacked = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(unpacked)
    assert (unpacked.reason, unpacked.domain) == (kind.reason, "a2a-protocol.org")
    assert status.code == grpc.StatusCode[kind.status].value[0]
