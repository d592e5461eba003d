"""A turn that ends here (its lease lost, canceled, its job stopped) cuts its model call at once.

Issue 48, defect 5: a turn stopped while its model answer streamed in left the LiteLLM stream
open, and the model went on streaming to its natural end (tokens spent for nothing) while the
context's next turn already ran elsewhere. Here the real LiteLLM adapter calls the fake model
server over HTTP; the fake streams slowly (a minute in all), and each test stops the turn in
the middle of it and asserts what the fake saw: its client closed the connection before the
stream's end. (The fake records that when its stream ends: a call left open would end only
after the minute, past the test's wait, and show no disconnect.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from agent.llm.litellm import LiteLLMClient
from agent.loop import AgentLoop
from agent.runtime.runner import TaskRunner
from agent.tools.base import report_progress
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from stores import chunks as chunk_writes
from stores.base import ChunkSink, Fence, WriteRetry
from stores.chunks import WritingBehind
from stores.models import ArtifactUpdate, TaskState
from tests.fakes.fake_llm import FakeLLMServer, RecordedRequest, text, tool_calls

from .engine_helpers import OWNER, Stores, start_turn

HOLDER = "process-1"
CHUNKS = [f"w{n:03d} " for n in range(300)]  # 0.2 s apart: a minute, far past any wait here


@pytest.fixture
async def engine(fake_llm: FakeLLMServer) -> AsyncIterator[tuple[Stores, TaskRunner]]:
    model = LiteLLMClient(
        model="openai/fake-model", api_base=fake_llm.base_url, api_key="sk-test", num_retries=0
    )
    await model.warm_up()
    stores = Stores()
    runner = stores.runner(AgentLoop(model, Toolbox([], timeout_s=5)), holder=HOLDER)
    yield stores, runner
    await runner.shutdown()


async def _streaming(
    stores: Stores, runner: TaskRunner, fake_llm: FakeLLMServer, marker: str
) -> tuple[str, RecordedRequest]:
    """A turn whose model answer is streaming in (3 chunks in the journal): its task, the call."""
    fake_llm.script(text(CHUNKS, chunk_delay=0.2, when_user_contains=marker))
    task, message = await stores.new_task(f"a long answer {marker}")
    await start_turn(runner, task, message)
    after = 0
    seen = 0
    while seen < 3:
        entries = await stores.tasks.read(task.id, owner=OWNER, after=after, timeout_s=30)
        assert entries, "the model's answer never started streaming"
        seen += sum(isinstance(entry.event, ArtifactUpdate) for entry in entries)
        after = entries[-1].position
    (call,) = fake_llm.records_for(marker)
    assert call.finished_at is None
    return task.id, call


async def _stopped(runner: TaskRunner, task_id: str) -> None:
    await asyncio.wait_for(runner.until_local_turn_ends(task_id, owner=OWNER), 30)


async def _call_ended(call: RecordedRequest) -> RecordedRequest:
    """The call once the fake has ended it (a cut call: as soon as the fake sees it)."""
    for _ in range(1000):  # 20 s: a slow machine's margin (the stream lasts a minute)
        if call.finished_at is not None:
            break
        await asyncio.sleep(0.02)
    assert call.finished_at is not None, "the model call is still streaming: it was not cut"
    return call


async def test_a_turn_whose_lease_is_lost_cuts_its_model_call(
    engine: tuple[Stores, TaskRunner], fake_llm: FakeLLMServer, marker: str
) -> None:
    """Another process took the turn over mid-answer: the next chunk's write is refused
    (LeaseLost) and the turn stops here, its model call with it."""
    stores, runner = engine
    task_id, call = await _streaming(stores, runner, fake_llm, marker)
    holder = runner.lease_holder(task_id, owner=OWNER)
    assert holder is not None
    await stores.leases.hand_over(task_id, owner=OWNER, holder=holder)
    assert await stores.leases.acquire(task_id, owner=OWNER, holder="process-2", ttl_s=60)

    await _stopped(runner, task_id)
    assert (await _call_ended(call)).client_disconnected
    assert (await stores.snapshot(task_id)).status.state == TaskState.WORKING  # the new holder's


async def test_a_turn_canceled_while_it_waits_for_its_chunks_write_cuts_its_model_call(
    engine: tuple[Stores, TaskRunner],
    fake_llm: FakeLLMServer,
    marker: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cancel comes while the turn waits for its chunks' write (a store far behind: Redis
    writes them behind the turn, and the turn waits past MAX_UNWRITTEN_CHUNKS), not for the
    model: the model call is cut all the same."""
    stores, runner = engine
    held, waiting = asyncio.Event(), asyncio.Event()
    publish_chunks = stores.tasks.publish_chunks

    async def held_publish_chunks(*args: Any, **kwargs: Any) -> int:
        if held.is_set():
            await asyncio.Event().wait()  # the store stops answering (until the turn is canceled)
        return await publish_chunks(*args, **kwargs)

    class Watched(WritingBehind):
        async def written(self) -> None:
            if held.is_set():
                waiting.set()  # the turn waits for the write out
            await super().written()

    def chunk_sink(
        task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        async def write(batch: Sequence[bytes], event_id: str) -> int:
            return await held_publish_chunks(
                task_id, batch, owner=owner, event_id=event_id, fence=fence
            )

        return Watched(write, retry=retry)

    monkeypatch.setattr(stores.tasks, "chunk_sink", chunk_sink)
    monkeypatch.setattr(chunk_writes, "MAX_UNWRITTEN_CHUNKS", 1)  # the next chunk waits for it
    task_id, call = await _streaming(stores, runner, fake_llm, marker)
    held.set()
    await asyncio.wait_for(waiting.wait(), 30)

    assert await runner.cancel(task_id, owner=OWNER) is True
    assert (await stores.snapshot(task_id)).status.state == TaskState.CANCELED
    assert (await _call_ended(call)).client_disconnected


async def test_a_turn_stopped_here_cuts_its_model_call(
    engine: tuple[Stores, TaskRunner], fake_llm: FakeLLMServer, marker: str
) -> None:
    """Its job stopped without a cancel (its lease found lost by the renewal: `drop`)."""
    stores, runner = engine
    task_id, call = await _streaming(stores, runner, fake_llm, marker)
    await runner.drop(task_id, owner=OWNER)
    assert (await _call_ended(call)).client_disconnected


async def test_a_turn_whose_lease_is_lost_during_a_tool_call_has_cancelled_it_when_it_ends(
    fake_llm: FakeLLMServer, marker: str
) -> None:
    """A tool call's progress line is refused (LeaseLost): by the time the turn is over here,
    the call is cancelled (not left running until the garbage collector closes the turn)."""
    started, go, cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hang() -> str:
        """Report progress when told to, then hang until cancelled."""
        started.set()
        try:
            await go.wait()
            report_progress("still working")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    model = LiteLLMClient(
        model="openai/fake-model", api_base=fake_llm.base_url, api_key="sk-test", num_retries=0
    )
    stores = Stores()
    toolbox = Toolbox([FunctionTool(hang)], timeout_s=60)
    runner = stores.runner(AgentLoop(model, toolbox), holder=HOLDER)
    try:
        fake_llm.script(tool_calls([("hang", {})], when_user_contains=marker))
        task, message = await stores.new_task(f"call the tool {marker}")
        await start_turn(runner, task, message)
        await asyncio.wait_for(started.wait(), 30)
        holder = runner.lease_holder(task.id, owner=OWNER)
        assert holder is not None
        await stores.leases.hand_over(task.id, owner=OWNER, holder=holder)
        assert await stores.leases.acquire(task.id, owner=OWNER, holder="process-2", ttl_s=60)
        go.set()
        await _stopped(runner, task.id)
        assert cancelled.is_set(), "the turn ended with its tool call still running"
    finally:
        await runner.shutdown()
