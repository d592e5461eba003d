"""A "timestamp" A2A extension, implemented as a hook: the worked example of docs/extensions.md.

When a request activates the extension (its client lists `TIMESTAMP_URI` in `A2A-Extensions`),
the agent's answer carries the time it was completed, in its metadata under the extension's URI:

    "metadata": {"https://example.com/extensions/timestamp/v1": {"timestamp": "2026-...Z"}}

on the answer artifact, on the agent's message in the task's history and on the final status
update. A request that does not activate it gets answers without it. Serve it with:

    AGENT_HOOKS=examples.timestamp_extension:TimestampExtension PYTHONPATH=. .venv/bin/a2a-server
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.extensions import AgentExtension
from agent.hooks import Hooks, TurnContext

TIMESTAMP_URI = "https://example.com/extensions/timestamp/v1"
"""The extension's identity: a URL of your own, where its specification can be read."""


class TimestampExtension(Hooks):
    """Declares the extension in the agent card, and stamps the answers of turns that have it."""

    def extensions(self) -> list[AgentExtension]:
        return [
            AgentExtension(
                uri=TIMESTAMP_URI,
                description="Stamps the agent's answer with the time it was completed"
                " (metadata under this URI: `timestamp`, RFC 3339, UTC).",
                params={"timestampFormat": "RFC 3339"},
            )
        ]

    async def answer_metadata(self, turn: TurnContext, answer: str) -> dict[str, Any] | None:
        if TIMESTAMP_URI not in turn.extensions:
            return None  # not activated by the request: the answer is left as it is
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return {TIMESTAMP_URI: {"timestamp": now}}
