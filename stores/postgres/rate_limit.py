"""The token bucket in PostgreSQL, so a principal's limit holds across every replica.

A row per key: tokens, when they were counted (server time), and whether the last take got a
token. One upsert reads, refills, takes and writes it (the row lock makes it atomic), on the
database's clock, so replicas with skewed clocks agree. The row expires once the bucket would be
full again: an expired row and a full bucket are the same.
"""

from __future__ import annotations

import math

from stores.postgres.database import Database
from stores.rate_limit import RateDecision, RateLimit, RateLimiter

# The bucket's tokens now: refilled since it was last counted, at most its capacity (all of it
# once the row expired). Every SET below reads the row as it was before this take.
_REFILLED = (
    "least($2, CASE WHEN b.expires_at > now()"
    " THEN b.tokens + extract(epoch FROM now() - b.at)::float8 * $3 ELSE $2 END)"
)

# $1 key, $2 capacity, $3 tokens per s, $4 ttl s. Returns the tokens left and whether one was
# taken.
_TAKE = f"""
INSERT INTO rate_buckets AS b (key, tokens, at, granted, expires_at)
VALUES ($1, $2 - 1, now(), true, now() + make_interval(secs => $4))
ON CONFLICT (key) DO UPDATE SET
    tokens = CASE WHEN {_REFILLED} >= 1 THEN {_REFILLED} - 1 ELSE {_REFILLED} END,
    granted = {_REFILLED} >= 1,
    at = now(),
    expires_at = now() + make_interval(secs => $4)
RETURNING tokens, granted
"""


class PostgresRateLimiter(RateLimiter):
    """Buckets in PostgreSQL, shared by every replica on the database.

    Raises StoreUnavailable when the database cannot be reached (the caller decides whether
    that refuses the request or lets it through).
    """

    def __init__(self, database: Database, limit: RateLimit) -> None:
        super().__init__(limit)
        self._db = database
        # Refilling from empty takes one period; a second more covers the rounding.
        self._ttl_s = float(math.ceil(limit.period_s) + 1)

    async def acquire(self, key: str) -> RateDecision:
        async with self._db.connection() as connection:
            row = await connection.fetchrow(
                _TAKE, key, float(self.limit.requests), self.limit.tokens_per_s, self._ttl_s
            )
        if row["granted"]:
            return RateDecision(allowed=True)
        wait_s = (1.0 - float(row["tokens"])) / self.limit.tokens_per_s
        return RateDecision(allowed=False, retry_after_s=wait_s)
