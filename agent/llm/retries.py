"""When a failed model call is tried again: when the provider asks (`Retry-After`), else after a
jittered exponential backoff; never past the call's time budget (LLM_TIMEOUT_S).

A provider that answers 429, 503 or 529 with `retry-after` says when it will take the request;
trying sooner only earns another refusal (and counts against the rate limit). Without it, the
backoff's jitter keeps the tasks that failed together from retrying together.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

MAX_ASKED_S = 3600.0
"""A longer wait than this is read as a misconfigured header, not a request to wait."""


def asked_delay(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """The wait in seconds a response asks for: `retry-after-ms` (OpenAI's, the more precise),
    else `retry-after` as seconds or as an HTTP date; None when it asks for none (or says
    something that is neither). `now`: epoch seconds, for a date."""
    if not headers:
        return None
    lowered = {str(name).lower(): str(value).strip() for name, value in headers.items()}
    if (millis := _number(lowered.get("retry-after-ms"))) is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    if not value:
        return None
    if (seconds := _number(value)) is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is malformed
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), MAX_ASKED_S)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if number != number or number < 0 or number > MAX_ASKED_S * 1000:  # NaN, negative, absurd
        return None
    return min(number, MAX_ASKED_S * 1000)


@dataclass(frozen=True, slots=True)
class Retry:
    """Try again after `delay_s`."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop: no retry left, or the wait would not fit the budget. `past_budget`: the provider
    asked for a wait longer than the time left (a rate limit, whatever the status said)."""

    past_budget: bool = False


@dataclass(kw_only=True)
class RetrySchedule:
    """The retries of one call to one model: at most `num_retries`, all within `budget_s` of
    the first attempt (its start is when the schedule is made)."""

    num_retries: int
    backoff_s: float
    budget_s: float
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = random.random
    retries: int = 0
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.budget_s

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def after_failure(self, *, asked_s: float | None) -> Retry | GiveUp:
        """What to do after a transient failure that asked for `asked_s` (None: no ask)."""
        if self.retries >= self.num_retries:
            return GiveUp()
        left = self.remaining_s()
        if asked_s is not None:
            if asked_s > left:
                return GiveUp(past_budget=True)
            delay = asked_s  # no sooner than asked; the provider chose the moment
        else:
            # "Equal jitter": half the exponential step, plus up to the other half at random.
            step = self.backoff_s * 2**self.retries
            delay = step / 2 + step / 2 * self.jitter()
            if delay >= left:
                return GiveUp()
        self.retries += 1
        return Retry(delay)
