"""TurnSupervisor: keeps this process's turn leases alive, hears cancel requests from any
process, and takes over turns whose process died.

    every lease_ttl/3:  renew the leases of the turns running here (one batch)
                            --HELD--> nothing
                            --CANCEL_REQUESTED--> cancel it here
                            --LOST--> stop it here, record nothing
    cancel requests (pub/sub): a turn running here --> cancel it within milliseconds
    every lease_ttl/3:  expired leases --acquire (a free slot here)--> resume from the checkpoint,
                        start a turn that never started (SUBMITTED), or fail the task with a reason

    every presence_ttl/3: heartbeat --> processes whose heartbeat lapsed (killed, node lost)
                        --> their leases expire now --> taken over at once, not after LEASE_TTL_S

A takeover needs a free running-turn slot: a replica at its limit leaves the turn for another
replica (or its own next sweep), so recovery never overloads a replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

from agent.runtime.admission import Overloaded
from agent.runtime.errors import LeaseTaken
from agent.runtime.runner import TaskRunner
from agent.runtime.turn import TurnCheckpoint, TurnRequested, TurnStart
from stores.base import (
    CheckpointStore,
    LeaseLost,
    LeaseStatus,
    LeaseStore,
    StoreUnavailable,
    TaskRef,
    TaskStore,
)
from stores.models import Role, TaskState

logger = logging.getLogger(__name__)

MIN_PRESENCE_TTL_S = 2.0
"""A heartbeat lapses after a third of the lease (at least this): short enough to take a killed
process's turns over well before their leases expire, long enough that a busy event loop is not
taken for a dead one (and if it is, fencing stops it: the turn goes on elsewhere)."""

UNRECOVERABLE = (
    "The server running this task stopped before the turn could be saved, so it cannot go on;"
    " please send the message again."
)
CONTEXT_WENT_ON = (
    "Another task took this task's conversation while no server ran it, so it cannot go on;"
    " please send the message again."
)


class TurnSupervisor:
    def __init__(
        self,
        runner: TaskRunner,
        *,
        tasks: TaskStore,
        checkpoints: CheckpointStore,
        leases: LeaseStore,
    ) -> None:
        """`leases`: the store the runner's leases are in (its turns' renewals, this process's
        heartbeat, the expired leases of others)."""
        self._runner = runner
        self._leases = leases
        self._tasks = tasks
        self._checkpoints = checkpoints
        self._interval_s = runner.lease_ttl_s / 3
        self._presence_ttl_s = max(MIN_PRESENCE_TTL_S, runner.lease_ttl_s / 3)
        self._jobs: list[asyncio.Task[None]] = []
        self._cancels: set[asyncio.Task[bool]] = set()

    async def __aenter__(self) -> TurnSupervisor:
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        """Stop the supervisor's jobs, then every turn running here, each handed over."""
        await self.stop()
        await self._runner.shutdown()

    def start(self) -> None:
        self._jobs = [
            asyncio.create_task(self._forever(self.renew_leases), name="lease-renewal"),
            asyncio.create_task(self._forever(self.recover_orphans), name="turn-recovery"),
            asyncio.create_task(self._hear_cancels(), name="cancel-listener"),
            asyncio.create_task(
                self._forever(self.heartbeat, interval_s=self._presence_ttl_s / 3),
                name="heartbeat",
            ),
        ]

    async def stop(self) -> None:
        for job in self._jobs:
            job.cancel()
        for job in self._jobs:
            with suppress(asyncio.CancelledError):
                await job
        if self._jobs:
            with suppress(StoreUnavailable):
                await self._leases.leave(self._runner.holder)

    async def _forever(
        self, step: Callable[[], Awaitable[None]], *, interval_s: float | None = None
    ) -> None:
        while True:
            try:
                await step()
            except StoreUnavailable:
                name = getattr(step, "__name__", "step")
                self._runner.store_unreachable(name)
                logger.warning("store unavailable; %s retries", name)
            except Exception:
                logger.exception("supervisor step failed")
            await asyncio.sleep(interval_s or self._interval_s)

    async def heartbeat(self) -> None:
        """Say this process is alive; hand over the turns of processes that stopped saying so."""
        lapsed = await self._leases.heartbeat(self._runner.holder, ttl_s=self._presence_ttl_s)
        for process in lapsed:
            count = await self._leases.hand_over_process(process)
            logger.warning(
                "process=<%s>, turns=<%d> | a server stopped heartbeating; taking its turns over",
                process,
                count,
            )
            if count:
                await self.recover_orphans()

    async def renew_leases(self) -> None:
        runner = self._runner
        held = runner.leased()
        statuses = await self._leases.renew_many(held, ttl_s=runner.lease_ttl_s)
        for (ref, holder), status in zip(held, statuses, strict=True):
            if status is LeaseStatus.CANCEL_REQUESTED:
                await runner.cancel(ref.task_id, owner=ref.owner)
            elif status is LeaseStatus.LOST and (ref, holder) in runner.leased():
                # Still running here and holding, as far as this process knows: it was taken.
                logger.warning(
                    "task_id=<%s> | lease lost; another server took the turn", ref.task_id
                )
                await runner.drop(ref.task_id, owner=ref.owner)

    async def _hear_cancels(self) -> None:
        while True:
            try:
                async for ref in self._leases.cancel_requests():
                    if self._runner.is_running(ref.task_id, owner=ref.owner):
                        cancel = asyncio.create_task(
                            self._runner.cancel(ref.task_id, owner=ref.owner)
                        )
                        self._cancels.add(cancel)
                        cancel.add_done_callback(self._cancels.discard)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("cancel listener lost its connection; reconnecting")
                await asyncio.sleep(self._interval_s)

    async def recover_orphans(self) -> None:
        runner = self._runner
        for ref in await self._leases.expired():
            if runner.is_running(ref.task_id, owner=ref.owner):
                continue
            try:
                async with runner.starting(ref.task_id, owner=ref.owner) as start:
                    await self._take_over(ref, start)
            except LeaseTaken:
                continue  # another server got there first
            except Overloaded:
                logger.info("running-turn limit reached; orphaned turns left for later")
                return

    async def _take_over(self, ref: TaskRef, start: TurnStart) -> None:
        runner = self._runner
        assert start.fence is not None
        record = await self._tasks.get(ref.task_id, owner=ref.owner)
        if record is None or not record.task.status.state.is_active:
            return  # nothing to run: leaving `starting` releases the lease
        task = record.task
        # The context under the new lease before the turn goes on, or ends: from now on the
        # previous holder's conversation writes are refused, however late they land.
        try:
            holder = await runner.claims.take(
                task.context_id, task.id, owner=ref.owner, fence=start.fence
            )
        except LeaseLost:
            return  # taken over again meanwhile
        if holder is not None:  # its claim was lost, and another task is at work there
            logger.warning("task_id=<%s> | orphaned turn's context went on without it", task.id)
            with suppress(LeaseLost):
                await runner.record_state(
                    task, TaskState.FAILED, owner=ref.owner, text=CONTEXT_WENT_ON, fence=start.fence
                )
            return
        saved = await self._checkpoints.load(task.id, owner=ref.owner)
        checkpoint = _readable(saved)
        if checkpoint is not None:
            logger.info("task_id=<%s> | taking over an orphaned turn from its checkpoint", task.id)
            runner.launch_resumed(start, task, checkpoint, recovered=True)
            runner.observer.on_takeover("resumed")
            return
        last = task.history[-1] if task.history else None
        if task.status.state is TaskState.SUBMITTED and last is not None and last.role is Role.USER:
            # The turn never started (its process died right after accepting it): start it.
            logger.info("task_id=<%s> | starting an orphaned turn that never started", task.id)
            # As it was asked: its extensions, the client's tools and trace (TurnRequested).
            requested = TurnRequested.read(saved) or TurnRequested(not_begun=True)
            runner.launch_new(
                start,
                task,
                last,
                trace_carrier=requested.trace_carrier,
                client_tools=requested.client_tools,
                extensions=frozenset(requested.extensions),
            )
            runner.observer.on_takeover("restarted")
            return
        logger.warning("task_id=<%s> | orphaned turn has no usable checkpoint", task.id)
        with suppress(LeaseLost):
            await runner.record_state(
                task, TaskState.FAILED, owner=ref.owner, text=UNRECOVERABLE, fence=start.fence
            )
            runner.observer.on_takeover("failed")


def _readable(saved: str | None) -> TurnCheckpoint | None:
    if saved is None:
        return None
    try:
        return TurnCheckpoint.model_validate_json(saved)
    except ValueError:
        return None
