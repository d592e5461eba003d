"""The request handler over a runner, wired as app.main wires it (without push delivery)."""

from __future__ import annotations

from agent.runtime.admission import Slots
from agent.runtime.drain import Drain
from agent.runtime.journal import JournalFollower
from agent.runtime.runner import TaskRunner
from agent.runtime.tasks import TaskLifecycle
from app.handler import RequestHandler
from stores.base import CheckpointStore, MessageStore, TaskStore


def build_handler(
    runner: TaskRunner,
    *,
    tasks: TaskStore,
    messages: MessageStore,
    checkpoints: CheckpointStore,
    read_block_s: float = 15.0,
    max_streams: int = 1000,
    drain: Drain | None = None,
) -> RequestHandler:
    drain = drain or Drain()
    journal = JournalFollower(tasks, read_block_s=read_block_s, drain=drain, local=runner)
    lifecycle = TaskLifecycle(
        tasks=tasks, messages=messages, checkpoints=checkpoints, runner=runner, journal=journal
    )
    return RequestHandler(
        tasks=tasks,
        lifecycle=lifecycle,
        journal=journal,
        streams=Slots(max_streams, what="open streams"),
        drain=drain,
    )
