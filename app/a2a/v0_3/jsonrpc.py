"""The A2A 0.3 JSON-RPC methods (`message/send`, `tasks/get`, ...) on the same endpoint as 1.0.

Each method translates its 0.3 params into the 1.0 params of the same operation (app.a2a.v0_3.wire),
calls it, and translates the 1.0 result back; streams render each journal entry as a 0.3 event.
Errors keep their codes, which the two generations share.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import Response

from app.a2a.operations import Operations
from app.a2a.rpc import JsonId, Method, Responder
from app.a2a.v0_3.wire import (
    Dialect,
    entry_renderer,
    push_config_out,
    push_config_ref_in,
    response_out,
    send_params_in,
    set_push_config_in,
    task_out,
    task_query_in,
)
from app.call_context import CallContext
from app.errors import A2AError, InvalidParamsError
from app.http.json_body import JsonObject
from stores.models import JournalEntry

_RPC = Dialect.JSONRPC


render_entry_v03 = entry_renderer(_RPC)


async def _failed(error: A2AError) -> AsyncIterator[list[JournalEntry]]:
    """A stream whose one event is the error: 0.3 clients of a streaming method read SSE only."""
    raise error
    yield  # an async generator, for the stream writer (which renders the error as an event)


def v03_methods(operations: Operations, respond: Responder) -> dict[str, Method]:
    """The 0.3 method table, answering through the JSON-RPC binding's `respond`."""
    result, stream = respond.result, respond.stream

    async def send(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        response = await operations.send_message(
            send_params_in(params, _RPC), context=context, generation="0.3"
        )
        return result(request_id, response_out(response, _RPC))

    async def send_streaming(
        params: JsonObject, request_id: JsonId, context: CallContext
    ) -> Response:
        try:
            entries = await operations.stream_message(
                send_params_in(params, _RPC), context=context, generation="0.3"
            )
        except A2AError as error:
            entries = _failed(error)
        return stream(request_id, entries, render_entry_v03)

    async def get(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        task = await operations.get_task(task_query_in(params), context=context)
        return result(request_id, task_out(task, _RPC))

    async def cancel(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        task = await operations.cancel_task(task_query_in(params), context=context)
        return result(request_id, task_out(task, _RPC))

    async def resubscribe(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        try:
            entries = await operations.subscribe({"id": params.get("id")}, context=context)
        except A2AError as error:
            entries = _failed(error)
        return stream(request_id, entries, render_entry_v03)

    async def set_push(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        config = await operations.create_push_config(
            set_push_config_in(params), context=context, generation="0.3"
        )
        return result(request_id, push_config_out(config, _RPC))

    async def get_push(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        reference = push_config_ref_in(params)
        if "id" not in reference:
            # 0.3 allowed leaving the config id out: the task's only (first) config.
            listed = await operations.list_push_configs(reference, context=context)
            configs = listed.get("configs", [])
            if not configs:
                raise InvalidParamsError(
                    "The task has no push notification config", field="pushNotificationConfigId"
                )
            return result(request_id, push_config_out(configs[0], _RPC))
        config = await operations.get_push_config(reference, context=context)
        return result(request_id, push_config_out(config, _RPC))

    async def list_push(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        listed = await operations.list_push_configs(push_config_ref_in(params), context=context)
        return result(
            request_id, [push_config_out(config, _RPC) for config in listed.get("configs", [])]
        )

    async def delete_push(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
        await operations.delete_push_config(push_config_ref_in(params), context=context)
        return result(request_id, None)

    async def extended_card(
        params: JsonObject, request_id: JsonId, context: CallContext
    ) -> Response:
        card = await operations.extended_card({}, context=context, generation="0.3")
        return result(request_id, card)

    return {
        "message/send": send,
        "message/stream": send_streaming,
        "tasks/get": get,
        "tasks/cancel": cancel,
        "tasks/resubscribe": resubscribe,
        "tasks/pushNotificationConfig/set": set_push,
        "tasks/pushNotificationConfig/get": get_push,
        "tasks/pushNotificationConfig/list": list_push,
        "tasks/pushNotificationConfig/delete": delete_push,
        "agent/getAuthenticatedExtendedCard": extended_card,
    }
