"""The per-request call context: immutable, built from headers, owners namespaced by scheme."""

from __future__ import annotations

import dataclasses

import pytest
from starlette.datastructures import Headers

from app.call_context import ANONYMOUS_PRINCIPAL, CallContext, Principal
from stores.base import ANONYMOUS

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_built_from_request_headers() -> None:
    alice = Principal(id="alice", scheme="api-key", scopes=frozenset({"read"}))
    headers = Headers(
        raw=[
            (b"traceparent", TRACEPARENT.encode()),
            (b"tracestate", b"vendor=1"),
            (b"last-event-id", b"7"),
            (b"a2a-version", b" 1.0 "),
            (b"a2a-extensions", b"https://ext.example/a/v1, https://ext.example/b/v1"),
            (b"a2a-extensions", b"https://ext.example/c/v1,,"),
            (b"authorization", b"Bearer secret"),
        ]
    )
    context = CallContext.from_request(headers, principal=alice)
    assert context == CallContext(
        principal=alice,
        trace_carrier={"traceparent": TRACEPARENT, "tracestate": "vendor=1"},
        last_event_id="7",
        protocol_version="1.0",
        requested_extensions=frozenset(
            {"https://ext.example/a/v1", "https://ext.example/b/v1", "https://ext.example/c/v1"}
        ),
    )
    assert dict(context.trace_carrier) == {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    assert context.owner == "api-key:alice"
    assert "secret" not in repr(context)  # credentials are not part of the context


def test_header_names_in_any_case_from_a_plain_mapping() -> None:
    context = CallContext.from_request({"A2A-Version": "1.0", "Last-Event-ID": "3"})
    assert (context.protocol_version, context.last_event_id) == ("1.0", "3")


def test_the_version_may_come_from_the_query_string_and_the_header_wins() -> None:
    assert CallContext.from_request({}, query={"A2A-Version": "0.3"}).protocol_version == "0.3"
    both = CallContext.from_request({"a2a-version": "1.0"}, query={"A2A-Version": "0.3"})
    assert both.protocol_version == "1.0"


def test_absent_headers_give_empty_values() -> None:
    context = CallContext.from_request(Headers({"a2a-version": " ", "last-event-id": ""}))
    assert context == CallContext()
    assert context.principal == ANONYMOUS_PRINCIPAL
    assert context.owner == ANONYMOUS
    assert dict(context.trace_carrier) == {}
    assert context.requested_extensions == frozenset()


def test_the_context_is_immutable() -> None:
    source = {"traceparent": TRACEPARENT}
    context = CallContext(trace_carrier=source)
    source["traceparent"] = "changed"
    assert context.trace_carrier["traceparent"] == TRACEPARENT  # a copy was taken
    with pytest.raises(TypeError):
        context.trace_carrier["traceparent"] = "changed"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.principal = Principal(id="mallory", scheme="api-key")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.principal.id = "mallory"  # type: ignore[misc]
    assert hash(context) == hash(CallContext(trace_carrier={"traceparent": "other"}))


def test_owners_are_namespaced_by_scheme() -> None:
    """One name under two schemes is two owners, and no credential names the anonymous owner."""
    by_key = Principal(id="alice", scheme="api-key")
    by_jwt = Principal(id="alice", scheme="jwt")
    named_anonymous = Principal(id=ANONYMOUS, scheme="api-key")
    assert len({by_key.owner, by_jwt.owner, named_anonymous.owner, ANONYMOUS_PRINCIPAL.owner}) == 4
    assert ANONYMOUS_PRINCIPAL.owner == ANONYMOUS
    assert not ANONYMOUS_PRINCIPAL.is_authenticated
    assert by_key.is_authenticated and by_jwt.is_authenticated
