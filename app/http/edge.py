"""The request edge shared by both bindings: who is calling, and may they call now.

`Edge.context(request)` runs once per A2A request, before anything is parsed into an operation:
authenticate the headers (401 / 503), take one token from the caller's rate-limit bucket (429),
then build the immutable `CallContext` the operation and the handler get. The owner scoping every
store key is `context.owner`, so a principal reaches nothing another principal created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial

from starlette.requests import Request

from app.call_context import CallContext, Principal
from app.errors import StoreUnavailableError
from app.http.auth import Authenticator
from app.http.errors import RateLimitedError
from stores.base import StoreUnavailable
from stores.rate_limit import RateLimiter

logger = logging.getLogger(__name__)


class Edge:
    """Authentication and rate limiting for every A2A operation."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        rate_limiter: RateLimiter | None = None,
        base_url: Callable[[Request], str] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.rate_limiter = rate_limiter
        self._base_url = base_url

    async def context(self, request: Request) -> CallContext:
        principal = await self.admit(request.headers)
        return CallContext.from_request(
            request.headers,
            principal=principal,
            # The query string is parsed only if A2A-Version is not a header (the usual case).
            query=None if "a2a-version" in request.headers else request.query_params,
            base_url_of=partial(self._base_url, request) if self._base_url else None,
        )

    async def admit(self, headers: Mapping[str, str]) -> Principal:
        """The caller the headers (or gRPC metadata, lower-case) authenticate, once it has taken
        a token from its rate-limit bucket: 401 / 429 / 503 otherwise."""
        principal = await self.authenticator.authenticate(headers)
        if self.rate_limiter is not None:
            try:
                decision = await self.rate_limiter.acquire(principal.owner)
            except StoreUnavailable as exc:
                logger.warning("rate limit | the store is unavailable: %s", exc)
                raise StoreUnavailableError() from exc
            if not decision.allowed:
                raise RateLimitedError(
                    "Too many requests from this caller (A2A_RATE_LIMIT); retry later",
                    retry_after_s=decision.retry_after_whole_s,
                )
        return principal

    async def aclose(self) -> None:
        await self.authenticator.aclose()
