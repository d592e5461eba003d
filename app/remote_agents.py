"""Other A2A agents as tools (AGENT_REMOTE_AGENTS): each agent card becomes one tool.

The tool is named from the card's `name` (lower-cased, non-alphanumerics as `_`), described by the
card, and takes one string argument, `message`. A call sends the message over A2A, in the
generation and binding the card offers (1.0 before 0.3, JSON-RPC before HTTP+JSON), streams the
answer and returns the final artifacts' text. Its working status messages show in our task as
progress; its question (input-required) becomes our client's, and the answer goes back down to its
task (ToolNeedsInput / resume). The caller's trace context travels with it
(`traceparent`), so do the A2A extensions active for the turn that the agent's card declares
(`A2A-Extensions`), and so does the call depth (message metadata `a2aCallDepth`): a turn started by
a call at AGENT_MAX_CALL_DEPTH cannot call further, so two agents calling each other stop.
Cancelling our task (running, or waiting for that answer) cancels the sub-agent's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from agent.context import TurnContext
from agent.tools.base import ToolError, ToolNeedsInput, ToolProvider, ToolSpec, report_progress
from agent.tools.toolbox import TOOL_TIMEOUT_S
from agent.tracing import carrier_of
from app.client.a2a_client import (
    END_STATES,
    INTERRUPTED_STATES,
    A2AClient,
    A2AClientError,
    card_url_of,
    state_of,
    status_text,
    text_of,
)
from app.client.card_signatures import CardVerdict, verify_card

logger = logging.getLogger(__name__)

CALL_DEPTH_KEY = "a2aCallDepth"
RETRY_MAX_S = 30.0  # the longest wait between two tries of a card that is not up yet


class CardNotTrusted(A2AClientError):
    """The entry requires a signed card, and the agent's is unsigned or does not verify."""


@dataclass(frozen=True, kw_only=True)
class RemoteAgentConfig:
    card_url: str
    headers: dict[str, str] = field(default_factory=dict)
    require_signed_card: bool = False
    """Use the agent only if its card's signature verifies (app.client.card_signatures)."""


def parse_remote_agents(value: str) -> list[RemoteAgentConfig]:
    """AGENT_REMOTE_AGENTS: card URLs, comma-separated, or a JSON list of `{"url", "headers",
    "require_signed_card"}`."""
    if value.lstrip().startswith("["):
        entries = json.loads(value)
        if not isinstance(entries, list):
            raise ValueError("AGENT_REMOTE_AGENTS must be a JSON list")
        configs = []
        for entry in entries:
            if isinstance(entry, str):
                configs.append(RemoteAgentConfig(card_url=entry))
            elif isinstance(entry, dict) and isinstance(entry.get("url"), str):
                headers = entry.get("headers") or {}
                signed = entry.get("require_signed_card", False)
                if not isinstance(signed, bool):
                    raise ValueError(
                        f"AGENT_REMOTE_AGENTS entry {entry['url']!r}: require_signed_card must be"
                        " true or false"
                    )
                configs.append(
                    RemoteAgentConfig(
                        card_url=entry["url"], headers=dict(headers), require_signed_card=signed
                    )
                )
            else:
                raise ValueError(f"AGENT_REMOTE_AGENTS entry {entry!r} needs a `url`")
        return configs
    return [RemoteAgentConfig(card_url=url.strip()) for url in value.split(",") if url.strip()]


def tool_name(card_name: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", card_name.lower()).strip("_")
    return name or "agent"


class RemoteAgentProvider(ToolProvider):
    def __init__(
        self,
        config: RemoteAgentConfig,
        *,
        client: httpx.AsyncClient | None = None,
        max_call_depth: int = 3,
        timeout_s: float = TOOL_TIMEOUT_S,
    ) -> None:
        super().__init__()
        self.name = "remote"
        self._config = config
        # The operator configured these URLs (not a client): no outbound guard, but no proxy
        # from the environment either. Idle connections go after 2 s: servers close theirs after
        # about 5 s (uvicorn's, ours, Node's default), and a call sent on one being closed at
        # that moment fails with a ReadError, a request httpx cannot retry by itself.
        self._http = client or httpx.AsyncClient(
            trust_env=False, timeout=30.0, limits=httpx.Limits(keepalive_expiry=2.0)
        )
        self._max_call_depth = max_call_depth
        self._timeout_s = timeout_s
        self._spec: ToolSpec | None = None
        self._agent: A2AClient | None = None
        self._status: str | None = "not reached yet"
        self._retrying: asyncio.Task[None] | None = None

    def status(self) -> str | None:
        return self._status

    async def start(self) -> None:
        """Read the card; if the agent is not up yet (agents start in any order), keep trying in
        the background, backing off to RETRY_MAX_S, until it is."""
        if not await self._connect():
            self._retrying = asyncio.create_task(self._keep_trying())

    async def _keep_trying(self) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            if await self._connect(quiet=True):
                self.changed()  # a new tool: the card's skills and the next turn see it
                return
            delay = min(delay * 2, RETRY_MAX_S)

    async def _connect(self, *, quiet: bool = False) -> bool:
        try:
            agent = await A2AClient.connect(
                self._http, self._config.card_url, headers=self._config.headers
            )
            card = agent.card
            verdict = await self._trust(card)
            name = tool_name(str(card.get("name", "")))
            self.name = name
            description = str(card.get("description") or f"The A2A agent {card.get('name')}")
            self._spec = ToolSpec(
                name=name,
                description=f"Ask the agent {card.get('name')!r}: {description}",
                parameters={
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "What to ask the agent."}
                    },
                    "required": ["message"],
                },
            )
            self._agent, self._status = agent, None
            logger.info(
                "remote_agent=<%s>, url=<%s> | ready%s",
                name,
                agent.endpoint.url,
                f" ({verdict})" if verdict is not None else "",
            )
            return True
        except (httpx.HTTPError, ValueError, A2AClientError) as exc:
            self._status = f"the agent card at {self._config.card_url} is not usable: {exc}"
            if not quiet:  # one line per broken source, not one per retry
                logger.warning(
                    "remote_agent=<%s> | %s; retrying in the background",
                    self._config.card_url,
                    self._status,
                )
            return False

    async def _trust(self, card: dict[str, Any]) -> CardVerdict | None:
        """With `require_signed_card`: the card's verdict, if its signature verifies; else
        CardNotTrusted (the tool is not offered, and /readyz says why)."""
        if not self._config.require_signed_card:
            return None
        verdict = await verify_card(self._http, card, card_url=card_url_of(self._config.card_url))
        if not verdict.verified:
            what = "it is unsigned" if verdict.status == "unsigned" else f"its {verdict}"
            raise CardNotTrusted(f"{what} (require_signed_card)")
        return verdict

    async def aclose(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
        await self._http.aclose()

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return [self._spec] if self._spec is not None else []

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            raise ToolError("`message` must be a non-empty string")
        depth = (turn.call_depth if turn else 0) + 1
        if depth > self._max_call_depth:
            raise ToolError(
                f"call depth limit reached ({self._max_call_depth}): agents calling agents"
                " stop here (AGENT_MAX_CALL_DEPTH)"
            )
        return await self._converse(message, depth, turn, task=None)

    async def resume(
        self, name: str, state: dict[str, Any], answer: str, turn: TurnContext | None
    ) -> Any:
        """Our user answered the agent's question: the answer goes down to its task."""
        return await self._converse(answer, int(state.get("depth", 1)), turn, task=state)

    async def abandon(self, name: str, state: dict[str, Any]) -> None:
        if self._agent is not None and isinstance(state.get("taskId"), str):
            await self._cancel(self._agent, state["taskId"])

    async def _converse(
        self, text: str, depth: int, turn: TurnContext | None, *, task: dict[str, Any] | None
    ) -> Any:
        """Send `text` (a new task, or an answer on `task`), relay the agent's progress, and
        return its answer; its question becomes ours (ToolNeedsInput)."""
        agent = self._agent
        if agent is None:
            raise ToolError(f"the agent is unavailable: {self._status}")
        headers = dict(carrier_of(turn.trace)) if turn is not None and turn.trace else {}
        if turn is not None:  # those it declares of the extensions our caller activated
            headers |= agent.extension_headers(turn.extensions & agent.extensions)
        task_id: str | None = (task or {}).get("taskId")
        context_id: str | None = (task or {}).get("contextId")
        message = agent.message(
            text, task_id=task_id, context_id=context_id, metadata={CALL_DEPTH_KEY: depth}
        )
        texts: list[str] = []
        state: str | None = None
        said = ""
        try:
            async with contextlib.aclosing(agent.stream(message, headers=headers)) as events:
                async for event in events:
                    if event.kind == "message":
                        return text_of(event.payload)
                    payload = event.payload
                    task_id = payload.get("taskId") or payload.get("id") or task_id
                    context_id = payload.get("contextId") or context_id
                    if event.kind == "artifact":
                        piece = text_of(payload.get("artifact"))
                        if payload.get("append"):
                            texts.append(piece)
                        else:
                            texts = [piece] if not texts else [*texts, "\n", piece]
                    state = state_of(payload) or state
                    said = status_text(payload)
                    if state == "TASK_STATE_WORKING" and event.kind == "status" and said:
                        report_progress(said)
                    if state in INTERRUPTED_STATES or state in END_STATES:
                        break
        except A2AClientError as exc:
            if task_id is not None and state not in END_STATES:
                await self._cancel(agent, task_id)
            raise ToolError(f"the agent failed: {exc}") from exc
        except BaseException:
            # Our turn was canceled (or the call failed): the sub-agent's task goes too.
            if task_id is not None and state not in END_STATES:
                await self._cancel(agent, task_id)
            raise
        if state == "TASK_STATE_INPUT_REQUIRED" and task_id is not None:
            # Its question is our user's to answer; the answer comes back through `resume`.
            raise ToolNeedsInput(
                said or "The agent needs more input.",
                {"taskId": task_id, "contextId": context_id, "depth": depth},
            )
        if state != "TASK_STATE_COMPLETED":
            why = f": {said}" if said else ""
            raise ToolError(f"the agent's task ended {state or 'without a state'}{why}")
        return "".join(texts)

    async def _cancel(self, agent: A2AClient, task_id: str) -> None:
        try:
            await agent.cancel(task_id)
        except (httpx.HTTPError, A2AClientError) as exc:
            logger.info("remote_agent=<%s> | cancelling %s failed: %s", self.name, task_id, exc)
