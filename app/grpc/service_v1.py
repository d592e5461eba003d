"""The A2A 1.0 service `lf.a2a.v1.A2AService`: each of its eleven methods is the operation of
the same name (app.a2a.operations), on the ProtoJSON of its request, answered with the ProtoJSON
the JSON-RPC binding sends, as protobuf. A stream's messages are the journal entries a
JSON-RPC stream sends (`StreamResponse`), rendered from their stored form."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import orjson
from a2a.types import a2a_pb2
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from app.a2a.operations import Operations
from app.a2a.wire import render_entry
from app.grpc.calls import GrpcCalls, Streaming, Unary
from app.grpc.protojson import protobuf_of, reader
from app.http.json_body import JsonObject
from stores.models import JournalEntry

SERVICE = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
"""`lf.a2a.v1.A2AService`, as the official a2a-sdk generated it from the spec's proto."""

Operation = Callable[..., Awaitable[Any]]


_read_stream_response = reader(a2a_pb2.StreamResponse)


def render_stream_response(entry: JournalEntry) -> Message:
    """A journal entry as the JSON-RPC stream's `StreamResponse`, as protobuf."""
    return _read_stream_response(orjson.loads(render_entry(entry)))


def _unary(operation: Operation, answer: type[Message]) -> Unary:
    async def call(params: JsonObject, context: Any) -> Message:
        return protobuf_of(await operation(params, context=context), answer)

    return call


def _streaming(operation: Operation) -> Streaming:
    async def open_stream(params: JsonObject, context: Any) -> Any:
        return await operation(params, context=context)

    return Streaming(open=open_stream, render=render_stream_response)


def service_v1(calls: GrpcCalls, operations: Operations) -> grpc.GenericRpcHandler:
    """The 1.0 service's method handlers."""
    return calls.handler(
        SERVICE,
        generation="1.0",
        unary={
            "SendMessage": _unary(operations.send_message, a2a_pb2.SendMessageResponse),
            "GetTask": _unary(operations.get_task, a2a_pb2.Task),
            "ListTasks": _unary(operations.list_tasks, a2a_pb2.ListTasksResponse),
            "CancelTask": _unary(operations.cancel_task, a2a_pb2.Task),
            "CreateTaskPushNotificationConfig": _unary(
                operations.create_push_config, a2a_pb2.TaskPushNotificationConfig
            ),
            "GetTaskPushNotificationConfig": _unary(
                operations.get_push_config, a2a_pb2.TaskPushNotificationConfig
            ),
            "ListTaskPushNotificationConfigs": _unary(
                operations.list_push_configs, a2a_pb2.ListTaskPushNotificationConfigsResponse
            ),
            "DeleteTaskPushNotificationConfig": _unary(
                operations.delete_push_config, empty_pb2.Empty
            ),
            "GetExtendedAgentCard": _unary(operations.extended_card, a2a_pb2.AgentCard),
        },
        streaming={
            "SendStreamingMessage": _streaming(operations.stream_message),
            "SubscribeToTask": _streaming(operations.subscribe),
        },
    )
