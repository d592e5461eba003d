"""The retry schedule of a model call: Retry-After obeyed (seconds, milliseconds, an HTTP date),
else a jittered exponential backoff; never a wait past the call's budget."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from agent.llm.retries import GiveUp, Retry, RetrySchedule, asked_delay

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "asked"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the precise one wins
        ({"retry-after": format_datetime(datetime.fromtimestamp(NOW + 7, UTC), usegmt=True)}, 7.0),
        ({"retry-after": format_datetime(datetime.fromtimestamp(NOW - 7, UTC), usegmt=True)}, 0.0),
        ({"retry-after": "0"}, 0.0),
        ({}, None),
        (None, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "Tue, 01 Dec 2026 16:00:00"}, None),  # a date without its zone
    ],
)
def test_the_wait_a_response_asks_for(headers: dict[str, str] | None, asked: float | None) -> None:
    assert asked_delay(headers, now=NOW) == asked


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def schedule(clock: Clock, *, retries: int = 3, budget: float = 10.0, jitter: float = 0.5):
    return RetrySchedule(
        num_retries=retries, backoff_s=0.5, budget_s=budget, clock=clock, jitter=lambda: jitter
    )


def test_an_asked_wait_is_waited_exactly_no_sooner() -> None:
    clock = Clock()
    plan = schedule(clock)
    assert plan.after_failure(asked_s=2.0) == Retry(2.0)
    clock.now += 2.0
    assert plan.after_failure(asked_s=0.0) == Retry(0.0)


def test_without_an_ask_the_backoff_doubles_with_jitter_in_its_upper_half() -> None:
    low, high = schedule(Clock(), jitter=0.0), schedule(Clock(), jitter=1.0)
    assert [low.after_failure(asked_s=None) for _ in range(3)] == [
        Retry(0.25), Retry(0.5), Retry(1.0)
    ]  # fmt: skip
    assert [high.after_failure(asked_s=None) for _ in range(3)] == [
        Retry(0.5), Retry(1.0), Retry(2.0)
    ]  # fmt: skip


def test_retries_stop_at_their_number() -> None:
    plan = schedule(Clock(), retries=1)
    assert isinstance(plan.after_failure(asked_s=None), Retry)
    assert plan.after_failure(asked_s=None) == GiveUp()


def test_an_ask_past_the_budget_gives_up_at_once_as_a_rate_limit() -> None:
    clock = Clock()
    plan = schedule(clock, budget=10.0)
    clock.now += 7.0  # 3 s left
    assert plan.after_failure(asked_s=3.5) == GiveUp(past_budget=True)
    assert plan.after_failure(asked_s=2.5) == Retry(2.5)


def test_a_backoff_past_the_budget_gives_up() -> None:
    clock = Clock()
    plan = schedule(clock, budget=1.0, jitter=1.0)
    clock.now += 0.6
    assert plan.after_failure(asked_s=None) == GiveUp()
