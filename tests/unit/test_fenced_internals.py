"""Other libraries' private names, fenced (issue 41): each is looked up where it is used, and
without it the server takes the public path and still serves. Here the names are removed as a
later Python or uvicorn would lack them; tests/e2e/test_public_paths.py serves the whole wire
from an `a2a-server` started without them, tests/redis/test_redis_batch.py runs the batcher on
both of its reads."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.cli import server_config
from app.http import connections, request_task, server
from app.http.asgi import route_path
from app.http.server import DrainingServer
from app.main import create_app
from app.settings import Settings
from tests.e2e.harness import free_port
from tests.unit.threaded_server import running

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


# --- asyncio's `_enter_task` / `_leave_task` (app.http.request_task) ---------------------------


@pytest.mark.parametrize("name", ["_enter_task", "_leave_task"])
def test_without_asyncios_task_hooks_no_first_step_is_taken_early(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    assert request_task.running_task_hooks() is not None  # CPython 3.11-3.13 have both
    monkeypatch.delattr(asyncio.tasks, name)
    assert request_task.running_task_hooks() is None


async def test_without_the_task_hooks_a_request_task_runs_as_any_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The public path: the first step is not taken in the read, the task takes it at the
    loop's next pass, in its own context, and ends with its coroutine's result."""
    monkeypatch.setattr(request_task, "_TASK_HOOKS", None)
    assert not request_task.first_step_available()
    loop = asyncio.get_running_loop()
    steps: list[str] = []
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")

    async def request() -> str:
        steps.append("first")
        seen.set("mine")
        await asyncio.sleep(0)
        return seen.get()

    taken: asyncio.Future[bool] = loop.create_future()

    def from_the_protocol() -> None:  # as a protocol's callback runs: no task current
        task = request_task.start(loop, request())
        taken.set_result(request_task.take_first_step(loop, task))
        steps.append("read done")
        task.add_done_callback(lambda done: steps.append(f"ended: {done.result()}"))

    loop.call_soon(from_the_protocol)
    assert await taken is False
    for _ in range(5):
        await asyncio.sleep(0)
    assert steps == ["read done", "first", "ended: mine"]
    assert seen.get() == "unset"


# --- uvicorn's `HttpToolsProtocol._start_asgi_task` (app.http.connections) ---------------------


def test_without_uvicorns_request_task_hook_the_header_limits_run_on_uvicorns_tasks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert connections.request_task_hooks_present() and connections.request_tasks_available()
    assert connections.with_limits(1.0, 4096).__name__ == "RequestTaskProtocol"
    monkeypatch.delattr(HttpToolsProtocol, "_start_asgi_task")
    assert not connections.request_task_hooks_present()
    monkeypatch.setattr(connections, "_REQUEST_TASKS", connections.request_task_hooks_present())
    with caplog.at_level(logging.INFO, logger="app.http.connections"):
        protocol = connections.with_limits(1.0, 4096)
    assert protocol.__name__ == "FastHeaderDeadlineProtocol"
    assert "_start_asgi_task" not in vars(protocol.__mro__[1])  # uvicorn's own runs
    assert "request-task hooks are missing" in caplog.text


def test_a_request_task_hook_of_another_shape_is_not_overridden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def start(self: Any, request: Any) -> None:  # what a later uvicorn might have
        raise AssertionError("not called here")

    monkeypatch.setattr(HttpToolsProtocol, "_start_asgi_task", start)
    assert not connections.request_task_hooks_present()


# --- uvicorn's `Server.servers` (app.http.server) -------------------------------------------


def test_a_server_without_the_attributes_the_listeners_need_is_left_as_it_is() -> None:
    settings = Settings(log_level="warning")
    plain = uvicorn.Server(server_config(create_app(settings), settings))
    assert server.listening_servers(plain) is None  # never started: no `servers`
    plain.servers = [object()]  # type: ignore[list-item]
    assert server.listening_servers(plain) is None  # not servers as uvicorn 0.54 makes them


@pytest.fixture
def servers_renamed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """uvicorn keeping its listening servers under another name, as a later version might."""
    startup, shutdown = uvicorn.Server.startup, uvicorn.Server.shutdown

    async def renamed_startup(self: uvicorn.Server, sockets: Any = None) -> None:
        await startup(self, sockets)
        self.renamed_servers = self.__dict__.pop("servers")  # type: ignore[attr-defined]

    async def renamed_shutdown(self: uvicorn.Server, sockets: Any = None) -> None:
        self.servers = self.renamed_servers  # type: ignore[attr-defined]
        await shutdown(self, sockets)

    monkeypatch.setattr(uvicorn.Server, "startup", renamed_startup)
    monkeypatch.setattr(uvicorn.Server, "shutdown", renamed_shutdown)
    yield


def test_without_uvicorns_servers_uvloop_accepts_and_the_server_serves(
    servers_renamed: None, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(a2a_port=free_port(), log_level="warning")
    app = create_app(settings)
    with caplog.at_level(logging.INFO, logger="app.http.server"):
        with running(DrainingServer(server_config(app, settings), drain=app.state.drain)) as up:
            reply = httpx.post(
                f"http://127.0.0.1:{settings.a2a_port}/",
                json=_send("hello"),
                headers={"A2A-Version": "1.0"},
                timeout=10,
                trust_env=False,
            )
    assert reply.status_code == 200
    assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "listening servers are not where they were" in caplog.text
    assert not any(type(each).__name__ == "BurstListener" for each in up.servers)


# --- Starlette's private `get_route_path` (app.http.asgi) -------------------------------------


@pytest.mark.parametrize(
    ("root_path", "path"),
    [
        ("", "/"),
        ("", "/v1/tasks"),
        ("/agent", "/agent/"),
        ("/agent", "/agent"),
        ("/agent", "/agent/v1/tasks"),
        ("/agent", "/agentx/"),
        ("/agent", "/other/"),
    ],
)
def test_the_direct_routes_path_is_the_one_the_router_matches(root_path: str, path: str) -> None:
    utils = pytest.importorskip("starlette._utils")
    scope = {"type": "http", "root_path": root_path, "path": path}
    assert route_path(scope) == utils.get_route_path(scope)


# --- redis-py's parser internals (stores.redis.batch) ---------------------------------------


class _Parser:
    def __init__(self, **names: Any) -> None:
        self.__dict__.update(names)


def test_the_batcher_reads_through_read_response_without_redis_pys_parser_names() -> None:
    """The hiredis reader is taken only as redis-py 8.1 keeps it (`_parser._reader` and
    `read_from_socket`): a connection without any of those names is read by its public
    `read_response` (tests/redis/test_redis_batch.py runs every round trip both ways)."""
    import hiredis

    from stores.redis import batch

    async def read_more() -> None: ...

    reader = hiredis.Reader()
    as_81 = _Parser(_parser=_Parser(_reader=reader, read_from_socket=read_more))
    assert batch._hiredis_reader(as_81) == (reader, read_more)
    for connection in (
        _Parser(),  # no `_parser`
        _Parser(parser=as_81._parser),  # renamed
        _Parser(_parser=_Parser(read_from_socket=read_more)),  # no `_reader`
        _Parser(_parser=_Parser(_reader=object(), read_from_socket=read_more)),  # another parser
        _Parser(_parser=_Parser(_reader=reader)),  # no `read_from_socket`
    ):
        assert batch._hiredis_reader(connection) is None


# --- the collector: `a2a-server` tunes it, `create_app` does not -----------------------------

_EMBEDDED = """
import asyncio, gc, json
import httpx
from app.main import create_app
from app.settings import Settings

async def main():
    gc.set_threshold(1234, 11, 12)  # the host's own choice
    before = (gc.get_freeze_count(), gc.get_threshold())
    app = create_app(Settings())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for _ in range(200):
                ready = await client.get("/readyz")
                if ready.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert ready.status_code == 200, ready.text
            message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": message}}
            reply = (await client.post("/", json=body, headers={"A2A-Version": "1.0"})).json()
        await asyncio.sleep(0.2)  # whatever the lifespan would do after being ready
        after = (gc.get_freeze_count(), gc.get_threshold())
    print(json.dumps({"before": before, "after": after,
                      "state": reply["result"]["task"]["status"]["state"]}))

asyncio.run(main())
"""


def _python(code: str) -> dict[str, Any]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("A2A_", "LLM_", "AGENT_", "REDIS_"))
    }
    environment["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def test_create_app_in_a_host_process_leaves_its_collector_as_it_was() -> None:
    seen = _python(_EMBEDDED)
    assert seen["state"] == "TASK_STATE_COMPLETED"
    assert seen["before"] == [0, [1234, 11, 12]]
    assert seen["after"] == seen["before"]


def test_the_server_command_freezes_the_loaded_heap_once_the_model_is_ready() -> None:
    seen = _python(
        """
        import asyncio, gc, json
        from app import cli

        async def main():
            ready = asyncio.Event()
            freezing = asyncio.create_task(cli.freeze_when_ready(ready))
            await asyncio.sleep(0.05)
            waiting = gc.get_freeze_count()
            ready.set()
            await freezing
            print(json.dumps({"waiting": waiting, "frozen": gc.get_freeze_count()}))

        asyncio.run(main())
        """
    )
    assert seen["waiting"] == 0  # nothing frozen before the model adapter has loaded
    assert seen["frozen"] > 10_000  # the modules and classes the server loaded


def _send(text: str) -> dict[str, Any]:
    message = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
