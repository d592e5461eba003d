"""The agent card, served at /.well-known/agent-card.json with HTTP caching headers."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from email.utils import format_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from agent.tools import FunctionTool
from app.handler import SUPPORTED_INPUT_MODES
from app.settings import Settings

DEMO_NOTE = (
    " [Demo: this server runs the built-in offline demo model; set LLM_MODEL to use a real one.]"
)


def package_version() -> str:
    try:
        return version("a2a-agent-server")
    except PackageNotFoundError:
        return "0.0.0"


def build_card(settings: Settings, tools: list[FunctionTool]) -> dict[str, Any]:
    description = settings.agent_description + (DEMO_NOTE if settings.uses_demo_model else "")
    skills = [
        {
            "id": "conversation",
            "name": "Conversation",
            "description": "Multi-turn conversation: messages with the same contextId continue it.",
            "tags": ["chat", "multi-turn"],
            "examples": ["What can you do?"],
        }
    ] + [
        {
            "id": f"tool-{tool.name}",
            "name": tool.name,
            "description": tool.description,
            "tags": ["tool"],
        }
        for tool in tools
    ]
    return {
        "name": settings.agent_name,
        "description": description,
        "version": package_version(),
        "supportedInterfaces": [
            {"url": settings.public_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": settings.public_url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "defaultInputModes": list(SUPPORTED_INPUT_MODES),
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    }


class AgentCardEndpoint:
    """Serves a fixed card with an ETag, Last-Modified and a max-age, answering 304 when fresh."""

    def __init__(self, card: dict[str, Any], *, max_age_s: int = 300) -> None:
        self._body = json.dumps(card, separators=(",", ":")).encode()
        self._etag = '"' + hashlib.sha256(self._body).hexdigest()[:32] + '"'
        self._headers = {
            "ETag": self._etag,
            "Last-Modified": format_datetime(datetime.now(UTC).replace(microsecond=0), usegmt=True),
            "Cache-Control": f"public, max-age={max_age_s}",
        }

    async def __call__(self, request: Request) -> Response:
        if request.headers.get("if-none-match") == self._etag:
            return Response(status_code=304, headers=self._headers)
        return Response(self._body, media_type="application/json", headers=self._headers)
