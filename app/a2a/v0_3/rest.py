"""The A2A 0.3 HTTP+JSON routes under `/v1/`, beside the 1.0 routes.

Bodies and results are the ProtoJSON of the 0.3 proto (app.a2a.v0_3.wire, `Dialect.REST`); each
route translates into the 1.0 operation of the same meaning and back. Errors are the same AIP-193
bodies as the 1.0 routes (as a2a-python's 0.3 adapter answers).
0.3 has no ListTasks over HTTP+JSON.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.a2a.binding import Binding
from app.a2a.http_json import (
    Endpoint,
    guarded,
    ignored_body,
    query_params,
    read_body,
    sse_response,
)
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
from app.errors import MethodNotFoundError
from app.http.json_body import JsonObject
from app.http.responses import json_response

_REST = Dialect.REST


render_entry_rest_v03 = entry_renderer(_REST)


def _history_length(request: Request) -> JsonObject:
    """`historyLength`, or `history_length` as the 0.3 TCK's REST client spells it."""
    query = request.query_params
    value = query.get("historyLength", query.get("history_length"))
    return {} if value is None else {"historyLength": value}


class RestV03Binding(Binding):
    def routes(self, tenant: str | None = None) -> list[Route]:
        """The routes under `/v1/`; with `tenant` (an agent of AGENTS_FILE), their copies
        under `/{tenant}/v1/`, within that tenant (where the agent's card sends 0.3 clients)."""
        prefix = f"/{tenant}" if tenant else ""

        def route(path: str, endpoint: Endpoint, method: str, verbs: list[str]) -> Route:
            handler = guarded(
                self._edge,
                endpoint,
                metrics=self._metrics,
                method=method,
                generation="0.3",
                v03_tenant=tenant,
            )
            return Route(prefix + path, handler, methods=verbs)

        configs = "/v1/tasks/{ref}/pushNotificationConfigs"
        return [
            route("/v1/message:send", self._send, "message/send", ["POST"]),
            route("/v1/message:stream", self._stream, "message/stream", ["POST"]),
            route("/v1/tasks/{ref}", self._task_get, "tasks/get", ["GET"]),
            route("/v1/tasks/{ref}", self._task_post, "tasks/cancel", ["POST"]),
            route(configs, self._push_configs, "tasks/pushNotificationConfig", ["GET", "POST"]),
            route(
                configs + "/{config_id}",
                self._push_config,
                "tasks/pushNotificationConfig",
                ["GET", "DELETE"],
            ),
            route("/v1/card", self._card, "agent/getAuthenticatedExtendedCard", ["GET"]),
        ]

    async def _body(self, request: Request) -> JsonObject:
        return await read_body(request, max_json_depth=self._max_json_depth)

    async def _send(self, request: Request, context: CallContext) -> Response:
        params = send_params_in(await self._body(request), _REST)
        result = await self._operations.send_message(params, context=context, generation="0.3")
        return json_response(response_out(result, _REST), request)

    async def _stream(self, request: Request, context: CallContext) -> Response:
        params = send_params_in(await self._body(request), _REST)
        entries = await self._operations.stream_message(params, context=context, generation="0.3")
        return sse_response(entries, render_entry_rest_v03, metrics=self._metrics)

    async def _task_get(self, request: Request, context: CallContext) -> Response:
        task_id, _, action = request.path_params["ref"].partition(":")
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        if action:
            raise MethodNotFoundError(f"GET /v1/tasks/{{id}}:{action} is not a route")
        params = {"id": task_id} | _history_length(request)
        task = await self._operations.get_task(params, context=context)
        return json_response(task_out(task, _REST), request)

    async def _task_post(self, request: Request, context: CallContext) -> Response:
        task_id, _, action = request.path_params["ref"].partition(":")
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        if action != "cancel":
            raise MethodNotFoundError(f"POST /v1/tasks/{{id}}:{action} is not a route")
        await ignored_body(request)  # as on the 1.0 route: whatever it holds
        task = await self._operations.cancel_task({"id": task_id}, context=context)
        return json_response(task_out(task, _REST), request)

    async def _subscribe(self, task_id: str, context: CallContext) -> Response:
        entries = await self._operations.subscribe({"id": task_id}, context=context)
        return sse_response(entries, render_entry_rest_v03, metrics=self._metrics)

    async def _push_configs(self, request: Request, context: CallContext) -> Response:
        task_id = request.path_params["ref"]
        operations = self._operations
        if request.method == "POST":
            body = await self._body(request)
            # The 0.3 SDK posts the whole CreateTaskPushNotificationConfigRequest
            # ({parent, configId, config: {name, pushNotificationConfig}}); a bare config too.
            config = body.get("config", body)
            inner = config.get("pushNotificationConfig", config.get("push_notification_config"))
            fields = push_config_in(inner if inner is not None else config, "config")
            config_id = body.get("configId", body.get("config_id"))
            fields.setdefault("id", config_id or DEFAULT_PUSH_CONFIG_ID)
            created = await operations.create_push_config(
                fields | {"taskId": task_id}, context=context, generation="0.3"
            )
            return json_response(push_config_out(created, _REST), request)
        query = query_params(request, ("pageSize", "pageToken"))
        listed = await operations.list_push_configs(query | {"taskId": task_id}, context=context)
        configs = [push_config_out(config, _REST) for config in listed.get("configs", [])]
        page = {"configs": configs, "nextPageToken": listed.get("nextPageToken", "")}
        return json_response(page, request)

    async def _push_config(self, request: Request, context: CallContext) -> Response:
        reference = {"taskId": request.path_params["ref"], "id": request.path_params["config_id"]}
        if request.method == "DELETE":
            await self._operations.delete_push_config(reference, context=context)
            return json_response({}, request)
        config = await self._operations.get_push_config(reference, context=context)
        return json_response(push_config_out(config, _REST), request)

    async def _card(self, request: Request, context: CallContext) -> Response:
        card = await self._operations.extended_card({}, context=context, generation="0.3")
        return json_response(card, request)
