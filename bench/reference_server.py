"""The reference of the side-by-side bench: the official `a2a-sdk` server (JSON-RPC at `/`) with an
executor that emits what `LLM_MODEL=scripted` makes our server emit: the task, a working status,
SCRIPTED_CHUNKS artifact chunks of 20 characters (SCRIPTED_DELAY_MS apart) and completed.

    .venv/bin/python bench/reference_server.py --port 9100
"""

from __future__ import annotations

import argparse
import asyncio
import os

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from agent.llm.scripted import scripted_chunk


class ScriptedExecutor(AgentExecutor):
    def __init__(self, chunks: int, delay_ms: float) -> None:
        self._chunks = [scripted_chunk(index) for index in range(chunks)]
        self._delay_s = delay_ms / 1000

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message] if context.message else [],
                )
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        for index, chunk in enumerate(self._chunks):
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
            await updater.add_artifact(
                [Part(text=chunk)],
                artifact_id="answer",
                name="answer",
                append=index > 0,
                last_chunk=index == len(self._chunks) - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def build(port: int) -> Starlette:
    card = AgentCard(
        name="reference",
        description="a2a-sdk reference server with a scripted executor",
        version="1.0",
        capabilities=AgentCapabilities(streaming=True),
        skills=[
            AgentSkill(id="scripted", name="scripted", description="a fixed answer", tags=["bench"])
        ],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
    )
    executor = ScriptedExecutor(
        int(os.environ.get("SCRIPTED_CHUNKS", "20")),
        float(os.environ.get("SCRIPTED_DELAY_MS", "0")),
    )
    handler = DefaultRequestHandler(executor, InMemoryTaskStore(), card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args()
    uvicorn.run(build(args.port), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
