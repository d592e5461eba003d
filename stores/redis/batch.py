"""CommandBatcher: the commands callers issue while a round trip is in flight go out together.

A streamed chunk is one EVALSHA, and with many turns streaming at once most of Redis' and
redis-py's cost is per round trip (a pool checkout, a write, a read wake-up), not per command.
The batcher keeps one pipeline in flight; whatever is issued meanwhile waits for it and then goes
out as the next pipeline, so N concurrent turns publish their chunks, save their checkpoints and
record their states in about one round trip. A lone caller waits for nothing but the end of the
event loop's current turn: with nothing in flight its command goes out then, with whatever the
other callers running in that turn issued.

On a single Redis the round trips go out on one connection of the client's pool, held for good,
and are written and read there directly: the commands as their builds queue them on a pipeline
kept only to record them, written at once, and each reply parsed as redis-py parses it (its
response callbacks), an error reply in its place. redis-py's own pipeline execution (a pool
checkout and release, its retry wrapper, the per-command bookkeeping around each reply) cost a
large share of a SendMessage's CPU on Redis. The replies are taken from hiredis' reader
directly: redis-py's `read_response` around each one (a timer, three coroutines) cost more than
the parse. A connection that fails is dropped and the round trip is sent once more on a new one
(the client's retry policy).

A caller issues a script (`run_script`), a command given by its arguments (`run_args`) or a group
of commands (`run_pipeline`, built on a pipeline as for `stores.redis.support.run_pipeline`), and
gets its own replies or error: the first error among its group's replies, as `run_pipeline`
raises it. A script or a command goes in as its arguments, as Redis takes them: through redis-py's
command methods and a recording pipeline it cost more than its packing. A script Redis does not
know (NOSCRIPT, after a restart or a SCRIPT FLUSH) is loaded and its group sent again: every
group is idempotent apart from its scripts, which did not run. A failure of the whole round trip
(the connection) is every caller's error; the client's retry policy has already re-sent it once,
which the publish script makes harmless (an event id seen last is not appended again).

Batching is for a client to a single Redis: a cluster pipeline splits commands by node and so
brings no such saving; with a cluster client every call goes out by itself.

With `round_trip_timeout_s` the batcher bounds each of its round trips as a whole, on a client
of its own without a socket timeout: redis-py otherwise arms a timer for every reply it reads.
A round trip without an answer in time fails as redis-py's own timeout does (a Redis
TimeoutError; its connection is dropped, not reused), so a hung Redis is still noticed within
one command timeout.

redis-py internals, fenced here: written against redis-py 8.1.0 (hiredis 3.5.0). Reading replies
straight from hiredis uses the connection's private parser (`_parser`, its `_reader` and
`read_from_socket`) and the sentinel its reader gives for a reply not yet whole
(`redis._parsers.hiredis.NOT_ENOUGH_DATA`). The sentinel is looked up at import
(`not_enough_data_sentinel`), the parser on each round trip (`_hiredis_reader`): without any
of them the replies are read by the connection's public `read_response`. (Figures:
bench/RESULTS.md, "Figures moved out of docstrings (issue 41)".)
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.redis.support import AnyPipeline, LuaScript, RedisClient, run_pipeline


def not_enough_data_sentinel() -> object | None:
    """What redis-py's hiredis readers give for a reply not yet whole (a private name of
    redis-py's), or None if this redis-py has none."""
    try:
        parsers = importlib.import_module("redis._parsers.hiredis")
    except ImportError:
        return None
    sentinel: object | None = getattr(parsers, "NOT_ENOUGH_DATA", None)
    return sentinel


_NOT_ENOUGH_DATA = not_enough_data_sentinel()
# What hiredis (>= 3.2) gives for a RESP3 push message (pub/sub, client tracking): none of
# which these connections ask for, so one is passed over rather than taken for a reply.
_PUSH = getattr(hiredis, "PushNotification", None)
MAX_BATCH = 512  # callers per pipeline: bounds a reply Redis has to buffer
GATHER_TURNS = 4  # turns of the event loop a round trip waits at most for more callers

Build = Callable[[AnyPipeline], None]
_Command = tuple[tuple[Any, ...], Mapping[str, Any]]  # arguments, options (as a pipeline's)
_Commands = list[_Command]
# A caller waiting to go out: its one command or what its build queues, its scripts (loaded on
# NOSCRIPT), its replies.
_Call = tuple["_Command | Build", Sequence[LuaScript], "asyncio.Future[list[Any]]"]
_NO_OPTIONS: Mapping[str, Any] = {}
_ReadMore = Callable[[], Awaitable[Any]]
_NOT_FOR_CALLBACKS = frozenset({"keys", EMPTY_RESPONSE, NEVER_DECODE})


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
        if isinstance(client, Redis):
            # The builds queue their commands on a pipeline used only to record them.
            self._recorder = client.pipeline(transaction=False)
            self._callbacks = client.response_callbacks
            self._callback_of: dict[Any, Any] = {}
        self._held: AbstractConnection | None = None
        # The round trip in flight (its task, its deadline) and the timer that watches it.
        self._in_flight: tuple[asyncio.Task[Any], float] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._timed_out: asyncio.Task[Any] | None = None

    async def run_script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if not self._batches:
            return await script(self._client, keys, args)
        return (await self._call((script.command(keys, args), _NO_OPTIONS), (script,)))[0]

    async def run_args(self, *args: Any, **options: Any) -> Any:
        """One command given as Redis takes it, its reply as redis-py's method gives it (by the
        command's response callback; `options` as the method passes them, e.g. `get=True` for
        SET ... GET): `run_args("HMGET", key, "task", "pos")`."""
        if not self._batches:
            return await self._client.execute_command(*args, **options)
        return (await self._call((args, options), ()))[0]

    async def run_pipeline(self, build: Build, *, scripts: Sequence[LuaScript] = ()) -> list[Any]:
        if not self._batches:
            replies: list[Any] = await run_pipeline(self._client, build, scripts=scripts)
            return replies
        return await self._call(build, scripts)

    async def _call(self, build: _Command | Build, scripts: Sequence[LuaScript]) -> list[Any]:
        """The call waits for the next round trip out: the one that starts once the round trip
        in flight is answered, or, with none in flight, at the end of this turn of the event
        loop (with what the other callers woken meanwhile issue)."""
        replies: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._pending.append((build, scripts, replies))
        if not self._busy:
            self._busy = True
            self._sender = asyncio.create_task(self._send_all())
        return await replies

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
                await self._gathered()
        finally:
            self._busy = False
            self._sender = None
            for _, _, replies in self._pending:  # cancelled (shutdown): nothing more is sent
                if not replies.done():
                    replies.set_exception(RedisConnectionError("the Redis client is closing"))
            self._pending = []

    async def _gathered(self) -> None:
        """Let the callers just answered run before the next round trip goes out, so that what
        they issue next goes with it: with N turns at once, each round trip carries the next
        command of nearly every one, not of half of them. A caller may take a few turns of the
        event loop to get to its next command: the batcher waits while each turn brings more,
        up to GATHER_TURNS."""
        for _ in range(GATHER_TURNS):
            waiting = len(self._pending)
            await asyncio.sleep(0)
            if len(self._pending) == waiting:
                return

    async def _send(self, batch: list[_Call]) -> None:
        assert isinstance(self._client, Redis)  # batches only on one Redis
        for attempt in range(2):
            commands, spans = self._recorded(batch)
            replies = await self._bounded(self._round_trip(commands))
            unknown: list[_Call] = []
            for call, (start, end) in zip(batch, spans, strict=True):
                group = replies[start:end]
                error = _first_error(group)
                if error is not None and attempt == 0 and _unknown_script(group):
                    unknown.append(call)
                elif not call[2].done():  # (done: its caller left; the commands ran all the same)
                    if error is None:
                        call[2].set_result(group)
                    else:
                        call[2].set_exception(error)
            if not unknown:
                return
            for script in {script for _, scripts, _ in unknown for script in scripts}:
                await self._bounded(self._client.script_load(script.source))
            batch = unknown

    def _recorded(self, batch: list[_Call]) -> tuple[_Commands, list[tuple[int, int]]]:
        """The batch's commands, each caller's one or as its build queues them, and where each
        caller's are among them."""
        commands: _Commands = []
        spans = []
        recorder = self._recorder
        for build, _, _ in batch:
            start = len(commands)
            if type(build) is tuple:
                commands.append(build)
            else:
                try:
                    build(recorder)  # type: ignore[operator]
                    commands += recorder.command_stack
                finally:
                    recorder.command_stack = []
            spans.append((start, len(commands)))
        return commands, spans

    async def _round_trip(self, commands: _Commands) -> list[Any]:
        """The commands written at once on the held connection and their replies read, each
        parsed as redis-py parses it, an error reply in its place; once more if the connection
        failed (the client's retry policy: redis-py dropped it, the next write connects anew)."""
        try:
            return await self._exchange(commands)
        except RedisConnectionError:
            return await self._exchange(commands)

    async def _exchange(self, commands: _Commands) -> list[Any]:
        if self._held is None:
            assert isinstance(self._client, Redis)  # batches only on one Redis
            pool = self._client.connection_pool
            self._held = await pool.get_connection()  # type: ignore[no-untyped-call]
        connection = self._held
        # One buffer, each command packed by the connection (hiredis: `redis_support`);
        # redis-py's `pack_commands` regroups the packed pieces first, for nothing here.
        packed = b"".join(
            [piece for args, _ in commands for piece in connection.pack_command(*args)]
        )
        await connection.send_packed_command(packed, check_health=False)
        fast = _hiredis_reader(connection)
        if fast is None:  # not hiredis' parser, or not as redis-py 8.1 has it: redis-py reads
            return [await self._reply(connection, args[0], options) for args, options in commands]
        try:
            return await self._replies(*fast, commands)
        except OSError as exc:
            await connection.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while reading from Redis: {exc.args}") from exc
        except BaseException:  # as redis-py: a connection whose replies are not all read is closed
            await connection.disconnect(nowait=True)
            raise

    async def _replies(
        self, reader: hiredis.Reader, read_more: _ReadMore, commands: _Commands
    ) -> list[Any]:
        """The commands' replies straight from hiredis' reader, read from the socket while it
        holds no whole one; an error reply in its place, as redis-py's pipelines give it."""
        replies = []
        for args, options in commands:
            decode = NEVER_DECODE not in options
            reply = reader.gets(decode)
            while reply is _NOT_ENOUGH_DATA or type(reply) is _PUSH:
                if reply is _NOT_ENOUGH_DATA:
                    await read_more()
                reply = reader.gets(decode)  # (a RESP3 push is no reply: none is asked for here)
            if isinstance(reply, ResponseError):
                replies.append(options.get(EMPTY_RESPONSE, reply))
                continue
            if isinstance(reply, RedisConnectionError):  # (LOADING, say): as redis-py, raised
                raise reply
            parsed = self._parsed(args[0], reply, options)
            # (A reply itself, as a command without a callback gives it, is never awaitable.)
            if parsed is not reply and inspect.isawaitable(parsed):
                parsed = await parsed
            replies.append(parsed)
        return replies

    async def _reply(
        self, connection: AbstractConnection, name: Any, options: Mapping[str, Any]
    ) -> Any:
        try:
            reply = await connection.read_response(disable_decoding=NEVER_DECODE in options)
        except ResponseError as exc:
            return options.get(EMPTY_RESPONSE, exc)
        parsed = self._parsed(name, reply, options)
        if parsed is not reply and inspect.isawaitable(parsed):
            parsed = await parsed
        return parsed

    def _parsed(self, name: Any, reply: Any, options: Mapping[str, Any]) -> Any:
        """The reply as redis-py gives it: through the command's response callback."""
        try:
            callback = self._callback_of[name]
        except KeyError:  # redis-py's callbacks are a case-insensitive dict: looked up once
            callback = self._callback_of[name] = self._callbacks.get(name)
        if callback is None:
            return reply
        if options:  # most commands have none: no dict to build per reply
            options = {
                key: value for key, value in options.items() if key not in _NOT_FOR_CALLBACKS
            }
        return callback(reply, **options)

    async def _bounded(self, round_trip: Awaitable[Any]) -> Any:
        """The round trip, failed as redis-py's timeout fails if it takes longer than
        `round_trip_timeout_s`. One at a time is in flight: a single timer watches them all
        (`_watch`), not one armed and cancelled per round trip (as `asyncio.timeout` would)."""
        if self._round_trip_timeout_s is None:
            return await round_trip
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        deadline = loop.time() + self._round_trip_timeout_s
        self._in_flight = (task, deadline)
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._watch)
        try:
            return await round_trip
        except asyncio.CancelledError:
            if self._timed_out is not task:
                raise
            self._timed_out = None
            if task.uncancel() > 0:  # cancelled from outside as well: that one wins
                raise
            raise RedisTimeoutError(
                f"Redis did not answer within {self._round_trip_timeout_s} s"
            ) from None
        finally:
            self._in_flight = None

    def _watch(self) -> None:
        """The watchdog's timer: the round trip in flight, if past its deadline, is cancelled
        (and `_bounded` turns that into a timeout); otherwise the timer waits for its deadline."""
        self._watchdog = None
        if self._in_flight is None:
            return
        task, deadline = self._in_flight
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            self._timed_out = task
            task.cancel()
        else:
            self._watchdog = loop.call_at(deadline, self._watch)


def _hiredis_reader(connection: AbstractConnection) -> tuple[hiredis.Reader, _ReadMore] | None:
    """The connection's hiredis reader and the read that feeds it, as redis-py 8.1 keeps them
    (private names); None when its parser is another or they are not there."""
    if _NOT_ENOUGH_DATA is None:
        return None
    parser = getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)  # reconnecting makes a new one
    read_more = getattr(parser, "read_from_socket", None)
    if not isinstance(reader, hiredis.Reader) or not callable(read_more):
        return None
    return reader, read_more


def _first_error(group: list[Any]) -> Exception | None:
    for reply in group:
        if isinstance(reply, Exception):
            return reply
    return None


def _unknown_script(group: list[Any]) -> bool:
    return any(isinstance(reply, NoScriptError) for reply in group)
