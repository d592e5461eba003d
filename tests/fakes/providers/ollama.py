"""A fake of Ollama's chat API: `POST /api/chat`, streamed as newline-delimited JSON.

What it speaks (https://github.com/ollama/ollama/blob/main/docs/api.md, "Generate a chat
completion"; https://ollama.com/blog/streaming-tool): one JSON object a line, each with
`model`, `created_at`, `message` (`role: assistant`, `content` the text chunk, `tool_calls`
as `[{"function": {"name", "arguments"}}]` with the arguments a JSON object), `done: false`;
the last line `done: true` with `done_reason` and the counts `prompt_eval_count` /
`eval_count` (and durations). With `stream: false` one object. Errors are `{"error": "..."}`
with the HTTP status (404 for a model that is not pulled, 400 for a body Go cannot decode);
`Reply.stream_error` sends that object as a line of the stream after the text, as Ollama does
when a runner fails mid-answer.

What it refuses, as Ollama does: no `model` (400 "model is required"), a model not in
`models` when that is set (404), and a message its Go types cannot decode (400 with Go's
`json: cannot unmarshal ...`): a `content` that is not a string (a tool result as a list of
parts), `tool_calls[].function.arguments` that are not an object (a JSON string, as the OpenAI
format has them). Ollama itself checks no key; a fake with `require_key` answers 401 to a
missing or wrong `Authorization: Bearer` (as a proxy in front of it, or ollama.com, does).

How LiteLLM (1.103.7) addresses it: model `ollama_chat/<model>`, `api_base` = the fake's root
(it appends `/api/chat`), `Authorization: Bearer <api_key>` when a key is set; tool results go
as role `tool` messages with `tool_call_id`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from tests.fakes.providers.script import Recorded, Refusal, Reply
from tests.fakes.providers.server import Chunks, ProviderFake


def _unmarshal(kind: str, field: str, go_type: str) -> Refusal:
    return Refusal(
        400, f"json: cannot unmarshal {kind} into Go struct field {field} of type {go_type}"
    )


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "null")


class OllamaFake(ProviderFake):
    """Ollama's /api/chat on loopback; see the module docstring."""

    def __init__(
        self, *, api_key: str = "sk-test", models: set[str] | None = None, require_key: bool = False
    ) -> None:
        super().__init__(api_key=api_key)
        self.models = models
        self.require_key = require_key

    def route(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/api/chat"

    def streaming(self, record: Recorded) -> bool:
        return record.body.get("stream") is not False  # Ollama streams unless told not to

    def user_text(self, body: dict[str, Any]) -> str:
        for message in reversed(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else ""
        return ""

    def check(self, record: Recorded) -> None:
        if self.require_key and record.headers.get("authorization") != f"Bearer {self.api_key}":
            raise Refusal(401, "unauthorized")
        model = record.body.get("model")
        if not model:
            raise Refusal(400, "model is required")
        if self.models is not None and model not in self.models:
            raise Refusal(404, f'model "{model}" not found, try pulling it first')
        for message in record.body.get("messages") or []:
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise _unmarshal(_json_kind(content), "ChatRequest.messages.content", "string")
            for call in message.get("tool_calls") or []:
                arguments = (call.get("function") or {}).get("arguments")
                if arguments is not None and not isinstance(arguments, dict):
                    raise _unmarshal(
                        _json_kind(arguments),
                        "ChatRequest.messages.tool_calls.function.arguments",
                        "api.ToolCallFunctionArguments",
                    )

    def error_response(self, status: int, reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
        return {"error": reply.message}, {}

    def _line(self, record: Recorded, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        return {"model": record.body.get("model"), "created_at": now, "message": message, **extra}

    def _final(self, record: Recorded, reply: Reply, message: dict[str, Any]) -> dict[str, Any]:
        counts = reply.counts()
        return self._line(
            record,
            message,
            done=True,
            done_reason=reply.stop_reason or "stop",
            total_duration=1_000_000,
            load_duration=100_000,
            prompt_eval_count=counts["input_tokens"],
            prompt_eval_duration=200_000,
            eval_count=counts["output_tokens"],
            eval_duration=700_000,
        )

    def _calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [{"function": {"name": name, "arguments": args}} for name, args in reply.tool_calls]

    def complete(self, record: Recorded, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.chunks)}
        if reply.thinking is not None:
            message["thinking"] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = self._calls(reply)
        return self._final(record, reply, message)

    def stream(self, record: Recorded, reply: Reply) -> tuple[str, Chunks]:
        return "application/x-ndjson", self._lines(record, reply)

    async def _lines(self, record: Recorded, reply: Reply) -> AsyncIterator[bytes]:
        def line(obj: dict[str, Any]) -> bytes:
            return json.dumps(obj, separators=(",", ":")).encode() + b"\n"

        if reply.thinking is not None:
            thought = {"role": "assistant", "content": "", "thinking": reply.thinking}
            yield line(self._line(record, thought, done=False))
        for chunk in reply.chunks:
            yield line(self._line(record, {"role": "assistant", "content": chunk}, done=False))
        if reply.stream_error:
            yield line({"error": reply.message})
            return
        if reply.tool_calls:
            message = {"role": "assistant", "content": "", "tool_calls": self._calls(reply)}
            yield line(self._line(record, message, done=False))
        yield line(self._final(record, reply, {"role": "assistant", "content": ""}))
