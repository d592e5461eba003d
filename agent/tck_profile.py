"""The TCK profile (`AGENT_PROFILE=tck`): a scripted model, tools and a hook that produce every
behaviour the A2A conformance suites ask for, through the real stack (handler, engine, journal).

Nothing here is known to the protocol layer: the model picks a behaviour from the id of the
message that started (or resumed) the turn, else from the first words of its text, and acts
through what any model has: text (streamed in chunks), tool calls (files and data come back as
artifacts, `tck_reject` declines the task), `ask_user` (input-required), a slow answer, a failed
call. The one Message reply comes from the `reply_directly` hook.

| message id (or text) prefix | behaviour |
|---|---|
| `tck-complete-task` | completes: "Hello from TCK" |
| `tck-artifact-text` / `-file` / `-file-url` / `-data` | a text / file / URL / data artifact |
| `tck-message-response` | a Message ("Direct message response"), no task |
| `tck-input-required`, `tck-multi-turn` | input-required; the answer's own prefix decides next |
| `tck-reject-task` | rejected |
| `tck-stream-*` | streamed: text, a file, or "chunk-1 " + "chunk-2" |
| `test-resubscribe-message-id`, `tck-long-running` | working for 4 s, then completed |
| `tck-cancel` | working until canceled |
| `tck-task-failure` | failed |
| other `tck-*` | completes: "Unhandled messageId prefix: ..." |
| anything else (the 0.3 TCK's ids) | input-required, every time (see below) |

The 0.3 TCK continues and cancels tasks that a blocking send has returned (a2a-tck #91, #140), so
its tasks must stay open: a message outside the TCK 1.0 scheme is always asked a question.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agent.events import Usage
from agent.hooks import Hooks
from agent.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, LLMText
from agent.tools.outputs import DataResult, FileResult, TaskRejected
from stores.models import Message, ToolCall

TCK_PROFILE = "tck"
SLOW_S = 4.0
"""How long the slow behaviours stay working (the TCK resubscribes within 2 x 2 s)."""

_TEXT_ANSWERS = {
    "tck-complete-task": "Hello from TCK",
    "tck-artifact-text": "Generated text content",
    "tck-stream-artifact-text": "Streamed text content",
    "tck-stream-ordering-001": "Ordered output",
    "tck-stream-001": "Stream hello from TCK",
    "tck-stream-003": "Stream task lifecycle",
    "tck-stream-basic": "Stream hello from TCK",
    "tck-stream-002": "",
}
_TOOL_CALLS = {
    "tck-artifact-file-url": ("tck_file", {"location": "url"}),
    "tck-artifact-file": ("tck_file", {"location": "bytes"}),
    "tck-stream-artifact-file": ("tck_file", {"location": "bytes"}),
    "tck-artifact-data": ("tck_data", {}),
    "tck-reject-task": ("tck_reject", {}),
}
_CHUNKED = ("tck-stream-artifact-chunked", "tck-stream-chunked")
_ASKING = ("tck-input-required", "tck-multi-turn")
_SLOW = ("test-resubscribe-message-id", "tck-long-running")


# --- tools -----------------------------------------------------------------------------------


def tck_file(location: str) -> FileResult:
    """Produce the TCK's file artifact: output.txt, its bytes or its URL.

    Args:
        location: "bytes" for the content inline, "url" for a link to it.
    """
    if location == "url":
        return FileResult(
            name="output.txt", media_type="text/plain", url="https://example.com/output.txt"
        )
    return FileResult(name="output.txt", media_type="text/plain", data=b"tck")


def tck_data() -> DataResult:
    """Produce the TCK's data artifact."""
    return DataResult(name="data", data={"key": "value", "count": 42})


def tck_reject() -> str:
    """Decline the task."""
    raise TaskRejected("The agent declines this task (TCK: tck-reject-task)")


TCK_TOOLS: list[Callable[..., Any]] = [tck_file, tck_data, tck_reject]


class TckHooks(Hooks):
    """The TCK's one direct reply: a Message instead of a task."""

    async def reply_directly(self, owner: str, message: Message) -> str | None:
        if _key(message.message_id, message.text()) == "tck-message-response":
            return "Direct message response"
        return None


# --- the model -------------------------------------------------------------------------------


def _key(message_id: str | None, text: str) -> str:
    """The behaviour's name: the known prefix the message id (else its text) starts with."""
    known = (
        list(_TEXT_ANSWERS)
        + list(_TOOL_CALLS)
        + [*_CHUNKED, *_ASKING, *_SLOW, "tck-message-response", "tck-cancel", "tck-task-failure"]
    )
    for candidate in (message_id or "", text.strip()):
        # The longest match wins: `tck-artifact-file-url` over `tck-artifact-file`.
        matches = [name for name in known if candidate.startswith(name)]
        if matches:
            return max(matches, key=len)
    return "tck-other" if (message_id or "").startswith("tck-") else "other"


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


class TckModel(LLMClient):
    """The scripted model of the TCK profile (see the module's table)."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]:
        message_id = request.turn.message_id if request.turn else None
        key = _key(message_id, _last_user_text(request.messages))
        after_tool = request.messages[-1].get("role") == "tool"
        usage = Usage(prompt_tokens=len(request.messages), completion_tokens=1)

        def answer(text: str) -> LLMResponse:
            return LLMResponse(content=text, tool_calls=[], finish_reason="stop", usage=usage)

        def call(name: str, arguments: dict[str, Any]) -> LLMResponse:
            tool_call = ToolCall(
                id=f"call_{name}_{len(request.messages)}",
                name=name,
                arguments=json.dumps(arguments),
            )
            return LLMResponse(
                content="", tool_calls=[tool_call], finish_reason="tool_calls", usage=usage
            )

        if key in _TOOL_CALLS:
            # The tool's artifact is the answer; after it, no text.
            yield answer("") if after_tool else call(*_TOOL_CALLS[key])
        elif key in _TEXT_ANSWERS:
            text = _TEXT_ANSWERS[key]
            if text:
                yield LLMText(text=text)
            yield answer(text)
        elif key in _CHUNKED:
            for chunk in ("chunk-1 ", "chunk-2"):
                yield LLMText(text=chunk)
            yield answer("chunk-1 chunk-2")
        elif key in _SLOW:
            await asyncio.sleep(SLOW_S)
            yield LLMText(text="Done after a while")
            yield answer("Done after a while")
        elif key == "tck-cancel":
            await asyncio.sleep(3600)  # until canceled
            yield answer("Not canceled")
        elif key == "tck-task-failure":
            raise LLMError("The task failed, as asked (TCK: tck-task-failure)")
        elif key == "tck-other":
            text = f"Unhandled messageId prefix: {message_id}"
            yield LLMText(text=text)
            yield answer(text)
        else:  # `tck-input-required`, `tck-multi-turn`, and every message of the 0.3 TCK
            yield call("ask_user", {"question": "Please provide more input."})
