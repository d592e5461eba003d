"""CommandBatcher: the commands callers issue while a round trip is in flight go out together.

A streamed chunk is one EVALSHA, and with many turns streaming at once most of Redis' and
redis-py's cost is per round trip (a pool checkout, a write, a read wake-up), not per command.
The batcher keeps one pipeline in flight; whatever is issued meanwhile waits for it and then goes
out as the next pipeline, so N concurrent turns publish their chunks in about one round trip.
A lone caller waits for nothing: with nothing in flight its command goes out at once, as a plain
command (a pipeline of one costs more in redis-py than the command alone).

Each caller gets its own command's reply or error. A script Redis does not know (NOSCRIPT, after
a restart or a SCRIPT FLUSH) is loaded and its commands sent again: they did not run. A failure of
the whole round trip (the connection) is every caller's error; the client's retry policy has
already re-sent it once, which the publish script makes harmless (an event id seen last is not
appended again).

Only for a client to a single Redis: a cluster pipeline splits commands by node and so brings no
such saving; the cluster stores send their commands one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from stores.redis_support import LuaScript

MAX_BATCH = 512  # commands per pipeline: bounds a reply Redis has to buffer

# A command waiting to go out: its script (to load on NOSCRIPT), EVALSHA's arguments, its reply.
_Call = tuple[LuaScript, Sequence[Any], "asyncio.Future[Any]"]


class CommandBatcher:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._busy = False  # a round trip is in flight: new commands queue for the next one
        self._pending: list[_Call] = []
        self._sender: asyncio.Task[None] | None = None

    async def run_script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if not self._busy:  # nothing in flight: this one goes out now, as a plain command
            self._busy = True
            try:
                return await script(self._client, keys, args)
            finally:
                self._busy = False
                self._send_pending()
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((script, [script.sha, len(keys), *keys, *args], reply))
        return await reply

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
                    for _, _, reply in batch:
                        if not reply.done():
                            reply.set_exception(exc)
                except asyncio.CancelledError:
                    self._pending = batch + self._pending
                    raise
        finally:
            self._busy = False
            self._sender = None
            for _, _, reply in self._pending:  # cancelled (shutdown): nothing more is sent
                if not reply.done():
                    reply.set_exception(RedisConnectionError("the Redis client is closing"))
            self._pending = []

    async def _send(self, batch: list[_Call]) -> None:
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for _, command, _ in batch:
                pipe.execute_command("EVALSHA", *command)
            replies = await pipe.execute(raise_on_error=False)
            unknown = {n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)}
            if unknown and attempt == 0:
                for script in {batch[n][0] for n in unknown}:
                    await self._client.script_load(script.source)
                ran = [n for n in range(len(batch)) if n not in unknown]
                self._settle([batch[n] for n in ran], [replies[n] for n in ran])
                batch = [batch[n] for n in sorted(unknown)]
                continue
            self._settle(batch, replies)
            return

    @staticmethod
    def _settle(batch: list[_Call], replies: list[Any]) -> None:
        for (_, _, reply), value in zip(batch, replies, strict=True):
            if reply.done():  # its caller left: the command ran all the same
                continue
            if isinstance(value, Exception):
                reply.set_exception(value)
            else:
                reply.set_result(value)
