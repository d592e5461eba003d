"""stores.codec's forms written without a model (a chunk; a task event around a stored task) are
byte for byte what the serializer writes for the same event, and are read back as that event."""

from __future__ import annotations

import pytest
from pydantic_core import to_json

from stores.codec import (
    _MARKS,
    ArtifactChunks,
    dump_event,
    dump_task,
    load_event,
    snapshot_event,
    stored_entry,
)
from stores.models import (
    Artifact,
    ArtifactUpdate,
    Part,
    StatusUpdate,
    Task,
    TaskSnapshot,
    TaskState,
    TaskStatus,
)

TEXTS = [
    "chunk 0001 .........",
    "",
    'quotes " and \\ backslashes',
    "control \x00 \x01 \x1f \n \r \t characters",
    "unicode é 漢字 🙂 \u2028 \u2029",
    "</script><!-- markup stays text -->",
]


def expected(text: str, *, append: bool, last: bool, context_id: str = "ctx-1") -> bytes:
    artifact = Artifact(artifact_id="art-1", name="answer", parts=[Part(text=text)])
    update = ArtifactUpdate(
        task_id="task-1", context_id=context_id, artifact=artifact, append=append, last_chunk=last
    )
    return dump_event(update)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize(
    ("append", "last"), [(False, False), (True, False), (True, True), (False, True)]
)
def test_a_rendered_chunk_is_what_the_serializer_writes(
    text: str, append: bool, last: bool
) -> None:
    chunks = ArtifactChunks(
        task_id="task-1", context_id="ctx-1", artifact_id="art-1", name="answer"
    )
    rendered = chunks.render(text, append=append, last=last)
    assert rendered == expected(text, append=append, last=last)
    event = load_event(rendered)
    assert isinstance(event, ArtifactUpdate)
    assert (event.artifact.parts[0].text, event.append, event.last_chunk) == (text, append, last)
    entry = stored_entry(7, rendered)  # read back without a parse, as stores hand it out
    assert (entry.kind, entry.stored, entry.state) == ("artifact", rendered, None)


def test_the_flags_of_one_chunk_do_not_leak_into_the_next() -> None:
    chunks = ArtifactChunks(
        task_id="task-1", context_id="ctx-1", artifact_id="art-1", name="answer"
    )
    first = chunks.render("a", append=False, last=False)
    middle = chunks.render("b", append=True, last=False)
    final = chunks.render("c", append=True, last=True)
    assert first == expected("a", append=False, last=False)
    assert middle == expected("b", append=True, last=False)
    assert final == expected("c", append=True, last=True)


@pytest.mark.parametrize("placeholder", _MARKS, ids=lambda mark: mark.split("-")[0])
def test_ids_that_look_like_the_placeholders_are_kept(placeholder: str) -> None:
    # A client chooses its context id: even a placeholder's own text there changes nothing.
    context_id = placeholder
    assert to_json(context_id) in expected("x", append=True, last=False, context_id=context_id)
    chunks = ArtifactChunks(
        task_id="task-1", context_id=context_id, artifact_id="art-1", name="answer"
    )
    rendered = chunks.render(placeholder, append=True, last=False)
    assert rendered == expected(placeholder, append=True, last=False, context_id=context_id)
    event = load_event(rendered)
    assert isinstance(event, ArtifactUpdate) and event.context_id == context_id


def test_a_task_event_around_a_stored_task_is_what_the_serializer_writes() -> None:
    task = Task.model_validate(
        {
            "id": "t",
            "contextId": "c",
            "status": {"state": "TASK_STATE_SUBMITTED"},
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 'a "b" é'}]}],
        }
    )
    assert snapshot_event(dump_task(task)) == dump_event(TaskSnapshot(task=task))
    assert load_event(snapshot_event(dump_task(task))) == TaskSnapshot(task=task)


@pytest.mark.parametrize(
    "awkward_id", ["plain-id", 'a "quoted" id', "back\\slash\\", 'both \\" kinds', "é 漢字"]
)
def test_a_stored_event_is_read_without_a_parse_whatever_its_ids(
    awkward_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = TaskStatus(state=TaskState.INPUT_REQUIRED)
    task = Task(id=awkward_id, context_id=awkward_id, status=status)
    chunks = ArtifactChunks(
        task_id=awkward_id, context_id=awkward_id, artifact_id=awkward_id, name="answer"
    )
    events = [
        (dump_event(StatusUpdate(task_id=awkward_id, context_id=awkward_id, status=status)),
         "status", TaskState.INPUT_REQUIRED),
        (dump_event(TaskSnapshot(task=task)), "task", TaskState.INPUT_REQUIRED),
        (chunks.render("text", append=True, last=False), "artifact", None),
    ]  # fmt: skip

    def no_parse(raw: bytes) -> None:
        raise AssertionError(f"parsed: {raw!r}")

    monkeypatch.setattr("stores.codec.load_event", no_parse)
    for stored, kind, state in events:
        entry = stored_entry(3, stored)
        assert (entry.kind, entry.state, entry.stored) == (kind, state, stored)
