"""TaskRunner: a turn in the background, observed through the task's journal and snapshot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from agent.events import Usage
from agent.llm.base import LLMClient, LLMRequest, LLMResponse, LLMText
from agent.loop import ANSWER_SEPARATOR, AgentLoop
from agent.runtime.publisher import ANSWER_ARTIFACT_NAME
from agent.runtime.runner import TaskRunner
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from stores.base import ChunkSink, Fence, JournalWrite, StoreUnavailable, WriteRetry
from stores.chunks import WritingBehind
from stores.memory import InMemoryTaskStore
from stores.models import (
    ArtifactUpdate,
    JournalEntry,
    Role,
    StatusUpdate,
    Task,
    TaskSnapshot,
    TaskState,
)
from tests.fakes.tools import add

from .engine_helpers import OWNER, Stores, chunks, start_turn, status_updates
from .scripted_llm import ScriptedLLM, blocked, call, crash, fail, text, tools

HOLDER = "process-1"
CANCELED_TEXT = "The task was canceled."


def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


TOOL_STARTED = asyncio.Event  # type alias for readability below


class Rig:
    """A runner over in-memory stores (engine_helpers.Stores), driven like the request handler."""

    def __init__(self, llm: ScriptedLLM, loop: AgentLoop) -> None:
        self.llm = llm
        self.stores = Stores()
        self.tasks, self.checkpoints, self.leases = (
            self.stores.tasks,
            self.stores.checkpoints,
            self.stores.leases,
        )
        self.runner = self.make_runner(loop)

    def make_runner(self, loop: AgentLoop) -> TaskRunner:
        return self.stores.runner(loop, holder=HOLDER)

    async def submit(self, content: str = "hello", *, context_id: str | None = None) -> Task:
        task, message = await self.stores.new_task(content, context_id=context_id)
        await start_turn(self.runner, task, message)
        return task

    async def journal(self, task_id: str, *, timeout_s: float = 5.0) -> list[JournalEntry]:
        """Every journal entry, up to and including the one that ends the turn."""
        return await self.stores.journal_until_end(task_id, timeout_s=timeout_s)

    async def snapshot(self, task_id: str) -> Task:
        return await self.stores.snapshot(task_id)

    async def claim_is_free(self, context_id: str) -> bool:
        return await self.stores.claim_is_free(context_id)


def progress_texts(entries: list[JournalEntry]) -> list[str]:
    return [
        u.status.message.text()
        for u in status_updates(entries)
        if u.status.state == TaskState.WORKING and u.status.message is not None
    ]


@pytest.fixture
async def rig(llm: ScriptedLLM):
    toolbox = Toolbox([FunctionTool(add), FunctionTool(explode)], timeout_s=5)
    rig = Rig(llm, AgentLoop(llm, toolbox, system_prompt="sys", max_iterations=5))
    yield rig
    await rig.runner.shutdown()


# --- a text turn -----------------------------------------------------------------------------


async def test_text_turn_journal_snapshot_working_chunks_completed(rig: Rig) -> None:
    rig.llm.script(text("Hel", "lo", " there"))
    task = await rig.submit("hi")
    entries = await rig.journal(task.id)

    assert [e.position for e in entries] == list(range(1, len(entries) + 1))
    first, working, *middle, completed = entries
    assert first.position == 1
    assert isinstance(first.event, TaskSnapshot)
    assert first.event.task.id == task.id
    assert first.event.task.status.state == TaskState.SUBMITTED
    assert isinstance(working.event, StatusUpdate)
    assert working.event.status.state == TaskState.WORKING
    assert isinstance(completed.event, StatusUpdate)
    assert completed.event.status.state == TaskState.COMPLETED

    assert all(isinstance(e.event, ArtifactUpdate) for e in middle), middle
    updates = [e.event for e in middle]
    assert len(updates) >= 1
    assert updates[0].append is False
    assert all(u.append is True for u in updates[1:])
    assert all(u.last_chunk is False for u in updates[:-1])
    assert updates[-1].last_chunk is True
    assert len({u.artifact.artifact_id for u in updates}) == 1
    assert all(u.artifact.name == ANSWER_ARTIFACT_NAME for u in updates)
    assert "".join(u.artifact.parts[0].text for u in updates) == "Hello there"
    assert all(u.task_id == task.id and u.context_id == task.context_id for u in updates)


async def test_text_turn_final_snapshot(rig: Rig) -> None:
    rig.llm.script(text("Hel", "lo", " there"))
    task = await rig.submit("hi")
    entries = await rig.journal(task.id)
    record = await rig.tasks.get(task.id, owner=OWNER)
    assert record is not None
    final = record.task

    assert record.position == entries[-1].position
    assert final.status.state == TaskState.COMPLETED
    (artifact,) = final.artifacts
    assert [p.text for p in artifact.parts] == ["Hello there"]
    assert artifact.artifact_id == chunks(entries)[0].artifact.artifact_id
    assert [m.role for m in final.history] == [Role.USER, Role.AGENT]
    assert final.history[0].text() == "hi"
    assert final.history[1].text() == "Hello there"
    assert final.history[1].task_id == task.id
    assert final.history[1].context_id == task.context_id
    assert final.metadata["usage"]["llmCalls"] == 1
    assert final.metadata["usage"]["toolCalls"] == 0


async def test_turn_end_releases_the_context_claim_and_checkpoint(rig: Rig) -> None:
    rig.llm.script(text("done"))
    task = await rig.submit()
    await rig.journal(task.id)
    for _ in range(50):  # the release happens right after the last event is published
        if not rig.runner.is_running(task.id, owner=OWNER):
            break
        await asyncio.sleep(0.01)
    assert not rig.runner.is_running(task.id, owner=OWNER)
    assert await rig.claim_is_free(task.context_id)
    assert await rig.checkpoints.load(task.id, owner=OWNER) is None
    assert await rig.leases.acquire(task.id, owner=OWNER, holder="process-2", ttl_s=5), (
        "the finished turn still holds its lease"
    )


async def test_snapshot_then_journal_after_its_position_misses_nothing(rig: Rig) -> None:
    gate = asyncio.Event()
    second = blocked(gate, then=text("Two."))
    rig.llm.script(tools(call("c1", "add", {"a": 1, "b": 1}), chunks=["Let me add."]), second)
    task = await rig.submit()
    await asyncio.wait_for(second.entered.wait(), 2)

    # Mid-turn: the snapshot is the WORKING one; text chunks and progress came after it.
    record = await rig.tasks.get(task.id, owner=OWNER)
    assert record.task.status.state == TaskState.WORKING
    after = await rig.tasks.read(task.id, owner=OWNER, after=record.position, timeout_s=0)
    assert after, "events published after the snapshot are missing"
    assert after[0].position == record.position + 1
    assert "".join(u.artifact.parts[0].text for u in chunks(after)) == "Let me add."

    gate.set()
    entries = await rig.journal(task.id)
    tail = [e for e in entries if e.position > record.position]
    assert "".join(u.artifact.parts[0].text for u in chunks(tail)) == (
        "Let me add." + ANSWER_SEPARATOR + "Two."
    )


# --- tools -----------------------------------------------------------------------------------


async def test_tool_progress_status_updates(rig: Rig) -> None:
    rig.llm.script(
        tools(call("c1", "add", {"a": 1, "b": 2})),
        tools(call("c2", "explode")),
        text("All done."),
    )
    task = await rig.submit()
    entries = await rig.journal(task.id)

    assert progress_texts(entries) == [
        "calling add",
        "add finished",
        "calling explode",
        "explode failed",
    ]
    final = await rig.snapshot(task.id)
    assert final.status.state == TaskState.COMPLETED
    assert final.metadata["usage"]["toolCalls"] == 2
    assert final.metadata["usage"]["llmCalls"] == 3
    assert "".join(u.artifact.parts[0].text for u in chunks(entries)) == "All done."


async def test_text_before_a_tool_call_is_streamed_before_the_tool_runs(rig: Rig) -> None:
    rig.llm.script(
        tools(call("c1", "add", {"a": 1, "b": 2}), chunks=["Let me ", "check."]),
        text("It is 3."),
    )
    task = await rig.submit()
    entries = await rig.journal(task.id)

    order = [
        ("chunk", e.event.artifact.parts[0].text)
        if isinstance(e.event, ArtifactUpdate)
        else (
            "status",
            e.event.status.message.text() if e.event.status.message else e.event.status.state,
        )
        for e in entries[1:]
        if not isinstance(e.event, TaskSnapshot)
    ]
    calling = order.index(("status", "calling add"))
    chunk_texts_before = "".join(t for kind, t in order[:calling] if kind == "chunk")
    assert chunk_texts_before == "Let me check."
    updates = chunks(entries)
    assert "".join(u.artifact.parts[0].text for u in updates) == (
        "Let me check." + ANSWER_SEPARATOR + "It is 3."
    )
    assert [u.append for u in updates] == [False] + [True] * (len(updates) - 1)
    assert [u.last_chunk for u in updates] == [False] * (len(updates) - 1) + [True]
    final = await rig.snapshot(task.id)
    assert final.artifacts[0].parts[0].text == "Let me check." + ANSWER_SEPARATOR + "It is 3."


# --- failures --------------------------------------------------------------------------------


async def test_model_failure_fails_the_task_with_the_reason(rig: Rig) -> None:
    rig.llm.script(fail("provider said: invalid api key"))
    task = await rig.submit()
    entries = await rig.journal(task.id)

    last = entries[-1].event
    assert last.status.state == TaskState.FAILED
    assert "provider said: invalid api key" in last.status.message.text()
    final = await rig.snapshot(task.id)
    assert final.status.state == TaskState.FAILED
    assert final.metadata["usage"]["llmCalls"] == 1
    assert final.artifacts == []
    assert not chunks(entries)
    await asyncio.sleep(0.01)
    assert await rig.claim_is_free(task.context_id)


async def test_adapter_crash_fails_the_task_as_internal_error(rig: Rig) -> None:
    rig.llm.script(crash(RuntimeError("adapter bug")))
    task = await rig.submit()
    entries = await rig.journal(task.id)

    last = entries[-1].event
    assert last.status.state == TaskState.FAILED
    assert "internal error" in last.status.message.text()
    assert "adapter bug" not in last.status.message.text()
    await asyncio.sleep(0.01)
    assert await rig.claim_is_free(task.context_id)


# --- cancel ----------------------------------------------------------------------------------


async def test_cancel_mid_model_call(rig: Rig) -> None:
    step = blocked()
    rig.llm.script(step)
    task = await rig.submit()
    await asyncio.wait_for(step.entered.wait(), 2)
    assert rig.runner.is_running(task.id, owner=OWNER)

    assert await rig.runner.cancel(task.id, owner=OWNER) is True

    assert not rig.runner.is_running(task.id, owner=OWNER)
    assert step.cancelled, "the model call was not interrupted"
    final = await rig.snapshot(task.id)
    assert final.status.state == TaskState.CANCELED
    assert final.status.message.text() == CANCELED_TEXT
    entries = await rig.journal(task.id)
    assert [u.status.state for u in status_updates(entries)] == [
        TaskState.WORKING,
        TaskState.CANCELED,
    ]
    record = await rig.tasks.get(task.id, owner=OWNER)
    assert record.position == entries[-1].position
    assert await rig.claim_is_free(task.context_id)
    assert await rig.checkpoints.load(task.id, owner=OWNER) is None


async def test_a_wait_for_the_local_turn_ends_with_it_and_a_cancelled_wait_leaves_it(
    rig: Rig,
) -> None:
    gate = asyncio.Event()
    rig.llm.script(blocked(gate, then=text("Done.")))
    task = await rig.submit()
    waits = [
        asyncio.create_task(rig.runner.until_local_turn_ends(task.id, owner=OWNER))
        for _ in range(2)
    ]
    await asyncio.sleep(0.05)
    waits[0].cancel()  # a client that stops waiting (a drain) does not stop the turn
    await asyncio.sleep(0.05)
    assert rig.runner.is_running(task.id, owner=OWNER) and not waits[1].done()
    gate.set()
    turn = await asyncio.wait_for(waits[1], 2)
    assert turn is not None and turn.settled is not None
    assert turn.settled.task.status.state == TaskState.COMPLETED
    assert await rig.runner.until_local_turn_ends(task.id, owner=OWNER) is None  # over here


async def test_a_store_found_unreachable_ends_the_waits_not_the_turn(rig: Rig) -> None:
    """A replica cut off from its store: a blocking send waiting on a turn here is told at once
    (the store-unavailable error, naming its task), while the turn waits for the store and goes
    on; a wait that begins afterwards waits for the turn again."""
    gate = asyncio.Event()
    rig.llm.script(blocked(gate, then=text("Done.")))
    task = await rig.submit()
    wait = asyncio.create_task(rig.runner.until_local_turn_ends(task.id, owner=OWNER))
    await asyncio.sleep(0.05)
    rig.runner.store_unreachable("lease renewal")
    with pytest.raises(StoreUnavailable) as raised:
        await asyncio.wait_for(wait, 2)
    assert raised.value.task_id == task.id and task.id in str(raised.value)
    assert rig.runner.is_running(task.id, owner=OWNER)
    gate.set()
    turn = await asyncio.wait_for(rig.runner.until_local_turn_ends(task.id, owner=OWNER), 2)
    assert turn is not None and turn.settled is not None
    assert turn.settled.task.status.state == TaskState.COMPLETED


async def test_a_wait_for_the_local_turn_goes_on_in_the_pass_the_turn_ends(rig: Rig) -> None:
    """Woken by the turn's last step, not through its job's end (whose done callbacks run a
    pass later, and `asyncio.wait`'s waiter one more): a blocking send is answered sooner."""
    rig.llm.script(text("Done."))
    task = await rig.submit()
    turn = await rig.runner.until_local_turn_ends(task.id, owner=OWNER)
    assert turn is not None and turn.settled is not None
    # The job's bookkeeping (its done callback) has not run yet: this waiter went first.
    assert rig.runner.is_running(task.id, owner=OWNER)
    await asyncio.sleep(0)
    assert not rig.runner.is_running(task.id, owner=OWNER)


async def test_a_wait_for_a_turn_stopped_before_its_first_step_ends_with_it(rig: Rig) -> None:
    """A waiter that came between the launch and the job's first step (as a blocking send's
    handler does) is woken by the job's end when the job never ran (stopped at once)."""
    task = await rig.submit()  # nothing scripted: the turn never gets to call the model
    job, _ = rig.runner._running[(OWNER, task.id)]
    job.cancel()  # before its first step: the turn's own code never runs
    async with asyncio.timeout(2):  # (in this task: it waits before the job's step runs)
        turn = await rig.runner.until_local_turn_ends(task.id, owner=OWNER)
    assert turn is not None and turn.task.id == task.id
    assert job.cancelled() and rig.llm.calls == 0


async def test_cancel_before_the_first_step(rig: Rig) -> None:
    task = await rig.submit()  # nothing scripted: the model must never be called
    assert await rig.runner.cancel(task.id, owner=OWNER) is True

    final = await rig.snapshot(task.id)
    assert final.status.state == TaskState.CANCELED
    entries = await rig.journal(task.id)
    assert isinstance(entries[0].event, TaskSnapshot)
    assert [u.status.state for u in status_updates(entries)] == [TaskState.CANCELED]
    assert rig.llm.calls == 0
    assert await rig.claim_is_free(task.context_id)
    assert not rig.runner.is_running(task.id, owner=OWNER)


async def test_cancel_while_a_tool_runs_stops_the_tool(rig: Rig) -> None:
    tool_started = asyncio.Event()
    tool_cancelled = asyncio.Event()

    async def hang() -> str:
        """Hang until cancelled."""
        tool_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "never"

    loop = AgentLoop(rig.llm, Toolbox([FunctionTool(hang)], timeout_s=30), max_iterations=5)
    runner = rig.runner = rig.make_runner(loop)
    rig.llm.script(tools(call("h1", "hang")))
    task = await rig.submit()
    await asyncio.wait_for(tool_started.wait(), 2)

    assert await runner.cancel(task.id, owner=OWNER) is True
    await asyncio.wait_for(tool_cancelled.wait(), 1)
    final = await rig.snapshot(task.id)
    assert final.status.state == TaskState.CANCELED
    assert await rig.claim_is_free(task.context_id)


async def test_cancel_of_a_task_not_running_here(rig: Rig) -> None:
    assert await rig.runner.cancel("no-such-task", owner=OWNER) is False
    rig.llm.script(text("done"))
    task = await rig.submit()
    await rig.journal(task.id)
    await asyncio.sleep(0.01)
    assert await rig.runner.cancel(task.id, owner=OWNER) is False
    assert (await rig.snapshot(task.id)).status.state == TaskState.COMPLETED


async def test_turns_of_different_contexts_run_concurrently(rig: Rig) -> None:
    gate = asyncio.Event()
    first = blocked(gate, then=text("first"))
    rig.llm.script(first, text("second"))
    slow = await rig.submit("slow")
    await asyncio.wait_for(first.entered.wait(), 2)
    fast = await rig.submit("fast")
    entries = await rig.journal(fast.id)
    assert entries[-1].event.status.state == TaskState.COMPLETED
    assert (await rig.snapshot(slow.id)).status.state == TaskState.WORKING
    gate.set()
    entries = await rig.journal(slow.id)
    assert entries[-1].event.status.state == TaskState.COMPLETED


def writing_behind(tasks: InMemoryTaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the store hand turns the chunk sink of a store a write waits for (Redis): chunks
    written behind the turn, in batches, each through `tasks.publish_chunks`."""

    def chunk_sink(
        task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        async def write(batch: Sequence[bytes], event_id: str) -> int:
            return await tasks.publish_chunks(
                task_id, batch, owner=owner, event_id=event_id, fence=fence
            )

        return WritingBehind(write, retry=retry)

    monkeypatch.setattr(tasks, "chunk_sink", chunk_sink)


async def test_cancel_while_chunks_are_being_written(
    pausing: tuple[Rig, PausingModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks go out behind the turn while the model is between chunks; a cancel that comes
    while their write is out ends the turn canceled after it, with a journal without gaps (the
    chunk held back for lookahead is dropped)."""
    rig, _ = pausing
    writing, release = asyncio.Event(), asyncio.Event()
    publish_chunks = rig.tasks.publish_chunks
    writing_behind(rig.tasks, monkeypatch)

    async def slow_publish_chunks(*args: object, **kwargs: object) -> int:
        writing.set()
        await release.wait()
        return await publish_chunks(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.tasks, "publish_chunks", slow_publish_chunks)
    task = await rig.submit()
    await asyncio.wait_for(writing.wait(), 2)
    cancel = asyncio.create_task(rig.runner.cancel(task.id, owner=OWNER))
    await asyncio.sleep(0)  # the cancel is in: the turn stops, and waits for the write out
    assert not cancel.done()
    release.set()
    assert await cancel is True

    entries = await rig.journal(task.id)
    assert (await rig.snapshot(task.id)).status.state == TaskState.CANCELED
    assert [e.position for e in entries] == list(range(1, len(entries) + 1))
    assert [u.status.state for u in status_updates(entries)] == [
        TaskState.WORKING,
        TaskState.CANCELED,
    ]
    assert [u.artifact.parts[0].text for u in chunks(entries)] == ["a"]
    assert await rig.claim_is_free(task.context_id)


async def test_chunks_not_yet_taken_by_a_write_go_with_the_next_event(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a store a write waits for (Redis), an answer streamed faster than it is written costs
    no write of its own: the chunks still waiting go in the COMPLETED event's write, before it."""
    writing_behind(rig.tasks, monkeypatch)
    writes: list[tuple[str, int]] = []
    publish, publish_chunks = rig.tasks.publish, rig.tasks.publish_chunks

    async def counted_publish(task_id: str, write: JournalWrite, *, owner: str) -> int:
        event = write.event
        state = event.status.state.value if isinstance(event, StatusUpdate) else "other"
        writes.append((state, len(write.chunks)))
        return await publish(task_id, write, owner=owner)

    async def counted_chunks(*args: object, **kwargs: object) -> int:
        writes.append(("chunks", len(args[1])))  # type: ignore[arg-type]
        return await publish_chunks(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.tasks, "publish", counted_publish)
    monkeypatch.setattr(rig.tasks, "publish_chunks", counted_chunks)
    rig.llm.script(text("a", "b", "c"))
    task = await rig.submit()

    entries = await rig.journal(task.id)
    assert writes == [("TASK_STATE_WORKING", 0), ("TASK_STATE_COMPLETED", 3)]
    assert [e.position for e in entries] == list(range(1, len(entries) + 1))
    answer = chunks(entries)
    assert [u.artifact.parts[0].text for u in answer] == ["a", "b", "c"]
    assert [(u.append, u.last_chunk) for u in answer] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert [u.status.state for u in status_updates(entries)][-1] == TaskState.COMPLETED
    assert (await rig.snapshot(task.id)).status.state == TaskState.COMPLETED


# --- chunks written in process (the in-memory store) -----------------------------------------


class PausingModel(LLMClient):
    """Streams "a", "b", waits for `gates[0]`, "c", waits for `gates[1]`, "d" and the end: a
    model between chunks (`paused[i]` is set while it waits at `gates[i]`)."""

    def __init__(self) -> None:
        self.gates = (asyncio.Event(), asyncio.Event())
        self.paused = (asyncio.Event(), asyncio.Event())

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]:
        yield LLMText(text="a")
        yield LLMText(text="b")
        for gate, paused, chunk in zip(self.gates, self.paused, ("c", "d"), strict=True):
            paused.set()
            await gate.wait()
            yield LLMText(text=chunk)
        yield LLMResponse(content="abcd", tool_calls=[], finish_reason="stop", usage=Usage())


@pytest.fixture
async def pausing() -> AsyncIterator[tuple[Rig, PausingModel]]:
    model = PausingModel()
    rig = Rig(ScriptedLLM(), AgentLoop(model, Toolbox([], timeout_s=5), max_iterations=5))
    assert type(rig.tasks) is InMemoryTaskStore  # its own sink: chunks written at once
    yield rig, model
    for gate in model.gates:
        gate.set()
    await rig.runner.shutdown()


async def test_a_chunk_is_in_the_journal_while_the_model_is_still_streaming(
    pausing: tuple[Rig, PausingModel],
) -> None:
    """No write behind the turn, yet no chunk waits for the turn's next event: what the model
    sent is journaled when the turn's step ends ("b" is held back to learn if it is the last)."""
    rig, model = pausing
    task = await rig.submit()
    await asyncio.wait_for(model.paused[0].wait(), 2)
    entries = await rig.tasks.read(task.id, owner=OWNER, after=2, timeout_s=2)
    assert [u.artifact.parts[0].text for u in chunks(entries)] == ["a"]
    for gate in model.gates:
        gate.set()
    entries = await rig.journal(task.id)
    assert [u.artifact.parts[0].text for u in chunks(entries)] == ["a", "b", "c", "d"]
    assert entries[-1].event.status.state == TaskState.COMPLETED  # type: ignore[union-attr]


async def test_a_chunk_write_refused_between_events_stops_the_turn(
    pausing: tuple[Rig, PausingModel], caplog: pytest.LogCaptureFixture
) -> None:
    """Another process took the turn over while the model was between chunks: the write of the
    next chunk ("b", written as the turn's step ends, where no one awaits it) is refused
    (LeaseLost), and the turn stops at its next chunk, writing nothing more."""
    rig, model = pausing
    task = await rig.submit()
    await asyncio.wait_for(model.paused[0].wait(), 2)
    holder = rig.runner.lease_holder(task.id, owner=OWNER)
    assert holder is not None
    await rig.leases.hand_over(task.id, owner=OWNER, holder=holder)
    assert await rig.leases.acquire(task.id, owner=OWNER, holder="process-2", ttl_s=5)
    model.gates[0].set()
    await asyncio.wait_for(model.paused[1].wait(), 2)
    await asyncio.sleep(0)  # the turn's step has ended: "b" was written, or refused
    model.gates[1].set()
    for _ in range(200):
        if not rig.runner.is_running(task.id, owner=OWNER):
            break
        await asyncio.sleep(0.01)
    assert not rig.runner.is_running(task.id, owner=OWNER)
    entries = await rig.tasks.read(task.id, owner=OWNER, after=0, timeout_s=0)
    assert [u.artifact.parts[0].text for u in chunks(entries)] == ["a"]
    assert [u.status.state for u in status_updates(entries)] == [TaskState.WORKING]
    assert "lease lost" in caplog.text
    assert "Exception in callback" not in caplog.text
