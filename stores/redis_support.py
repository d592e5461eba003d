"""What the Redis stores share: error mapping, Lua scripts by SHA, pipelines, JSON codecs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.base import StoreUnavailable
from stores.models import ChatMessage, Task, TaskEvent

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EVENTS: TypeAdapter[TaskEvent] = TypeAdapter(TaskEvent)


@contextmanager
def redis_available() -> Iterator[None]:
    """Turn "Redis cannot be reached" (refused, lost, timed out) into StoreUnavailable."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise StoreUnavailable(f"Redis is unavailable: {exc}") from exc


def text(value: object) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


LUA_NOW_MS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""
"""A script prologue: `now`, Redis server time in ms (so process clocks never matter)."""


class LuaScript:
    """A Lua script run by EVALSHA; loaded on the first NOSCRIPT (one round trip when cached).

    Not redis-py's `Script`: inside a pipeline that one sends SCRIPT EXISTS first on every execute,
    an extra round trip per call.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, client: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        pipe.evalsha(self.sha, len(keys), *keys, *args)


async def run_pipeline(
    client: Redis, build: Callable[[Pipeline], None], *, scripts: Sequence[LuaScript] = ()
) -> list[Any]:
    """Send the commands `build` queues in one round trip (not a transaction) and return replies.

    If Redis does not know a script yet, load `scripts` and send the whole pipeline again: every
    pipeline built here is idempotent apart from its scripts, which did not run.
    """
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        build(pipe)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in replies):
            for script in scripts:
                await client.script_load(script.source)
            continue
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies
    raise AssertionError("unreachable")


# --- serialization: the records' JSON (camelCase aliases, `kind` discriminator kept) ---------
# exclude_none: a Part with an explicit `data` None would otherwise fail its exactly-one check on
# the way back (every absent content field would come back as present).


def dump_event(event: TaskEvent) -> bytes:
    return _EVENTS.dump_json(event, by_alias=True, exclude_none=True)


def load_event(raw: bytes | str) -> TaskEvent:
    return _EVENTS.validate_json(raw)


def dump_task(task: Task) -> bytes:
    return task.model_dump_json(by_alias=True, exclude_none=True).encode()


def load_task(raw: bytes | str) -> Task:
    return Task.model_validate_json(raw)


def dump_message(message: ChatMessage) -> bytes:
    return message.model_dump_json(exclude_none=True).encode()


def load_message(raw: bytes | str) -> ChatMessage:
    return ChatMessage.model_validate_json(raw)


def timestamp_ms(moment: datetime) -> int:
    """As the in-memory store computes it, so both order and page identically."""
    return int(moment.timestamp() * 1000)


def timestamp_us(moment: datetime) -> int:
    """Exact microseconds since the epoch (for `status_after`, compared at full precision)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)
