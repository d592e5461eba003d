"""OpenTelemetry spans of a turn: `agent.turn` > `llm.call` | `tool.execute`.

With no SDK configured these are no-ops. Spans are started with an explicit parent and never made
"current", so nothing leaks across the yields of the loop's async generators. A turn's trace
context travels as a W3C carrier (`traceparent`): in from the client's request, and in the
checkpoint, so a turn resumed later or on another replica continues the same trace.
"""

from __future__ import annotations

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

tracer = trace.get_tracer("a2a_agent_server")

Carrier = dict[str, str]


def start_span(name: str, parent: Context | None, **attributes: str | int) -> Span:
    return tracer.start_span(name, context=parent, attributes=attributes)


def context_of(span: Span) -> Context:
    return trace.set_span_in_context(span)


def carrier_of(context: Context | None) -> Carrier:
    carrier: Carrier = {}
    if context is not None:
        propagate.inject(carrier, context=context)
    return carrier


def context_from(carrier: Carrier | None) -> Context | None:
    return propagate.extract(carrier) if carrier else None
