"""A foreign agent for the tests: the official `a2a-sdk` server, run by the SDK of either
generation (1.x in the project's venv, 0.3 in `.venv-a2a03`), JSON-RPC at `/`.

    python sdk_agent.py PORT

It says what it is doing (a working status with a message), answers "echo: <text>", and for a
text that mentions a city it first asks "Which city?" (input-required), then answers
"Sunny in <answer>."; a text with "fail" fails the task.
"""

from __future__ import annotations

import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, Task, TaskStatus

try:  # 1.x: protobuf types, routes for Starlette
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.types import AgentInterface, TaskState
    from starlette.applications import Starlette

    V03 = False
except ImportError:  # 0.3: pydantic types, an application class
    from a2a.server.apps import A2AStarletteApplication
    from a2a.types import TaskState, TextPart

    V03 = True

PORT = int(sys.argv[1])
GENERATION = "0.3" if V03 else "1.0"


def text_part(text: str) -> Part:
    return Part(root=TextPart(text=text)) if V03 else Part(text=text)


def state(name: str) -> TaskState:
    """A state by its 0.3 name (`input-required`), in this SDK's enum."""
    member = name.replace("-", "_")
    return getattr(TaskState, member if V03 else f"TASK_STATE_{member.upper()}")


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        said = context.get_user_input()
        updater = TaskUpdater(event_queue, task_id, context_id)
        current = context.current_task
        if current is None:
            history = [context.message] if context.message else []
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=state("submitted")),
                    history=history,
                )
            )
        await updater.start_work(updater.new_agent_message([text_part(f"{GENERATION} is on it")]))
        if current is not None and current.status.state == state("input-required"):
            answer = f"Sunny in {said}."
        elif "fail" in said:
            await updater.failed(updater.new_agent_message([text_part("it broke")]))
            return
        elif "city" in said:
            await updater.requires_input(updater.new_agent_message([text_part("Which city?")]))
            return
        else:
            answer = f"echo: {said}"
        await updater.add_artifact([text_part(answer)], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def main() -> None:
    url = f"http://127.0.0.1:{PORT}/"
    common = {
        "name": f"SDK {GENERATION} Agent",
        "description": f"The official a2a-sdk {GENERATION} server",
        "version": "1.0",
        "capabilities": AgentCapabilities(streaming=True),
        "skills": [AgentSkill(id="echo", name="echo", description="echoes", tags=["test"])],
        "default_input_modes": ["text/plain"],
        "default_output_modes": ["text/plain"],
    }
    if V03:
        card = AgentCard(url=url, preferred_transport="JSONRPC", **common)
        handler = DefaultRequestHandler(Executor(), InMemoryTaskStore())
        app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    else:
        interface = AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        card = AgentCard(supported_interfaces=[interface], **common)
        handler = DefaultRequestHandler(Executor(), InMemoryTaskStore(), card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        app = Starlette(routes=routes)
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")


if __name__ == "__main__":
    main()
