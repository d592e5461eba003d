"""OpenTelemetry: a turn's spans, the client's trace joined, the trace kept across a resume."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.runtime.turn import TurnCheckpoint
from agent.tracing import carrier_of, context_from, context_of, trace_id_of
from tests.fakes.tools import add

from .engine_helpers import OWNER, Stores, make_loop, resume_turn, start_turn
from .scripted_llm import ScriptedLLM, call, text, tools

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{CLIENT_SPAN_ID:016x}-01"

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    # The global provider can be set once per process; the agent's tracer is a proxy to it.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_turn_joins_the_clients_trace(spans: InMemorySpanExporter) -> None:
    stores = Stores()
    llm = ScriptedLLM(tools(call("c1", "add", {"a": 2, "b": 3})), text("5"))
    runner = stores.runner(make_loop(llm, [add]), holder="me")
    task, message = await stores.new_task("add 2 and 3")
    await start_turn(runner, task, message, trace_carrier={"traceparent": TRACEPARENT})
    await stores.journal_until_end(task.id)

    finished = list(spans.get_finished_spans())
    (turn,) = named(finished, "agent.turn")
    assert turn.context.trace_id == TRACE_ID
    assert turn.parent is not None and turn.parent.span_id == CLIENT_SPAN_ID
    assert turn.attributes is not None and turn.attributes["a2a.task_id"] == task.id
    children = named(finished, "llm.call") + named(finished, "tool.execute")
    assert len(named(finished, "llm.call")) == 2 and len(named(finished, "tool.execute")) == 1
    for child in children:
        assert child.context.trace_id == TRACE_ID
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
    (tool_span,) = named(finished, "tool.execute")
    assert tool_span.attributes is not None and tool_span.attributes["tool.name"] == "add"


async def test_a_resumed_turn_continues_the_same_trace(spans: InMemorySpanExporter) -> None:
    stores = Stores()
    llm = ScriptedLLM(tools(call("c1", "add", {"a": 1, "b": 1})), text("2"))
    runner = stores.runner(make_loop(llm, [add]), holder="first")
    task, message = await stores.new_task("add")
    await start_turn(runner, task, message, trace_carrier={"traceparent": TRACEPARENT})
    await stores.journal_until_end(task.id)
    saved: TurnCheckpoint = stores.checkpoints.of(task.id)[-1]
    assert saved.trace_carrier["traceparent"].split("-")[1] == f"{TRACE_ID:032x}"

    # Another process goes on from that checkpoint: its turn span is in the same trace, under
    # the first process's turn span.
    first_turn = named(list(spans.get_finished_spans()), "agent.turn")[0]
    spans.clear()
    other = stores.runner(make_loop(ScriptedLLM(text("again")), [add]), holder="second")
    checkpoint = saved.model_copy(deep=True)
    checkpoint.loop.pending_calls, checkpoint.loop.results = [], {}
    await stores.leases.release(task.id, owner=OWNER, holder="first")
    before = await stores.position(task.id)
    await resume_turn(other, task, checkpoint, owner=OWNER, recovered=True)
    await stores.journal_until_end(task.id, after=before)
    (resumed,) = named(list(spans.get_finished_spans()), "agent.turn")
    assert resumed.context.trace_id == TRACE_ID
    assert resumed.parent is not None and resumed.parent.span_id == first_turn.context.span_id


def test_without_an_sdk_a_turn_keeps_only_a_clients_trace() -> None:
    # No SDK: the turn's span is the client's own (a non-recording span of its traceparent), so
    # its checkpoint and its calls to other agents still carry that trace; with no client trace
    # there is nothing to carry, and the turn holds no context at all.
    tracer = trace.NoOpTracer()
    joined = context_of(
        tracer.start_span("agent.turn", context=context_from({"traceparent": TRACEPARENT}))
    )
    assert carrier_of(joined) == {"traceparent": TRACEPARENT}
    assert trace_id_of(joined) == f"{TRACE_ID:032x}"
    alone = context_of(tracer.start_span("agent.turn", context=context_from({})))
    assert alone is None
    assert carrier_of(alone) == {} and trace_id_of(alone) is None
