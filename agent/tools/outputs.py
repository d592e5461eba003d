"""What a tool may return besides text: files and structured data, delivered as artifacts.

A tool returns a `FileResult` (bytes or a URL, with a media type and a name), a `DataResult`
(any JSON value), or a list mixing them with strings. The client gets each file or data result as
an artifact of the task (a file part, a data part); the model gets a one-line description of it in
the tool result, never the bytes, so a 10 MB report costs it a sentence of context.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stores.ids import new_id
from stores.models import Artifact, Part


@dataclass(frozen=True, kw_only=True, slots=True)
class FileResult:
    """A file for the client: its bytes (`data`) or where it is (`url`), never both."""

    name: str
    media_type: str = "application/octet-stream"
    data: bytes | None = None
    url: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("a FileResult needs exactly one of data or url")


@dataclass(frozen=True, kw_only=True, slots=True)
class DataResult:
    """Structured data for the client (any JSON value), e.g. a table or a form's values."""

    data: Any
    name: str = "data"
    description: str | None = None


RichResult = FileResult | DataResult


class TaskRejected(Exception):
    """Raised by a tool: the agent declines the task; the turn ends TASK_STATE_REJECTED with
    this message (not a failure: nothing went wrong, the request is refused)."""


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count / (1024 * 1024):.1f} MB"


def to_artifact(result: RichResult) -> tuple[Artifact, str]:
    """The artifact the client gets, and the line the model reads about it."""
    artifact_id = new_id()
    if isinstance(result, FileResult):
        part = Part(
            raw=base64.b64encode(result.data).decode() if result.data is not None else None,
            url=result.url,
            media_type=result.media_type,
            filename=result.name,
        )
        where = _size(len(result.data)) if result.data is not None else result.url
        line = f"file {result.name} ({result.media_type}, {where}) attached as artifact"
    else:
        part = Part(data=result.data)
        size = len(json.dumps(result.data, default=str))
        line = f"data {result.name} ({size} characters of JSON) attached as artifact"
    artifact = Artifact(
        artifact_id=artifact_id, name=result.name, description=result.description, parts=[part]
    )
    return artifact, f"{line} {artifact_id}"


def split_output(value: Any) -> tuple[Any, list[Artifact]]:
    """A tool's return value as (what the model reads, the artifacts for the client)."""
    items: Iterable[Any] = value if isinstance(value, list | tuple) else [value]
    items = list(items)
    if not any(isinstance(item, FileResult | DataResult) for item in items):
        return value, []
    lines: list[str] = []
    artifacts: list[Artifact] = []
    for item in items:
        if isinstance(item, FileResult | DataResult):
            artifact, line = to_artifact(item)
            artifacts.append(artifact)
            lines.append(line)
        else:
            lines.append(item if isinstance(item, str) else json.dumps(item, default=str))
    return "\n".join(lines), artifacts
