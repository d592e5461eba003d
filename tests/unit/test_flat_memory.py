"""A replica's memory stays flat over many tasks (issue 44): everything the server keeps per
task, context or request is bounded by A2A_MEMORY_MAX_TASKS or let go when the task ends. The
whole app in process (JSON-RPC through its ASGI app, the scripted model, in-memory stores, push
delivery to a webhook of the test's own), driven through many more tasks than the store keeps;
then each structure that holds something per task is counted (its size, not the process's RSS:
bench/memory_soak.py measures that against a real `a2a-server`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

import app.main
from agent.llm.scripted import ScriptedModel
from agent.runtime.push import PushDelivery, PushPolicy
from app.main import create_app
from app.ops.metrics import _Family
from app.services import Services
from app.settings import Settings
from stores.base import JournalWrite
from stores.memory import InMemoryStores
from stores.models import PushConfig, StatusUpdate, Task, TaskState, TaskStatus
from stores.redis.journal_mux import LINGER_S

pytestmark = pytest.mark.timeout(120)

LIMIT = 20
REDIS_URL = "redis://127.0.0.1:6379/0"
HEADERS = {"A2A-Version": "1.0"}


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A webhook on 127.0.0.1 that answers 204 and keeps each request's head."""
    received: list[bytes] = []
    connections: set[asyncio.StreamWriter] = set()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.add(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                received.append(head)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook", received
    finally:
        server.close()
        for writer in connections:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def served(
    monkeypatch: pytest.MonkeyPatch, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    built: list[Services] = []

    def keep(*args: Any, **kwargs: Any) -> Services:
        built.append(build_services(*args, **kwargs))
        return built[-1]

    build_services = app.main.build_services
    monkeypatch.setattr(app.main, "build_services", keep)
    configured = Settings(
        a2a_memory_max_tasks=LIMIT,
        a2a_turn_slice_ms=0,
        a2a_push_allowed_hosts=["127.0.0.1"],
        **settings,
    )
    server = create_app(configured, llm=ScriptedModel(chunks=3))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=server)
    async with (
        server.router.lifespan_context(server),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        yield client, built[0]


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def run_tasks(client: httpx.AsyncClient, count: int, hook: str, numbers: Any) -> None:
    """`count` tasks of a mix: blocking and streamed sends, new and continued contexts, some
    with a webhook, each read back with GetTask, a ListTasks now and then."""
    context = None
    for _ in range(count):
        n = next(numbers)
        message: dict[str, Any] = {
            "messageId": f"m{n}",
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}],
        }
        if context is not None and n % 3:
            message["contextId"] = context  # a context goes on for a few turns
        params: dict[str, Any] = {"message": message}
        if n % 5 == 0:
            params["configuration"] = {"taskPushNotificationConfig": {"url": hook}}
        if n % 2:
            reply = await client.post("/", json=rpc("SendMessage", params), headers=HEADERS)
            task = reply.json()["result"]["task"]
        else:
            reply = await client.post(
                "/", json=rpc("SendStreamingMessage", params), headers=HEADERS
            )
            events = [
                json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")
            ]
            task = events[0]["result"]["task"]
            task["status"] = events[-1]["result"]["statusUpdate"]["status"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", reply.text
        context = task["contextId"] if n % 4 else None
        got = await client.post("/", json=rpc("GetTask", {"id": task["id"]}), headers=HEADERS)
        assert got.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        if n % 10 == 0:
            listed = await client.post("/", json=rpc("ListTasks", {"pageSize": 5}), headers=HEADERS)
            assert len(listed.json()["result"]["tasks"]) == min(5, n + 1)


def held(services: Services) -> dict[str, int]:
    """The size of everything the server keeps per task, context or turn."""
    stores: Any = services.stores
    metrics = services.metrics
    return {
        "tasks": len(stores.tasks._tasks),
        "ended tasks": len(stores.tasks._ended),
        "conversations": len(stores.messages._conversations),
        "context claims": len(stores.messages._claims),
        "leases": len(stores.leases._leases),
        "checkpoints": len(stores.checkpoints._checkpoints),
        "push configs and cursors": len(stores.pushes._tasks),
        "running turns": len(services.runner._running),
        "push deliveries": len(services.push._deliveries),
        "metric label sets": sum(
            len(family._children)
            for family in vars(metrics).values()
            if isinstance(family, _Family)
        ),
    }


def held_on_redis(services: Services) -> dict[str, int]:
    """What a replica on Redis keeps per task, context or turn: its tasks and conversations
    are in Redis; in the process, what its turns and readers hold."""
    tasks: Any = services.stores.tasks
    mux = tasks._mux
    return {
        "running turns": len(services.runner._running),
        "push deliveries": len(services.push._deliveries),
        "journals followed": len(mux._shard_of),
        "journal readers": sum(len(shard._readers) for shard in mux._shards),
        "journals read lately": sum(len(shard._recent) for shard in mux._shards),
        "shared reads": len(tasks._waits._flights),
        "metric label sets": sum(
            len(family._children)
            for family in vars(services.metrics).values()
            if isinstance(family, _Family)
        ),
    }


async def settled(services: Services, count: Any = held) -> dict[str, int]:
    """`count` once the last push deliveries are done (they follow the journal past the end)."""
    for _ in range(200):
        if not services.push._deliveries:
            break
        await asyncio.sleep(0.01)
    return count(services)  # type: ignore[no-any-return]


async def test_what_the_server_keeps_per_task_stays_bounded_over_many_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    numbers = itertools.count()
    async with webhook() as (hook, received), served(monkeypatch) as (client, services):
        await run_tasks(client, 3 * LIMIT, hook, numbers)
        first = await settled(services)
        await run_tasks(client, 12 * LIMIT, hook, numbers)
        later = await settled(services)
    assert received, "no webhook was called: push delivery was not exercised"
    bounded = ("tasks", "ended tasks", "conversations", "leases", "push configs and cursors")
    for name in bounded:
        assert later[name] <= LIMIT, (name, later)
    # Nothing runs between the requests: what a turn holds was let go when it ended.
    for name in ("context claims", "checkpoints", "running turns", "push deliveries"):
        assert later[name] == 0, (name, later)
    # One label set per binding, method, outcome, state...: none per task.
    assert later["metric label sets"] == first["metric label sets"], (first, later)


@pytest.mark.redis
async def test_what_a_replica_on_redis_keeps_per_task_stays_bounded_over_many_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    numbers = itertools.count()
    try:
        async with (
            webhook() as (hook, received),
            served(monkeypatch, redis_url=REDIS_URL, redis_key_prefix=prefix) as (client, services),
        ):
            await run_tasks(client, 3 * LIMIT, hook, numbers)
            first = await settled(services, held_on_redis)
            await run_tasks(client, 12 * LIMIT, hook, numbers)
            # A journal just read stays in the reads for a moment (LINGER_S, so that a reader
            # coming back finds it), and leaves them at the next read after that.
            await asyncio.sleep(LINGER_S + 0.2)
            await run_tasks(client, 1, hook, numbers)
            later = await settled(services, held_on_redis)
    finally:
        redis = Redis.from_url(REDIS_URL)
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    assert received, "no webhook was called: push delivery was not exercised"
    for name in ("running turns", "push deliveries", "journal readers", "shared reads"):
        assert later[name] == 0, (name, later)
    for name in ("journals followed", "journals read lately"):  # the last task's, at most
        assert later[name] <= 1, (name, later)
    assert later["metric label sets"] == first["metric label sets"], (first, later)


async def test_a_delivery_whose_task_lost_its_configs_stops_and_keeps_no_cursor() -> None:
    """The task store dropped a task while its webhook delivery still ran (a slow webhook, a
    busy store): its configs and cursor went with it, and the delivery must not write the
    cursor back (nothing would ever remove it again)."""
    stores = InMemoryStores.create(ttl_s=3600)
    posted: list[bytes] = []

    def webhook_answer(request: httpx.Request) -> httpx.Response:
        posted.append(request.content)
        return httpx.Response(204)

    delivery = PushDelivery(
        tasks=stores.tasks,
        pushes=stores.pushes,
        client=httpx.AsyncClient(transport=httpx.MockTransport(webhook_answer)),
        event_renderers={"1.0": lambda entry: entry.stored},
        policy=PushPolicy(read_block_s=0.05),
    )
    working = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.WORKING))
    await stores.tasks.create(working, owner="o")
    await stores.pushes.put(PushConfig(id="p", task_id="t", url="https://x/h"), owner="o")
    delivery.start("t", owner="o")
    update = StatusUpdate(task_id="t", context_id="c", status=working.status)
    position = await stores.tasks.publish("t", JournalWrite(update), owner="o")
    for _ in range(200):
        if await stores.pushes.cursor("t", owner="o") == position:
            break
        await asyncio.sleep(0.01)
    assert posted, "the first events were not delivered"
    sent = len(posted)
    stores.pushes.forget_task("o", "t", "c")  # as the task store does when it drops the task
    await stores.tasks.publish("t", JournalWrite(update), owner="o")
    for _ in range(200):
        if not delivery._deliveries:
            break
        await asyncio.sleep(0.01)
    assert delivery._deliveries == {}
    assert stores.pushes._tasks == {}
    assert len(posted) == sent  # nothing was sent for the event after
    await delivery.aclose()
