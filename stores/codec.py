"""The records' stored form: JSON with the camelCase aliases and the `kind` discriminator kept.

Both stores keep what they are given in this form, so a caller never shares an object with the
store (the copy is a serialization, which pydantic-core does far faster than a deep copy) and
Redis holds the same bytes the in-memory store does.
"""

from __future__ import annotations

import re

from stores.models import _EVENTS, ChatMessage, JournalEntry, Task, TaskEvent, TaskState

# exclude_none: a Part with an explicit `data` None would otherwise fail its exactly-one check on
# the way back (every absent content field would come back as present).


def dump_event(event: TaskEvent) -> bytes:
    return _EVENTS.dump_json(event, by_alias=True, exclude_none=True)  # as JournalEntry.stored


def load_event(raw: bytes | str) -> TaskEvent:
    return _EVENTS.validate_json(raw)


def dump_task(task: Task) -> bytes:
    return task.model_dump_json(by_alias=True, exclude_none=True).encode()


def load_task(raw: bytes | str) -> Task:
    return Task.model_validate_json(raw)


def copy_task(task: Task) -> Task:
    """A copy sharing nothing with `task`: through the stored form, several times faster than a
    deep copy (pydantic-core does both halves)."""
    return load_task(dump_task(task))


def dump_message(message: ChatMessage) -> bytes:
    return message.model_dump_json(exclude_none=True).encode()


def load_message(raw: bytes | str) -> ChatMessage:
    return ChatMessage.model_validate_json(raw)


# The stored form of an event starts with its kind and, for a status or task event, reaches its
# state before any free text (the serializer writes fields in their declared order, and ids and
# kinds come first): a reader learns both without parsing the event.
_HEAD = re.compile(
    rb'\{"kind":"(status|artifact|task)",'
    rb'(?:"task":\{"id":"(?:[^"\\]|\\.)*",|"taskId":"(?:[^"\\]|\\.)*",)'
    rb'"contextId":"(?:[^"\\]|\\.)*",'
    rb'(?:"status":\{"state":"(TASK_STATE_[A-Z_]+)")?'
)


def stored_entry(position: int, stored: bytes) -> JournalEntry:
    """A journal entry for an event in its stored form, parsed only if its head is unusual."""
    head = _HEAD.match(stored)
    if head is None:
        return JournalEntry(position=position, event=load_event(stored))
    kind, state = head.group(1).decode(), head.group(2)
    if kind != "artifact" and state is None:
        return JournalEntry(position=position, event=load_event(stored))
    return JournalEntry(
        position=position,
        stored=stored,
        kind=kind,
        state=TaskState(state.decode()) if state else None,
    )
