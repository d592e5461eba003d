"""OpenTelemetry spans of a turn: `agent.turn` > `llm.call` | `tool.execute`.

With no SDK configured these are no-ops. Spans are started with an explicit parent and never made
"current", so nothing leaks across the yields of the loop's async generators. A turn's trace
context travels as a W3C carrier (`traceparent`): in from the client's request, and in the
checkpoint, so a turn resumed later or on another replica continues the same trace.
"""

from __future__ import annotations

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

tracer = trace.get_tracer("a2a_agent_server")

Carrier = dict[str, str]


def start_span(name: str, parent: Context | None, **attributes: str | int) -> Span:
    return tracer.start_span(name, context=parent, attributes=attributes)


def context_of(span: Span) -> Context | None:
    """The context holding `span`; None when its span context is invalid (no SDK configured
    and no client trace to continue): then every child span, carrier and trace id of the turn
    is the no-op it would have been, at no cost per use."""
    if not span.get_span_context().is_valid:
        return None
    return trace.set_span_in_context(span)


def carrier_of(context: Context | None) -> Carrier:
    carrier: Carrier = {}
    if context is not None:
        propagate.inject(carrier, context=context)
    return carrier


def current_carrier() -> Carrier:
    """The current span's context as a carrier (the request span, when requests are traced);
    empty when no valid span is current."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    return carrier_of(context.get_current())


def context_from(carrier: Carrier | None) -> Context | None:
    return propagate.extract(carrier) if carrier else None


def trace_id_of(context: Context | None) -> str | None:
    """The trace id (32 hex digits) of the span in `context`, None when there is no valid one."""
    if context is None:
        return None
    span_context = trace.get_current_span(context).get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None
