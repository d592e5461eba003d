"""The nemesis' model: an OpenAI-compatible fake whose every reply follows from the conversation it
is sent, so any replica, taking any turn over from any checkpoint, gets the same reply.

A prompt reads `nem <key> do=<plain|tool|ask>`; `<key>` names one attempt of one turn
(`<session>.<turn>.<attempt>`, see workload.py). The model, reading the messages after that prompt:

* `tool`: asks for `nemesis_step(key)` (tests/nemesis/tool.py, which records each run), then,
  once its result is in the messages, answers;
* `ask`: asks the user (`ask_user`: the task goes input-required), then, once answered, answers;
* `plain`: answers at once; `long`: the same answer, streamed over about three and a half leases
  (20 s at bench's 6 s lease: a pause of the replica, the lease and a little, falls inside its
  model call: when the turn ends or moves meanwhile, that call must be cut, not left to stream
  on).

An answer is `answer_text(key)`, streamed in chunks a little apart (so streams are joined and
cut mid-answer). Every request is recorded (FakeLLMServer), with the key it was for and the
replica that made it: each replica's LLM_API_BASE is `<base>/r<index>/v1` (`replica_base_url`).
"""

from __future__ import annotations

import contextvars
import json
import re
from dataclasses import dataclass
from typing import Any

from tests.fakes.fake_llm import FakeLLMServer, Step, last_user_text

PROMPT = re.compile(r"nem (\S+) do=(plain|tool|ask|long)")
ANSWER_WORDS = 12
TOOL_NAME = "nemesis_step"
# A long answer's chunks, one lease apart per this many chunks (1.6 s at a 6 s lease).
LONG_CHUNKS_PER_LEASE = 3.75
REPLICA_PATH = re.compile(r"^/r(\d+)(/.*)$")
_replica: contextvars.ContextVar[int | None] = contextvars.ContextVar("replica", default=None)


@dataclass
class ReplicaStep(Step):
    """A reply, and which replica asked for it."""

    replica: int | None = None


def prompt_text(key: str, kind: str) -> str:
    return f"nem {key} do={kind}"


def answer_chunks(key: str) -> list[str]:
    return [f"answer {key} "] + [f"w{n} " for n in range(ANSWER_WORDS)]


def answer_text(key: str) -> str:
    return "".join(answer_chunks(key))


def reply_text(key: str) -> str:
    """What the client answers the model's question with."""
    return f"reply {key}"


def key_of_request(body: dict[str, Any]) -> str | None:
    """The key of the turn a model request is for: the last prompt in its messages."""
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") == "user":
            found = PROMPT.search(str(msg.get("content") or ""))
            if found:
                return found.group(1)
    return None


def _called_since_prompt(messages: list[dict[str, Any]]) -> set[str]:
    """Names of the tools the model asked for after the last prompt."""
    names: set[str] = set()
    for msg in reversed(messages):
        if msg.get("role") == "user" and PROMPT.search(str(msg.get("content") or "")):
            break
        for call in msg.get("tool_calls") or []:
            names.add((call.get("function") or {}).get("name", ""))
    return names


class NemesisModel(FakeLLMServer):
    """The reply is decided by the request alone (nothing queued): see the module docstring."""

    def __init__(self, *, lease_ttl_s: float, chunk_delay: float = 0.08) -> None:
        super().__init__()
        self.chunk_delay = chunk_delay
        self.long_chunk_delay = lease_ttl_s / LONG_CHUNKS_PER_LEASE

    def _take_step(self, body: dict[str, Any]) -> Step | None:
        step = self._reply(body)
        return ReplicaStep(**{**step.__dict__, "replica": _replica.get()})

    def _reply(self, body: dict[str, Any]) -> Step:
        found = PROMPT.search(last_user_text(body))
        if found is None:
            return Step(chunks=["no nemesis prompt here"])
        key, kind = found.groups()
        called = _called_since_prompt(body.get("messages") or [])
        if kind == "tool" and TOOL_NAME not in called:
            return Step(tool_calls=[(TOOL_NAME, json.dumps({"key": key}))], times=None)
        if kind == "ask" and "ask_user" not in called:
            question = json.dumps({"question": f"question {key}"})
            return Step(tool_calls=[("ask_user", question)], times=None)
        delay = self.long_chunk_delay if kind == "long" else self.chunk_delay
        return Step(chunks=answer_chunks(key), chunk_delay=delay, times=None)

    def replica_base_url(self, index: int) -> str:
        return self.base_url.removesuffix("/v1") + f"/r{index}/v1"

    async def _asgi(self, scope: dict, receive: Any, send: Any) -> None:
        found = REPLICA_PATH.match(scope.get("path", ""))
        if found:
            _replica.set(int(found.group(1)))
            scope = {**scope, "path": found.group(2)}
        await super()._asgi(scope, receive, send)

    def calls(self) -> list[dict[str, Any]]:
        """Each model request: its key, when it came and ended (monotonic), whether the caller
        went away before its end."""
        return [
            {
                "key": key_of_request(rec.body),
                "received": rec.received_at,
                "finished": rec.finished_at,
                "cut": rec.client_disconnected,
                "replica": getattr(rec.step, "replica", None),
                "tool_results": [
                    str(m.get("content")).split()[1]
                    for m in rec.body.get("messages") or []
                    if m.get("role") == "tool" and str(m.get("content") or "").startswith("ran ")
                ],
            }
            for rec in self.records
        ]
