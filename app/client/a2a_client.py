"""The client side of A2A, shared by the remote-agent tools and the `a2a` CLI.

It reads an agent card, picks what the card offers (app.client.endpoints: 1.0 before 0.3,
JSON-RPC before HTTP+JSON, or the binding asked for, gRPC included: app.client.grpc_wire)
and speaks that generation and binding: a streamed send, subscribe (with `Last-Event-ID`), get,
list and cancel. Events come back the same way whatever the wire: `Event(kind, payload, raw, id)`
with `kind` one of task, status, artifact, message; `state_of(payload)` gives 1.0 state names.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from app.client.endpoints import (
    WELL_KNOWN_CARD,
    Endpoint,
    Generation,
    NoInterface,
    card_url_of,
    choose_endpoint,
)
from app.client.events import (
    END_STATES,
    INTERRUPTED_STATES,
    Event,
    parts_of,
    read_event,
    state_of,
    status_text,
    text_of,
)
from app.client.events import sse_lines as _sse
from app.client.generations import V11, GapWatcher, offers_v11

if TYPE_CHECKING:
    from app.client.grpc_wire import GrpcWire

__all__ = [
    "END_STATES",
    "INTERRUPTED_STATES",
    "WELL_KNOWN_CARD",
    "Endpoint",
    "Event",
    "Generation",
    "card_url_of",
    "choose_endpoint",
    "parts_of",
    "read_event",
    "state_of",
    "status_text",
    "text_of",
]


class A2AClientError(Exception):
    """The agent refused or failed (an error answer, an HTTP error): the message says what."""


class NotAnAgent(A2AClientError):
    """The URL does not serve an A2A agent card."""


class Unauthorized(A2AClientError):
    """The agent wants credentials (HTTP 401)."""


class A2AClient:
    """One agent, reached through the endpoint its card offers."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: Endpoint,
        *,
        headers: dict[str, str] | None = None,
        card: dict[str, Any] | None = None,
        extensions: Iterable[str] = (),
    ) -> None:
        self._http = http
        self.endpoint = endpoint
        self.card = card or {}
        self._headers = dict(headers or {})
        self.task_generations = offers_v11(self.card, endpoint)
        """The card offers 1.1 here: requests ask for it (generations, the long poll)."""
        if endpoint.generation == "1.0":
            self._headers["A2A-Version"] = V11 if self.task_generations else "1.0"
        self._headers |= self.extension_headers(extensions)
        self._grpc: GrpcWire | None = None

    @property
    def _wire(self) -> GrpcWire:
        """The gRPC channel (GRPC endpoints), opened on first use; `aclose` closes it."""
        if self._grpc is None:
            from app.client.grpc_wire import GrpcWire  # grpc is imported only when used

            self._grpc = GrpcWire(self.endpoint.url, self.endpoint.tenant, self._headers)
        return self._grpc

    async def aclose(self) -> None:
        if self._grpc is not None:
            await self._grpc.aclose()

    @property
    def extensions(self) -> frozenset[str]:
        """The URIs of the A2A extensions the agent's card declares (`capabilities.extensions`)."""
        declared = (self.card.get("capabilities") or {}).get("extensions") or []
        return frozenset(
            entry["uri"]
            for entry in declared
            if isinstance(entry, dict) and isinstance(entry.get("uri"), str)
        )

    def extension_headers(self, uris: Iterable[str]) -> dict[str, str]:
        """The headers asking the agent for the extensions `uris` (none: no header):
        `A2A-Extensions`, and `X-A2A-Extensions` too for a 0.3 endpoint (0.3 servers read that)."""
        value = ", ".join(sorted(set(uris)))
        if not value:
            return {}
        if self.endpoint.generation == "0.3":
            return {"A2A-Extensions": value, "X-A2A-Extensions": value}
        return {"A2A-Extensions": value}

    @classmethod
    async def connect(
        cls,
        http: httpx.AsyncClient,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        binding: str | None = None,
        card_order: bool = False,
        extensions: Iterable[str] = (),
    ) -> A2AClient:
        """The agent at `url` through its card's interface (see `choose_endpoint`), asking
        for `extensions` in every request."""
        card = await fetch_card(http, url, headers=headers)
        try:
            endpoint = choose_endpoint(card, binding=binding, card_order=card_order)
        except NoInterface as exc:
            raise NotAnAgent(str(exc)) from None
        return cls(http, endpoint, headers=headers, card=card, extensions=extensions)

    # --- messages ---

    def message(
        self,
        text: str,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A user message in this endpoint's generation and binding."""
        v03_rpc = self.endpoint.generation == "0.3" and self.endpoint.binding == "JSONRPC"
        parts: list[dict[str, Any]] = []
        if text:
            parts.append({"kind": "text", "text": text} if v03_rpc else {"text": text})
        if data is not None:
            parts.append({"kind": "data", "data": data} if v03_rpc else {"data": data})
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "user" if v03_rpc else "ROLE_USER",
        }
        if v03_rpc:
            message["kind"] = "message"
        message["content" if self.endpoint.generation == "0.3" and not v03_rpc else "parts"] = parts
        for key, value in (("taskId", task_id), ("contextId", context_id), ("metadata", metadata)):
            if value is not None:
                message[key] = value
        return message

    async def stream(
        self, message: dict[str, Any], *, headers: dict[str, str] | None = None
    ) -> AsyncGenerator[Event, None]:
        """Send a message and stream what the agent does with it (`headers`: e.g. the trace
        context of this call)."""
        if self.endpoint.binding == "GRPC":
            params = {"message": message}
            async for event in self._grpc_events("SendStreamingMessage", params, headers):
                yield event
            return
        request: tuple[str, str, dict[str, Any] | None]
        if self.endpoint.binding == "JSONRPC":
            method = (
                "SendStreamingMessage" if self.endpoint.generation == "1.0" else "message/stream"
            )
            request = self._rpc_request(method, {"message": message})
        else:
            request = ("POST", self._rest_url("/message:stream"), {"message": message})
        async for event in self._events(*request, headers=headers):
            yield event

    async def subscribe(
        self, task_id: str, *, last_event_id: str | None = None
    ) -> AsyncGenerator[Event, None]:
        """A task's events from now (or, with `last_event_id`, those after it)."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        if self.endpoint.binding == "GRPC":
            async for event in self._grpc_events("SubscribeToTask", {"id": task_id}, headers):
                yield event
            return
        request: tuple[str, str, dict[str, Any] | None]
        if self.endpoint.binding == "JSONRPC":
            method = "SubscribeToTask" if self.endpoint.generation == "1.0" else "tasks/resubscribe"
            request = self._rpc_request(method, {"id": task_id})
        else:
            request = ("GET", self._rest_url(f"/tasks/{task_id}:subscribe"), None)
        async for event in self._events(*request, headers=headers):
            yield event

    # --- tasks ---

    async def get_task(
        self, task_id: str, *, current_generation: int | None = None
    ) -> dict[str, Any]:
        """The task; with `current_generation` (1.1 only), once it is past that generation or
        at the server's timeout (a long poll)."""
        if self.endpoint.binding == "GRPC":
            return await self._grpc_call("GetTask", {"id": task_id})
        poll = (
            {"currentGeneration": str(current_generation)}
            if self.task_generations and current_generation is not None
            else {}
        )
        if self.endpoint.binding == "JSONRPC":
            method = "GetTask" if self.endpoint.generation == "1.0" else "tasks/get"
            return await self._rpc(method, {"id": task_id, **poll})
        return await self._rest("GET", f"/tasks/{task_id}", params=poll or None)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        if self.endpoint.binding == "GRPC":
            return await self._grpc_call("CancelTask", {"id": task_id})
        if self.endpoint.binding == "JSONRPC":
            method = "CancelTask" if self.endpoint.generation == "1.0" else "tasks/cancel"
            return await self._rpc(method, {"id": task_id})
        return await self._rest("POST", f"/tasks/{task_id}:cancel", {})

    async def list_tasks(self, *, context_id: str | None = None) -> list[dict[str, Any]]:
        if self.endpoint.generation == "0.3":
            raise A2AClientError("A2A 0.3 has no task listing (the agent speaks 0.3)")
        params = {"contextId": context_id} if context_id else {}
        if self.endpoint.binding == "GRPC":
            result = await self._grpc_call("ListTasks", params)
        elif self.endpoint.binding == "JSONRPC":
            result = await self._rpc("ListTasks", params)
        else:
            result = await self._rest("GET", "/tasks", params=params)
        return list(result.get("tasks") or [])

    # --- the wire ---

    async def _grpc_call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        from app.client.grpc_wire import GrpcFailure

        try:
            return await self._wire.call(method, f"{method}Request", params)
        except GrpcFailure as exc:
            raise A2AClientError(str(exc)) from None

    async def _grpc_events(
        self, method: str, params: dict[str, Any], headers: dict[str, str] | None
    ) -> AsyncGenerator[Event, None]:
        from app.client.grpc_wire import GrpcFailure

        kind = "SendMessageRequest" if method == "SendStreamingMessage" else f"{method}Request"
        try:
            async for event_id, result in self._wire.stream(method, kind, params, headers):
                event_kind, payload = read_event(result)
                yield Event(event_kind, payload, result, event_id)
        except GrpcFailure as exc:
            raise A2AClientError(str(exc)) from None

    def _rest_url(self, path: str) -> str:
        endpoint = self.endpoint
        if endpoint.generation == "0.3":
            prefix = "/v1"
        else:  # the proto's `/{tenant}/...` copy of every route
            prefix = f"/{quote(endpoint.tenant, safe='')}" if endpoint.tenant else ""
        return f"{endpoint.url.rstrip('/')}{prefix}{path}"

    def _rpc_request(self, method: str, params: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        if self.endpoint.tenant and self.endpoint.generation == "1.0":
            params = {**params, "tenant": self.endpoint.tenant}
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        return "POST", self.endpoint.url, body

    async def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        _, url, body = self._rpc_request(method, params)
        response = await self._http.post(url, json=body, headers=self._headers)
        answer = _json_of(response)
        if "error" in answer:
            raise A2AClientError(_error_text(answer["error"]))
        result = answer.get("result")
        return result if isinstance(result, dict) else {"result": result}

    async def _rest(
        self,
        verb: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        response = await self._http.request(
            verb, self._rest_url(path), json=body, params=params, headers=self._headers
        )
        answer = _json_of(response)
        if "error" in answer:
            raise A2AClientError(_error_text(answer["error"]))
        return answer

    async def _events(
        self,
        verb: str,
        url: str,
        body: dict[str, Any] | None,
        *,
        headers: dict[str, str] | None = None,
    ) -> AsyncGenerator[Event, None]:
        headers = {**self._headers, **(headers or {}), "Accept": "text/event-stream"}
        async with self._http.stream(
            verb, url, json=body, headers=headers, timeout=httpx.Timeout(30.0, read=None)
        ) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                await response.aread()
                answer = _json_of(response)
                raise A2AClientError(_error_text(answer.get("error", answer)))
            gaps = GapWatcher()
            async for event_id, data in _sse(response):
                document = json.loads(data)
                if "error" in document:
                    raise A2AClientError(_error_text(document["error"]))
                result = document.get("result", document) if "jsonrpc" in document else document
                kind, payload = read_event(result)
                if self.task_generations and gaps.missed(payload) and payload.get("taskId"):
                    # A gap in the generations: an event was missed. The task as it stands first.
                    task = await self.get_task(payload["taskId"])
                    yield Event("task", task, {"task": task})
                yield Event(kind, payload, result, event_id)


async def fetch_card(
    http: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The agent card at `url` (a base URL or the card's own); NotAnAgent if it is none."""
    card_url = card_url_of(url)
    try:
        # Asked for in 1.1: an agent that speaks it lists its 1.1 interfaces (ours does so only
        # then); others ignore the header.
        response = await http.get(card_url, headers={"A2A-Version": V11, **(headers or {})})
    except httpx.HTTPError as exc:
        raise NotAnAgent(f"cannot reach {card_url}: {exc}") from exc
    if response.status_code == 401:
        raise Unauthorized(f"{card_url} wants credentials (HTTP 401)")
    if response.status_code != 200:
        raise NotAnAgent(f"{card_url} is not an A2A agent card (HTTP {response.status_code})")
    try:
        card = response.json()
    except ValueError:
        raise NotAnAgent(f"{card_url} is not an A2A agent card (not JSON)") from None
    if not isinstance(card, dict) or not isinstance(card.get("name"), str):
        raise NotAnAgent(f"{card_url} is not an A2A agent card (no name)")
    return card


def _json_of(response: httpx.Response) -> dict[str, Any]:
    if response.status_code == 401:
        raise Unauthorized("the agent wants credentials (HTTP 401)")
    try:
        answer = response.json()
    except ValueError:
        raise A2AClientError(f"the agent answered HTTP {response.status_code}, not JSON") from None
    if not isinstance(answer, dict):
        raise A2AClientError(f"the agent answered HTTP {response.status_code}: {answer!r}")
    if response.status_code >= 400 and "error" not in answer:
        return {"error": {"message": f"HTTP {response.status_code}: {answer}"}}
    return answer


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message") or error.get("status") or json.dumps(error)
        return f"{message} ({code})" if code is not None else str(message)
    return str(error)
