"""A fake of Anthropic's Messages API: `POST /v1/messages`, streamed as server-sent events.

What it speaks (https://docs.anthropic.com/en/api/messages, .../en/api/messages-streaming):
`message_start` (the message with its input usage), `ping`, then per content block
`content_block_start` / `content_block_delta` (`thinking_delta` then `signature_delta` for a
thinking block, `text_delta`, `input_json_delta` for a `tool_use`) / `content_block_stop`, then
`message_delta` (stop_reason, usage with `output_tokens`, `cache_creation_input_tokens`,
`cache_read_input_tokens`) and `message_stop`. Without `stream: true` it answers the whole
message. Errors are `{"type": "error", "error": {"type", "message"}}` with the documented status
(https://docs.anthropic.com/en/api/errors: 429 `rate_limit_error` with `retry-after`, 529
`overloaded_error`, ...), also as an in-stream `error` event (`Reply.stream_error`).

What it refuses, as the real API does (400 `invalid_request_error` unless said):
- a wrong or missing `x-api-key` (401 `authentication_error`), no `anthropic-version` header;
- no `max_tokens`; a message with role `system` (the system prompt is the top-level `system`);
- a `tool_use` not answered by a `tool_result` at the start of the next (user) message, or a
  `tool_result` answering no `tool_use` of the message before
  (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use);
- with `thinking` enabled, a tool round whose assistant message does not start with its thinking
  block, or a thinking block whose `signature` is not the one this fake minted for exactly that
  text (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking, "Preserving
  thinking blocks"); signatures are an HMAC of the thinking text under the fake's own key, so
  a block glued together from the deltas or edited in any way fails;
- more than 4 `cache_control` breakpoints over `tools`, `system` and `messages`
  (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).

How LiteLLM (1.103.7) addresses it: model `anthropic/<model>`, `api_base` = the fake's root (it
appends `/v1/messages`), headers `x-api-key`, `anthropic-version: 2023-06-01`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tests.fakes.providers.script import Recorded, Refusal, Reply
from tests.fakes.providers.server import Chunks, ProviderFake, sse

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
MAX_CACHE_BREAKPOINTS = 4
THINKING_BLOCKS = ("thinking", "redacted_thinking")


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as blocks (a plain string is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def cache_breakpoints(body: dict[str, Any]) -> int:
    """How many blocks of a request carry `cache_control` (tools, system, message content)."""
    system = body.get("system")
    marked = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    marked += [b for b in system if isinstance(b, dict)] if isinstance(system, list) else []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            marked += blocks(message)
    return sum(1 for item in marked if item.get("cache_control"))


class AnthropicFake(ProviderFake):
    """Anthropic Messages on loopback; see the module docstring."""

    def __init__(self, *, api_key: str = "sk-test") -> None:
        super().__init__(api_key=api_key)
        self._signing_key = secrets.token_bytes(16)

    def sign(self, thinking: str) -> str:
        """The signature this fake gives (and then requires of) a thinking block."""
        digest = hmac.new(self._signing_key, thinking.encode(), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    def route(self, method: str, path: str) -> bool:
        return method == "POST" and path == "/v1/messages"

    def user_text(self, body: dict[str, Any]) -> str:
        # A tool round's user message holds only tool_result blocks: the prompt is further up.
        for message in reversed(body.get("messages") or []):
            if isinstance(message, dict) and message.get("role") == "user":
                texts = [b["text"] for b in blocks(message) if b.get("type") == "text"]
                if texts:
                    return "".join(str(t) for t in texts)
        return ""

    # ---- refusals ---------------------------------------------------------------------------

    def check(self, record: Recorded) -> None:
        if record.headers.get("x-api-key") != self.api_key:
            raise Refusal(401, "invalid x-api-key")
        if not record.headers.get("anthropic-version"):
            raise Refusal(400, "anthropic-version: header is required")
        body = record.body
        if "max_tokens" not in body:
            raise Refusal(400, "max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Refusal(400, "messages: Field required")
        for index, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role == "system":
                raise Refusal(
                    400,
                    f'messages.{index}.role: Unexpected role "system". The Messages API accepts'
                    ' a top-level `system` parameter, not "system" as an input message role.',
                )
            if role not in ("user", "assistant"):
                raise Refusal(400, f"messages.{index}.role: Input should be 'user' or 'assistant'")
        self._check_tool_pairs(messages)
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
            self._check_thinking(messages)
        found = cache_breakpoints(body)
        if found > MAX_CACHE_BREAKPOINTS:
            raise Refusal(
                400,
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be"
                f" provided. Found {found}.",
            )

    def _check_tool_pairs(self, messages: list[dict[str, Any]]) -> None:
        for index, message in enumerate(messages):
            uses = [b["id"] for b in blocks(message) if b.get("type") == "tool_use"]
            following = messages[index + 1] if index + 1 < len(messages) else None
            results: list[str] = []
            if following is not None and following.get("role") == "user":
                content = blocks(following)
                lead = 0
                while lead < len(content) and content[lead].get("type") == "tool_result":
                    lead += 1
                if any(b.get("type") == "tool_result" for b in content[lead:]):
                    raise Refusal(
                        400,
                        f"messages.{index + 1}: `tool_result` blocks must come first in the"
                        " user message, before any other content",
                    )
                results = [b.get("tool_use_id") for b in content[:lead]]
            missing = [i for i in uses if i not in results]
            if uses and missing and following is not None:
                raise Refusal(
                    400,
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks"
                    f" immediately after: {', '.join(missing)}. Each `tool_use` block must have"
                    " a corresponding `tool_result` block in the next message.",
                )
            stray = [r for r in results if r not in uses]
            if stray:
                raise Refusal(
                    400,
                    f"messages.{index + 1}.content: unexpected `tool_use_id` found in"
                    f" `tool_result` blocks: {', '.join(map(str, stray))}. Each `tool_result`"
                    " block must have a corresponding `tool_use` block in the previous message.",
                )

    def _check_thinking(self, messages: list[dict[str, Any]]) -> None:
        for index, message in enumerate(messages):
            for position, block in enumerate(blocks(message)):
                if block.get("type") != "thinking":
                    continue
                signature = block.get("signature")
                if signature != self.sign(str(block.get("thinking", ""))):
                    raise Refusal(
                        400,
                        f"messages.{index}.content.{position}: Invalid `signature` in"
                        " `thinking` block",
                    )
        last = messages[-1]
        if last.get("role") != "user" or not any(
            b.get("type") == "tool_result" for b in blocks(last)
        ):
            return
        index = len(messages) - 2
        content = blocks(messages[index]) if index >= 0 else []
        first = content[0].get("type") if content else None
        if first not in THINKING_BLOCKS:
            raise Refusal(
                400,
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`,"
                f" but found `{first}`. When `thinking` is enabled, a final `assistant` message"
                " must start with a thinking block (preceeding the lastmost set of `tool_use`"
                " and `tool_result` blocks).",
            )

    # ---- answers ----------------------------------------------------------------------------

    def error_response(self, status: int, reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
        error_type = reply.error_type or ERROR_TYPES.get(status, "api_error")
        headers = {"request-id": f"req_{uuid.uuid4().hex[:20]}"}
        retry_after = reply.retry_after or ("1" if status == 429 else None)
        if retry_after is not None:
            headers["retry-after"] = retry_after
        body = {"type": "error", "error": {"type": error_type, "message": reply.message}}
        return body, headers

    def _content(self, reply: Reply) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if reply.thinking is not None:
            signature = self.sign(reply.thinking)
            content.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
        if reply.chunks:
            content.append({"type": "text", "text": "".join(reply.chunks)})
        for name, arguments in reply.tool_calls:
            tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
            content.append({"type": "tool_use", "id": tool_id, "name": name, "input": arguments})
        return content

    def _usage(self, reply: Reply) -> dict[str, int]:
        counts = reply.counts()
        return {
            "input_tokens": counts["input_tokens"],
            "cache_creation_input_tokens": counts["cache_creation_input_tokens"],
            "cache_read_input_tokens": counts["cache_read_input_tokens"],
            "output_tokens": counts["output_tokens"] + counts["thinking_tokens"],
        }

    def _stop_reason(self, reply: Reply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def complete(self, record: Recorded, reply: Reply) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": record.body.get("model"),
            "content": self._content(reply),
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def stream(self, record: Recorded, reply: Reply) -> tuple[str, Chunks]:
        return "text/event-stream; charset=utf-8", self._events(record, reply)

    async def _events(self, record: Recorded, reply: Reply) -> AsyncIterator[bytes]:
        usage = self._usage(reply)
        start = {**usage, "output_tokens": 1}
        message = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": record.body.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start,
        }
        yield event("message_start", {"message": message})
        yield event("ping", {})
        for index, block in enumerate(self._content(reply)):
            for data in _block_events(block, reply):
                yield event(data.pop("type"), {"index": index, **data})
            if block["type"] == "text" and reply.stream_error:
                status = reply.status or 529
                body, _ = self.error_response(status, reply)
                yield event("error", {"error": body["error"]})
                return
        delta = {"stop_reason": self._stop_reason(reply), "stop_sequence": None}
        yield event("message_delta", {"delta": delta, "usage": usage})
        yield event("message_stop", {})


def event(kind: str, data: dict[str, Any]) -> bytes:
    """An Anthropic stream event: the `event:` line names the `type` of its data."""
    return sse({"type": kind, **data}, event=kind)


def _block_events(block: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """start, deltas and stop of one content block, as the API streams them."""
    kind = block["type"]
    if kind == "thinking":
        text = block["thinking"]
        pieces = [text[i : i + 12] for i in range(0, len(text), 12)] or [""]
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in pieces]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
        opening = {"type": "thinking", "thinking": "", "signature": ""}
    elif kind == "text":
        deltas = [{"type": "text_delta", "text": chunk} for chunk in reply.chunks]
        opening = {"type": "text", "text": ""}
    else:
        arguments = json.dumps(block["input"])
        middle = len(arguments) // 2
        # The first input_json_delta is empty, as the API's are; then the JSON in pieces.
        pieces = ["", arguments[:middle], arguments[middle:]]
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        opening = {**block, "input": {}}
    return [
        {"type": "content_block_start", "content_block": opening},
        *({"type": "content_block_delta", "delta": delta} for delta in deltas),
        {"type": "content_block_stop"},
    ]
