"""What the HTTP+JSON routes of both generations (1.0 at `/`, 0.3 under `/v1/`) share: the
guarded endpoint, the JSON body, the query string, the SSE answer.

Kept apart from either binding so that neither imports the other's module: a route of either
generation is an `Endpoint` wrapped by `guarded`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.a2a.binding import echo_extensions
from app.a2a.sse import JournalStream, frame
from app.a2a.versions import Generation, check_version
from app.call_context import CallContext
from app.errors import A2AError, InvalidParamsError, MethodNotFoundError, as_a2a_error
from app.http.edge import Edge
from app.http.json_body import (
    JsonObject,
    check_depth,
    check_json_media_type,
    parse_json,
    render_json,
)
from app.http.responses import error_response
from app.ops.metrics import Metrics, RequestRecord
from stores.models import JournalEntry
from stores.tenants import ROUTE_NAMES

logger = logging.getLogger(__name__)

Endpoint = Callable[[Request, CallContext], Awaitable[Response]]

_REST_ACTIONS = {
    ("GET", "subscribe"): "SubscribeToTask",
    ("POST", "subscribe"): "SubscribeToTask",
    ("POST", "cancel"): "CancelTask",
}
"""The method a `/tasks/{id}:action` route serves (for metrics and logs)."""


async def read_body(request: Request, *, max_json_depth: int) -> JsonObject:
    """The request's JSON object body ({} when empty); 415 for another media type."""
    check_json_media_type(request.headers.get("content-type", ""))
    raw = await request.body()
    if not raw.strip():
        return {}
    payload = parse_json(raw)
    check_depth(payload, limit=max_json_depth, text=raw)
    if not isinstance(payload, dict):
        raise InvalidParamsError("The request body must be a JSON object")
    return payload


async def ignored_body(request: Request) -> None:
    """Read a body the operation does not take, and drop it whatever it holds.

    CancelTask's: the official servers (a2a-python, a2a-go) never read it, and their clients
    send what they like there: a2a-go v2.3.1 sends `null`, a2a-python nothing, others `{}`.
    So any JSON value, a body that is not JSON and any media type all cancel alike (the
    request's `metadata` has no effect on a cancel here). It is read, not left unread, so that
    the connection can carry the next request.
    """
    await request.body()


def query_params(request: Request, names: tuple[str, ...]) -> JsonObject:
    return {name: request.query_params[name] for name in names if name in request.query_params}


def guarded(
    edge: Edge,
    endpoint: Endpoint,
    *,
    metrics: Metrics,
    method: str,
    generation: Generation = "1.0",
    v03_tenant: str | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint, once the caller is authenticated and within its rate (one call context per
    request), with every failure rendered as an AIP-193 error; counted as `method`. A 0.3
    route is within `v03_tenant` (an agent's copy of the route), else the card's tenant."""

    async def guarded(request: Request) -> Response:
        with metrics.request("rest") as record:
            record.method = method
            return await serve(request, record)

    async def serve(request: Request, record: RequestRecord) -> Response:
        where = f"REST {request.method} {request.url.path}"
        ref = request.path_params.get("ref")
        if isinstance(ref, str):
            task_id, _, action = ref.partition(":")
            record.task_id = task_id
            record.method = _REST_ACTIONS.get((request.method, action), method)
        context: CallContext | None = None
        try:
            # The tenant is the path's (`/{tenant}/...`): a `tenant` in the body or the query
            # is not read, as a2a-sdk does (its client writes the same tenant in both). 0.3
            # has no tenant: its routes are within the card's (or their agent's).
            tenant = (
                request.path_params.get("tenant")
                if generation == "1.0"
                else v03_tenant or edge.tenants.card_tenant
            )
            if generation == "1.0" and tenant in ROUTE_NAMES:
                # `/v1/tasks`, `/healthz/tasks`: a path under a route of its own is answered as
                # it was before tenants, not as a tenant's (whose name would be refused).
                raise MethodNotFoundError(f"{request.method} {request.url.path} is not a route")
            context = await edge.context(request, tenant=tenant)
            record.owner = context.owner
            check_version(request, generation)
            return echo_extensions(await endpoint(request, context), context)
        except ClientDisconnect:
            logger.debug("%s | the client went away before its request arrived", where)
            return Response(status_code=400)  # nobody reads it
        except Exception as exc:
            error = as_a2a_error(exc, where=where)
            record.outcome = error.reason
            if isinstance(exc, A2AError):
                logger.debug(
                    "%s | refused: status=<%s> | %s", where, error.http_status, error.message
                )
            return echo_extensions(error_response(request.scope, error), context)

    return guarded


def sse_response(
    entries: AsyncIterator[list[JournalEntry] | None],
    render: Callable[[JournalEntry], bytes],
    *,
    metrics: Metrics,
) -> Response:
    """Journal entries as SSE; a failure mid-stream is a last `event: error` with its body."""
    return JournalStream(
        entries,
        render=render,
        render_error=lambda error: frame(render_json(error.rest_body()), event="error"),
        metrics=metrics,
    )
