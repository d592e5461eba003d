"""Rate limiting per principal: a token bucket, in memory (one replica) or in Redis (all replicas).

A bucket holds at most `limit.requests` tokens and refills at `limit.requests` per `limit.period_s`
seconds, continuously. Each request takes one token; with none left it is refused, and told how
long until one is back. A full bucket is the same as no bucket, so an idle key may be forgotten
(the in-memory limiter drops it, the Redis key expires) without changing any answer.
"""

from __future__ import annotations

import math
import re
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

_PERIODS_S = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
}
_FORMAT = re.compile(r"^\s*(\d{1,9})\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """`requests` per `period_s` seconds; also the largest burst."""

    requests: int
    period_s: int

    def __post_init__(self) -> None:
        if self.requests < 1 or self.period_s < 1:
            raise ValueError("a rate limit needs at least 1 request per at least 1 second")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """`60/minute`, `10/second`, `1000/hour`, `5/s`, `100/day` (plurals accepted)."""
        match = _FORMAT.match(text.lower())
        period = _PERIODS_S.get(match.group(2)) if match else None
        if match is None or period is None:
            raise ValueError(
                f"rate limit {text!r} is not `<requests>/<period>`"
                " with a period of second, minute, hour or day (e.g. `60/minute`)"
            )
        return cls(requests=int(match.group(1)), period_s=period)

    @property
    def tokens_per_s(self) -> float:
        return self.requests / self.period_s


@dataclass(frozen=True, slots=True)
class RateDecision:
    """Whether a request may proceed; if not, after how many seconds one token is back."""

    allowed: bool
    retry_after_s: float = 0.0

    @property
    def retry_after_whole_s(self) -> int:
        """Whole seconds, at least 1 (a client must not retry at once): for `Retry-After`."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def retry_after_header(self) -> str:
        return str(self.retry_after_whole_s)


class RateLimiter(ABC):
    """Takes one token from a key's bucket per request."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit

    @abstractmethod
    async def acquire(self, key: str) -> RateDecision:
        """Take a token from `key`'s bucket, or say how long until one is back."""


class InMemoryRateLimiter(RateLimiter):
    """Buckets in this process: for one replica. At most `max_keys` buckets are kept (the least
    recently used go first), so a flood of distinct keys cannot grow memory without bound."""

    def __init__(
        self,
        limit: RateLimit,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(limit)
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, updated

    async def acquire(self, key: str) -> RateDecision:
        return self.acquire_now(key)

    def acquire_now(self, key: str) -> RateDecision:
        """The same, without awaiting: the check and the take are one step on the event loop."""
        now = self._clock()
        capacity = float(self.limit.requests)
        tokens, updated = self._buckets.pop(key, (capacity, now))
        tokens = min(capacity, tokens + max(0.0, now - updated) * self.limit.tokens_per_s)
        if tokens >= 1.0:
            decision = RateDecision(allowed=True)
            tokens -= 1.0
        else:
            decision = RateDecision(
                allowed=False, retry_after_s=(1.0 - tokens) / self.limit.tokens_per_s
            )
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return decision

    def __len__(self) -> int:
        return len(self._buckets)
