"""A2A 1.1 task generations on the wire: the `generation` members, and the params that use them.

A task's generation is its journal position (stores.base.TaskStore): the Task of a record is at
`record.position`, a status or artifact event at its own entry's position. Nothing is stored for
it, so it is the same on every replica and after a takeover. It is written as ProtoJSON writes an
`int64`, a decimal string (`"generation":"7"`); the params that carry one (`currentGeneration`,
`ifGenerationMatch`) take a JSON number or such a string, as ProtoJSON parsers do.

Only a request served in 1.1 (`CallContext.task_generations`) sees any of it: a 1.0 (or 0.3, or
version-less) request's payloads are byte for byte what they were before 1.1.
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidParamsError
from app.http.json_body import JsonObject
from stores.models import JournalEntry

__all__ = [
    "CURRENT_GENERATION",
    "IF_GENERATION_MATCH",
    "generation_member",
    "generation_param",
    "render_entry_with_generation",
    "with_generation",
]

CURRENT_GENERATION = ("currentGeneration", "current_generation")
"""GetTask's long-poll param (and REST's `?currentGeneration=`), in both spellings."""
IF_GENERATION_MATCH = ("ifGenerationMatch", "if_generation_match")
"""SendMessageConfiguration's precondition on a follow-up, in both spellings."""


def generation_member(position: int) -> bytes:
    """`,"generation":"<position>"`: the member appended to a rendered object."""
    return b',"generation":"' + str(position).encode() + b'"'


def with_generation(rendered: bytes, position: int) -> bytes:
    """A rendered Task (`{...}`) with its generation as its last member."""
    if not rendered.endswith(b"}"):
        raise ValueError("not a rendered JSON object")
    return rendered[:-1] + generation_member(position) + b"}"


def render_entry_with_generation(rendered: bytes, entry: JournalEntry) -> bytes:
    """A StreamResponse (`{"task":{...}}`, `{"statusUpdate":{...}}`, `{"artifactUpdate":...}`)
    whose payload carries the entry's position as its generation; a Message has none."""
    if entry.kind == "message":
        return rendered
    if not rendered.endswith(b"}}"):
        raise ValueError("not a rendered StreamResponse")
    return rendered[:-2] + generation_member(entry.position) + b"}}"


def generation_param(params: JsonObject | None, names: tuple[str, str]) -> int | None:
    """A generation-valued param (number or decimal string, >= 0), or None when absent;
    anything else is invalid params (-32602 / 400) naming it."""
    if not params:
        return None
    for name in names:
        if name in params and params[name] is not None:
            return _generation(params[name], names[0])
    return None


def _generation(value: Any, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise InvalidParamsError(
        f"{field} must be a non-negative integer (a generation), not {value!r}", field=field
    )
