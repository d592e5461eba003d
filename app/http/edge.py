"""The request edge shared by both bindings: who is calling, and may they call now.

`Edge.context(request, tenant=...)` runs once per A2A request, before anything is parsed into an
operation: authenticate the headers (401 / 503), check the tenant the request names, activate
the requested A2A extensions (-32008 / 400 without a required one), take one token from the
caller's rate-limit bucket within that tenant (429), and build the immutable `CallContext` the
operation and the handler get. The owner scoping every store key is
`context.owner`, the principal's within the tenant, so a caller reaches nothing another principal
created, nor anything made in another tenant or outside every tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial

from starlette.requests import Request

from app.call_context import CallContext
from app.errors import StoreUnavailableError
from app.extensions import Extensions
from app.http.auth import Authenticator
from app.http.errors import RateLimitedError
from app.http.tenants import Tenants
from stores.base import StoreUnavailable
from stores.rate_limit import RateLimiter

logger = logging.getLogger(__name__)


class Edge:
    """Authentication, the tenant and rate limiting for every A2A operation."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        rate_limiter: RateLimiter | None = None,
        base_url: Callable[[Request], str] | None = None,
        tenants: Tenants | None = None,
        extensions: Extensions | None = None,
        extensions_of: Callable[[str | None], Extensions] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.rate_limiter = rate_limiter
        self.tenants = tenants or Tenants()
        self.extensions = extensions or Extensions()
        """The declared extensions of a request whose tenant names no agent of its own."""
        self._extensions_of = extensions_of
        """AGENTS_FILE: a checked tenant -> its agent's extensions (each agent requires its own)."""
        self._base_url = base_url

    async def context(self, request: Request, *, tenant: object = None) -> CallContext:
        """The call context of an HTTP request naming `tenant` (its raw value, or None)."""
        return await self.context_of(
            request.headers,
            tenant=tenant,
            # The query string is parsed only if A2A-Version is not a header (the usual case).
            query=None if "a2a-version" in request.headers else request.query_params,
            base_url_of=partial(self._base_url, request) if self._base_url else None,
        )

    async def context_of(
        self,
        headers: Mapping[str, str],
        *,
        tenant: object = None,
        query: Mapping[str, str] | None = None,
        base_url_of: Callable[[], str] | None = None,
    ) -> CallContext:
        """The call context of a request with these headers (or gRPC metadata) naming `tenant`:
        the caller authenticated (401 / 503), then the tenant checked (-32602 / 400, or 404
        when not served; only once the caller is known, so that an anonymous caller learns
        nothing of the tenants), then the A2A extensions activated (`A2A-Extensions`, 0.3's
        `X-A2A-Extensions`: -32008 / 400 without a required one), then a token taken from the
        bucket of the caller within the tenant (429)."""
        principal = await self.authenticator.authenticate(headers)
        checked = self.tenants.check(tenant)
        extensions = self._extensions_of(checked) if self._extensions_of else self.extensions
        context = CallContext.from_request(
            headers,
            principal=principal,
            tenant=checked,
            query=query,
            base_url_of=base_url_of,
            activate=extensions.activate,
        )
        if self.rate_limiter is not None:
            try:
                decision = await self.rate_limiter.acquire(context.owner)
            except StoreUnavailable as exc:
                logger.warning("rate limit | the store is unavailable: %s", exc)
                raise StoreUnavailableError() from exc
            if not decision.allowed:
                raise RateLimitedError(
                    "Too many requests from this caller (A2A_RATE_LIMIT); retry later",
                    retry_after_s=decision.retry_after_whole_s,
                )
        return context

    async def aclose(self) -> None:
        await self.authenticator.aclose()
