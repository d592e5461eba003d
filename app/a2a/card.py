"""The agent card, served at /.well-known/agent-card.json with HTTP caching headers.

The card's URL (every interface's `url`) is A2A_PUBLIC_URL when set. Unset, it is the URL the
request was sent to: its scheme and `Host` (or, for a request without `Host`, the address of
the socket it arrived on, never a wildcard bind address); with A2A_TRUST_FORWARDED=true, a
reverse proxy's `X-Forwarded-Proto`, `X-Forwarded-Host` and `X-Forwarded-Prefix` replace them.
Each URL gets its own body and ETag, and the response varies on the headers that chose it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from email.utils import format_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from agent.tools.base import ToolSpec
from agent.tools.toolbox import Toolbox
from app.a2a.card_signing import CardSigner
from app.a2a.v0_3.card import with_v03_fields
from app.a2a.versions import asks_task_generations, requested_generation, requested_version
from app.extensions import Extensions
from app.handler import SUPPORTED_INPUT_MODES
from app.http.auth import card_security
from app.settings import Settings

DEMO_NOTE = (
    " [Demo: this server runs the built-in offline demo model; set LLM_MODEL to use a real one.]"
)


def package_version() -> str:
    try:
        return version("a2a-agent-server")
    except PackageNotFoundError:
        return "0.0.0"


# A `Host` (or `X-Forwarded-Host`) value that can go into a URL: a name or an IPv4 address, or
# a bracketed IPv6 address, and an optional port. Anything else is ignored.
_HOST = re.compile(
    r"^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.?"
    r"|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$"
)
_PREFIX = re.compile(r"^(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+/?$")
FORWARDED_HEADERS = ("x-forwarded-proto", "x-forwarded-host", "x-forwarded-prefix")


def _first(value: str | None) -> str:
    """The first entry of a header a chain of proxies may have appended to (`a, b`)."""
    return (value or "").split(",", 1)[0].strip()


def request_base_url(request: Request, *, trust_forwarded: bool) -> str:
    """The base URL the client used to reach this server, without a trailing slash."""
    headers = request.headers
    scheme = request.scope.get("scheme", "http")  # what `request.url` builds its URL from
    scheme = scheme if scheme in ("http", "https") else "http"
    host = _first(headers.get("host")).lower()
    prefix = request.scope.get("root_path", "") or ""
    if trust_forwarded:
        proto = _first(headers.get("x-forwarded-proto")).lower()
        if proto in ("http", "https"):
            scheme = proto
        forwarded_host = _first(headers.get("x-forwarded-host")).lower()
        if _HOST.match(forwarded_host):
            host = forwarded_host
        forwarded_prefix = _first(headers.get("x-forwarded-prefix"))
        if _PREFIX.match(forwarded_prefix):
            prefix = forwarded_prefix + prefix
    if not _HOST.match(host):
        # No usable `Host` (HTTP/1.0): the address the connection arrived on, which is a real
        # interface address even when the server is bound to a wildcard one.
        server = request.scope.get("server") or ("localhost", None)
        address, port = server
        host = f"[{address}]" if ":" in address else address
        if port and port != {"http": 80, "https": 443}[scheme]:
            host = f"{host}:{port}"
    return f"{scheme}://{host}{prefix}".rstrip("/")


def card_base_url(settings: Settings, request: Request) -> str:
    """The base URL the card names for this request: A2A_PUBLIC_URL, else the request's."""
    return settings.public_url or request_base_url(
        request, trust_forwarded=settings.a2a_trust_forwarded
    )


def grpc_target(settings: Settings, url: str) -> str | None:
    """The card's gRPC interface for the base URL `url`: a gRPC target `host:port` (gRPC clients
    hand it to their channel as it is: a scheme or a path would not connect), the host `url`'s
    and the port A2A_GRPC_PUBLIC_PORT or the one served; None without gRPC."""
    if settings.a2a_grpc_port is None:
        return None
    host = urlsplit(url).hostname or "localhost"
    port = settings.a2a_grpc_public_port or settings.a2a_grpc_port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def declared_extensions(settings: Settings, sources: Iterable[object]) -> Extensions:
    """The extensions the card declares: A2A_EXTENSIONS, then those of the hooks and tool
    sources (`sources`) that implement one."""
    return Extensions.gathered(settings.a2a_extensions, sources=sources)


def build_card(
    settings: Settings,
    tools: Iterable[ToolSpec],
    *,
    url: str,
    with_v03: bool = True,
    extensions: Extensions | None = None,
    skills: list[dict[str, Any]] | None = None,
    agent: str | None = None,
    with_v11: bool = False,
) -> dict[str, Any]:
    """The card, every interface at `url` (the base URL: A2A_PUBLIC_URL or the request's, and
    an agent's path); with the 0.3 members beside the 1.0 ones unless `with_v03` is false;
    `with_v11`: the 1.1 interfaces (JSON-RPC and HTTP+JSON, at the same URLs) after the 1.0
    ones, for a client that asked for the card in 1.1;
    `extensions`: the declared ones (both generations read them from
    `capabilities.extensions`); `skills`: an agent's own (AGENTS_FILE), else the tools';
    `agent`: its name, the `tenant` of its gRPC interface (the HTTP ones name it in the URL)."""
    description = settings.agent_description + (DEMO_NOTE if settings.uses_demo_model else "")
    grpc = grpc_target(settings, url)
    skills = skills or [
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
    card = {
        "name": settings.agent_name,
        "description": description,
        "version": package_version(),
        # 1.0 interfaces first: clients that take the first interface of a binding get 1.0.
        # A2A_TENANT on every interface: 1.0 clients send it with every request (0.3 ones cannot,
        # and are served within it).
        "supportedInterfaces": [
            {"url": at, "protocolBinding": binding, "protocolVersion": version}
            | ({"tenant": settings.a2a_tenant} if settings.a2a_tenant else {})
            | ({"tenant": agent} if agent and binding == "GRPC" else {})
            for version in ("1.0", "1.1", "0.3")
            for binding, at in (("JSONRPC", url), ("HTTP+JSON", url), ("GRPC", grpc))
            if at is not None
            # gRPC stays 1.0 (its schema has no generations); 1.1 only when asked for in 1.1
            and (version != "1.1" or (with_v11 and binding != "GRPC"))
        ],
        "capabilities": {
            "streaming": True,
            "pushNotifications": settings.a2a_push_notifications,
            "extendedAgentCard": settings.extended_card is not None,
            **(
                {"extensions": extensions.card_entries()}
                if extensions and extensions.declared
                else {}
            ),
        },
        "defaultInputModes": list(SUPPORTED_INPUT_MODES),
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        # The schemes enforced, so a client knows how to authenticate (empty when none is).
        **card_security(settings),
    }
    return with_v03_fields(card, url=url, grpc=grpc) if with_v03 else card


def build_extended_card(
    settings: Settings,
    tools: Iterable[ToolSpec],
    url: str,
    with_v03: bool = True,
    extensions: Extensions | None = None,
    skills: list[dict[str, Any]] | None = None,
    agent: str | None = None,
    with_v11: bool = False,
) -> dict[str, Any] | None:
    """The card for authenticated callers: the public one with A2A_EXTENDED_CARD's fields over
    it, its skills added to the public ones (and, `with_v11`, its 1.1 interfaces, for a caller
    asking in 1.1); None when no extended card is configured."""
    fields = settings.extended_card
    if fields is None:
        return None
    card = build_card(
        settings,
        tools,
        url=url,
        with_v03=False,
        extensions=extensions,
        skills=skills,
        agent=agent,
        with_v11=with_v11,
    )
    extra_skills = fields.get("skills")
    extended = card | {key: value for key, value in fields.items() if key != "skills"}
    if isinstance(extra_skills, list):
        extended["skills"] = card["skills"] + extra_skills
    # The 0.3 members last, from the merged card: they then say what its 1.0 members say.
    return (
        with_v03_fields(extended, url=url, grpc=grpc_target(settings, url))
        if with_v03
        else extended
    )


def signed_extended_card(
    settings: Settings,
    toolbox: Toolbox,
    signer: CardSigner | None,
    extensions: Extensions | None,
    url: str,
    with_v03: bool,
    *,
    skills: list[dict[str, Any]] | None = None,
    signing_base: str | None = None,
    agent: str | None = None,
    with_v11: bool = False,
) -> dict[str, Any] | None:
    """The extended card at `url`, signed when A2A_CARD_SIGNING_KEY is set (the keys at
    `signing_base`, the server's base URL: `url` unless an agent's path ends it); `with_v11`:
    with the 1.1 interfaces, signed with them, as the public card asked for in 1.1 is."""
    card = build_extended_card(
        settings, toolbox.specs, url, with_v03, extensions, skills, agent, with_v11
    )
    if card is None or signer is None:
        return card
    return signer.sign(card, base_url=signing_base or url)


def signed_public_card(
    settings: Settings,
    toolbox: Toolbox,
    signer: CardSigner | None,
    extensions: Extensions | None,
    url: str,
    *,
    skills: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The public card at `url` with both generations' members (what 0.3's gRPC `GetAgentCard`
    answers), signed when A2A_CARD_SIGNING_KEY is set."""
    card = build_card(settings, toolbox.specs, url=url, extensions=extensions, skills=skills)
    return signer.sign(card, base_url=url) if signer else card


class AgentCardEndpoint:
    """Serves the card with an ETag, Last-Modified and a max-age, answering 304 when fresh.

    With a fixed public URL there is one card. Otherwise there is one per base URL the requests
    name: each has its own body and ETag (a card cached for one URL is never revalidated as
    another's), and the response says `Vary` on the headers that chose the URL. The last
    `MAX_CACHED` of them are kept; others are built again (a few microseconds).

    A request that says `A2A-Version: 1.x` gets the 1.0 card alone: a strict 1.0 validator (the
    TCK's) refuses the 0.3 members. Without the header (0.3 clients send none; the spec reads an
    empty version as 0.3) the card carries both generations' members, unless A2A_CARD_V03=false.
    With A2A_CARD_SIGNING_KEY each carries its signature, made when the card is first built.
    """

    MAX_CACHED = 64

    def __init__(
        self,
        settings: Settings,
        toolbox: Toolbox,
        *,
        signer: CardSigner | None = None,
        max_age_s: int = 300,
        extensions: Extensions | None = None,
        path: str = "",
        skills: list[dict[str, Any]] | None = None,
        agent: str | None = None,
    ) -> None:
        """`path`: the agent's (`/{name}`), after the base URL in every interface's `url`;
        `skills`: its own (AGENTS_FILE), else the tools'; `agent`: its gRPC interface's
        `tenant`."""
        self._path = path
        self._agent = agent
        self._skills = skills
        self._settings = settings
        self._signer = signer
        self._extensions = extensions
        self._toolbox = toolbox
        self._fixed_url = settings.public_url
        self._trust_forwarded = settings.a2a_trust_forwarded
        self._last_modified = format_datetime(datetime.now(UTC).replace(microsecond=0), usegmt=True)
        self._cache_control = f"public, max-age={max_age_s}"
        vary = [
            "A2A-Version",
            "Host",
            *(
                ("X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Prefix")
                if self._trust_forwarded
                else ()
            ),
        ]
        self._vary = "A2A-Version" if self._fixed_url else ", ".join(vary)
        self._cards: OrderedDict[tuple[str, bool, bool, int], tuple[bytes, dict[str, str]]] = (
            OrderedDict()
        )

    def _card(
        self, base: str, *, with_v03: bool, with_v11: bool = False
    ) -> tuple[bytes, dict[str, str]]:
        url = base + self._path
        # The tools' version is in the key: a source whose list changed changes the skills.
        key = (url, with_v03, with_v11, self._toolbox.version)
        cached = self._cards.get(key)
        if cached is not None:
            self._cards.move_to_end(key)
            return cached
        card = build_card(
            self._settings,
            self._toolbox.specs,
            url=url,
            with_v03=with_v03,
            extensions=self._extensions,
            skills=self._skills,
            agent=self._agent,
            with_v11=with_v11,
        )
        if self._signer is not None:  # the same signature with and without the 0.3 members
            card = self._signer.sign(card, base_url=base)
        body = json.dumps(card, separators=(",", ":")).encode()
        headers = {
            "ETag": '"' + hashlib.sha256(body).hexdigest()[:32] + '"',
            "Last-Modified": self._last_modified,
            "Cache-Control": self._cache_control,
        }
        headers["Vary"] = self._vary
        self._cards[key] = (body, headers)
        if len(self._cards) > self.MAX_CACHED:
            self._cards.popitem(last=False)
        return body, headers

    async def __call__(self, request: Request) -> Response:
        url = card_base_url(self._settings, request)
        version = requested_version(request)
        asks_for_v1 = version is not None and requested_generation(version) == "1.0"
        with_v03 = self._settings.a2a_card_v03 and not asks_for_v1
        # The 1.1 interfaces are listed for a client that asks in 1.1: a card fetched without
        # a version (or in 1.0) stays the one strict 1.0 and 0.3 clients have always read.
        body, headers = self._card(url, with_v03=with_v03, with_v11=asks_task_generations(version))
        if request.headers.get("if-none-match") == headers["ETag"]:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)
