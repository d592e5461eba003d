"""What every gRPC method shares: the caller from metadata, the request as JSON params, the
answer as protobuf, a failure as a `google.rpc.Status`, the metric, the log line and the span.

    request bytes --deserialize (a malformed message: INVALID_ARGUMENT)--> protobuf
      --edge (authorization / x-api-key, tenant, a2a-extensions, rate), a2a-version--> CallContext
      --MessageToDict, nesting depth--> JSON params --> the service's operation
      --> a protobuf answer, or journal entries relayed as protobuf messages

A service (app.grpc.service_v1, app.grpc.service_v0_3) is a table of operations on JSON params;
`GrpcCalls.handler` builds the gRPC method handlers of its descriptor from that table.

Streams. Each message of a stream is one journal entry; the first one's position is sent in the
initial metadata (`a2a-first-event-id`), and the positions of the ones after it follow one by
one, so a client knows the position of everything it received. A stream that ends (the task
settled, the server draining, an error) says the last position sent in its trailing metadata
(`a2a-last-event-id`). `SubscribeToTask` with `a2a-last-event-id: N` in its metadata sends the
events after position N, as SSE's `Last-Event-ID` does. A gap in the positions ends a stream
before it (`_relay`), so that counting stays exact.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2, json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry import propagate, trace

from app.a2a.rpc import Entries
from app.a2a.versions import Generation, check_requested_version
from app.call_context import CallContext
from app.errors import A2AError, InvalidParamsError, InvalidRequestError, as_a2a_error
from app.extensions import echo_headers
from app.http.edge import Edge
from app.http.json_body import JsonObject, check_depth
from app.ops.metrics import Metrics, RequestRecord
from stores.models import JournalEntry

logger = logging.getLogger(__name__)

STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailing metadata that carries the whole `google.rpc.Status` (gRPC's rich errors)."""
FIRST_EVENT_ID_KEY = "a2a-first-event-id"
LAST_EVENT_ID_KEY = "a2a-last-event-id"

# ErrorInfo and RetryInfo in the default pool: an error's details are packed into `Any` by name.
_DETAIL_TYPES = (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo)

Unary = Callable[[JsonObject, CallContext], Awaitable[Message]]
"""A unary method: the request's JSON params and the caller in, the protobuf answer out."""
OpenStream = Callable[[JsonObject, CallContext], Awaitable[Entries]]
Render = Callable[[JournalEntry], Message]


@dataclass(frozen=True, slots=True)
class Streaming:
    """A server-streaming method: how it opens its journal entries, and how one goes out."""

    open: OpenStream
    render: Render


class _Malformed:
    """What a request that is not a valid protobuf message deserializes to."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def status_of(error: A2AError) -> status_pb2.Status:
    """The error as `google.rpc.Status`: its gRPC code, message, and details (ErrorInfo, with
    the A2A reason in the `a2a-protocol.org` domain; RetryInfo when the client may retry)."""
    details = []
    for detail in error.details():
        packed = any_pb2.Any()
        json_format.ParseDict(detail, packed)
        details.append(packed)
    return status_pb2.Status(code=_code(error).value[0], message=error.message, details=details)


def _code(error: A2AError) -> grpc.StatusCode:
    return grpc.StatusCode.__members__.get(error.status, grpc.StatusCode.INTERNAL)


async def abort(
    context: grpc.aio.ServicerContext, error: A2AError, *metadata: tuple[str, str]
) -> NoReturn:
    """End the call with the error (raises, as `context.abort` does)."""
    details = (STATUS_DETAILS_KEY, status_of(error).SerializeToString())
    await context.abort(_code(error), error.message, trailing_metadata=(details, *metadata))
    raise AssertionError("unreachable: abort raises")


def _initial_metadata(context: CallContext) -> tuple[tuple[str, str], ...]:
    """The activated extensions, named back as HTTP's response headers name them
    (`a2a-extensions`, and 0.3's `x-a2a-extensions` for a client that sent that one)."""
    return tuple((name.lower(), value) for name, value in echo_headers(context).items())


def metadata_of(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's text metadata, keys in lower case, repeated keys joined with commas."""
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if key.endswith("-bin") or not isinstance(value, str):
            continue
        key = key.lower()
        found[key] = f"{found[key]},{value}" if key in found else value
    return found


def _task_id_of(request: Any) -> str | None:
    """The task a request names, for its log line (0.3 names it `tasks/{id}...`)."""
    if isinstance(request, _Malformed):
        return None
    fields = request.DESCRIPTOR.fields_by_name
    for name in ("task_id", "id"):
        if name in fields:
            return getattr(request, name) or None
    for name in ("name", "parent"):
        if name in fields:
            parts = getattr(request, name).split("/")
            return parts[1] if len(parts) > 1 and parts[1] else None
    if "message" in fields:
        return request.message.task_id or None
    return None


class GrpcCalls:
    """Builds the gRPC method handlers of a service from its table of operations."""

    def __init__(
        self,
        edge: Edge,
        *,
        metrics: Metrics,
        max_json_depth: int = 32,
        traced: bool = False,
        base_url: Callable[[], str] | None = None,
    ) -> None:
        self._edge = edge
        self._metrics = metrics
        self._max_json_depth = max_json_depth
        self._tracer = trace.get_tracer("app.grpc") if traced else None
        self._base_url = base_url

    def handler(
        self,
        service: ServiceDescriptor,
        *,
        generation: Generation,
        unary: Mapping[str, Unary],
        streaming: Mapping[str, Streaming],
    ) -> grpc.GenericRpcHandler:
        """The handler of every method of `service` (each must be in `unary` or `streaming`)."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in service.methods:
            deserialize = _deserializer(method)
            serialize = _serialize
            if method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(method, generation, streaming[method.name]),
                    request_deserializer=deserialize,
                    response_serializer=serialize,
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(method, generation, unary[method.name]),
                    request_deserializer=deserialize,
                    response_serializer=serialize,
                )
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _unary(self, method: MethodDescriptor, generation: Generation, call: Unary) -> Any:
        name = method.name

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Message:
            with self._metrics.request("grpc") as record:
                record.method, record.task_id = name, _task_id_of(request)
                metadata = metadata_of(context)
                with self._span(method, metadata):
                    try:
                        params, call_context = await self._admit(request, metadata, generation)
                        record.owner = call_context.owner
                        answer = await call(params, call_context)
                        if initial := _initial_metadata(call_context):
                            await context.send_initial_metadata(initial)
                        return answer
                    except Exception as exc:
                        await abort(context, self._refusal(exc, name, record))

        return handle

    def _streaming(
        self, method: MethodDescriptor, generation: Generation, stream: Streaming
    ) -> Any:
        name = method.name

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
            with self._metrics.request("grpc") as record:  # the request: the stream's opening
                record.method, record.task_id = name, _task_id_of(request)
                metadata = metadata_of(context)
                with self._span(method, metadata):
                    try:
                        params, call_context = await self._admit(request, metadata, generation)
                        record.owner = call_context.owner
                        entries = await stream.open(params, call_context)
                    except Exception as exc:
                        await abort(context, self._refusal(exc, name, record))
            initial = _initial_metadata(call_context)
            async for message in self._relay(entries, stream.render, context, initial):
                yield message

        return handle

    async def _admit(
        self, request: Any, metadata: dict[str, str], generation: Generation
    ) -> tuple[JsonObject, CallContext]:
        """The call context from the edge every binding uses (`Edge.context_of`: the caller
        authenticated, the tenant checked, the requested extensions activated, the rate limit),
        in the version asked for; then the request as JSON params. A malformed message is
        refused once the caller is known, as a JSON-RPC parse error is."""
        last_event_id = metadata.get(LAST_EVENT_ID_KEY) or metadata.get("last-event-id")
        call_context = await self._edge.context_of(
            {**metadata, "last-event-id": last_event_id or ""},
            tenant=self._tenant_of(request, generation),
            base_url_of=self._base_url,
        )
        check_requested_version(metadata.get("a2a-version"), generation)
        if call_context.task_generations:  # gRPC stays 1.0: its schema has no generations
            call_context = replace(call_context, task_generations=False)
        if isinstance(request, _Malformed):
            raise InvalidRequestError(f"The request is not a valid {request.type_name} message")
        if last_event_id and not (last_event_id.isascii() and last_event_id.isdigit()):
            raise InvalidParamsError(
                f"{LAST_EVENT_ID_KEY} {last_event_id!r} is not a journal position",
                field=LAST_EVENT_ID_KEY,
            )
        params = json_format.MessageToDict(request)
        check_depth(params, limit=self._max_json_depth)
        return params, call_context

    def _tenant_of(self, request: Any, generation: Generation) -> object:
        """The request's `tenant` field (1.0; `""`, proto3's default, is no tenant). 0.3 has
        none: its calls are served within the card's tenant, as on the HTTP bindings."""
        if generation == "0.3":
            return self._edge.tenants.card_tenant
        if isinstance(request, _Malformed):
            return None
        return getattr(request, "tenant", None)

    @staticmethod
    def _refusal(exc: Exception, name: str, record: RequestRecord) -> A2AError:
        error = as_a2a_error(exc, where=f"gRPC {name}")
        record.outcome = error.reason
        if isinstance(exc, A2AError):
            logger.debug("gRPC %s | refused: status=<%s> | %s", name, error.status, error.message)
        return error

    async def _relay(
        self,
        entries: Entries,
        render: Render,
        context: grpc.aio.ServicerContext,
        initial: tuple[tuple[str, str], ...],
    ) -> AsyncIterator[Message]:
        """Each journal entry as a message; a failure (reading, rendering) ends the stream with
        its error. The entries are closed however the stream ends, the client's cancel too.

        A gap in the positions (a reader so far behind that the journal dropped what it had not
        read: it keeps a task's last 10,000 events) ends the stream before it, cleanly: the
        client counts positions from `a2a-first-event-id`, so a message after a gap would be
        counted wrong. Resumed, the stream's first position says what is no longer there."""
        metrics, opened_at = self._metrics, time.time()
        last: int | None = None
        gap = False
        metrics.open_streams.add(1)
        try:
            async for batch in entries:
                # None: a read that waited its whole time for nothing. SSE sends a comment then;
                # here the connection is kept by HTTP/2 pings (grpc.keepalive_time_ms).
                for entry in batch or ():
                    if last is not None and entry.position != last + 1:
                        gap = True
                        break
                    message = render(entry)
                    if last is None:
                        await context.send_initial_metadata(
                            ((FIRST_EVENT_ID_KEY, str(entry.position)), *initial)
                        )
                    yield message
                    last = entry.position
                    metrics.stream_sent(entry, opened_at=opened_at)
                if gap:
                    break
        except Exception as exc:
            error = as_a2a_error(exc, where="gRPC stream")
            await abort(context, error, *_last_event(last))
        finally:
            metrics.open_streams.add(-1)
            aclose = getattr(entries, "aclose", None)
            if aclose is not None:
                await aclose()
        context.set_trailing_metadata(_last_event(last))

    @contextmanager
    def _span(self, method: MethodDescriptor, metadata: dict[str, str]) -> Iterator[None]:
        """A server span for the call (the client's `traceparent` its parent) when tracing is
        on: the turn a send starts joins it, as it joins an HTTP request's span."""
        if self._tracer is None:
            yield
            return
        service = method.containing_service.full_name
        with self._tracer.start_as_current_span(
            f"{service}/{method.name}",
            context=propagate.extract(metadata),
            kind=trace.SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method.name},
        ):
            yield


def _last_event(last: int | None) -> tuple[tuple[str, str], ...]:
    return () if last is None else ((LAST_EVENT_ID_KEY, str(last)),)


def _deserializer(method: MethodDescriptor) -> Callable[[bytes], Any]:
    message_class = message_factory.GetMessageClass(method.input_type)
    type_name = method.input_type.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except (DecodeError, RuntimeError, ValueError):
            return _Malformed(type_name)

    return deserialize


def _serialize(message: Message) -> bytes:
    serialized: bytes = message.SerializeToString()
    return serialized
