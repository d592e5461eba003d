"""A2A extensions as the engine knows them: what an agent declares, and what a turn has on.

An extension is named by its URI. The agent declares the ones it supports in its card
(`AgentExtension`: from A2A_EXTENSIONS, and from hooks and tool providers that implement one);
a request lists the ones its client wants in `A2A-Extensions`, and the declared ones it lists
are active for that request. A turn's hooks and tools read the active set in
`TurnContext.extensions` and do what each extension specifies (its params, metadata under its
URI). Negotiating them is the app's (app/extensions.py); this module has no HTTP in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

_FIELDS = frozenset({"uri", "description", "required", "params"})


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentExtension:
    """One extension the agent supports, as its card declares it (A2A `AgentExtension`)."""

    uri: str
    description: str | None = None
    required: bool = False
    """A client that does not list it in `A2A-Extensions` is refused (-32008)."""
    params: Mapping[str, Any] | None = None
    """The extension's configuration, as its specification defines it."""

    def card_entry(self) -> dict[str, Any]:
        """The card's `capabilities.extensions` entry (1.0 and 0.3 share the shape)."""
        entry: dict[str, Any] = {"uri": self.uri}
        if self.description:
            entry["description"] = self.description
        entry["required"] = self.required
        if self.params is not None:
            entry["params"] = dict(self.params)
        return entry


def _header_safe(uri: object) -> TypeGuard[str]:
    return (
        isinstance(uri, str)
        and bool(uri)
        and uri.isascii()
        and uri.isprintable()
        and not any(char.isspace() or char == "," for char in uri)
    )


def extension_from(value: object, *, where: str = "extension") -> AgentExtension:
    """An `{uri, description, required, params}` object (decoded JSON or YAML) as a declaration;
    ValueError naming `where` and what is wrong (a missing `uri`, a mistyped or unknown member)."""
    if isinstance(value, AgentExtension):
        return value
    if not isinstance(value, Mapping) and hasattr(value, "uri"):
        # Another library's AgentExtension (a2a-sdk's, say): its members, as they are named.
        value = {name: getattr(value, name) for name in _FIELDS if hasattr(value, name)}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object with a `uri`, got {value!r}")
    unknown = sorted(set(value) - _FIELDS)
    if unknown:
        raise ValueError(
            f"{where} has unknown members {unknown} (known: uri, description, required, params)"
        )
    uri = value.get("uri")
    if not _header_safe(uri):
        raise ValueError(
            f"{where} needs a `uri`: a non-empty string of printable ASCII without spaces or"
            f" commas (it travels in the A2A-Extensions header), got {uri!r}"
        )
    description = value.get("description")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"{where}: `description` must be a string")
    required = value.get("required", False)
    if not isinstance(required, bool):
        raise ValueError(f"{where}: `required` must be true or false")
    params = value.get("params")
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"{where}: `params` must be an object")
    return AgentExtension(uri=uri, description=description, required=required, params=params)


def extensions_from(values: object, *, where: str = "extensions") -> list[AgentExtension]:
    """A list of declarations (see `extension_from`); a URI declared twice is an error."""
    if not isinstance(values, list | tuple):
        raise ValueError(f"{where} must be a list of `{{uri, ...}}` objects")
    declared = [extension_from(value, where=f"{where}[{n}]") for n, value in enumerate(values)]
    seen: set[str] = set()
    for extension in declared:
        if extension.uri in seen:
            raise ValueError(f"{where}: {extension.uri!r} is declared twice")
        seen.add(extension.uri)
    return declared


def declared_by(source: object) -> list[AgentExtension]:
    """What a hook or tool provider declares: its `extensions()` method (or an `extensions`
    attribute holding the list), checked (ValueError)."""
    declare = getattr(source, "extensions", None)
    if declare is None:
        return []
    declared: Iterable[object] = (declare() if callable(declare) else declare) or ()
    where = f"{type(source).__name__}.extensions{'()' if callable(declare) else ''}"
    return extensions_from(list(declared), where=where)
