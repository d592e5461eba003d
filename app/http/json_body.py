"""Strict JSON request bodies, shared by both bindings.

`parse_json` accepts RFC 8259 JSON only: no `NaN`/`Infinity`, valid UTF-8, no lone surrogates,
at most orjson's 1024 levels (orjson parses without Python recursion, so no input can raise a
RecursionError here). Any failure is one error, a parse error, whatever its cause.

`check_depth` then walks the parsed value without recursion and refuses anything nested deeper
than the configured limit (A2A_MAX_JSON_DEPTH), naming the field, before the value reaches a
handler: what is accepted can be stored, read back and rendered by every store (pydantic's own
JSON reader stops at about 200 levels).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from app.errors import InvalidParamsError, JSONParseError, UnsupportedMediaTypeError

JsonObject = dict[str, Any]
"""A JSON object as parsed: the currency of the protocol layer (params, results, bodies)."""

_BOM = b"\xef\xbb\xbf"  # tolerated at the start (RFC 8259 section 8.1 allows ignoring it)
_PATH_SHOWN = 8  # path components named in a depth error; deeper ones are elided
_KEY_SHOWN = 64  # characters of one object key named in a depth error

# A container met during the walk: (value, depth, parent node, key in the parent).
_Node = tuple[Any, int, "_Node | None", str | int | None]


JSON_MEDIA_TYPES = ("application/json", "application/a2a+json", "")
"""What both bindings take as a JSON body (a missing Content-Type is taken as JSON); anything
else, such as the form type `curl -d` sends by default, is refused with 415."""


def check_json_media_type(content_type: str) -> None:
    """UnsupportedMediaTypeError (415, -32005) unless `content_type` is a JSON media type."""
    media_type = content_type.split(";")[0].strip().lower()
    if media_type not in JSON_MEDIA_TYPES:
        raise UnsupportedMediaTypeError(
            f"Content-Type {media_type!r} is not supported;"
            " send application/json or application/a2a+json"
        )


def parse_json(body: bytes) -> Any:
    """The body as JSON, or JSONParseError (-32700 / HTTP 400) for anything that is not JSON."""
    try:
        return orjson.loads(body.removeprefix(_BOM))
    except orjson.JSONDecodeError as exc:
        raise JSONParseError(f"Invalid JSON payload: {exc}") from exc


async def read_request_body(request: Request) -> bytes:
    """The whole body of a request read once, as `Request.body()` reads it (ClientDisconnect if
    the client leaves first), straight from `receive` rather than through starlette's body
    stream (an async generator and its context manager per request: ~4% of a GetTask's samples,
    bench/RESULTS.md, issue 53). For a request whose body nothing else reads."""
    chunks: list[bytes] = []
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def render_json(payload: Any) -> bytes:
    """`payload` as compact JSON text in UTF-8 (non-ASCII characters as they are), written by
    orjson: rendering is on every request's path (bench/RESULTS.md). What orjson refuses
    (an integer beyond 64 bits, text with a lone surrogate, which only a model's output could
    hold) is written by the stdlib instead, every non-ASCII character escaped: still valid JSON.
    """
    try:
        return orjson.dumps(payload)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(payload, separators=(",", ":")).encode()


def check_depth(value: Any, *, limit: int, text: bytes | None = None) -> None:
    """Raise InvalidParamsError if objects and arrays nest more than `limit` levels (the top-level
    value is level 1); the message names the path of the first value found too deep. With the
    `text` it was parsed from, the walk is skipped when the text has no more than `limit`
    brackets that open (each level needs one; those in strings only count extra): most bodies."""
    if not isinstance(value, dict | list):
        return
    if text is not None and text.count(b"{") + text.count(b"[") <= limit:
        return
    stack: list[_Node] = [(value, 1, None, None)]
    while stack:
        node = stack.pop()
        container, depth = node[0], node[1]
        items = container.items() if isinstance(container, dict) else enumerate(container)
        children: list[_Node] = []
        for key, child in items:
            if isinstance(child, dict | list):
                if depth == limit:
                    path = _path(node, key)
                    raise InvalidParamsError(
                        f"Invalid parameters: {path}: nested deeper than {limit} levels"
                        " of JSON objects and arrays",
                        field=path,
                        maxDepth=str(limit),
                    )
                children.append((child, depth + 1, node, key))
        stack.extend(reversed(children))  # so the first too-deep value in document order is named


def _path(parent: _Node, key: str | int) -> str:
    """`params.message.parts[0].data`: the keys from the top down to `key` under `parent`."""
    keys: list[str | int] = [key]
    node: _Node | None = parent
    while node is not None and node[3] is not None:
        keys.append(node[3])
        node = node[2]
    keys.reverse()
    text = ""
    for key in keys[:_PATH_SHOWN]:
        if isinstance(key, int):
            text += f"[{key}]"
        else:
            name = key if len(key) <= _KEY_SHOWN else key[:_KEY_SHOWN] + "…"
            text += f".{name}" if text else name
    return text + ("…" if len(keys) > _PATH_SHOWN else "")
