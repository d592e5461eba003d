"""How a stream of A2A events looks in a terminal: the answer on stdout as it arrives, progress,
questions and the model's reasoning (dimmed) on stderr (or, with `--json`, each event as the wire
carried it)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from app.client.a2a_client import Event, parts_of, state_of, status_text, text_of

DIM, NORMAL = "\x1b[2m", "\x1b[0m"


@dataclass
class Turn:
    """What one streamed exchange came to."""

    task_id: str | None = None
    context_id: str | None = None
    state: str | None = None
    question: str = ""
    last_event_id: str | None = None
    artifacts_seen: set[str] = field(default_factory=set)


class Printer:
    """Answer text to stdout as it arrives; progress and questions to stderr."""

    def __init__(self, *, raw: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.raw, self.out, self.err = raw, out, err
        self._mid_line = False
        self._thinking = False  # reasoning text is being written to stderr, mid-line
        self._dim = err.isatty()  # escape codes only where a terminal reads them

    def event(self, event: Event, turn: Turn) -> None:
        if self.raw:
            print(json.dumps(event.raw, separators=(",", ":")), file=self.out, flush=True)
            return
        payload = event.payload
        if event.kind == "artifact":
            artifact = payload.get("artifact") or {}
            key = str(artifact.get("artifactId", ""))
            if not payload.get("append") and key in turn.artifacts_seen:
                self.text("\n")
            turn.artifacts_seen.add(key)
            self.text(text_of(artifact) or describe_parts(parts_of(artifact)))
        elif event.kind == "message":
            self.text(text_of(payload))
        elif event.kind == "status" and state_of(payload) == "TASK_STATE_WORKING":
            if thought := thought_text(payload):
                self.thought(thought)
                return
            said = status_text(payload)
            if said:
                self.note(f"· {said}")
        elif event.kind == "task":
            for artifact in payload.get("artifacts") or []:  # a snapshot: the answer so far
                turn.artifacts_seen.add(str(artifact.get("artifactId", "")))
                self.text(text_of(artifact))

    def thought(self, text: str) -> None:
        """Reasoning as it streams: one dimmed run on stderr, apart from the answer's lines."""
        if not self._thinking:
            self.end_line()
            self._thinking = True
        self.err.write(f"{DIM}{text}{NORMAL}" if self._dim else text)
        self.err.flush()

    def end_thought(self) -> None:
        if self._thinking:
            self._thinking = False
            self.err.write("\n")
            self.err.flush()

    def text(self, text: str) -> None:
        if text:
            self.end_thought()
            self.out.write(text)
            self.out.flush()
            self._mid_line = not text.endswith("\n")

    def end_line(self) -> None:
        self.end_thought()
        if self._mid_line:
            self.text("\n")

    def note(self, line: str) -> None:
        self.end_line()
        print(line, file=self.err, flush=True)


def thought_text(payload: dict[str, Any]) -> str:
    """The reasoning text of a status update: its text parts marked `metadata.thought`."""
    parts = ((payload.get("status") or {}).get("message") or {}).get("parts") or []
    return "".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict) and (part.get("metadata") or {}).get("thought") is True
    )


def describe_parts(parts: list[dict[str, Any]]) -> str:
    described = []
    for part in parts:
        if "data" in part:
            described.append(json.dumps(part["data"]))
        elif "file" in part or "url" in part or "raw" in part:
            described.append(f"[file {part.get('filename') or part.get('name') or ''}]")
    return " ".join(described)
