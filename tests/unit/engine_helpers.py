"""Shared helpers for the agent-engine unit tests: loops, recording hooks and tools, a runner rig.

Module-level hook objects (`HOOK_INSTANCE`, `HookClass`, `HOOK_LIST`, ...) are targets for
`load_hooks` references (`f"{__name__}:HOOK_INSTANCE"`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.agent import Agent
from agent.context import TurnContext
from agent.events import CheckpointReached
from agent.hooks import Approval, HookChain, Hooks
from agent.llm.base import LLMRequest, LLMResponse
from agent.loop import AgentLoop
from agent.runtime.observer import TurnObserver
from agent.runtime.runner import TaskRunner
from agent.runtime.turn import TurnCheckpoint
from agent.state import LoopState
from agent.tools.base import ToolResult
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from stores.base import Fence, JournalWrite
from stores.memory import (
    InMemoryCheckpointStore,
    InMemoryLeaseStore,
    InMemoryMessageStore,
    InMemoryTaskStore,
)
from stores.models import (
    ArtifactUpdate,
    ChatMessage,
    JournalEntry,
    Message,
    Part,
    Role,
    StatusUpdate,
    Task,
    TaskState,
    TaskStatus,
    ToolCall,
)

from .scripted_llm import ScriptedLLM

SYSTEM = "You are an engine-test assistant."
USER = ChatMessage(role="user", content="hello there")
TURN = TurnContext(owner="owner-e", context_id="ctx-e", task_id="task-e")
OWNER = "owner-e"


# --- tools -----------------------------------------------------------------------------------


class ToolLog:
    """Counts and records the calls of the tools it makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    def tools(self) -> list[Any]:
        log = self

        def add(a: int, b: int) -> int:
            """Add two integers.

            Args:
                a: The first number.
                b: The second number.
            """
            log.calls.append(("add", {"a": a, "b": b}))
            return a + b

        def echo(text: str) -> str:
            """Echo a text back.

            Args:
                text: The text.
            """
            log.calls.append(("echo", {"text": text}))
            return text

        def danger(target: str = "all") -> str:
            """Do something dangerous.

            Args:
                target: What to destroy.
            """
            log.calls.append(("danger", {"target": target}))
            return f"destroyed {target}"

        return [add, echo, danger]


def make_loop(
    llm: ScriptedLLM,
    functions: Iterable[Any] = (),
    *,
    hooks: Iterable[Hooks] = (),
    failure_mode: str = "fail",
    system_prompt: str | None = SYSTEM,
    max_iterations: int = 10,
    timeout_s: float = 5.0,
    **options: Any,
) -> AgentLoop:
    toolbox = Toolbox([FunctionTool(f) for f in functions], timeout_s=timeout_s)
    return AgentLoop(
        llm,
        toolbox,
        system_prompt=system_prompt,
        max_iterations=max_iterations,
        hooks=HookChain(hooks, failure_mode=failure_mode),
        **options,
    )


async def collect(loop: AgentLoop, state: LoopState, turn: TurnContext = TURN) -> list[Any]:
    """Every event of one `run` (checkpoints included)."""
    return [event async for event in loop.run(state, turn)]


def of(events: list[Any], kind: type) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


def without_checkpoints(events: list[Any]) -> list[Any]:
    return [event for event in events if not isinstance(event, CheckpointReached)]


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


def tool_names(request: LLMRequest) -> list[str]:
    return [tool["function"]["name"] for tool in request.tools]


# --- hooks -----------------------------------------------------------------------------------


class RecordingHooks(Hooks):
    """Records every hook call as (method name, detail)."""

    def __init__(self, log: list[tuple[str, Any]] | None = None, tag: str = "") -> None:
        self.log: list[tuple[str, Any]] = log if log is not None else []
        self.tag = tag

    def _record(self, name: str, detail: Any = None) -> None:
        self.log.append((f"{self.tag}{name}", detail))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    async def on_turn_start(self, turn: TurnContext) -> None:
        self._record("on_turn_start", turn)

    async def on_turn_end(self, turn: TurnContext, outcome: Any) -> None:
        self._record("on_turn_end", outcome)

    async def before_llm_call(self, turn: TurnContext, request: LLMRequest) -> LLMRequest | None:
        self._record("before_llm_call", request)
        return None

    async def after_llm_call(self, turn: TurnContext, response: LLMResponse) -> None:
        self._record("after_llm_call", response)

    async def before_tool_call(self, turn: TurnContext, call: ToolCall) -> Any:
        self._record("before_tool_call", call)
        return None

    async def after_tool_call(
        self, turn: TurnContext, call: ToolCall, result: ToolResult
    ) -> ToolResult | None:
        self._record("after_tool_call", (call, result))
        return None

    async def approve_tool_call(self, turn: TurnContext, call: ToolCall) -> Approval | None:
        self._record("approve_tool_call", call)
        return None


class HookClass(Hooks):
    """A Hooks subclass constructible without arguments (a `load_hooks` target)."""


class OtherHookClass(Hooks):
    pass


class NeedsArguments(Hooks):
    def __init__(self, required: str) -> None:
        self.required = required


HOOK_INSTANCE = HookClass()
HOOK_LIST = [HOOK_INSTANCE, OtherHookClass]
HOOK_TUPLE = (OtherHookClass(),)
NOT_A_HOOK = object()
LIST_WITH_NOT_A_HOOK = [HookClass, "not a hook"]


# --- a TaskRunner over in-memory stores ------------------------------------------------------


class RecordingCheckpoints(InMemoryCheckpointStore):
    """Keeps every checkpoint ever saved, parsed."""

    def __init__(self, *, leases: InMemoryLeaseStore | None = None) -> None:
        super().__init__(leases=leases)
        self.saved: list[tuple[str, TurnCheckpoint]] = []

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        await super().save(task_id, checkpoint, owner=owner, fence=fence)
        try:
            self.saved.append((task_id, TurnCheckpoint.model_validate_json(checkpoint)))
        except ValueError:
            pass  # a test planting a broken checkpoint

    def of(self, task_id: str) -> list[TurnCheckpoint]:
        return [checkpoint for saved_id, checkpoint in self.saved if saved_id == task_id]


@dataclass
class Stores:
    """The in-memory stores wired as in production: task and checkpoint writes are fenced by
    the lease store."""

    leases: InMemoryLeaseStore = field(default_factory=InMemoryLeaseStore)
    messages: InMemoryMessageStore = field(default_factory=InMemoryMessageStore)

    def __post_init__(self) -> None:
        self.tasks = InMemoryTaskStore(leases=self.leases)
        self.checkpoints = RecordingCheckpoints(leases=self.leases)

    def runner(
        self,
        loop: AgentLoop,
        *,
        holder: str,
        lease_ttl_s: float = 15.0,
        history: int = 50,
        observer: TurnObserver | None = None,
    ) -> TaskRunner:
        return TaskRunner(
            Agent(loop, self.messages, history_max_messages=history),
            tasks=self.tasks,
            messages=self.messages,
            checkpoints=self.checkpoints,
            leases=self.leases,
            holder=holder,
            lease_ttl_s=lease_ttl_s,
            observer=observer,
        )

    async def new_task(
        self, content: str = "hello", *, context_id: str | None = None
    ) -> tuple[Task, Message]:
        """What the request handler does for a new message: claim the context, create the task."""
        context_id = context_id or f"ctx-{uuid.uuid4().hex[:8]}"
        task_id = f"task-{uuid.uuid4().hex[:8]}"
        assert await self.messages.claim(context_id, task_id, owner=OWNER) is None
        message = user_message(content, task_id=task_id, context_id=context_id)
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.SUBMITTED),
            history=[message],
        )
        record = await self.tasks.create(task, owner=OWNER)
        return record.task, message

    async def submit(
        self,
        runner: TaskRunner,
        content: str = "hello",
        *,
        extensions: frozenset[str] = frozenset(),
    ) -> Task:
        task, message = await self.new_task(content)
        await start_turn(runner, task, message, extensions=extensions)
        return task

    async def entries(self, task_id: str, *, after: int = 0) -> list[JournalEntry]:
        return await self.tasks.read(task_id, owner=OWNER, after=after, timeout_s=0)

    async def journal_until_end(
        self, task_id: str, *, after: int = 0, timeout_s: float = 5.0
    ) -> list[JournalEntry]:
        """Journal entries after `after`, up to and including the one that ends the turn."""
        entries: list[JournalEntry] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            last = entries[-1].position if entries else after
            entries.extend(await self.tasks.read(task_id, owner=OWNER, after=last, timeout_s=0.2))
            if entries and ends_turn(entries[-1]):
                return entries
        raise AssertionError(f"the turn did not end within {timeout_s} s: {entries}")

    async def snapshot(self, task_id: str) -> Task:
        record = await self.tasks.get(task_id, owner=OWNER)
        assert record is not None
        return record.task

    async def position(self, task_id: str) -> int:
        entries = await self.entries(task_id)
        return entries[-1].position

    async def conversation(self, context_id: str) -> list[ChatMessage]:
        return await self.messages.window(context_id, owner=OWNER, limit=1000)

    async def claim_is_free(self, context_id: str) -> bool:
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        holder = await self.messages.claim(context_id, probe, owner=OWNER)
        if holder is None:
            await self.messages.release(context_id, probe, owner=OWNER)
        return holder is None


async def start_turn(
    runner: TaskRunner,
    task: Task,
    message: Message,
    *,
    owner: str = OWNER,
    trace_carrier: dict[str, str] | None = None,
    extensions: frozenset[str] = frozenset(),
) -> None:
    """Take the lease of an existing task and run a new turn for it (the handler's order,
    with the task already created)."""
    async with runner.starting(task.id, owner=owner) as start:
        runner.launch_new(start, task, message, trace_carrier=trace_carrier, extensions=extensions)


async def resume_turn(
    runner: TaskRunner,
    task: Task,
    checkpoint: TurnCheckpoint,
    *,
    owner: str = OWNER,
    recovered: bool = False,
) -> None:
    """Take the task's lease and its context's claim under it, and go on from a checkpoint (as
    the supervisor's takeover does)."""
    async with runner.starting(task.id, owner=owner) as start:
        assert start.fence is not None
        holder = await runner.claims.take(task.context_id, task.id, owner=owner, fence=start.fence)
        assert holder is None, f"the context is held by {holder!r}"
        runner.launch_resumed(start, task, checkpoint, recovered=recovered)


def user_message(content: str, *, task_id: str | None = None, context_id: str | None = None):
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.USER,
        parts=[Part(text=content)],
        task_id=task_id,
        context_id=context_id,
    )


def ends_turn(entry: JournalEntry) -> bool:
    event = entry.event
    return isinstance(event, StatusUpdate) and (
        event.status.state.is_terminal or event.status.state.is_interrupted
    )


def status_updates(entries: list[JournalEntry]) -> list[StatusUpdate]:
    return [e.event for e in entries if isinstance(e.event, StatusUpdate)]


def chunks(entries: list[JournalEntry]) -> list[ArtifactUpdate]:
    return [e.event for e in entries if isinstance(e.event, ArtifactUpdate)]


def chunk_text(update: ArtifactUpdate) -> str:
    return "".join(part.text or "" for part in update.artifact.parts)


async def wait_until(predicate: Any, *, timeout_s: float = 2.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def expire_lease(stores: Stores, task_id: str, holder: str) -> None:
    """The holder died: its lease runs out (taken with a tiny ttl)."""
    assert await stores.leases.acquire(task_id, owner=OWNER, holder=holder, ttl_s=0.001)
    await asyncio.sleep(0.005)
    assert any(ref.task_id == task_id for ref in await stores.leases.expired())


async def orphan_without_a_turn(stores: Stores, state: TaskState = TaskState.WORKING) -> Task:
    """A task whose process died before it saved anything: its lease expired, no checkpoint."""
    task, _ = await stores.new_task("lost")
    if state != TaskState.SUBMITTED:
        task.status = TaskStatus(state=state)
        update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=task.status)
        await stores.tasks.publish(task.id, JournalWrite(update, snapshot=task), owner=OWNER)
    await expire_lease(stores, task.id, "dead-process")
    return task
