"""A gRPC stream relays journal entries with their positions: the first in the initial
metadata, the last in the trailers; a gap in the positions ends the stream before it (a client
counts positions from the first, so a message after a gap would be counted wrong)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from a2a.types import a2a_pb2

from app.grpc.calls import GrpcCalls
from app.ops.metrics import Metrics
from stores.models import JournalEntry, Message, MessageReply, Part, Role


class FakeContext:
    """What the relay uses of a grpc.aio.ServicerContext, recorded."""

    def __init__(self) -> None:
        self.initial: tuple[tuple[str, str], ...] | None = None
        self.trailing: tuple[tuple[str, str], ...] | None = None

    async def send_initial_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        assert self.initial is None, "initial metadata sent twice"
        self.initial = metadata

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = metadata


def entry(position: int) -> JournalEntry:
    reply = Message(message_id=f"m{position}", role=Role.AGENT, parts=[Part(text=str(position))])
    return JournalEntry(position=position, event=MessageReply(message=reply))


class Entries:
    def __init__(self, batches: list[list[JournalEntry] | None]) -> None:
        self._batches = iter(batches)
        self.closed = False

    def __aiter__(self) -> Entries:
        return self

    async def __anext__(self) -> list[JournalEntry] | None:
        try:
            return next(self._batches)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.closed = True


async def relay(batches: list[list[JournalEntry] | None]) -> tuple[list[str], FakeContext, Entries]:
    calls = GrpcCalls(edge=None, metrics=Metrics())  # type: ignore[arg-type]
    context, entries = FakeContext(), Entries(batches)

    def render(item: JournalEntry) -> Any:
        return a2a_pb2.StreamResponse(message=a2a_pb2.Message(message_id=f"m{item.position}"))

    stream: AsyncIterator[Any] = calls._relay(entries, render, context, ())  # type: ignore[arg-type]
    sent = [message.message.message_id async for message in stream]
    return sent, context, entries


async def test_positions_in_the_metadata_and_keep_alives_skipped() -> None:
    sent, context, entries = await relay([[entry(4), entry(5)], None, [entry(6)]])
    assert sent == ["m4", "m5", "m6"]
    assert context.initial == (("a2a-first-event-id", "4"),)
    assert context.trailing == (("a2a-last-event-id", "6"),)
    assert entries.closed


async def test_a_gap_ends_the_stream_before_it() -> None:
    sent, context, entries = await relay([[entry(1), entry(2)], [entry(3), entry(9), entry(10)]])
    assert sent == ["m1", "m2", "m3"]
    assert context.trailing == (("a2a-last-event-id", "3"),)
    assert entries.closed


async def test_a_stream_with_nothing_sends_no_positions() -> None:
    sent, context, _ = await relay([None])
    assert sent == [] and context.initial is None and context.trailing == ()
