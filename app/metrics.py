"""Prometheus metrics of one app: a registry of its own (two apps in one process never collide).

`Metrics` is the agent layer's `TurnObserver` (turns, model and tool calls, takeovers, store
outages) and what the bindings report each request and stream to. `GET /metrics` renders it.
Every label has a bounded set of values: tool names outside the toolbox are `unknown`, methods
outside the protocol's are `unknown`, outcomes are `ok` or an A2A error reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response

from agent.observer import TurnObserver, TurnReport
from stores.models import JournalEntry, StatusUpdate, utc_now

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


class Metrics(TurnObserver):
    """The app's metric families, in its own registry."""

    def __init__(self, *, tools: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._tools = frozenset(tools)
        r = self.registry
        self.requests = Counter(
            "a2a_requests",
            "A2A requests by binding, method and outcome (ok or the A2A error reason).",
            ["binding", "method", "outcome"],
            registry=r,
        )
        self.task_states = Counter(
            "a2a_task_state_changes",
            "Task state changes, by the state entered.",
            ["state"],
            registry=r,
        )
        self.turn_duration = Histogram(
            "a2a_turn_duration_seconds",
            "Time a turn ran on this process, by the task's state when it stopped here.",
            ["state"],
            buckets=_SECONDS,
            registry=r,
        )
        self.model_latency = Histogram(
            "a2a_model_call_duration_seconds",
            "Model call latency (whole streamed response), by outcome (ok, error).",
            ["outcome"],
            buckets=_SECONDS,
            registry=r,
        )
        self.model_tokens = Counter(
            "a2a_model_tokens", "Model tokens, by type (prompt, completion).", ["type"], registry=r
        )
        self.tool_calls = Counter("a2a_tool_calls", "Tool calls, by tool.", ["tool"], registry=r)
        self.tool_errors = Counter(
            "a2a_tool_errors", "Tool calls that failed, by tool.", ["tool"], registry=r
        )
        self.open_streams = Gauge("a2a_open_streams", "SSE streams open now.", registry=r)
        self.journal_lag = Histogram(
            "a2a_journal_lag_seconds",
            "Time from a status update's timestamp (set when it is published) to an SSE stream"
            " sending it; live status updates only.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.store_errors = Counter(
            "a2a_store_errors",
            "StoreUnavailable failures, by operation.",
            ["operation"],
            registry=r,
        )
        self.takeovers = Counter(
            "a2a_takeovers",
            "Orphaned turns taken over, by outcome (resumed, restarted, failed).",
            ["outcome"],
            registry=r,
        )

    # -- the agent layer's facts --------------------------------------------------------------

    def on_state_changed(self, state: str) -> None:
        self.task_states.labels(state).inc()

    def on_turn_ended(self, report: TurnReport) -> None:
        self.turn_duration.labels(report.state).observe(report.duration_s)

    def on_model_call(
        self, *, duration_s: float, ok: bool, prompt_tokens: int = 0, completion_tokens: int = 0
    ) -> None:
        self.model_latency.labels("ok" if ok else "error").observe(duration_s)
        if prompt_tokens:
            self.model_tokens.labels("prompt").inc(prompt_tokens)
        if completion_tokens:
            self.model_tokens.labels("completion").inc(completion_tokens)

    def on_tool_call(self, name: str, *, ok: bool) -> None:
        tool = name if name in self._tools else "unknown"
        self.tool_calls.labels(tool).inc()
        if not ok:
            self.tool_errors.labels(tool).inc()

    def on_store_unavailable(self, operation: str) -> None:
        self.store_errors.labels(operation).inc()

    def on_takeover(self, outcome: str) -> None:
        self.takeovers.labels(outcome).inc()

    # -- the bindings' facts ------------------------------------------------------------------

    @contextmanager
    def request(self, binding: str) -> Iterator[RequestRecord]:
        """Count and log one request; the binding fills in the record as it learns more."""
        record = RequestRecord(binding=binding)
        began = time.monotonic()
        try:
            yield record
        finally:
            duration_s = time.monotonic() - began
            self.requests.labels(record.binding, record.method, record.outcome).inc()
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

    @contextmanager
    def stream_open(self) -> Iterator[None]:
        self.open_streams.inc()
        try:
            yield
        finally:
            self.open_streams.dec()

    def stream_sent(self, entry: JournalEntry, *, opened_at: float) -> None:
        """An entry went out on a stream opened at `opened_at` (epoch seconds). Only status
        updates carry the time they were published; entries older than the stream (a replay
        after Last-Event-ID, a subscribe's catch-up) would count the client's absence as lag."""
        event = entry.event
        if isinstance(event, StatusUpdate):
            published = event.status.timestamp.timestamp()
            if published >= opened_at - 0.001:  # timestamps are to the millisecond
                self.journal_lag.observe(max(0.0, utc_now().timestamp() - published))

    async def endpoint(self, _: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
