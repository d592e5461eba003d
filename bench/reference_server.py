"""The reference of the side-by-side bench: the official `a2a-sdk` server (JSON-RPC at `/`) with an
executor that emits what `LLM_MODEL=scripted` makes our server emit: the task, a working status,
SCRIPTED_CHUNKS artifact chunks of 20 characters (SCRIPTED_DELAY_MS apart) and completed.

    .venv/bin/python bench/reference_server.py --port 9100
    .venv/bin/python bench/reference_server.py --port 9100 \
        --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/DB

With `--database-url` its tasks are in the SDK's `DatabaseTaskStore` (SQLAlchemy; the `tasks`
table created at startup by its `initialize()`, as `create_table=True` documents) on an engine of
`--pool-size` connections (10, our DATABASE_POOL_SIZE default; SQLAlchemy's overflow of 10 more
left as it is), in place of its `InMemoryTaskStore`. It saves the task at every event, as its
`TaskManager` does with any store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
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


def build(port: int, database_url: str | None = None, pool_size: int = 10) -> Starlette:
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
    store: TaskStore = InMemoryTaskStore()
    lifespan = None
    if database_url is not None:
        from a2a.server.tasks import DatabaseTaskStore
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(database_url, pool_size=pool_size)
        database = DatabaseTaskStore(engine, create_table=True)
        store = database

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            await database.initialize()  # CREATE TABLE tasks, before the first request
            try:
                yield
            finally:
                await engine.dispose()

    handler = DefaultRequestHandler(executor, store, card)
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    return Starlette(routes=routes, lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument(
        "--database-url", help="postgresql+asyncpg://...: the SDK's DatabaseTaskStore"
    )
    parser.add_argument("--pool-size", type=int, default=10)
    args = parser.parse_args()
    app = build(args.port, args.database_url, args.pool_size)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
