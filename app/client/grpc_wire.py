"""The client's gRPC binding (A2A 1.0, `lf.a2a.v1.A2AService`): the same operations as the
HTTP bindings, the same JSON in and out.

Requests are built from the JSON the HTTP+JSON binding would send (1.0's HTTP+JSON bodies are
the ProtoJSON of these very messages) and answers turned back into it, so `A2AClient` and the
CLI see one shape whatever the binding. grpc and the a2a-sdk's messages are imported when an
`A2AClient` first talks gRPC, never by `import app.client...`: the CLI starts without them.

    headers (X-API-Key, Authorization, A2A-Version, A2A-Extensions) -> metadata, lower-case
    a stream's event ids: `a2a-first-event-id` (initial metadata) + the message's index, the
    journal positions SSE's `id:` carries; `Last-Event-ID` -> `a2a-last-event-id`
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any
from urllib.parse import urlsplit

FIRST_EVENT_ID_KEY = "a2a-first-event-id"
LAST_EVENT_ID_KEY = "a2a-last-event-id"
# What a card's gRPC `url` may look like: `host:port` (ours), `grpc://`, `grpcs://`, `https://`.
_TLS_SCHEMES = {"grpcs", "https"}


class GrpcFailure(Exception):
    """A call the agent refused or failed: its status code's name and its message."""


def target_of(url: str) -> tuple[str, bool]:
    """(host:port, over TLS) of a card's gRPC interface URL."""
    if "://" not in url:
        return url.rstrip("/"), False
    parts = urlsplit(url)
    tls = parts.scheme in _TLS_SCHEMES
    port = parts.port or (443 if tls else 80)
    return f"{parts.hostname}:{port}", tls


class GrpcWire:
    """One channel to an agent's gRPC interface; `aclose` closes it."""

    def __init__(self, url: str, tenant: str | None, headers: Mapping[str, str]) -> None:
        import grpc  # here, not at the top: only a client that talks gRPC pays for it
        from a2a.types import a2a_pb2, a2a_pb2_grpc
        from google.protobuf import json_format

        self._grpc, self._pb, self._json = grpc, a2a_pb2, json_format
        target, tls = target_of(url)
        self._channel = (
            grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
            if tls
            else grpc.aio.insecure_channel(target)
        )
        self._stub = a2a_pb2_grpc.A2AServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._tenant = tenant
        self._metadata = tuple(
            (name.lower(), value) for name, value in headers.items() if name.lower() != "accept"
        )

    async def aclose(self) -> None:
        await self._channel.close()

    def _request(self, kind: str, params: dict[str, Any]) -> Any:
        if self._tenant:
            params = {**params, "tenant": self._tenant}
        return self._json.ParseDict(params, getattr(self._pb, kind)())

    def _as_json(self, message: Any) -> dict[str, Any]:
        return dict(self._json.MessageToDict(message))

    def _failure(self, exc: Exception) -> GrpcFailure:
        code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return GrpcFailure(f"{details or 'the call failed'} ({code})")

    async def call(self, method: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """A unary method (`GetTask`, `CancelTask`, `ListTasks`) on JSON params."""
        try:
            answer = await getattr(self._stub, method)(
                self._request(kind, params), metadata=self._metadata
            )
        except self._grpc.aio.AioRpcError as exc:
            raise self._failure(exc) from None
        return self._as_json(answer)

    async def stream(
        self,
        method: str,
        kind: str,
        params: dict[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[tuple[str | None, dict[str, Any]], None]:
        """(event id, StreamResponse as JSON) of a streaming method (`SendStreamingMessage`,
        `SubscribeToTask`); `headers`' `Last-Event-ID` resumes after that position."""
        metadata = list(self._metadata)
        for name, value in (headers or {}).items():
            key = LAST_EVENT_ID_KEY if name.lower() == "last-event-id" else name.lower()
            metadata.append((key, value))
        call = getattr(self._stub, method)(self._request(kind, params), metadata=tuple(metadata))
        try:
            first: int | None = None
            index = 0
            async for response in call:
                if first is None:
                    initial = dict(await call.initial_metadata() or ())
                    found = initial.get(FIRST_EVENT_ID_KEY)
                    first = int(found) if isinstance(found, str) and found.isdigit() else -1
                yield (str(first + index) if first >= 0 else None), self._as_json(response)
                index += 1
        except self._grpc.aio.AioRpcError as exc:
            raise self._failure(exc) from None
        finally:
            call.cancel()
