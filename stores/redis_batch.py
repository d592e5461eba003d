"""CommandBatcher: the commands callers issue while a round trip is in flight go out together.

A streamed chunk is one EVALSHA, and with many turns streaming at once most of Redis' and
redis-py's cost is per round trip (a pool checkout, a write, a read wake-up), not per command.
The batcher keeps one pipeline in flight; whatever is issued meanwhile waits for it and then goes
out as the next pipeline, so N concurrent turns publish their chunks, save their checkpoints and
record their states in about one round trip. A lone caller waits for nothing: with nothing in
flight its command goes out at once, as a plain command (a pipeline of one costs more in redis-py
than the command alone) or as its own pipeline.

A caller issues a script (`run_script`), a command (`run_command`) or a group of commands
(`run_pipeline`, built on a pipeline as for `stores.redis_support.run_pipeline`), and gets its
own replies or error: the
first error among its group's replies, as `run_pipeline` raises it. A script Redis does not know
(NOSCRIPT, after a restart or a SCRIPT FLUSH) is loaded and its group sent again: every group
is idempotent apart from its scripts, which did not run. A failure of the whole round trip (the
connection) is every caller's error; the client's retry policy has already re-sent it once,
which the publish script makes harmless (an event id seen last is not appended again).

Batching is for a client to a single Redis: a cluster pipeline splits commands by node and so
brings no such saving; with a cluster client every call goes out by itself.

With `round_trip_timeout_s` the batcher bounds each of its round trips as a whole, on a client
of its own without a socket timeout: redis-py otherwise arms a timer for every reply it reads (a
tenth of a turn's CPU on Redis, with ~30 replies a turn). A round trip without an answer in time
fails as redis-py's own timeout does (a Redis TimeoutError; its connection is dropped, not
reused), so a hung Redis is still noticed within one command timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.redis_support import AnyPipeline, LuaScript, RedisClient, run_pipeline

MAX_BATCH = 512  # callers per pipeline: bounds a reply Redis has to buffer

Build = Callable[[AnyPipeline], None]
# A caller waiting to go out: what it queues, its scripts (loaded on NOSCRIPT), its replies.
_Call = tuple[Build, Sequence[LuaScript], "asyncio.Future[list[Any]]"]


class CommandBatcher:
    def __init__(
        self,
        client: RedisClient,
        *,
        round_trip_timeout_s: float | None = None,
    ) -> None:
        self._client = client
        self._batches = isinstance(client, Redis)
        self._round_trip_timeout_s = round_trip_timeout_s
        self._busy = False  # a round trip is in flight: new commands queue for the next one
        self._pending: list[_Call] = []
        self._sender: asyncio.Task[None] | None = None

    async def run_script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self._batches and self._busy:
            return (await self._queued(lambda pipe: script.queue(pipe, keys, args), [script]))[0]
        return await self._alone(script(self._client, keys, args))

    async def run_command(self, command: Callable[[Any], Any]) -> Any:
        """One command, written as a call on the client or a pipeline (redis-py gives both the
        same methods): `run_command(lambda redis: redis.get(key))`."""
        if self._batches and self._busy:
            return (await self._queued(command, ()))[0]
        return await self._alone(command(self._client))

    async def run_pipeline(self, build: Build, *, scripts: Sequence[LuaScript] = ()) -> list[Any]:
        if self._batches and self._busy:
            return await self._queued(build, scripts)
        replies: list[Any] = await self._alone(run_pipeline(self._client, build, scripts=scripts))
        return replies

    async def _alone(self, call: Any) -> Any:
        """Nothing in flight: this one goes out now; what comes meanwhile waits for it."""
        if not self._batches:
            return await call
        self._busy = True
        try:
            return await self._bounded(call)
        finally:
            self._busy = False
            self._send_pending()

    def _queued(self, build: Build, scripts: Sequence[LuaScript]) -> asyncio.Future[list[Any]]:
        replies: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._pending.append((build, scripts, replies))
        return replies

    def _send_pending(self) -> None:
        if self._pending and not self._busy:
            self._busy = True
            self._sender = asyncio.create_task(self._send_all())

    async def _send_all(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                try:
                    await self._send(batch)
                except Exception as exc:  # the round trip failed: every caller's error
                    for _, _, replies in batch:
                        if not replies.done():
                            replies.set_exception(exc)
                except asyncio.CancelledError:
                    self._pending = batch + self._pending
                    raise
        finally:
            self._busy = False
            self._sender = None
            for _, _, replies in self._pending:  # cancelled (shutdown): nothing more is sent
                if not replies.done():
                    replies.set_exception(RedisConnectionError("the Redis client is closing"))
            self._pending = []

    async def _send(self, batch: list[_Call]) -> None:
        assert isinstance(self._client, Redis)  # batches only on one Redis
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            spans = []
            for build, _, _ in batch:
                start = len(pipe.command_stack)
                build(pipe)
                spans.append((start, len(pipe.command_stack)))
            replies = await self._bounded(pipe.execute(raise_on_error=False))
            unknown: list[_Call] = []
            for call, (start, end) in zip(batch, spans, strict=True):
                group = replies[start:end]
                if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in group):
                    unknown.append(call)
                else:
                    _settle(call[2], group)
            if not unknown:
                return
            for script in {script for _, scripts, _ in unknown for script in scripts}:
                await self._bounded(self._client.script_load(script.source))
            batch = unknown

    async def _bounded(self, round_trip: Awaitable[Any]) -> Any:
        if self._round_trip_timeout_s is None:
            return await round_trip
        try:
            async with asyncio.timeout(self._round_trip_timeout_s):
                return await round_trip
        except TimeoutError as exc:
            raise RedisTimeoutError(
                f"Redis did not answer within {self._round_trip_timeout_s} s"
            ) from exc


def _settle(replies: asyncio.Future[list[Any]], group: list[Any]) -> None:
    if replies.done():  # its caller left: the commands ran all the same
        return
    error = next((reply for reply in group if isinstance(reply, Exception)), None)
    if error is not None:
        replies.set_exception(error)
    else:
        replies.set_result(group)
