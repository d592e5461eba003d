"""TurnObserver: what the task runner and the supervisor report for metrics and logs.

The agent layer stays free of any metrics library: it calls these no-op methods at each fact
(a state change, a model call, a tool call, a turn's end, a store outage, a takeover) and the app
turns them into Prometheus series and log lines. The methods are synchronous and must not raise
or block: they run on the turn's path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnReport:
    """How one turn ended on this process (`state` is the task's state when it stopped here)."""

    task_id: str
    context_id: str
    trace_id: str | None
    state: str
    duration_s: float
    model_calls: int
    tool_calls: int


class TurnObserver:
    """No-op observer. Override what you need."""

    def on_state_changed(self, state: str) -> None:
        """A task moved to `state` (a TaskState value)."""

    def on_turn_ended(self, report: TurnReport) -> None:
        """A turn stopped running on this process (finished, suspended, handed over)."""

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
        """One model call finished (`ok`) or failed; `model` answered it (a fallback, maybe),
        at `cost_usd` (None: no known price), for a task of `owner`."""

    def on_tool_call(self, name: str, *, ok: bool) -> None:
        """One tool call finished; `ok` False for a tool error (or an unknown tool)."""

    def on_store_unavailable(self, operation: str) -> None:
        """A store operation failed with StoreUnavailable (it may be retried)."""

    def on_takeover(self, outcome: str) -> None:
        """An orphaned turn was taken over: `resumed`, `restarted` or `failed`."""

    def on_turn_held(self) -> None:
        """A turn waited at the turn gate for a later loop pass (A2A_TURN_SLICE_MS)."""
