"""Push notifications: one more reader of a task's journal, with a cursor of its own.

A task's delivery runs where its turn runs: the runner starts it with the turn (and a replica
taking the turn over starts it again, from the stored cursor); a state change recorded outside a
turn (a cancel) starts a short one. It POSTs each journal event to each of the task's webhooks,
in journal order, rendered in the generation of the client that registered the webhook, with
`Authorization: <scheme> <credentials>` and `X-A2A-Notification-Token` as configured. A failed
POST is retried with exponential backoff, a bounded number of times, then given up (logged); the
cursor moves on once every webhook has had the event. It never blocks the turn: it is a task of
its own, and a webhook that hangs only delays the next notification. Every request goes through
the outbound guard (no loopback, private, link-local or metadata address unless allowed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from agent.runtime.journal import JournalFollower
from stores.base import PushConfigStore, StoreError, StoreUnavailable, TaskStore
from stores.models import JournalEntry, PushConfig, Task

logger = logging.getLogger(__name__)

EventRenderer = Callable[[JournalEntry], bytes]
"""A journal event as a webhook body (1.0: the event as a StreamResponse)."""
TaskRenderer = Callable[[Task], bytes]
"""The task as a webhook body (0.3 webhooks get the whole task at each state change)."""


@dataclass(frozen=True, kw_only=True)
class PushPolicy:
    max_attempts: int = 5
    first_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    read_block_s: float = 5.0
    """How long a delivery waits on the journal before checking whether its turn still runs."""


class PushDelivery:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        pushes: PushConfigStore,
        client: httpx.AsyncClient,
        event_renderers: Mapping[str, EventRenderer],
        task_renderers: Mapping[str, TaskRenderer] | None = None,
        policy: PushPolicy | None = None,
    ) -> None:
        self._tasks = tasks
        self._pushes = pushes
        self._client = client
        self._event_renderers = event_renderers
        self._task_renderers = task_renderers or {}
        self._policy = policy or PushPolicy()
        # Not cut by a drain: the turn goes on until it hands over, and so does its delivery.
        self._journal = JournalFollower(tasks, read_block_s=self._policy.read_block_s)
        self._deliveries: dict[tuple[str, str], asyncio.Task[None]] = {}

    def start(self, task_id: str, *, owner: str) -> None:
        """Deliver the task's events from its cursor, unless a delivery already runs here."""
        key = (owner, task_id)
        running = self._deliveries.get(key)
        if running is not None and not running.done():
            return
        delivery = asyncio.create_task(self._deliver(task_id, owner), name=f"push {task_id}")
        self._deliveries[key] = delivery
        delivery.add_done_callback(lambda _: self._deliveries.pop(key, None))

    async def aclose(self) -> None:
        for delivery in list(self._deliveries.values()):
            delivery.cancel()
        if self._deliveries:
            await asyncio.wait(list(self._deliveries.values()), timeout=2.0)
        await self._client.aclose()

    async def _deliver(self, task_id: str, owner: str) -> None:
        """Deliver from the stored cursor until the turn stops. A store that stops answering
        does not end it: it waits (with the backoff of a failed POST) and goes on from the
        cursor, so the webhooks get every event through the last at least once (an event sent
        whose cursor could not be stored is sent again)."""
        wait_s = self._policy.first_backoff_s
        while True:
            try:
                await self._deliver_from_cursor(task_id, owner)
                return
            except StoreUnavailable as exc:
                logger.warning(
                    "task_id=<%s> | push delivery waits for the store (%s); on from its cursor"
                    " in %.1fs",
                    task_id,
                    exc,
                    wait_s,
                )
                await asyncio.sleep(wait_s)
                wait_s = min(wait_s * 2, self._policy.max_backoff_s)
            except StoreError as exc:  # the task is gone or unreadable: nothing more to send
                logger.warning("task_id=<%s> | push delivery stopped: store error %s", task_id, exc)
                return
            except Exception:
                logger.exception("task_id=<%s> | push delivery failed", task_id)
                return

    async def _deliver_from_cursor(self, task_id: str, owner: str) -> None:
        if not await self._pushes.list(task_id, owner=owner):
            return  # nothing registered: nothing to read
        cursor = await self._pushes.cursor(task_id, owner=owner)
        # Like a stream that follows a turn: it ends where the turn stops, at an end or a
        # question (or once the task has expired).
        async for entries in self._journal.tail(
            task_id,
            owner=owner,
            after=cursor,
            at_interrupt=True,
            until_drain=False,
            wait_first=True,
        ):
            for entry in entries or ():
                configs = await self._pushes.list(task_id, owner=owner)
                if not configs:  # all deleted, or gone with their task: no one to tell,
                    return  # and no cursor to keep (a new config starts from the task's end)
                bodies = await self._bodies(task_id, owner, entry, configs)
                await asyncio.gather(
                    *(
                        self._send(config, entry, body)
                        for config, body in zip(configs, bodies, strict=True)
                        if body is not None
                    )
                )
                await self._pushes.advance(task_id, entry.position, owner=owner)

    async def _bodies(
        self, task_id: str, owner: str, entry: JournalEntry, configs: list[PushConfig]
    ) -> list[bytes | None]:
        """Each config's body for the entry, rendered once per generation; None: not sent (a
        task-per-state-change webhook skips artifact chunks)."""
        by_generation: dict[str, bytes | None] = {}
        for generation in {config.dialect for config in configs}:
            task_renderer = self._task_renderers.get(generation)
            if task_renderer is None:
                render = self._event_renderers.get(generation) or self._event_renderers["1.0"]
                by_generation[generation] = render(entry)
            elif entry.state is None:
                by_generation[generation] = None
            else:
                record = await self._tasks.get(task_id, owner=owner)
                by_generation[generation] = task_renderer(record.task) if record else None
        return [by_generation[config.dialect] for config in configs]

    async def _send(self, config: PushConfig, entry: JournalEntry, body: bytes) -> None:
        headers = {"Content-Type": "application/a2a+json"}
        if config.authentication is not None:
            credentials = config.authentication.credentials or ""
            headers["Authorization"] = f"{config.authentication.scheme} {credentials}".strip()
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        backoff = self._policy.first_backoff_s
        for attempt in range(1, self._policy.max_attempts + 1):
            outcome = await self._post(config.url, body, headers)
            if outcome is None:
                logger.debug(
                    "task_id=<%s>, config_id=<%s>, position=<%d> | pushed",
                    config.task_id,
                    config.id,
                    entry.position,
                )
                return
            if attempt == self._policy.max_attempts:
                logger.warning(
                    "task_id=<%s>, config_id=<%s>, position=<%d>, attempts=<%d> | push given up:"
                    " %s",
                    config.task_id,
                    config.id,
                    entry.position,
                    attempt,
                    outcome,
                )
                return
            logger.debug(
                "task_id=<%s>, config_id=<%s>, attempt=<%d> | push failed (%s); retrying in %.1fs",
                config.task_id,
                config.id,
                attempt,
                outcome,
                backoff,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._policy.max_backoff_s)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> str | None:
        """None when the webhook took it (2xx), else why not."""
        try:
            response = await self._client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"
