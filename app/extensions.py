"""A2A extensions on the wire, for every binding (JSON-RPC, HTTP+JSON, gRPC): the ones the agent
declares, and the ones that are on for a request.

    requested URIs: `A2A-Extensions` (0.3: `X-A2A-Extensions`; gRPC: metadata), comma-separated,
    repeatable
      -> Extensions.activate: the declared ones listed are on, others are ignored; a declared
         `required` one not listed refuses the request (ExtensionSupportRequiredError, -32008)
      -> CallContext.activated_extensions -> the turn (TurnContext.extensions, its checkpoint)
      -> echoed: the response's `A2A-Extensions` names exactly the activated ones (none: no
         header), on a result and on an error alike once activation has succeeded

Activation is done by the edge for every A2A operation (`Edge.context_of`, app/http/edge.py),
so a binding that builds its call context there (gRPC, from its metadata) activates them the
same way and echoes `echo_headers(context)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.extensions import AgentExtension, declared_by
from app.call_context import (
    EXTENSIONS_HEADER,
    LEGACY_EXTENSIONS_HEADER,
    CallContext,
)
from app.errors import ExtensionSupportRequiredError


class ExtensionDeclarationError(ValueError):
    """A hook or tool source declares an extension that cannot go in the card."""


class Extensions:
    """The extensions the agent declares (its card's `capabilities.extensions`), and the one
    rule that activates them for a request."""

    def __init__(self, declared: Iterable[AgentExtension] = ()) -> None:
        self.declared: tuple[AgentExtension, ...] = tuple(declared)
        self._uris = frozenset(extension.uri for extension in self.declared)
        self._required = tuple(sorted({ext.uri for ext in self.declared if ext.required}))

    @classmethod
    def gathered(
        cls, configured: Iterable[AgentExtension], *, sources: Iterable[object] = ()
    ) -> Extensions:
        """A2A_EXTENSIONS, then what each hook and tool provider in `sources` declares
        (`extensions()`); a URI already declared keeps its first declaration, so the
        operator's configuration overrides a plugin's (to make it required, say)."""
        declared: dict[str, AgentExtension] = {}
        try:
            plugins = [extension for source in sources for extension in declared_by(source)]
        except ValueError as exc:
            raise ExtensionDeclarationError(str(exc)) from exc
        for extension in [*configured, *plugins]:
            declared.setdefault(extension.uri, extension)
        return cls(declared.values())

    def card_entries(self) -> list[dict[str, Any]]:
        return [extension.card_entry() for extension in self.declared]

    def activate(self, requested: frozenset[str]) -> frozenset[str]:
        """The declared ones among `requested`; ExtensionSupportRequiredError when a required
        one is not there."""
        missing = [uri for uri in self._required if uri not in requested] if self._required else []
        if missing:
            raise ExtensionSupportRequiredError(
                f"This agent requires the extension{'s' if len(missing) > 1 else ''}"
                f" {', '.join(repr(uri) for uri in missing)}: list"
                f" {'them' if len(missing) > 1 else 'it'} in the {EXTENSIONS_HEADER} header",
                extensions=",".join(missing),
            )
        return requested & self._uris if requested else frozenset()


def echoed(activated: frozenset[str]) -> str | None:
    """The value naming the activated extensions in a response (None: no header at all)."""
    return ", ".join(sorted(activated)) if activated else None


def echo_headers(context: CallContext | None) -> dict[str, str]:
    """The response headers for a request's activated extensions: `A2A-Extensions`, and
    0.3's `X-A2A-Extensions` too for a client that sent that one."""
    value = echoed(context.activated_extensions) if context is not None else None
    if value is None:
        return {}
    assert context is not None
    if context.legacy_extensions_header:
        return {EXTENSIONS_HEADER: value, LEGACY_EXTENSIONS_HEADER: value}
    return {EXTENSIONS_HEADER: value}
