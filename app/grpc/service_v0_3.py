"""The A2A 0.3 service `a2a.v1.A2AService` beside the 1.0 one, as a2a-python serves both.

The ProtoJSON of the 0.3 proto is what the 0.3 HTTP+JSON routes read and write
(app.a2a.v0_3.wire, `Dialect.REST`): each method translates its request into the 1.0 operation
of the same meaning with those translations, and the 1.0 result back. Resources are named as in
0.3 (`tasks/{id}`, `tasks/{id}/pushNotificationConfigs/{configId}`). `GetAgentCard` answers the
card (the extended one when it is configured), converted by the SDK's own 0.3 conversions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import orjson
from a2a.compat.v0_3 import a2a_v0_3_pb2
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.proto_utils import ToProto
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from app.a2a.operations import Operations
from app.a2a.v0_3.wire import (
    DEFAULT_PUSH_CONFIG_ID,
    Dialect,
    entry_renderer,
    push_config_in,
    push_config_out,
    response_out,
    send_params_in,
    task_out,
)
from app.call_context import CallContext
from app.errors import ExtendedAgentCardNotConfiguredError, InvalidParamsError
from app.grpc.calls import GrpcCalls, Streaming, Unary
from app.grpc.protojson import protobuf_of, reader
from app.http.json_body import JsonObject
from stores.models import JournalEntry

SERVICE_V03 = a2a_v0_3_pb2.DESCRIPTOR.services_by_name["A2AService"]
"""`a2a.v1.A2AService`: the A2A 0.3 proto, as the official a2a-sdk ships it (compat.v0_3)."""

_REST = Dialect.REST
_render_v03 = entry_renderer(_REST)

PublicCard = Callable[[str], JsonObject]
"""The public card, with its 0.3 members, at a base URL."""


_read_stream_response = reader(a2a_v0_3_pb2.StreamResponse)


def _render(entry: JournalEntry) -> Message:
    return _read_stream_response(orjson.loads(_render_v03(entry)))


def _resource(name: Any, *, collection: str | None = None, field: str = "name") -> list[str]:
    """`tasks/{id}` (and, with `collection`, `tasks/{id}/{collection}/{item}`): the ids."""
    parts = name.split("/") if isinstance(name, str) else []
    size = 4 if collection else 2
    if (
        len(parts) != size
        or parts[0] != "tasks"
        or not all(parts[1::2])
        or (collection and parts[2] != collection)
    ):
        shape = f"tasks/{{id}}/{collection}/{{id}}" if collection else "tasks/{id}"
        raise InvalidParamsError(f"{field} {name!r} is not a resource name {shape}", field=field)
    return parts[1::2]


class _Methods:
    def __init__(self, operations: Operations, card: PublicCard) -> None:
        self._operations = operations
        self._card = card

    async def send(self, params: JsonObject, context: CallContext) -> Message:
        result = await self._operations.send_message(
            send_params_in(params, _REST), context=context, generation="0.3"
        )
        return protobuf_of(response_out(result, _REST), a2a_v0_3_pb2.SendMessageResponse)

    async def stream(self, params: JsonObject, context: CallContext) -> Any:
        return await self._operations.stream_message(
            send_params_in(params, _REST), context=context, generation="0.3"
        )

    async def get_task(self, params: JsonObject, context: CallContext) -> Message:
        (task_id,) = _resource(params.get("name"))
        query = {"id": task_id} | (
            {"historyLength": params["historyLength"]} if "historyLength" in params else {}
        )
        task = await self._operations.get_task(query, context=context)
        return protobuf_of(task_out(task, _REST), a2a_v0_3_pb2.Task)

    async def cancel_task(self, params: JsonObject, context: CallContext) -> Message:
        (task_id,) = _resource(params.get("name"))
        task = await self._operations.cancel_task({"id": task_id}, context=context)
        return protobuf_of(task_out(task, _REST), a2a_v0_3_pb2.Task)

    async def subscribe(self, params: JsonObject, context: CallContext) -> Any:
        (task_id,) = _resource(params.get("name"))
        return await self._operations.subscribe({"id": task_id}, context=context)

    async def create_push_config(self, params: JsonObject, context: CallContext) -> Message:
        (task_id,) = _resource(params.get("parent"), field="parent")
        config = params.get("config") or {}
        fields = push_config_in(config.get("pushNotificationConfig") or {}, "config")
        fields.setdefault("id", params.get("configId") or DEFAULT_PUSH_CONFIG_ID)
        created = await self._operations.create_push_config(
            fields | {"taskId": task_id}, context=context, generation="0.3"
        )
        return protobuf_of(push_config_out(created, _REST), a2a_v0_3_pb2.TaskPushNotificationConfig)

    async def get_push_config(self, params: JsonObject, context: CallContext) -> Message:
        task_id, config_id = _resource(params.get("name"), collection="pushNotificationConfigs")
        config = await self._operations.get_push_config(
            {"taskId": task_id, "id": config_id}, context=context
        )
        return protobuf_of(push_config_out(config, _REST), a2a_v0_3_pb2.TaskPushNotificationConfig)

    async def list_push_configs(self, params: JsonObject, context: CallContext) -> Message:
        (task_id,) = _resource(params.get("parent"), field="parent")
        listed = await self._operations.list_push_configs({"taskId": task_id}, context=context)
        configs = [push_config_out(config, _REST) for config in listed.get("configs", [])]
        return protobuf_of(
            {"configs": configs, "nextPageToken": listed.get("nextPageToken", "")},
            a2a_v0_3_pb2.ListTaskPushNotificationConfigResponse,
        )

    async def delete_push_config(self, params: JsonObject, context: CallContext) -> Message:
        task_id, config_id = _resource(params.get("name"), collection="pushNotificationConfigs")
        await self._operations.delete_push_config(
            {"taskId": task_id, "id": config_id}, context=context
        )
        return empty_pb2.Empty()

    async def agent_card(self, params: JsonObject, context: CallContext) -> Message:
        """0.3's GetAgentCard: the extended card when there is one, else the public card."""
        try:
            card = await self._operations.extended_card({}, context=context, generation="0.3")
        except ExtendedAgentCardNotConfiguredError:
            card = self._card(context.base_url or "")
        return ToProto.agent_card(types_v03.AgentCard.model_validate(card))


def service_v0_3(
    calls: GrpcCalls, operations: Operations, *, card: PublicCard
) -> grpc.GenericRpcHandler:
    """The 0.3 service's method handlers."""
    methods = _Methods(operations, card)
    unary: dict[str, Unary] = {
        "SendMessage": methods.send,
        "GetTask": methods.get_task,
        "CancelTask": methods.cancel_task,
        "CreateTaskPushNotificationConfig": methods.create_push_config,
        "GetTaskPushNotificationConfig": methods.get_push_config,
        "ListTaskPushNotificationConfig": methods.list_push_configs,
        "DeleteTaskPushNotificationConfig": methods.delete_push_config,
        "GetAgentCard": methods.agent_card,
    }
    return calls.handler(
        SERVICE_V03,
        generation="0.3",
        unary=unary,
        streaming={
            "SendStreamingMessage": Streaming(open=methods.stream, render=_render),
            "TaskSubscription": Streaming(open=methods.subscribe, render=_render),
        },
    )
