"""app.http.json_body: strict parsing and the iterative depth walk (the e2e tests cover the wire)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from app.a2a.wire import render_task, render_task_json
from app.errors import InvalidParamsError, JSONParseError
from app.http.json_body import check_depth, parse_json, read_request_body, render_json
from app.settings import Settings
from stores.base import TaskQuery
from stores.codec import dump_event, dump_task, load_event, load_task
from stores.memory import InMemoryTaskStore
from stores.models import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskRecord,
    TaskSnapshot,
    TaskState,
    TaskStatus,
)


def nested(levels: int, inner: Any = "x") -> Any:
    value = inner
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "body",
    [b"NaN", b"[Infinity]", b'"\\ud800"', b'"\xed\xa0\x80"', b"\xff", b"[" * 100_000, b""],
)
def test_anything_but_json_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(JSONParseError):
        parse_json(body)


def test_a_leading_byte_order_mark_is_tolerated() -> None:
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_the_limit_itself_passes_one_more_level_does_not() -> None:
    check_depth({"a": nested(3)}, limit=4)
    with pytest.raises(InvalidParamsError) as raised:
        check_depth({"a": nested(4)}, limit=4)
    assert raised.value.message.startswith("Invalid parameters: a[0][0][0]:"), raised.value
    assert raised.value.metadata == {"field": "a[0][0][0]", "maxDepth": "4"}


@pytest.mark.parametrize("levels", [3, 4, 10])
@pytest.mark.parametrize("text_field", ["", "[[[[[[{{{{{{"])  # brackets in a string count extra
def test_the_text_a_value_was_parsed_from_decides_nothing_but_whether_to_walk(
    levels: int, text_field: str
) -> None:
    """Skipping the walk for a text with few brackets never lets a too-deep value through."""
    value = {"a": nested(levels), "s": text_field}
    text = json.dumps(value).encode()
    assert parse_json(text) == value
    if levels + 1 <= 4:
        check_depth(value, limit=4, text=text)
        return
    with pytest.raises(InvalidParamsError) as raised:
        check_depth(value, limit=4, text=text)
    assert raised.value.metadata == {"field": "a[0][0][0]", "maxDepth": "4"}


def test_the_first_too_deep_value_in_document_order_is_named() -> None:
    params = {"message": {"parts": [{"text": "x"}, {"data": {"k": nested(40)}}], "z": nested(50)}}
    with pytest.raises(InvalidParamsError) as raised:
        check_depth({"params": params}, limit=12)
    assert raised.value.metadata["field"] == "params.message.parts[1].data.k[0][0]…"


def test_a_long_key_is_shortened_in_the_path() -> None:
    with pytest.raises(InvalidParamsError) as raised:
        check_depth({"k" * 500: nested(10)}, limit=4)
    assert raised.value.metadata["field"] == "k" * 64 + "…[0][0][0]"


def test_the_walk_does_not_recurse() -> None:
    check_depth(nested(200_000), limit=1_000_000)  # a recursive walk dies long before this
    with pytest.raises(InvalidParamsError):
        check_depth(nested(200_000), limit=32)
    check_depth([[1, 2]] * 100_000 + [{"a": {"b": None}}], limit=3)


async def test_the_setting_stays_within_what_the_stores_read_back() -> None:
    deepest = Settings(a2a_max_json_depth=128).a2a_max_json_depth
    with pytest.raises(ValidationError):
        Settings(a2a_max_json_depth=deepest + 1)
    # The deepest data a request can carry at the maximum (REST: 4 levels above `data`) goes
    # through every store's way of keeping it: Redis JSON (task and journal), in-memory copies.
    data = nested(deepest - 4)
    check_depth({"message": {"parts": [{"data": data}]}}, limit=deepest)
    task = Task.model_validate(
        {
            "id": "t",
            "contextId": "c",
            "status": {"state": "TASK_STATE_SUBMITTED"},
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}],
        }
    )
    assert load_task(dump_task(task)) == task
    assert load_event(dump_event(TaskSnapshot(task=task))) == TaskSnapshot(task=task)
    store = InMemoryTaskStore()
    await store.create(task, owner="o")
    (listed,) = (await store.list(TaskQuery(), owner="o")).tasks
    assert render_task(listed)["history"][0]["parts"][0]["data"] == data


@pytest.mark.parametrize(
    "payload",
    [
        {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"text": "unicode é 漢字 🙂 \u2028", "n": [1.5, None]},
        },
        {"id": 2**70},  # beyond orjson's 64 bits: the stdlib writes it
        {"text": "a lone surrogate \ud800 from a model"},  # not UTF-8: escaped by the stdlib
    ],
)
def test_a_rendered_payload_is_valid_json_of_the_same_value(payload: dict[str, Any]) -> None:
    rendered = render_json(payload)
    assert isinstance(rendered, bytes)
    assert json.loads(rendered) == payload
    with contextlib.suppress(UnicodeEncodeError):  # compact, non-ASCII as it is where it can be
        assert rendered == json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_task_reply_is_its_stored_form_and_renders_as_the_dict_would() -> None:
    task = Task(
        id="t-1",
        context_id="c-1",
        status=TaskStatus(state=TaskState.COMPLETED),
        history=[Message(message_id="m-1", role=Role.USER, parts=[Part(text="hi é")])],
        artifacts=[Artifact(artifact_id="a-1", name="answer", parts=[Part(text="yes")])],
        metadata={"usage": {"promptTokens": 3}},
    )
    record = TaskRecord(task=task, owner="o", position=3)
    fragment = render_task_json(record)
    assert render_json({"task": fragment}) == b'{"task":' + dump_task(task) + b"}"
    assert json.loads(render_json({"task": fragment})) == {"task": render_task(task)}
    # The record's stored form when it has one (the task may have moved on since).
    stored = TaskRecord(task=task, owner="o", position=3, stored=b'{"id":"t-0"}')
    assert render_json({"task": render_task_json(stored)}) == b'{"task":{"id":"t-0"}}'
    # Shaped (historyLength), it is render_task's dict.
    assert render_task_json(record, history_length=0) == render_task(task, history_length=0)


def request_of(*messages: dict[str, Any]) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return Request({"type": "http", "method": "POST", "headers": []}, receive)


async def test_a_body_in_several_parts_is_read_whole() -> None:
    parts = [b'{"a":', b"", b"1}"]
    request = request_of(
        *({"type": "http.request", "body": part, "more_body": True} for part in parts),
        {"type": "http.request", "body": b"", "more_body": False},
    )
    assert await read_request_body(request) == b'{"a":1}'
    empty = request_of({"type": "http.request"})
    assert await read_request_body(empty) == b""


async def test_a_client_leaving_before_its_body_ended_is_a_disconnect() -> None:
    request = request_of(
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.disconnect"},
    )
    with pytest.raises(ClientDisconnect):
        await read_request_body(request)
