"""Reading a client's answer to a suspended turn (a question, or a tool call to approve)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.runtime.errors import AnswerRejected
from agent.state import Awaiting
from agent.tools.client import read_tool_results
from stores.models import Message

__all__ = ["Answer", "AnswerRejected", "read_answer"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    text: str = ""
    approved: bool | None = None
    reason: str = ""
    tool_results: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """client_tools: by call id, what the model reads and whether the call succeeded."""


def read_answer(awaiting: Awaiting, message: Message) -> Answer:
    if awaiting.kind in ("ask_user", "tool_input"):
        return Answer(text=message.text())
    if awaiting.kind == "client_tools":
        try:
            return Answer(tool_results=read_tool_results(message, awaiting.calls))
        except ValueError as exc:
            raise AnswerRejected(str(exc)) from exc
    for part in message.parts:
        if (
            "data" in part.model_fields_set
            and isinstance(part.data, dict)
            and "approved" in part.data
        ):
            approved = part.data["approved"]
            if not isinstance(approved, bool):
                raise AnswerRejected('"approved" must be true or false')
            return Answer(approved=approved, reason=str(part.data.get("reason") or ""))
        if part.text is not None and part.text.strip().casefold() in ("approve", "deny"):
            return Answer(approved=part.text.strip().casefold() == "approve")
    raise AnswerRejected(
        f"Task waits for approval of the call of {awaiting.call.name!r}: answer with a text part"
        ' "approve" or "deny", or a data part {"approved": true|false, "reason": "..."}'
    )
