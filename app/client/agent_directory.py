"""The agents a server hosts: its `GET /agents` list, or, from a server without one, its one agent.

A server that hosts several agents serves each at `/{name}/` (its card at
`/{name}/.well-known/agent-card.json`) and lists them at `/agents`; any other A2A server is one
agent, described by its root card. `a2a agents` prints either; `a2a <command> URL/{name}` then
reaches one agent, since a card is always resolved relative to the URL's path (`card_url_of`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.client.a2a_client import (
    WELL_KNOWN_CARD,
    A2AClientError,
    Unauthorized,
    card_url_of,
    fetch_card,
)


@dataclass(frozen=True)
class AgentEntry:
    """One agent: its name, what it does, and its card's absolute URL."""

    name: str
    description: str
    url: str

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class AgentDirectory:
    agents: list[AgentEntry]
    listed: bool
    """False: the server has no agent list (`/agents` is 404); the one agent is its root card's."""


def server_url_of(url: str) -> str:
    """The server's base URL from one given for it, or for its card."""
    path = urlsplit(url).path
    if path.endswith(WELL_KNOWN_CARD):
        return url[: url.rindex(WELL_KNOWN_CARD)]
    return url.rstrip("/")


async def list_agents(
    http: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None
) -> AgentDirectory:
    """The agents of the server at `url`; A2AClientError (NotAnAgent, Unauthorized) if it has
    neither an agent list nor an agent card. Given one agent's URL (`URL/{name}`), the list of
    the server it is one of."""
    base = server_url_of(url)
    listed = await _listing(http, base, headers)
    if listed is not None:
        return AgentDirectory(listed, listed=True)
    parent, _, name = base.rpartition("/")
    if urlsplit(base).path.strip("/"):  # maybe one agent of a server that lists its agents
        siblings = await _listing(http, parent, headers)
        if siblings is not None and any(agent.name == name for agent in siblings):
            return AgentDirectory(siblings, listed=True)
    card = await fetch_card(http, base, headers=headers)
    entry = AgentEntry(str(card["name"]), str(card.get("description") or ""), card_url_of(base))
    return AgentDirectory([entry], listed=False)


async def _listing(
    http: httpx.AsyncClient, base: str, headers: dict[str, str] | None
) -> list[AgentEntry] | None:
    """`base/agents`, or None when there is none (404)."""
    listing_url = f"{base}/agents"
    try:
        response = await http.get(listing_url, headers=headers)
    except httpx.HTTPError as exc:
        raise A2AClientError(f"cannot reach {listing_url}: {exc}") from exc
    if response.status_code == 404:
        return None
    if response.status_code == 401:
        raise Unauthorized(f"{listing_url} wants credentials (HTTP 401)")
    if response.status_code != 200:
        raise A2AClientError(f"{listing_url} answered HTTP {response.status_code}")
    return _entries(listing_url, response)


def _entries(listing_url: str, response: httpx.Response) -> list[AgentEntry]:
    try:
        document: Any = response.json()
    except ValueError:
        raise A2AClientError(f"{listing_url} is not an agent list (not JSON)") from None
    agents = document.get("agents") if isinstance(document, dict) else None
    if not isinstance(agents, list) or not all(
        isinstance(agent, dict) and isinstance(agent.get("name"), str) for agent in agents
    ):
        raise A2AClientError(f'{listing_url} is not an agent list (no "agents" with names)')
    base = listing_url.removesuffix("/agents")
    return [
        AgentEntry(
            agent["name"],
            str(agent.get("description") or ""),
            str(agent.get("url") or card_url_of(f"{base}/{agent['name']}")),
        )
        for agent in agents
    ]
