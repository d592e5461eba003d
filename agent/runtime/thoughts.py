"""What a client sees of the model's reasoning.

With AGENT_REASONING=stream each chunk of reasoning text becomes a WORKING status update whose
message has one text part marked `metadata: {"thought": true}`: a client that knows the mark
shows it apart (folded, dimmed), one that does not reads it as progress. It is never an answer
chunk, in the answer artifact or in the final message.
"""

from __future__ import annotations

from agent.runtime.messages import agent_message
from stores.models import Part, StatusUpdate, Task, TaskState, TaskStatus

THOUGHT_METADATA = "thought"
"""The key of a text part's metadata that marks it as the model's reasoning."""


def thought_update(task: Task, text: str) -> StatusUpdate:
    """A WORKING status update carrying a chunk of reasoning text (not a state change)."""
    part = Part(text=text, metadata={THOUGHT_METADATA: True})
    status = TaskStatus(state=TaskState.WORKING, message=agent_message(task, [part]))
    return StatusUpdate(task_id=task.id, context_id=task.context_id, status=status)
