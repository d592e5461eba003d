"""The records' stored form: JSON with the camelCase aliases and the `kind` discriminator kept.

Both stores keep what they are given in this form, so a caller never shares an object with the
store (the copy is a serialization, which pydantic-core does far faster than a deep copy) and
Redis holds the same bytes the in-memory store does.
"""

from __future__ import annotations

import functools
import re
import uuid

from pydantic_core import to_json

from stores.models import (
    _EVENTS,
    Artifact,
    ArtifactUpdate,
    ChatMessage,
    JournalEntry,
    Part,
    Task,
    TaskEvent,
    TaskState,
)

# exclude_none: a Part with an explicit `data` None would otherwise fail its exactly-one check on
# the way back (every absent content field would come back as present).


def dump_event(event: TaskEvent | bytes) -> bytes:
    """The event's stored form (as JournalEntry.stored); bytes are taken as already in it."""
    if isinstance(event, bytes):
        return event
    return _EVENTS.dump_json(event, by_alias=True, exclude_none=True)


class ArtifactChunks:
    """The stored form of one streamed artifact's text chunks, written without a model each.

    A streamed answer is one artifact update per chunk that differ only in their text and their
    `append` / `lastChunk` flags: the bytes around the text are rendered once (by the serializer
    itself, from a template event, so they are what `dump_event` writes) and each chunk costs one
    string serialization. A chunk is the hot path of every turn.
    """

    __slots__ = ("_head", "_tails")

    def __init__(self, *, task_id: str, context_id: str, artifact_id: str, name: str) -> None:
        around_ids, self._tails = _chunk_template(name)
        ids = (to_json(task_id), to_json(context_id), to_json(artifact_id))
        self._head = b"".join(
            (around_ids[0], ids[0], around_ids[1], ids[1], around_ids[2], ids[2], around_ids[3])
        )

    def render(self, text: str, *, append: bool, last: bool) -> bytes:
        return self._head + to_json(text) + self._tails[(append, last)]


_MARKS = [f"{field}-{uuid.uuid4().hex}" for field in ("task", "context", "artifact", "text")]
"""Stand for the ids and the text in a chunk's template: strings no one else writes."""


@functools.lru_cache(maxsize=8)
def _chunk_template(name: str) -> tuple[list[bytes], dict[tuple[bool, bool], bytes]]:
    """The bytes of an answer chunk of artifact `name` around its three ids (four pieces), and
    after its text (one per pair of `append` / `lastChunk` flags): written by the serializer
    once per process, not once per turn. An id is serialized on its own where its mark was
    (`to_json` of a string is what the serializer writes for a string field)."""
    task_id, context_id, artifact_id, text = _MARKS
    artifact = Artifact(artifact_id=artifact_id, name=name, parts=[Part(text=text)])
    update = ArtifactUpdate(
        task_id=task_id, context_id=context_id, artifact=artifact, append=True, last_chunk=True
    )
    rest = dump_event(update)
    pieces = []
    for mark in _MARKS:  # in the order the serializer writes them (the declared field order)
        piece, found, rest = rest.partition(to_json(mark))
        assert found, (mark, rest)
        pieces.append(piece)
    flags = b'"append":true,"lastChunk":true}'
    assert rest.endswith(flags), rest
    # After the text come only the artifact's name (ours) and the two flags.
    stem = rest.removesuffix(flags)
    tails = {
        (append, last): b'%s"append":%s,"lastChunk":%s}' % (stem, to_json(append), to_json(last))
        for append in (False, True)
        for last in (False, True)
    }
    return pieces[:4], tails


def load_event(raw: bytes | str) -> TaskEvent:
    return _EVENTS.validate_json(raw)


def dump_task(task: Task) -> bytes:
    return task.__pydantic_serializer__.to_json(task, by_alias=True, exclude_none=True)


def snapshot_event(stored_task: bytes) -> bytes:
    """The stored form of a task event (`TaskSnapshot`) around a task's stored form: the task is
    serialized once for both the snapshot and the journal's first entry."""
    return b'{"kind":"task","task":' + stored_task + b"}"


def load_task(raw: bytes | str) -> Task:
    return Task.model_validate_json(raw)


def copy_task(task: Task) -> Task:
    """A copy sharing nothing with `task`: through the stored form, several times faster than a
    deep copy (pydantic-core does both halves)."""
    return load_task(dump_task(task))


def dump_message(message: ChatMessage) -> bytes:
    return message.__pydantic_serializer__.to_json(message, exclude_none=True)


def load_message(raw: bytes | str) -> ChatMessage:
    return ChatMessage.model_validate_json(raw)


# The stored form of an event starts with its kind and, for a status or task event, reaches its
# state before any free text (the serializer writes fields in their declared order, and ids and
# kinds come first): a reader learns both without parsing the event.
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a JSON string, its plain runs matched whole (4x faster)
_HEAD = re.compile(
    rb'\{"kind":"(status|artifact|task)",'
    rb'(?:"task":\{"id":' + _STRING + rb',|"taskId":' + _STRING + rb",)"
    rb'"contextId":' + _STRING + rb","
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
