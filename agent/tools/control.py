"""Loop-control tools the model can call: `ask_user(question)` and `finish(result)`.

They are not run by the toolbox: the loop itself acts on them (suspend for an answer; end the turn).
"""

from __future__ import annotations

import json
from typing import Any

from stores.models import ToolCall

ASK_USER = "ask_user"
FINISH = "finish"
CONTROL_TOOLS = {
    ASK_USER: {
        "type": "function",
        "function": {
            "name": ASK_USER,
            "description": "Ask the user a question and wait for the answer. Use it when you"
            " need information or a decision that only the user can give.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string", "description": "The question."}},
                "required": ["question"],
            },
        },
    },
    FINISH: {
        "type": "function",
        "function": {
            "name": FINISH,
            "description": "End the turn: give the final answer and stop.",
            "parameters": {
                "type": "object",
                "properties": {"result": {"type": "string", "description": "The final answer."}},
                "required": ["result"],
            },
        },
    },
}


def arguments_of(call: ToolCall) -> dict[str, Any]:
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
