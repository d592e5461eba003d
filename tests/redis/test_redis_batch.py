"""The batcher's own round trips on one held connection: the same replies as redis-py's, one
connection whoever calls, and a dropped connection replaced. Every test runs on both of its
reads: straight from hiredis (through redis-py's private parser names) and, as without those
names, through redis-py's public `read_response`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import hiredis
import pytest
from redis._parsers import hiredis as parsers
from redis.asyncio import Redis
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.redis import batch
from stores.redis.batch import CommandBatcher
from stores.redis.support import AnyPipeline, LuaScript
from tests.redis.conftest import _connect, delete_prefix


@pytest.fixture(autouse=True, params=["hiredis", "read_response"])
def reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The batcher's read: hiredis' reader as redis-py 8.1 keeps it, or the public path, taken
    when redis-py's private `NOT_ENOUGH_DATA` is missing (looked up here with the name removed,
    then put back: redis-py's own parser reads it too)."""
    if request.param == "read_response":
        with monkeypatch.context() as without:
            without.delattr(parsers, "NOT_ENOUGH_DATA")
            sentinel = batch.not_enough_data_sentinel()
        assert sentinel is None
        monkeypatch.setattr(batch, "_NOT_ENOUGH_DATA", sentinel)
    seen: list[bool] = []
    reader_of = batch._hiredis_reader

    def recorded(connection: Any) -> Any:
        fast = reader_of(connection)
        seen.append(fast is not None)
        return fast

    monkeypatch.setattr(batch, "_hiredis_reader", recorded)
    yield request.param
    if seen:  # the test made round trips: each on the read it was given
        assert set(seen) == {request.param == "hiredis"}


_PAIR = LuaScript("return {KEYS[1], tonumber(ARGV[1]) + 1, false}")


def _commands(prefix: str) -> Any:
    """The shapes the stores send, on keys of this test."""

    def build(pipe: AnyPipeline) -> None:
        key, zset, hash_key, members = (f"{prefix}:{name}" for name in ("k", "z", "h", "s"))
        pipe.set(key, "first", nx=True, get=True, px=60_000)
        pipe.set(key, "second", nx=True, get=True, px=60_000)
        pipe.get(key)
        pipe.get(f"{prefix}:missing")
        pipe.pexpire(key, 60_000)
        pipe.pexpire(f"{prefix}:missing", 60_000)
        pipe.zadd(zset, {"a": 1.5, "b": 2})
        pipe.zadd(zset, {"a": 3}, xx=True)
        pipe.zrange(zset, 0, -1, withscores=True)
        pipe.hset(hash_key, mapping={"holder": "h", "epoch": 3})
        pipe.hmget(hash_key, ["holder", "epoch", "nothing"])
        pipe.exists(key, f"{prefix}:missing")
        pipe.rpush(f"{prefix}:l", "x", "y")
        pipe.lrange(f"{prefix}:l", -49, -1)
        pipe.sadd(members, "m")
        pipe.delete(f"{prefix}:l")
        _PAIR.queue(pipe, [f"{prefix}:k"], [41])

    return build


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("decode", [False, True])
async def test_replies_are_the_ones_redis_py_gives(
    prefix: str, decode: bool, protocol: int
) -> None:
    """In RESP2 and in RESP3 (redis-py's default): the replies the batcher takes from hiredis'
    reader are the ones redis-py's pipeline gives, parsed by the same callbacks."""
    ours = await _connect(decode_responses=decode, protocol=protocol)
    theirs = await _connect(decode_responses=decode, protocol=protocol)
    try:
        await ours.script_load(_PAIR.source)
        batched = await CommandBatcher(ours).run_pipeline(_commands(f"{prefix}:a"), scripts=[_PAIR])
        pipe = theirs.pipeline(transaction=False)
        _commands(f"{prefix}:b")(pipe)
        expected = await pipe.execute()
        renamed = [_renamed(reply, f"{prefix}:b", f"{prefix}:a") for reply in expected]
        assert batched == renamed
        assert [type(reply) for reply in batched] == [type(reply) for reply in renamed]
        assert batched[0] is None and batched[1] in (b"first", "first")  # SET NX GET
        assert batched[4] is True and batched[5] is False  # PEXPIRE: booleans, as redis-py's
    finally:
        await delete_prefix(ours, prefix)
        await ours.aclose()
        await theirs.aclose()


def _renamed(reply: Any, old: str, new: str) -> Any:
    if isinstance(reply, list):
        return [_renamed(each, old, new) for each in reply]
    if isinstance(reply, bytes):
        return reply.replace(old.encode(), new.encode())
    if isinstance(reply, str):
        return reply.replace(old, new)
    return reply


@pytest.mark.parametrize("protocol", [2, 3])
async def test_a_command_given_by_its_arguments_replies_as_its_method(
    prefix: str, protocol: int
) -> None:
    """The stores' single commands, as `run_args` sends them and as redis-py's methods do."""
    client = await _connect(protocol=protocol)
    batcher, key, hash_key = CommandBatcher(client), f"{prefix}:claim", f"{prefix}:h"
    try:
        await client.hset(hash_key, mapping={"task": "{}", "pos": 3})
        claim = ("SET", key, "t1", "NX", "GET", "PX", 60_000)
        assert await batcher.run_args(*claim, get=True) is None
        assert await batcher.run_args(*claim, get=True) == b"t1"
        assert await client.set(key, "t2", nx=True, get=True, px=60_000) == b"t1"
        assert await batcher.run_args("HMGET", hash_key, "task", "pos") == [b"{}", b"3"]
        assert await batcher.run_args("HMGET", hash_key, "task", "pos") == await client.hmget(
            hash_key, ["task", "pos"]
        )
        assert await batcher.run_args("GET", f"{prefix}:missing") is None
        assert await batcher.run_args("DEL", key) == 1 == await client.delete(hash_key)
        assert await batcher.run_script(_PAIR, [key], [41]) == await _PAIR(client, [key], [41])
    finally:
        await delete_prefix(client, prefix)
        await client.aclose()


async def test_lone_and_batched_calls_share_one_held_connection(client: Redis) -> None:
    batcher = CommandBatcher(client)
    alone = [await batcher.run_args("CLIENT", "ID") for _ in range(3)]
    together = await asyncio.gather(*(batcher.run_args("CLIENT", "ID") for _ in range(20)))
    assert len(set(alone + together)) == 1
    # Held for good: the client's other commands never get it from the pool.
    assert await client.client_id() not in alone


async def test_a_dropped_connection_is_replaced_and_the_round_trip_sent_again(
    client: Redis, other_client: Redis, prefix: str
) -> None:
    batcher = CommandBatcher(client)
    first = await batcher.run_args("CLIENT", "ID")
    await other_client.client_kill_filter(_id=first)
    key = f"{prefix}:after-kill"
    assert await batcher.run_args("SET", key, "v") is True
    assert await client.get(key) == b"v"
    assert await batcher.run_args("CLIENT", "ID") != first


async def test_an_error_reply_is_its_callers_alone_and_the_connection_goes_on(
    client: Redis, prefix: str
) -> None:
    batcher = CommandBatcher(client)
    await client.set(f"{prefix}:text", "not a list")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await batcher.run_args("RPUSH", f"{prefix}:text", "x")
    outcomes = await asyncio.gather(
        batcher.run_args("RPUSH", f"{prefix}:text", "x"),
        batcher.run_args("RPUSH", f"{prefix}:list", "x"),
        batcher.run_args("LRANGE", f"{prefix}:list", 0, -1),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ResponseError) and outcomes[1:] == [1, [b"x"]]


async def test_a_push_message_on_the_held_connection_is_not_taken_for_a_reply(
    client: Redis, other_client: Redis, prefix: str
) -> None:
    """A RESP3 push (here client tracking's invalidation, which the stores never turn on)
    waiting before a reply is passed over: the reply is the command's own."""
    assert client.connection_pool.connection_kwargs.get("protocol", 3) in (3, "3")
    batcher, key = CommandBatcher(client), f"{prefix}:tracked"
    await other_client.set(key, "1")
    await batcher.run_args("CLIENT", "TRACKING", "ON")
    assert await batcher.run_args("GET", key) == b"1"  # now tracked
    await other_client.set(key, "2")  # an invalidation push to the batcher's connection
    await asyncio.sleep(0.1)  # it is in the socket before the next reply
    assert await batcher.run_args("GET", key) == b"2"
    assert await batcher.run_args("GET", f"{prefix}:missing") is None


SILENT_TIMEOUT_S = 0.3


@contextlib.asynccontextmanager
async def _batcher_to_a_fake_redis(
    answer_after_s: float | None, *, timeout_s: float
) -> AsyncIterator[CommandBatcher]:
    """A batcher whose round trips are bounded by `timeout_s`, to a loopback server that answers
    a PING `answer_after_s` after it came (a connection's handshake at once), or nothing ever
    (None: a frozen Redis)."""
    connections: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        commands = hiredis.Reader()
        while answer_after_s is not None and (data := await reader.read(1 << 16)):
            commands.feed(data)
            while (command := commands.gets()) is not False:
                if command[0].upper() != b"PING":  # (the connection's handshake)
                    writer.write(b"+OK\r\n")
                    continue
                await asyncio.sleep(answer_after_s)
                writer.write(b"+PONG\r\n")

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    client = Redis(host="127.0.0.1", port=server.sockets[0].getsockname()[1])
    try:
        yield CommandBatcher(client, round_trip_timeout_s=timeout_s)
    finally:
        await client.aclose()
        server.close()
        for writer in connections:
            writer.close()


@pytest.fixture
async def silent_batcher() -> AsyncIterator[CommandBatcher]:
    async with _batcher_to_a_fake_redis(None, timeout_s=SILENT_TIMEOUT_S) as batcher:
        yield batcher


async def test_a_round_trip_without_an_answer_times_out_once_in_its_time(
    silent_batcher: CommandBatcher,
) -> None:
    for _ in range(2):  # the second on a new connection (a timed-out one is dropped)
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError, match=r"did not answer within 0\.3 s"):
            await silent_batcher.run_args("PING")
        assert SILENT_TIMEOUT_S <= time.monotonic() - started < 2 * SILENT_TIMEOUT_S


async def test_a_caller_cancelled_while_its_round_trip_waits_is_cancelled_not_timed_out(
    silent_batcher: CommandBatcher,
) -> None:
    caller = asyncio.create_task(silent_batcher.run_args("PING"))
    await asyncio.sleep(0.1)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0.4)  # past that round trip's deadline: nothing left to time out
    with pytest.raises(RedisTimeoutError):  # and the next one is timed as ever
        await silent_batcher.run_args("PING")


@pytest.fixture
async def slow_batcher() -> AsyncIterator[CommandBatcher]:
    async with _batcher_to_a_fake_redis(0.1, timeout_s=0.25) as batcher:
        yield batcher


async def test_round_trips_answered_in_time_are_never_timed_out(
    slow_batcher: CommandBatcher,
) -> None:
    """One timer watches every round trip: each time it fires (every 0.25 s here) a round trip
    of 0.1 s is in flight, and it goes on, being young."""
    finished = time.monotonic() + 1.0
    answered = 0
    while time.monotonic() < finished:
        assert await slow_batcher.run_args("PING") is True
        answered += 1
    assert answered >= 8
