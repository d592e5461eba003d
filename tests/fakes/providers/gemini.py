"""A fake of the Gemini API: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`.

What it speaks (https://ai.google.dev/api/generate-content): each server-sent event is a
GenerateContentResponse, `candidates[0].content.parts` holding `text`, `functionCall` (`name`,
`args` as a JSON object) or a thought summary (`text` with `thought: true`), the first
`functionCall` of a thinking reply carrying its `thoughtSignature`
(https://ai.google.dev/gemini-api/docs/thought-signatures); `finishReason` on the last event,
`usageMetadata` (`promptTokenCount`, `candidatesTokenCount`, `thoughtsTokenCount`,
`cachedContentTokenCount`, `totalTokenCount`) on every event, cumulative, as the API sends it.
`:generateContent` answers the whole response. Requests may spell fields in the JSON form
(`functionCall`, `systemInstruction`) or the proto form (`function_call`,
`system_instruction`, what LiteLLM sends): the API takes both. Errors are Google's
`{"error": {"code", "message", "status", "details"}}`
(https://ai.google.dev/gemini-api/docs/troubleshooting): 429 RESOURCE_EXHAUSTED (with a
`RetryInfo` detail when `Reply.retry_after` is set), 503 UNAVAILABLE, 500 INTERNAL, ...

What it refuses, as the real API does:
- no API key (403 PERMISSION_DENIED), a wrong one (400 INVALID_ARGUMENT, "API key not valid");
- a content role other than `user` / `model` (the system prompt is the top-level
  `systemInstruction`);
- function responses that do not answer the calls of the model turn just before them, in
  count and names, and a function-call turn that does not follow a user turn (or a function
  response turn) (https://ai.google.dev/gemini-api/docs/function-calling);
- with `require_thought_signatures` (Gemini 3 models), a function-call turn of the current
  turn whose first `functionCall` does not carry the signature this fake minted for it.

How LiteLLM (1.103.7) addresses it: model `gemini/<model>`, `api_base` = the fake's
`.../v1beta` (it appends `/models/{model}:streamGenerateContent?alt=sse`), header
`x-goog-api-key`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from tests.fakes.providers.script import Recorded, Refusal, Reply
from tests.fakes.providers.server import Chunks, ProviderFake, sse

STATUSES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
ROUTE = re.compile(
    r"^/v1(beta)?/models/(?P<model>[^/:]+):(?P<method>streamGenerateContent|generateContent)$"
)


def get(mapping: dict[str, Any], name: str) -> Any:
    """A field by its JSON name (`functionCall`) or its proto name (`function_call`)."""
    if name in mapping:
        return mapping[name]
    return mapping.get(re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower())


def parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


class GeminiFake(ProviderFake):
    """The Gemini API on loopback; see the module docstring."""

    base_path = "/v1beta"

    def __init__(
        self, *, api_key: str = "sk-test", require_thought_signatures: bool = False
    ) -> None:
        super().__init__(api_key=api_key)
        self.require_thought_signatures = require_thought_signatures
        self._signing_key = secrets.token_bytes(16)

    def sign(self, name: str, args: dict[str, Any]) -> str:
        """The thoughtSignature this fake gives (and then requires of) a function call."""
        message = json.dumps([name, args], sort_keys=True).encode()
        return base64.b64encode(
            hmac.new(self._signing_key, message, hashlib.sha256).digest()
        ).decode()

    def route(self, method: str, path: str) -> bool:
        return method == "POST" and ROUTE.match(path) is not None

    def streaming(self, record: Recorded) -> bool:
        return record.path.endswith(":streamGenerateContent")

    def user_text(self, body: dict[str, Any]) -> str:
        # A tool round's user turn holds only functionResponse parts: the prompt is further up.
        for content in reversed(body.get("contents") or []):
            if isinstance(content, dict) and content.get("role", "user") == "user":
                texts = [p["text"] for p in parts(content) if isinstance(p.get("text"), str)]
                if texts:
                    return "".join(texts)
        return ""

    # ---- refusals ---------------------------------------------------------------------------

    def check(self, record: Recorded) -> None:
        key = record.headers.get("x-goog-api-key") or (record.query.get("key") or [None])[0]
        if key is None:
            raise Refusal(
                403,
                "Method doesn't allow unregistered callers (callers without established"
                " identity). Please use API Key or other form of API consumer identity to call"
                " this API.",
            )
        if key != self.api_key:
            raise Refusal(400, "API key not valid. Please pass a valid API key.", "API_KEY_INVALID")
        contents = record.body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise Refusal(400, "* GenerateContentRequest.contents: contents is not specified")
        for index, content in enumerate(contents):
            if content.get("role", "user") not in ("user", "model"):
                raise Refusal(400, "Please use a valid role: user, model.")
            responses = [
                get(p, "functionResponse") for p in parts(content) if get(p, "functionResponse")
            ]
            if responses:
                self._check_answers(contents, index, responses)
            before = contents[index - 1] if index > 0 else None
            if any(get(p, "functionCall") for p in parts(content)) and (
                before is None or before.get("role", "user") != "user"
            ):
                raise Refusal(
                    400,
                    "Please ensure that function call turn comes immediately after a user turn"
                    " or after a function response turn.",
                )
        if self.require_thought_signatures:
            self._check_signatures(contents)

    def _check_answers(
        self, contents: list[dict[str, Any]], index: int, responses: list[dict[str, Any]]
    ) -> None:
        before = contents[index - 1] if index > 0 else {}
        calls = [get(p, "functionCall") for p in parts(before) if get(p, "functionCall")]
        if before.get("role") != "model" or not calls:
            raise Refusal(
                400,
                "Please ensure that function response turn comes immediately after a function call turn.",
            )
        if len(responses) != len(calls):
            raise Refusal(
                400,
                "Please ensure that the number of function response parts is equal to the number"
                " of function call parts of the function call turn.",
            )
        if sorted(str(r.get("name")) for r in responses) != sorted(
            str(c.get("name")) for c in calls
        ):
            raise Refusal(
                400,
                f"contents[{index}]: the names of the function response parts"
                f" {[r.get('name') for r in responses]} do not match the function call parts"
                f" {[c.get('name') for c in calls]} of the function call turn.",
            )

    def _check_signatures(self, contents: list[dict[str, Any]]) -> None:
        # The current turn starts after the last user content holding text (not a tool result).
        start = max(
            (
                i
                for i, c in enumerate(contents)
                if c.get("role", "user") == "user" and any("text" in p for p in parts(c))
            ),
            default=0,
        )
        for index in range(start, len(contents)):
            calls = [p for p in parts(contents[index]) if get(p, "functionCall")]
            if not calls:
                continue
            call = get(calls[0], "functionCall")
            if get(calls[0], "thoughtSignature") != self.sign(
                call.get("name"), call.get("args") or {}
            ):
                raise Refusal(
                    400,
                    "Function call is missing a thought_signature in functionCall parts. This is"
                    " required for tools to work correctly, and missing thought_signature may lead"
                    f" to degraded model performance. Additional data, function call"
                    f" `default_api:{call.get('name')}` , position {index + 1}.",
                )

    # ---- answers ----------------------------------------------------------------------------

    def error_response(self, status: int, reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
        details: list[dict[str, Any]] = []
        if reply.error_type:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reply.error_type,
                    "domain": "googleapis.com",
                }
            )
        if reply.retry_after is not None:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{reply.retry_after}s",
                }
            )
        error = {
            "code": status,
            "message": reply.message,
            "status": STATUSES.get(status, "UNKNOWN"),
        }
        if details:
            error["details"] = details
        return {"error": error}, {}

    def _parts(self, reply: Reply) -> list[list[dict[str, Any]]]:
        """The parts of each streamed event: thought, text chunks, then the function calls."""
        events: list[list[dict[str, Any]]] = []
        if reply.thinking is not None:
            events.append([{"text": reply.thinking, "thought": True}])
        events.extend([{"text": chunk}] for chunk in reply.chunks)
        calls: list[dict[str, Any]] = []
        for name, args in reply.tool_calls:
            part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
            if reply.thinking is not None and not calls:
                part["thoughtSignature"] = self.sign(name, args)
            calls.append(part)
        if calls:
            events.append(calls)
        return events or [[{"text": ""}]]

    def _usage(self, reply: Reply, share: float) -> dict[str, int]:
        counts = reply.counts()
        candidates = round(counts["output_tokens"] * share)
        thoughts = counts["thinking_tokens"]
        usage = {
            "promptTokenCount": counts["input_tokens"],
            "candidatesTokenCount": candidates,
            "totalTokenCount": counts["input_tokens"] + candidates + thoughts,
        }
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        if counts["cache_read_input_tokens"]:
            usage["cachedContentTokenCount"] = counts["cache_read_input_tokens"]
        return usage

    def _response(
        self,
        record: Recorded,
        event_parts: list[dict[str, Any]],
        reply: Reply,
        share: float,
        last: bool,
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": event_parts}, "index": 0}
        if last:
            candidate["finishReason"] = reply.stop_reason or "STOP"
        model = ROUTE.match(record.path)
        return {
            "candidates": [candidate],
            "usageMetadata": self._usage(reply, share),
            "modelVersion": model.group("model") if model else "",
            "responseId": secrets.token_urlsafe(12),
        }

    def complete(self, record: Recorded, reply: Reply) -> dict[str, Any]:
        merged = [part for event_parts in self._parts(reply) for part in event_parts]
        return self._response(record, merged, reply, 1.0, True)

    def stream(self, record: Recorded, reply: Reply) -> tuple[str, Chunks]:
        return "text/event-stream", self._events(record, reply)

    async def _events(self, record: Recorded, reply: Reply) -> AsyncIterator[bytes]:
        events = self._parts(reply)
        for number, event_parts in enumerate(events, start=1):
            last = number == len(events)
            yield sse(self._response(record, event_parts, reply, number / len(events), last))
            if reply.stream_error and "text" in event_parts[0]:
                body, _ = self.error_response(reply.status or 503, reply)
                yield sse(body)
                return
