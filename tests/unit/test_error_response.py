"""One error, answered in the shape of the binding at the request's path: a JSON-RPC error at `/`,
an AIP-193 body elsewhere; the same bytes whether the guard, the framework or a binding answers."""

from __future__ import annotations

import httpx
from starlette.types import Message, Receive, Scope, Send

from app.errors import MethodNotAllowedError
from app.http.errors import HostNotAllowedError, RateLimitedError
from app.http.guard import HttpGuard
from app.http.responses import error_response

AIP193_RATE_LIMITED = (
    b'{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"slow down","details":['
    b'{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMITED",'
    b'"domain":"a2a-protocol.org","metadata":{"retryAfterSeconds":"3"}},'
    b'{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}'
)
JSONRPC_RATE_LIMITED = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32029,"message":"slow down","data":['
    b'{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMITED",'
    b'"domain":"a2a-protocol.org","metadata":{"retryAfterSeconds":"3"}},'
    b'{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}'
)


def _scope(path: str, method: str = "POST", headers: tuple[tuple[bytes, bytes], ...] = ()) -> Scope:
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


def test_at_the_json_rpc_endpoint_an_error_is_a_json_rpc_response() -> None:
    response = error_response(_scope("/"), RateLimitedError("slow down", retry_after_s=3))
    assert response.status_code == 429
    assert response.body == JSONRPC_RATE_LIMITED
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "3"


def test_elsewhere_an_error_is_an_aip193_body_in_the_clients_media_type() -> None:
    error = RateLimitedError("slow down", retry_after_s=3)
    plain = error_response(_scope("/message:send"), error)
    assert (plain.status_code, plain.body) == (429, AIP193_RATE_LIMITED)
    assert plain.headers["content-type"] == "application/json"
    a2a = error_response(_scope("/tasks", "GET", ((b"accept", b"application/a2a+json"),)), error)
    assert a2a.body == AIP193_RATE_LIMITED
    assert a2a.headers["content-type"] == "application/a2a+json"


def test_a_status_other_than_the_errors_own_is_the_bodys_code_too() -> None:
    error = MethodNotAllowedError("no")
    response = error_response(_scope("/tasks"), error, status_code=405, headers={"Allow": "GET"})
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    assert response.body.startswith(b'{"error":{"code":405,"status":"UNIMPLEMENTED","message":"no"')
    assert error_response(_scope("/x"), error, status_code=409).body.startswith(
        b'{"error":{"code":409,'
    )


async def _never_called(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("the guard let a refused request through")


async def test_the_guard_answers_in_json_rpc_only_a_post_at_the_endpoint() -> None:
    """The guard refuses before any route: a POST at `/` is a JSON-RPC call and gets a JSON-RPC
    error; any other request (a GET at `/`, a REST route) gets the AIP-193 body."""
    guard = HttpGuard(_never_called, max_body_bytes=1024, allowed_hosts=["localhost"])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guard), base_url="http://evil.example"
    ) as client:
        response = await client.post("/")
        assert response.status_code == 421, response.text
        assert response.json()["jsonrpc"] == "2.0"
        assert response.json()["error"]["data"][0]["reason"] == "HOST_NOT_ALLOWED"
        response = await client.get("/")
        assert response.status_code == 421, response.text
        assert response.json()["error"]["status"] == HostNotAllowedError.status
        response = await client.post(
            "/message:send", headers={"content-type": "application/a2a+json"}
        )
        assert response.status_code == 421
        assert response.headers["content-type"] == "application/json"  # as it always was
        assert response.json()["error"]["status"] == HostNotAllowedError.status


async def test_a_body_over_the_limit_mid_read_is_refused_in_the_paths_shape() -> None:
    sent: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass

    chunks = iter([b"z" * 800, b"z" * 800])

    async def receive() -> Message:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = _scope("/", headers=((b"host", b"localhost"),)) | {"query_string": b""}
    await HttpGuard(app, max_body_bytes=1024, allowed_hosts=["localhost"])(scope, receive, send)
    assert sent[0]["status"] == 413
    assert sent[1]["body"].startswith(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,')
