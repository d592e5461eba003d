"""Prometheus metrics of one app: a registry of its own (two apps in one process never collide).

When an OTLP endpoint is set, every family is also an OpenTelemetry instrument of the same name
(`a2a_requests`, `a2a_turn_duration_seconds`, ...; a Prometheus counter's `_total` is a suffix
of the exposition, not part of the name), with the same attributes, recorded at the same moment.

`Metrics` is the agent layer's `TurnObserver` (turns, model and tool calls, takeovers, store
outages) and what the bindings report each request and stream to. `GET /metrics` renders it.
Every label has a bounded set of values: tool names outside the toolbox are `unknown`, methods
outside the protocol's are `unknown`, outcomes are `ok` or an A2A error reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response

from agent.runtime.observer import TurnObserver, TurnReport
from app.ops.logs import logged_by_a_binding
from stores.models import JournalEntry

logger = logging.getLogger("app.requests")

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass(kw_only=True)
class RequestRecord:
    """What a binding learns about one request while serving it (for its metric and log line)."""

    binding: str
    method: str = "unknown"
    outcome: str = "ok"
    owner: str | None = None
    task_id: str | None = None


class _Family:
    """One metric family: the Prometheus collector and, when OTLP is on, the OpenTelemetry
    instrument of the same name. Label values are given in the order of `labels`."""

    def __init__(self, prom: Counter | Gauge | Histogram, otel: Any, labels: list[str]) -> None:
        self.prom = prom
        self._otel = otel
        self._labels = labels
        # Each label set's child, looked up once: prometheus-client's `labels()` takes a lock
        # and validates the values at every call (the values are bounded, so is this).
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, values: tuple[str, ...]) -> Any:
        if not values:
            return self.prom
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.prom.labels(*values)
        return child

    def add(self, amount: float, *values: str) -> None:
        """A counter's increment, or a gauge's change (negative to go down)."""
        self._child(values).inc(amount)
        if self._otel is not None:
            self._otel.add(amount, dict(zip(self._labels, values, strict=True)))

    def observe(self, value: float, *values: str) -> None:
        self._child(values).observe(value)
        if self._otel is not None:
            self._otel.record(value, dict(zip(self._labels, values, strict=True)))


class Metrics(TurnObserver):
    """The app's metric families, in its own registry (and the OTLP meter's, when given)."""

    def __init__(
        self,
        *,
        tools: Iterable[str] = (),
        meter: Any = None,
        agent_of: Callable[[str], str] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # The process's own (memory, CPU, file descriptors) and its garbage collector's passes
        # and objects by generation: what an operator reads first when latency or memory drifts.
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._meter = meter
        self._tools = frozenset(tools)
        # The agent a task's owner belongs to (its name: bounded by the agents served).
        self._agent_of = agent_of or (lambda _owner: "")
        self.requests = self._family(
            Counter,
            "a2a_requests",
            "A2A requests by binding, method and outcome (ok or the A2A error reason).",
            ["binding", "method", "outcome"],
        )
        self.task_states = self._family(
            Counter,
            "a2a_task_state_changes",
            "Task state changes, by the state entered.",
            ["state"],
        )
        self.turn_duration = self._family(
            Histogram,
            "a2a_turn_duration_seconds",
            "Time a turn ran on this process, by the task's state when it stopped here.",
            ["state"],
            buckets=_SECONDS,
        )
        self.model_latency = self._family(
            Histogram,
            "a2a_model_call_duration_seconds",
            "Model call latency (whole streamed response), by outcome (ok, error).",
            ["outcome"],
            buckets=_SECONDS,
        )
        self.model_tokens = self._family(
            Counter, "a2a_model_tokens", "Model tokens, by type (prompt, completion).", ["type"]
        )
        self.model_calls = self._family(
            Counter,
            "a2a_model_calls",
            "Model calls answered, by the model that answered (a fallback's, when it did) and"
            " agent.",
            ["model", "agent"],
        )
        self.model_cost = self._family(
            Counter,
            "a2a_model_cost_usd",
            "What the model calls cost in US dollars by LiteLLM's price map, by model and agent"
            " (calls of a model with no known price add nothing).",
            ["model", "agent"],
        )
        self.tool_calls = self._family(Counter, "a2a_tool_calls", "Tool calls, by tool.", ["tool"])
        self.tool_errors = self._family(
            Counter, "a2a_tool_errors", "Tool calls that failed, by tool.", ["tool"]
        )
        self.open_streams = self._family(Gauge, "a2a_open_streams", "SSE streams open now.")
        self.journal_lag = self._family(
            Histogram,
            "a2a_journal_lag_seconds",
            "Time from a status update's timestamp (set when it is published) to an SSE stream"
            " sending it; live status updates only.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.store_errors = self._family(
            Counter, "a2a_store_errors", "StoreUnavailable failures, by operation.", ["operation"]
        )
        self.takeovers = self._family(
            Counter,
            "a2a_takeovers",
            "Orphaned turns taken over, by outcome (resumed, restarted, failed).",
            ["outcome"],
        )
        self.turns_held = self._family(
            Counter,
            "a2a_turns_held",
            "Times a turn waited at the turn gate for a later event-loop pass (A2A_TURN_SLICE_MS).",
        )

    def _family(
        self,
        kind: type[Counter | Gauge | Histogram],
        name: str,
        doc: str,
        labels: list[str] | None = None,
        **options: Any,
    ) -> _Family:
        labels = labels or []
        prom = kind(name, doc, labels, registry=self.registry, **options)
        otel = None
        if self._meter is not None:
            make = {
                Counter: self._meter.create_counter,
                Gauge: self._meter.create_up_down_counter,
                Histogram: self._meter.create_histogram,
            }[kind]
            otel = make(name, unit="s" if name.endswith("_seconds") else "1", description=doc)
        return _Family(prom, otel, labels)

    # -- the agent layer's facts --------------------------------------------------------------

    def on_state_changed(self, state: str) -> None:
        self.task_states.add(1, state)

    def on_turn_ended(self, report: TurnReport) -> None:
        self.turn_duration.observe(report.duration_s, report.state)

    def on_model_call(
        self,
        *,
        duration_s: float,
        ok: bool,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        model: str | None = None,
        cost_usd: float | None = None,
        owner: str | None = None,
    ) -> None:
        self.model_latency.observe(duration_s, "ok" if ok else "error")
        if prompt_tokens:
            self.model_tokens.add(prompt_tokens, "prompt")
        if completion_tokens:
            self.model_tokens.add(completion_tokens, "completion")
        if ok:
            # Model names are the configured ones (LLM_MODEL, LLM_FALLBACK_MODELS): bounded.
            labels = (model or "unknown", self._agent_of(owner) if owner is not None else "")
            self.model_calls.add(1, *labels)
            if cost_usd is not None:
                self.model_cost.add(cost_usd, *labels)

    def on_tool_call(self, name: str, *, ok: bool) -> None:
        tool = name if name in self._tools else "unknown"
        self.tool_calls.add(1, tool)
        if not ok:
            self.tool_errors.add(1, tool)

    def on_store_unavailable(self, operation: str) -> None:
        self.store_errors.add(1, operation)

    def on_takeover(self, outcome: str) -> None:
        self.takeovers.add(1, outcome)

    def on_turn_held(self) -> None:
        self.turns_held.add(1)

    # -- the bindings' facts ------------------------------------------------------------------

    @contextmanager
    def request(self, binding: str) -> Iterator[RequestRecord]:
        """Count and log one request; the binding fills in the record as it learns more."""
        record = RequestRecord(binding=binding)
        logged_by_a_binding()
        began = time.monotonic()
        try:
            yield record
        finally:
            duration_s = time.monotonic() - began
            self.requests.add(1, record.binding, record.method, record.outcome)
            if record.outcome == "STORE_UNAVAILABLE":
                self.on_store_unavailable(record.method)
            logger.info(
                "method=<%s>, binding=<%s>, outcome=<%s>, duration_s=<%.3f>, owner=<%s>,"
                " task_id=<%s> | request",
                record.method,
                record.binding,
                record.outcome,
                duration_s,
                record.owner,
                record.task_id,
            )

    def stream_sent(self, entry: JournalEntry, *, opened_at: float) -> None:
        """An entry went out on a stream opened at `opened_at` (epoch seconds). Only status
        updates carry the time they were published; entries older than the stream (a replay
        after Last-Event-ID, a subscribe's catch-up) would count the client's absence as lag."""
        if entry.kind != "status":  # the common artifact update is not parsed for this
            return
        published = _published_at(entry)
        if published is not None and published >= opened_at - 0.001:  # to the millisecond
            self.journal_lag.observe(max(0.0, time.time() - published))

    async def endpoint(self, _: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def _published_at(status_update: JournalEntry) -> float | None:
    """When a status update was published (its status timestamp, epoch seconds), read from its
    stored form with orjson: building the event to read one field cost a stream more than
    writing it. None if it says no time."""
    try:
        stamp = orjson.loads(status_update.stored)["status"]["timestamp"]
        return datetime.fromisoformat(stamp).timestamp()
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
