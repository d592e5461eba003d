"""The HTTP edge's refusals: authentication, rate and size limits, hosts, origins and tenants.

They have no A2A code of their own (the JSON-RPC codes here are implementation-defined, outside
the range A2A reserves); each is one more row of app.errors' table, and renders the same way.
"""

from __future__ import annotations

from app.errors import A2AError, RetryLaterError, UnsupportedMediaTypeError

AUTH_REALM = "a2a"


def _quoted(value: str) -> str:
    """An RFC 7235 quoted-string: printable ASCII only, `"` and `\\` escaped."""
    printable = "".join(char if " " <= char <= "~" else "?" for char in value)
    return '"' + printable.replace("\\", "\\\\").replace('"', '\\"') + '"'


class UnauthenticatedError(A2AError):
    """Missing or invalid credentials: HTTP 401 with a `WWW-Authenticate` Bearer challenge.

    `bearer_error` is the RFC 6750 error code (`invalid_token`, `invalid_request`) when the
    client presented something that failed; None when it presented no credentials at all.
    """

    code = -32040
    reason = "UNAUTHENTICATED"
    default_message = "Authentication required"
    http_status = 401
    status = "UNAUTHENTICATED"

    def __init__(self, message: str | None = None, *, bearer_error: str | None = None) -> None:
        super().__init__(message)
        self.bearer_error = bearer_error

    def http_headers(self) -> dict[str, str]:
        challenge = f"Bearer realm={_quoted(AUTH_REALM)}"
        if self.bearer_error:
            challenge += f", error={_quoted(self.bearer_error)}"
            challenge += f", error_description={_quoted(self.message)}"
        return {"WWW-Authenticate": challenge}


class AuthenticationUnavailableError(RetryLaterError):
    """Credentials cannot be checked right now (the identity provider's keys cannot be fetched)."""

    reason = "AUTHENTICATION_UNAVAILABLE"
    default_message = "Credentials cannot be verified right now; retry later"
    http_status = 503
    status = "UNAVAILABLE"
    default_retry_after_s = 5


class RateLimitedError(RetryLaterError):
    """The caller's request rate is over its limit: HTTP 429."""

    code = -32029
    reason = "RATE_LIMITED"
    default_message = "Too many requests; retry later"
    http_status = 429
    status = "RESOURCE_EXHAUSTED"


class RequestTimeoutError(A2AError):
    """The request body stalled (no bytes for A2A_BODY_TIMEOUT_S): HTTP 408, connection closed."""

    code = -32600
    reason = "REQUEST_TIMEOUT"
    default_message = "The request body stopped arriving"
    http_status = 408
    status = "DEADLINE_EXCEEDED"
    closes_connection = True


class PayloadTooLargeError(A2AError):
    """The request body is over the size limit (HTTP 413); the connection is closed after it."""

    code = -32600
    reason = "PAYLOAD_TOO_LARGE"
    default_message = "The request body is too large"
    http_status = 413
    status = "INVALID_ARGUMENT"
    closes_connection = True


class HostNotAllowedError(A2AError):
    """The `Host` header names a host this server does not serve (DNS rebinding): HTTP 421."""

    code = -32600
    reason = "HOST_NOT_ALLOWED"
    default_message = "This server does not serve the requested host"
    http_status = 421
    status = "INVALID_ARGUMENT"


class OriginNotAllowedError(A2AError):
    """A browser request from an origin that is neither this server nor in A2A_CORS_ORIGINS."""

    code = -32600
    reason = "ORIGIN_NOT_ALLOWED"
    default_message = "Requests from this origin are not allowed"
    http_status = 403
    status = "PERMISSION_DENIED"


class TenantNotFoundError(A2AError):
    """The request names a tenant this server does not serve (A2A_TENANTS): HTTP 404 on every
    binding, as a path that is not a route would be."""

    code = -32602
    reason = "TENANT_NOT_FOUND"
    default_message = "This server does not serve the requested tenant"
    http_status = 404
    status = "NOT_FOUND"


EDGE_ERRORS: tuple[type[A2AError], ...] = (
    UnauthenticatedError,
    AuthenticationUnavailableError,
    RateLimitedError,
    UnsupportedMediaTypeError,
    PayloadTooLargeError,
    HostNotAllowedError,
    OriginNotAllowedError,
    TenantNotFoundError,
)
"""Refusals at the HTTP edge: JSON-RPC answers these with their HTTP status (401, 415, 429...)
rather than 200, so HTTP clients, proxies and retry logic see them for what they are."""
