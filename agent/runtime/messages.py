"""The A2A messages the agent writes into a task: answers, progress, questions for the client."""

from __future__ import annotations

import json

from agent.state import Awaiting
from agent.tools.client import tool_calls_data
from stores.ids import new_id
from stores.models import Message, Part, Role, Task


def agent_message(task: Task, parts: list[Part]) -> Message:
    return Message(
        message_id=new_id(),
        role=Role.AGENT,
        parts=parts,
        task_id=task.id,
        context_id=task.context_id,
    )


def text_message(task: Task, text: str) -> Message:
    return agent_message(task, [Part(text=text)])


def json_or_text(arguments: str) -> object:
    """A call's arguments as JSON when they parse (what the model wrote, else)."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def question_message(task: Task, awaiting: Awaiting) -> Message:
    """The status message of an input-required task: what the client must answer."""
    if awaiting.kind in ("ask_user", "tool_input"):
        return text_message(task, awaiting.question)
    if awaiting.kind == "client_tools":
        return agent_message(task, [Part(data=tool_calls_data(awaiting.calls))])
    call = awaiting.call
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        arguments = call.arguments
    return agent_message(
        task,
        [
            Part(
                text=f"Approve the call of {call.name!r} with arguments {call.arguments or '{}'}?"
                ' Answer "approve" or "deny".'
            ),
            Part(
                data={
                    "approval": {"toolCallId": call.id, "name": call.name, "arguments": arguments}
                }
            ),
        ],
    )
