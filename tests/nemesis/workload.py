"""The nemesis' clients: sessions, each one conversation (context) played turn after turn, doing
what docs/operations.md tells a client to do when something fails.

A turn is `plain`, `tool` (the model calls nemesis_step), `ask` (the model asks a question:
input-required, the client answers) or `long` (the answer streams for about 20 s). Each is sent blocking (`SendMessage`) or streamed
(`SendStreamingMessage`) to a replica picked at random; while a streamed turn runs, one to three
`SubscribeToTask` streams may join it on the same replica, and the turn may be canceled.

What a client does on trouble (the documented behaviour):

* STORE_UNAVAILABLE naming a task, a stream cut or silent (keep-alives stop), a replica that
  does not answer once the task id is known: follow the task (`GetTask`, then `SubscribeToTask`
  with `Last-Event-ID` of the last event seen) on another replica;
* STORE_UNAVAILABLE without a task: send the same message again (on any replica); no answer
  before the task id is known: look for the task first (ListTasks of the context: one whose
  history holds the message), and send again only if there is none; OVERLOADED: send again
  after `retryAfterSeconds`;
* -32004 naming a task: read it; if it is this message's task (its history holds the prompt),
  follow it; else wait for it to end, and cancel it if it does not within two leases;
* a task FAILED with "please send the message again": send it again (a new attempt, a new key).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

from tests.e2e.harness import user_message
from tests.nemesis.a2a_wire import (
    BUSY,
    INPUT_REQUIRED,
    NOT_CANCELABLE,
    OVERLOADED,
    STORE_UNAVAILABLE,
    TERMINAL,
    Reply,
    Wire,
    state_of,
)
from tests.nemesis.history import BusyRecord, History, StreamRecord, TurnRecord
from tests.nemesis.model import prompt_text, reply_text

KINDS = ("plain", "plain", "plain", "tool", "ask", "long")
SEND_AGAIN = "please send the message again"
ATTEMPTS = 6


@dataclass(frozen=True)
class WorkloadConfig:
    sessions: int = 6
    max_turns: int = 1000  # per session
    join_probability: float = 0.4
    cancel_probability: float = 0.1
    lease_ttl_s: float = 6.0
    settle_s: float = 120.0  # longest a client follows one task before calling it stuck


class Session:
    def __init__(
        self, name: str, urls: list[str], wire: Wire, history: History, rng: random.Random,
        config: WorkloadConfig,
    ) -> None:  # fmt: skip
        self.name = name
        self.context_id = f"ctx-{name}"
        self.urls = urls
        self.wire = wire
        self.history = history
        self.rng = rng
        self.config = config
        self.side_tasks: set[asyncio.Task[Any]] = set()
        self.key = ""  # the attempt under way (named in the errors it meets)

    def pick(self) -> str:
        return self.rng.choice(self.urls)

    async def run(self, deadline: float) -> None:
        number = 0
        while time.monotonic() < deadline and number < self.config.max_turns:
            await self.turn(number)
            number += 1
            await asyncio.sleep(self.rng.uniform(0, 0.3))
        if self.side_tasks:
            await asyncio.wait(self.side_tasks, timeout=30)

    async def turn(self, number: int) -> None:
        record = TurnRecord(self.name, self.context_id, number, self.rng.choice(KINDS))
        self.history.turns.append(record)
        for attempt in range(ATTEMPTS):
            key = f"{self.name}.{number:03d}.{attempt}"
            record.keys.append(key)
            self.key = key
            if not await self.attempt(record, key):
                break
        record.ended = time.monotonic()

    async def attempt(self, record: TurnRecord, key: str) -> bool:
        """Play one attempt to its end; whether the client must send the message again."""
        prompt = prompt_text(key, record.kind)
        message = user_message(prompt, context_id=self.context_id, message_id=f"m-{key}")
        task_id, state = await self.deliver(record, key, message, None)
        answers = 0
        while task_id is not None and state == INPUT_REQUIRED and answers < 3:
            answers += 1
            reply = user_message(
                reply_text(key), context_id=self.context_id, task_id=task_id,
                message_id=f"r-{key}-{answers}",
            )  # fmt: skip
            task_id, state = await self.deliver(record, key, reply, task_id)
        if task_id is None or state not in TERMINAL:
            record.final_state = state or "NEVER ACKNOWLEDGED"
            return False
        task = await self.read_task(task_id)
        record.final_task, record.final_state = task_id, state
        if task is not None:
            record.final_state = task["status"]["state"]
            record.answer = "".join(
                p.get("text", "") for a in task.get("artifacts") or [] for p in a["parts"]
            )
            why = "".join(
                p.get("text", "") for p in (task["status"].get("message") or {}).get("parts") or []
            )
            if record.final_state == "TASK_STATE_FAILED":
                if SEND_AGAIN in why:
                    return True
                self.history.error(f"{self.key} turn", "", False, f"task {task_id} failed: {why}")
        return False

    # --- sending --------------------------------------------------------------------------

    async def deliver(
        self, record: TurnRecord, key: str, message: dict[str, Any], task_id: str | None
    ) -> tuple[str | None, str | None]:
        """Send `message` until a task takes it; follow that task until it settles (ends, or
        waits for input). (task id, state), or (None, why) when the attempt must be given up."""
        streamed = self.rng.random() < 0.5
        started = time.monotonic()
        while time.monotonic() - started < self.config.settle_s:
            url = self.pick()
            if streamed:
                stream = StreamRecord("SendStreamingMessage", url, task_id, None)
                self.history.streams.append(stream)
                answering = asyncio.Event()
                meddling = asyncio.create_task(self.meddle(record, stream, url, answering))
                reply = await self.wire.stream(
                    url, "SendStreamingMessage", {"message": message}, stream,
                    stop_at_input=True, answering=answering,
                )  # fmt: skip
                meddling.cancel()
                if stream.task_id is not None:
                    task_id = stream.task_id
                    self.learn(record, task_id, key)
                if reply is None:
                    return task_id, state_of(stream.events[-1][1])
                last = stream.events[-1][0] if stream.events else None
            else:
                reply = await self.wire.call(url, "SendMessage", {"message": message})
                if reply.ok:
                    task = reply.result.get("task")
                    if task is None:
                        self.history.error(
                            f"{self.key} SendMessage", url, False, f"no task: {reply.result}"
                        )
                        return None, "NO TASK"
                    self.learn(record, task["id"], key)
                    if task["status"]["state"] in TERMINAL | {INPUT_REQUIRED}:
                        return task["id"], task["status"]["state"]
                    return await self.follow(record, task["id"], None)
                last = None
            self.judge(reply, "send", url)
            if reply.reason == STORE_UNAVAILABLE and reply.meta.get("taskId"):
                task_id = reply.meta["taskId"]
                self.learn(record, task_id, key)
            if reply.reason == BUSY and "taskId" not in message:
                if await self.on_busy(record, key, reply.meta.get("taskId")):
                    task_id = reply.meta["taskId"]
                    return await self.follow(record, task_id, None)
                continue
            if task_id is None and reply.transport is not None and "taskId" not in message:
                # No answer: the message may have made a task all the same. Look before sending
                # it again, or it runs twice (a send is not idempotent).
                task_id = await self.find_own(record, key)
            if task_id is not None:
                followed = await self.follow(record, task_id, last)
                if "taskId" in message and followed[1] == INPUT_REQUIRED:
                    await self.backoff(reply)  # the answer was not taken: the task still waits
                    continue
                return followed
            await self.backoff(reply)
        return task_id, "STUCK"

    async def follow(
        self, record: TurnRecord, task_id: str, after: int | None
    ) -> tuple[str | None, str | None]:
        """Follow a known task until it settles: GetTask, then SubscribeToTask with the
        Last-Event-ID of the last event seen, on a replica picked at random, again and again."""
        started = time.monotonic()
        while time.monotonic() - started < self.config.settle_s:
            url = self.pick()
            got = await self.wire.call(url, "GetTask", {"id": task_id})
            if not got.ok:
                self.judge(got, "GetTask", url)
                await self.backoff(got)
                continue
            state = got.result["status"]["state"]
            if state in TERMINAL or state == INPUT_REQUIRED:
                return task_id, state
            stream = StreamRecord("SubscribeToTask", url, task_id, after)
            self.history.streams.append(stream)
            answering = asyncio.Event()
            meddling = asyncio.create_task(self.meddle(record, stream, url, answering))
            reply = await self.wire.stream(
                url, "SubscribeToTask", {"id": task_id}, stream,
                stop_at_input=True, answering=answering,
            )  # fmt: skip
            meddling.cancel()
            if stream.events:
                after = stream.events[-1][0]
            if reply is None:
                return task_id, state_of(stream.events[-1][1])
            self.judge(reply, "SubscribeToTask", url)
            await self.backoff(reply)
        self.history.error(
            f"{self.key} follow",
            "",
            False,
            f"task {task_id} did not settle in {self.config.settle_s}s",
        )
        return task_id, "STUCK"

    async def on_busy(self, record: TurnRecord, key: str, named: str | None) -> bool:
        """A -32004 refusal of a new message: whether the task it names is this message's."""
        if named is None:
            self.history.error(
                f"{self.key} send", "", False, "-32004 without the running task's id"
            )
            await asyncio.sleep(0.5)
            return False
        url = self.pick()
        got = await self.wire.call(url, "GetTask", {"id": named, "historyLength": 50})
        busy = BusyRecord(time.monotonic(), self.context_id, named, got.ok)
        self.history.busy.append(busy)
        if not got.ok:
            if got.reason is None or got.reason not in (STORE_UNAVAILABLE, "TASK_NOT_FOUND"):
                self.judge(got, "GetTask", url)
            await asyncio.sleep(0.5)
            return False
        task = got.result
        if prompt_text(key, record.kind) in _texts(task):
            self.learn(record, named, key)
            return True
        state = task["status"]["state"]
        first = min(b.at for b in self.history.busy if b.named == named)
        if state not in TERMINAL and time.monotonic() - first > 2 * self.config.lease_ttl_s:
            await self.cancel(named)  # not ours and not ending: the docs' last resort
        await asyncio.sleep(0.5)
        return False

    async def find_own(self, record: TurnRecord, key: str) -> str | None:
        """The task this attempt's message made, among the context's newest (ListTasks)."""
        prompt = prompt_text(key, record.kind)
        params = {"contextId": self.context_id, "pageSize": 20, "historyLength": 20}
        for _ in range(20):
            url = self.pick()
            got = await self.wire.call(url, "ListTasks", params)
            if got.ok:
                for task in got.result.get("tasks") or []:
                    if prompt in _texts(task):
                        self.learn(record, task["id"], key)
                        return task["id"]
                return None
            self.judge(got, "ListTasks", url)
            await self.backoff(got)
        return None

    # --- joining, canceling -----------------------------------------------------------------

    async def meddle(
        self, record: TurnRecord, stream: StreamRecord, url: str, answering: asyncio.Event
    ) -> None:
        """Once the turn streams its answer: subscribers join it on the same replica, or the
        client cancels it."""
        join = self.rng.random() < self.config.join_probability
        cancel = self.rng.random() < self.config.cancel_probability
        joiners = self.rng.randint(1, 3)
        await answering.wait()
        await asyncio.sleep(self.rng.uniform(0, 0.4))
        assert stream.task_id is not None
        if join:
            for _ in range(joiners):
                joined = StreamRecord("SubscribeToTask", url, stream.task_id, None, joined=True)
                self.history.streams.append(joined)
                side = asyncio.create_task(
                    self.wire.stream(
                        url, "SubscribeToTask", {"id": stream.task_id}, joined, stop_at_input=True
                    )
                )
                self.side_tasks.add(side)
                side.add_done_callback(self.side_tasks.discard)
        if cancel:
            record.canceled = True
            side = asyncio.create_task(self.cancel(stream.task_id))
            self.side_tasks.add(side)
            side.add_done_callback(self.side_tasks.discard)

    async def cancel(self, task_id: str) -> None:
        for _ in range(5):
            url = self.pick()
            reply = await self.wire.call(url, "CancelTask", {"id": task_id})
            if reply.ok or reply.reason == NOT_CANCELABLE:
                return
            self.judge(reply, "CancelTask", url)
            await self.backoff(reply)

    # --- bookkeeping ------------------------------------------------------------------------

    async def read_task(self, task_id: str) -> dict[str, Any] | None:
        for _ in range(20):
            url = self.pick()
            got = await self.wire.call(url, "GetTask", {"id": task_id})
            if got.ok:
                return got.result
            self.judge(got, "GetTask", url)
            await self.backoff(got)
        return None

    def learn(self, record: TurnRecord, task_id: str, key: str) -> None:
        record.task_ids.setdefault(task_id, key)
        self.history.acknowledge(task_id, key)

    def judge(self, reply: Reply, op: str, url: str) -> None:
        expected = reply.unexpected is None and (
            reply.transport is not None or reply.reason in (STORE_UNAVAILABLE, OVERLOADED, BUSY)
        )
        self.history.error(f"{self.key} {op}", url, expected, reply.describe())

    async def backoff(self, reply: Reply) -> None:
        if reply.reason == OVERLOADED:
            await asyncio.sleep(float(reply.meta.get("retryAfterSeconds", 1)))
        else:
            await asyncio.sleep(self.rng.uniform(0.2, 0.8))


def _texts(task: dict[str, Any]) -> list[str]:
    return [p.get("text", "") for m in task.get("history") or [] for p in m.get("parts") or []]


async def run_workload(
    urls: list[str], history: History, seed: int, config: WorkloadConfig, deadline: float
) -> None:
    wire = Wire(request_timeout_s=4 * config.lease_ttl_s, silence_s=7.0)
    try:
        sessions = [
            Session(f"s{seed}-{n}", urls, wire, history, random.Random(seed * 1000 + n), config)
            for n in range(config.sessions)
        ]
        await asyncio.gather(*(s.run(deadline) for s in sessions))
    finally:
        await wire.close()
