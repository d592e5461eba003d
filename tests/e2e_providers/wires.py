"""How each provider's wire carries what the contract tests check, one `Wire` per provider.

A test says "script a parallel tool round" or "what was the system prompt of this request"
once; each wire answers in its provider's own shape: Anthropic's top-level `system` and
`tool_result` blocks, Gemini's `systemInstruction` and `functionResponse` parts, Ollama's and
OpenAI's system message and role `tool` messages. The fakes are in tests/fakes/providers/
(and tests/fakes/fake_llm.py for OpenAI).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes import fake_llm
from tests.fakes.providers import script
from tests.fakes.providers.anthropic import blocks
from tests.fakes.providers.gemini import get, parts

Turn = tuple[str, str]
"""(role, text) of one user or assistant message, in the provider's request."""


class Wire:
    """What the contract tests need of one provider's fake."""

    model: str
    overloaded: int
    """The status the provider answers when it is overloaded."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    @property
    def base_url(self) -> str:
        return str(self.fake.base_url)

    def text(self, chunks: list[str], marker: str, usage: dict[str, int] | None = None) -> None:
        self.fake.script(script.text(chunks, usage=usage, when_user_contains=marker))

    def tool_calls(self, calls: list[tuple[str, dict[str, Any]]], marker: str) -> None:
        self.fake.script(script.tool_calls(calls, when_user_contains=marker))

    def error(self, status: int, message: str, marker: str, times: int | None) -> None:
        self.fake.script(script.error(status, message, when_user_contains=marker, times=times))

    def auth_error(self, message: str, marker: str) -> None:
        self.error(401, message, marker, None)

    cut_off = "length"
    """The stop reason this provider gives an answer its output token limit cut off."""

    def cut_off_text(self, chunks: list[str], marker: str) -> None:
        reply = script.text(chunks, when_user_contains=marker)
        reply.stop_reason = self.cut_off
        self.fake.script(reply)

    def requests(self, marker: str) -> list[dict[str, Any]]:
        """The bodies of the requests for `marker`, refused ones excluded (none expected)."""
        records = self.fake.requests_for(marker)
        assert not [r.refused for r in records if r.refused], [r.refused for r in records]
        return [r.body for r in records]

    def system(self, body: dict[str, Any]) -> list[str]:
        """The system prompt(s) of a request, where the provider wants them."""
        raise NotImplementedError

    def misplaced_system(self, body: dict[str, Any]) -> bool:
        """Whether a system prompt also appears where this provider does not take it."""
        return False

    def turns(self, body: dict[str, Any]) -> list[Turn]:
        raise NotImplementedError

    def tool_round(
        self, body: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The last tool round of a request: (the calls, the results), each as (key, value):
        a call's id and name, a result's call id and content (Gemini, with no ids: names)."""
        raise NotImplementedError


class AnthropicWire(Wire):
    model = "anthropic/claude-haiku-4-5"
    overloaded = 529
    cut_off = "max_tokens"

    def system(self, body: dict[str, Any]) -> list[str]:
        system = body.get("system")
        if isinstance(system, str):
            return [system]
        return [b["text"] for b in system or []]

    def misplaced_system(self, body: dict[str, Any]) -> bool:
        return any(m.get("role") == "system" for m in body["messages"])

    def turns(self, body: dict[str, Any]) -> list[Turn]:
        out = []
        for message in body["messages"]:
            text = "".join(b["text"] for b in blocks(message) if b.get("type") == "text")
            if text:
                out.append((message["role"], text))
        return out

    def tool_round(
        self, body: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        messages = body["messages"]
        index = max(
            i for i, m in enumerate(messages) if any(b.get("type") == "tool_use" for b in blocks(m))
        )
        calls = [
            (b["id"], b["name"]) for b in blocks(messages[index]) if b.get("type") == "tool_use"
        ]
        answer = messages[index + 1]  # one user message answers the whole round
        assert answer["role"] == "user", answer
        results = [
            (b["tool_use_id"], _text(b["content"]))
            for b in blocks(answer)
            if b.get("type") == "tool_result"
        ]
        return calls, results


class GeminiWire(Wire):
    model = "gemini/gemini-2.5-flash"
    overloaded = 503
    cut_off = "MAX_TOKENS"

    def auth_error(self, message: str, marker: str) -> None:
        # Google answers a bad key with 400 INVALID_ARGUMENT "API key not valid", not a 401.
        reply = script.error(
            400,
            f"API key not valid. Please pass a valid API key. {message}",
            when_user_contains=marker,
            times=None,
        )
        reply.error_type = "API_KEY_INVALID"
        self.fake.script(reply)

    def system(self, body: dict[str, Any]) -> list[str]:
        instruction = get(body, "systemInstruction") or {}
        return [p["text"] for p in parts(instruction)]

    def misplaced_system(self, body: dict[str, Any]) -> bool:
        return any(c.get("role") not in ("user", "model") for c in body["contents"])

    def turns(self, body: dict[str, Any]) -> list[Turn]:
        out = []
        for content in body["contents"]:
            text = "".join(p["text"] for p in parts(content) if "text" in p)
            if text:
                out.append(({"model": "assistant"}.get(content["role"], content["role"]), text))
        return out

    def tool_round(
        self, body: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        contents = body["contents"]
        index = max(
            i for i, c in enumerate(contents) if any(get(p, "functionCall") for p in parts(c))
        )
        calls = [get(p, "functionCall") for p in parts(contents[index]) if get(p, "functionCall")]
        answer = contents[index + 1]
        responses = [get(p, "functionResponse") for p in parts(answer)]
        return [(c["name"], c["name"]) for c in calls], [
            (r["name"], _text(r["response"])) for r in responses
        ]


class OllamaWire(Wire):
    model = "ollama_chat/llama3.1"
    overloaded = 503

    def system(self, body: dict[str, Any]) -> list[str]:
        return [m["content"] for m in body["messages"] if m["role"] == "system"]

    def turns(self, body: dict[str, Any]) -> list[Turn]:
        return [
            (m["role"], m["content"])
            for m in body["messages"]
            if m["role"] in ("user", "assistant") and m.get("content")
        ]

    def tool_round(
        self, body: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        messages = body["messages"]
        index = max(i for i, m in enumerate(messages) if m.get("tool_calls"))
        # Ollama's calls carry no ids; a result names its call by LiteLLM's tool_call_id.
        calls = [("", c["function"]["name"]) for c in messages[index]["tool_calls"]]
        answers = _tool_messages(messages[index + 1 :])
        results = [(m.get("tool_call_id", ""), m["content"]) for m in answers]
        return calls, results


class OpenAIWire(Wire):
    model = "openai/fake-model"
    overloaded = 503

    def text(self, chunks: list[str], marker: str, usage: dict[str, int] | None = None) -> None:
        step = fake_llm.text(chunks, when_user_contains=marker)
        if usage:
            step.usage = {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            }
        self.fake.script(step)

    def tool_calls(self, calls: list[tuple[str, dict[str, Any]]], marker: str) -> None:
        self.fake.script(fake_llm.tool_calls(calls, when_user_contains=marker))

    def cut_off_text(self, chunks: list[str], marker: str) -> None:
        self.fake.script(fake_llm.text(chunks, finish_reason="length", when_user_contains=marker))

    def error(self, status: int, message: str, marker: str, times: int | None) -> None:
        self.fake.script(fake_llm.error(status, message, when_user_contains=marker, times=times))

    def requests(self, marker: str) -> list[dict[str, Any]]:
        return list(self.fake.requests_for(marker))

    def system(self, body: dict[str, Any]) -> list[str]:
        return [fake_llm.message_text(m) for m in body["messages"] if m["role"] == "system"]

    def turns(self, body: dict[str, Any]) -> list[Turn]:
        return [
            (m["role"], fake_llm.message_text(m))
            for m in body["messages"]
            if m["role"] in ("user", "assistant") and m.get("content")
        ]

    def tool_round(
        self, body: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        messages = body["messages"]
        index = max(i for i, m in enumerate(messages) if m.get("tool_calls"))
        calls = [(c["id"], c["function"]["name"]) for c in messages[index]["tool_calls"]]
        answers = _tool_messages(messages[index + 1 :])
        return calls, [(m["tool_call_id"], fake_llm.message_text(m)) for m in answers]


def _tool_messages(following: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The role `tool` messages right after a tool-call message (the round's results)."""
    out = []
    for message in following:
        if message["role"] != "tool":
            break
        out.append(message)
    return out


def _text(content: Any) -> str:
    """A tool result's text, however the provider wraps it (string, blocks, an object)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    if isinstance(content, dict):
        return str(content.get("content", json.dumps(content)))
    return str(content)
