"""The token bucket in memory, and the `A2A_RATE_LIMIT` format."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings
from stores.rate_limit import InMemoryRateLimiter, RateDecision, RateLimit


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("text", "requests", "period_s"),
    [
        ("60/minute", 60, 60),
        ("10/second", 10, 1),
        ("5/s", 5, 1),
        ("1000/hour", 1000, 3600),
        ("100/day", 100, 86400),
        (" 3 / Minutes ", 3, 60),
        ("7/min", 7, 60),
    ],
)
def test_rate_limit_formats(text: str, requests: int, period_s: int) -> None:
    assert RateLimit.parse(text) == RateLimit(requests=requests, period_s=period_s)


@pytest.mark.parametrize(
    "text", ["", "60", "60/fortnight", "0/minute", "-1/minute", "1.5/s", "5/ms", "x/s"]
)
def test_bad_rate_limits_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        RateLimit.parse(text)


def test_settings_check_the_rate_limit_format() -> None:
    assert Settings(a2a_rate_limit="60/minute").a2a_rate_limit == "60/minute"
    with pytest.raises(ValidationError, match=r"e\.g\. `60/minute`"):
        Settings(a2a_rate_limit="lots")


def test_retry_after_header_is_whole_seconds_at_least_one() -> None:
    assert RateDecision(allowed=False, retry_after_s=0.01).retry_after_header == "1"
    assert RateDecision(allowed=False, retry_after_s=1.2).retry_after_header == "2"
    assert RateDecision(allowed=False, retry_after_s=30.0).retry_after_header == "30"


async def test_a_burst_up_to_the_limit_passes_then_one_is_refused() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(RateLimit.parse("6/minute"), clock=clock)
    decisions = [await limiter.acquire("alice") for _ in range(7)]
    assert [d.allowed for d in decisions] == [True] * 6 + [False]
    # One token comes back every 10 s.
    assert decisions[-1].retry_after_s == pytest.approx(10.0)
    assert decisions[-1].retry_after_header == "10"


async def test_tokens_come_back_at_the_rate() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(RateLimit.parse("6/minute"), clock=clock)
    for _ in range(6):
        assert (await limiter.acquire("alice")).allowed
    clock.now += 4.0
    refused = await limiter.acquire("alice")
    assert not refused.allowed
    assert refused.retry_after_s == pytest.approx(6.0)
    clock.now += 6.0
    assert (await limiter.acquire("alice")).allowed
    assert not (await limiter.acquire("alice")).allowed
    # A long idle time refills the bucket only up to its size.
    clock.now += 3600
    assert [(await limiter.acquire("alice")).allowed for _ in range(7)] == [True] * 6 + [False]


async def test_each_principal_has_its_own_bucket() -> None:
    limiter = InMemoryRateLimiter(RateLimit.parse("2/minute"), clock=FakeClock())
    assert [(await limiter.acquire("alice")).allowed for _ in range(3)] == [True, True, False]
    assert [(await limiter.acquire("bob")).allowed for _ in range(3)] == [True, True, False]


async def test_the_number_of_buckets_is_bounded() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(RateLimit.parse("1/minute"), max_keys=3, clock=clock)
    for index in range(10):
        await limiter.acquire(f"principal-{index}")
    assert len(limiter) == 3
    # The most recently used are kept: principal-9 is still empty.
    assert not (await limiter.acquire("principal-9")).allowed
