"""The edge errors: statuses, codes and the HTTP headers a binding must send with them."""

from __future__ import annotations

from app.http.errors import (
    AuthenticationUnavailableError,
    HostNotAllowedError,
    OriginNotAllowedError,
    PayloadTooLargeError,
    RateLimitedError,
    UnauthenticatedError,
)
from stores.rate_limit import RateDecision


def test_authentication_error_carries_a_bearer_challenge() -> None:
    missing = UnauthenticatedError()
    assert (missing.http_status, missing.code, missing.status) == (401, -32040, "UNAUTHENTICATED")
    assert missing.http_headers() == {"WWW-Authenticate": 'Bearer realm="a2a"'}
    invalid = UnauthenticatedError('Bad "token"\r\nX-Injected: 1', bearer_error="invalid_token")
    challenge = invalid.http_headers()["WWW-Authenticate"]
    assert challenge == (
        'Bearer realm="a2a", error="invalid_token", error_description="Bad \\"token\\"??X-Injected: 1"'
    )
    assert "\r" not in challenge and "\n" not in challenge


def test_rate_limited_error_says_when_to_retry() -> None:
    decision = RateDecision(allowed=False, retry_after_s=11.2)
    error = RateLimitedError(retry_after_s=int(decision.retry_after_header))
    assert (error.http_status, error.code, error.status) == (429, -32029, "RESOURCE_EXHAUSTED")
    assert error.http_headers() == {"Retry-After": "12"}
    assert error.details()[0]["metadata"] == {"retryAfterSeconds": "12"}


def test_the_other_edge_errors() -> None:
    assert PayloadTooLargeError().http_status == 413
    assert PayloadTooLargeError().http_headers() == {"Connection": "close"}
    assert HostNotAllowedError().http_status == 421
    assert OriginNotAllowedError().http_status == 403
    unavailable = AuthenticationUnavailableError()
    assert (unavailable.http_status, unavailable.http_headers()) == (503, {"Retry-After": "5"})
