"""A2A protocol generations and `A2A-Version` negotiation, shared by every binding and the card.

One endpoint serves two generations (1.0 and 0.3), so what a request's header asks for is decided
here, once: the JSON-RPC method table, the REST routes and the agent card all ask the same question.
1.1 is a minor of the 1.0 generation (the same methods and routes, a few fields more): a request
asking for it is served by the 1.0 tables with `CallContext.task_generations` on
(`asks_task_generations`).
"""

from __future__ import annotations

from starlette.requests import Request

from app.call_context import asks_task_generations
from app.errors import VersionNotSupportedError
from stores.models import Generation

__all__ = [
    "SERVED_VERSIONS",
    "Generation",
    "asks_task_generations",
    "check_requested_version",
    "check_version",
    "generation_of",
    "requested_generation",
    "requested_version",
]


SERVED_VERSIONS: tuple[str, ...] = ("1.1", "1.0", "0.3")
"""The `A2A-Version` values this server serves (what the card's interfaces declare)."""


def generation_of(method_name: str) -> Generation:
    """0.3 methods are `category/action`; 1.0 methods are PascalCase."""
    return "0.3" if "/" in method_name else "1.0"


def requested_version(request: Request) -> str | None:
    """The `A2A-Version` header, or the query parameter of the same name (SSE clients in browsers
    cannot set headers)."""
    return request.headers.get("a2a-version") or request.query_params.get("A2A-Version")


def requested_generation(version: str) -> Generation | None:
    """The generation we serve for an `A2A-Version` value (`1.2` is served as 1.0), or None."""
    major, _, minor = version.strip().partition(".")
    if major == "1":
        return "1.0"
    if major == "0" and minor.split(".")[0] == "3":
        return "0.3"
    return None


def check_version(request: Request, generation: Generation = "1.0") -> None:
    """A2A-Version, when present, must name the generation of the method or route called: a
    0.3 method (`message/send`, `/v1/...`) under `1.0`, or the reverse, is a version this
    method does not serve (-32009). Absent, the method's own generation is used (0.3 clients
    send no header; a 1.0 name without it is served leniently as 1.0)."""
    check_requested_version(requested_version(request), generation)


def check_requested_version(version: str | None, generation: Generation = "1.0") -> None:
    """`check_version` of a version however the binding carries it (gRPC: `a2a-version`)."""
    if not version:
        return
    requested = requested_generation(version)
    if requested is None:
        raise VersionNotSupportedError(
            f"A2A version {version!r} is not supported; this agent speaks 1.0 and 0.3"
            " (and 1.1, 1.0's minor with task generations)",
            requestedVersion=version,
        )
    if requested != generation:
        raise VersionNotSupportedError(
            f"A2A-Version {version!r} was requested, but this method is A2A {generation}",
            requestedVersion=version,
        )
