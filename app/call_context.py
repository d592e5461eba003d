"""Who is calling, and how: built once per request at the edge, then passed to the handler.

Like a2a-python's `ServerCallContext`, but immutable and typed: the authenticated `Principal`
and the tenant the request names (together the `owner` that scopes every store key), and the
request's protocol parameters that the handler, the engine and later push, 0.3 and tools need
(trace context, `Last-Event-ID`, `A2A-Version`, `A2A-Extensions`). Nothing here is parsed into
protocol meaning: the raw `Last-Event-ID` is checked by the operation that uses it, the version
by the binding, the extensions by the edge's `activate` (app/extensions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from agent.tracing import current_carrier
from stores.base import ANONYMOUS
from stores.tenants import tenant_owner

AuthScheme = Literal["none", "api-key", "jwt"]
"""How a principal was authenticated: not at all, by an API key, by a bearer JWT."""

TRACE_HEADERS = ("traceparent", "tracestate")
EXTENSIONS_HEADER = "A2A-Extensions"
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"
"""The name 0.3 clients send (and read) the extensions under."""
Activate = Callable[[frozenset[str]], frozenset[str]]
"""Requested extension URIs -> the activated ones (or an error refusing the request)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller (or the anonymous one, when authentication is off)."""

    id: str
    """The API key's principal name, or the JWT's `sub`."""
    scheme: AuthScheme
    scopes: frozenset[str] = frozenset()

    @property
    def is_authenticated(self) -> bool:
        return self.scheme != "none"

    @property
    def owner(self) -> str:
        """The owner of everything this principal creates (tasks, conversations, pushes...).

        Namespaced by scheme, so an API-key principal `alice` and a JWT whose `sub` is `alice`
        never share data, and no credential can name the anonymous owner of data created while
        authentication was off.
        """
        if self.scheme == "none":
            return ANONYMOUS
        return f"{self.scheme}:{self.id}"


ANONYMOUS_PRINCIPAL = Principal(id=ANONYMOUS, scheme="none")


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """One request's caller and protocol parameters. Immutable; build it with `from_request`."""

    principal: Principal = ANONYMOUS_PRINCIPAL
    tenant: str | None = None
    """The tenant the request names (checked at the edge: app.http.tenants), None for none:
    what the principal makes within it is another owner's than what it makes outside."""
    trace_carrier: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The W3C trace context (`traceparent`, `tracestate`) the turn joins: the request span's
    when requests are traced, else the client's."""
    last_event_id: str | None = None
    """The raw SSE `Last-Event-ID` header: the last journal position the client saw."""
    protocol_version: str | None = None
    """`A2A-Version` (header, or the query parameter of that name); None when absent."""
    task_generations: bool = False
    """A2A 1.1's task generations are on: the version asked for is 1.1 or a later 1.x (every
    Task and task event carries its `generation`; GetTask long-polls; a send may carry
    `ifGenerationMatch`). Off for 1.0, for no version (today's payloads exactly), for 0.3, and
    on gRPC (whose schema is 1.0's)."""
    requested_extensions: frozenset[str] = frozenset()
    """The extension URIs listed in `A2A-Extensions` (or 0.3's `X-A2A-Extensions`)."""
    activated_extensions: frozenset[str] = frozenset()
    """The requested ones the agent declares: on for this request (and the turn it starts),
    echoed in the response's `A2A-Extensions`."""
    legacy_extensions_header: bool = False
    """The request used 0.3's `X-A2A-Extensions`: the response echoes under that name too."""
    base_url_of: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    """Finds the base URL the client reached this server at: worked out only if asked for (one
    operation does: the extended card), not for every request."""

    owner: str = field(init=False, compare=False, repr=False)
    """The owner scoping every store key: the principal's, within the tenant if any (composed
    once here: a request reads it several times)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "trace_carrier", _frozen(self.trace_carrier))
        object.__setattr__(self, "owner", tenant_owner(self.tenant, self.principal.owner))

    @property
    def base_url(self) -> str | None:
        """The base URL the client reached this server at (what the card's interfaces name)."""
        return self.base_url_of() if self.base_url_of is not None else None

    @classmethod
    def from_request(
        cls,
        headers: Mapping[str, str],
        *,
        principal: Principal = ANONYMOUS_PRINCIPAL,
        tenant: str | None = None,
        query: Mapping[str, str] | None = None,
        base_url_of: Callable[[], str] | None = None,
        activate: Activate | None = None,
    ) -> CallContext:
        """From request headers (Starlette's `Headers`, or any mapping; names in any case;
        repeated headers joined with commas) and, for `A2A-Version` only, the query string;
        `activate` picks the extensions that are on (None: none are) and may refuse them."""
        lower: dict[str, str] = {}
        for name, value in headers.items():
            key = name.lower()
            lower[key] = f"{lower[key]},{value}" if key in lower else value
        version = lower.get("a2a-version") or (query or {}).get("A2A-Version")
        listed, legacy = lower.get("a2a-extensions"), lower.get("x-a2a-extensions")
        requested = (
            parse_extensions(",".join(filter(None, (listed, legacy))))
            if listed or legacy
            else frozenset()
        )
        protocol_version = version.strip() if version and version.strip() else None
        return cls(
            principal=principal,
            tenant=tenant,
            # The request span when requests are traced (itself a child of the client's
            # `traceparent`), else the client's headers as they came.
            trace_carrier=current_carrier()
            or {name: lower[name] for name in TRACE_HEADERS if name in lower},
            last_event_id=lower.get("last-event-id") or None,
            protocol_version=protocol_version,
            task_generations=asks_task_generations(protocol_version),
            requested_extensions=requested,
            activated_extensions=activate(requested) if activate is not None else frozenset(),
            legacy_extensions_header=legacy is not None,
            base_url_of=base_url_of,
        )


def asks_task_generations(version: str | None) -> bool:
    """Whether an `A2A-Version` value names 1.1 or a later 1.x minor (served as 1.1, the newest
    1.x this server knows, as a 1.2 was served as 1.0 before 1.1 existed)."""
    if not version:
        return False
    major, _, minor = version.strip().partition(".")
    minor = minor.split(".")[0]
    return major == "1" and minor.isdigit() and int(minor) >= 1


def parse_extensions(header: str) -> frozenset[str]:
    """`A2A-Extensions: uri1, uri2` (repeated headers joined with commas): the set of URIs,
    blank entries ignored."""
    return frozenset(uri.strip() for uri in header.split(",") if uri.strip())
