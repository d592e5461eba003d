"""Other A2A agents as tools (AGENT_REMOTE_AGENTS): each agent card becomes one tool.

The tool is named from the card's `name` (lower-cased, non-alphanumerics as `_`), described by the
card, and takes one string argument, `message`. A call sends the message over A2A, in the
generation and binding the card offers (1.0 before 0.3, JSON-RPC before HTTP+JSON), streams the
answer and returns the final artifacts' text. Its working status messages show in our task as
progress; its question (input-required) becomes our client's, and the answer goes back down to its
task (ToolNeedsInput / resume). The caller's trace context travels with it
(`traceparent`), and so does the call depth (message metadata `a2aCallDepth`): a turn started by
a call at AGENT_MAX_CALL_DEPTH cannot call further, so two agents calling each other stop.
Cancelling our task (running, or waiting for that answer) cancels the sub-agent's task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agent.hooks import TurnContext
from agent.tool_providers import (
    ToolError,
    ToolNeedsInput,
    ToolProvider,
    ToolSpec,
    report_progress,
)
from agent.tracing import carrier_of

logger = logging.getLogger(__name__)

CALL_DEPTH_KEY = "a2aCallDepth"
RETRY_MAX_S = 30.0  # the longest wait between two tries of a card that is not up yet
_STATES_03 = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "TASK_STATE_CANCELLED": "TASK_STATE_CANCELED",  # 0.3 ProtoJSON (HTTP+JSON) spells it so
}
_ENDS = {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}


@dataclass(frozen=True, kw_only=True)
class RemoteAgentConfig:
    card_url: str
    headers: dict[str, str] = field(default_factory=dict)


def parse_remote_agents(value: str) -> list[RemoteAgentConfig]:
    """AGENT_REMOTE_AGENTS: card URLs, comma-separated, or a JSON list of `{"url", "headers"}`."""
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
                configs.append(RemoteAgentConfig(card_url=entry["url"], headers=dict(headers)))
            else:
                raise ValueError(f"AGENT_REMOTE_AGENTS entry {entry!r} needs a `url`")
        return configs
    return [RemoteAgentConfig(card_url=url.strip()) for url in value.split(",") if url.strip()]


def tool_name(card_name: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", card_name.lower()).strip("_")
    return name or "agent"


@dataclass(frozen=True)
class Endpoint:
    url: str
    binding: str  # JSONRPC | HTTP+JSON
    generation: str  # 1.0 | 0.3


def choose_endpoint(card: dict[str, Any]) -> Endpoint:
    """1.0 before 0.3, JSON-RPC before HTTP+JSON, among what the card offers."""
    offered: list[Endpoint] = []
    for interface in card.get("supportedInterfaces") or []:
        version = "0.3" if str(interface.get("protocolVersion", "")).startswith("0.") else "1.0"
        offered.append(Endpoint(interface["url"], interface.get("protocolBinding", ""), version))
    if card.get("url"):
        offered.append(Endpoint(card["url"], card.get("preferredTransport", "JSONRPC"), "0.3"))
        for interface in card.get("additionalInterfaces") or []:
            offered.append(Endpoint(interface["url"], interface.get("transport", ""), "0.3"))
    ranked = [
        endpoint
        for generation in ("1.0", "0.3")
        for binding in ("JSONRPC", "HTTP+JSON")
        for endpoint in offered
        if endpoint.generation == generation and endpoint.binding == binding
    ]
    if not ranked:
        raise ToolError("the agent card offers no JSON-RPC or HTTP+JSON interface")
    return ranked[0]


def _state(payload: dict[str, Any]) -> str | None:
    state = (payload.get("status") or {}).get("state")
    return _STATES_03.get(state, state) if isinstance(state, str) else None


def _texts(parts: list[dict[str, Any]]) -> str:
    return "".join(part["text"] for part in parts if isinstance(part.get("text"), str))


def read_event(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of a streamed event of either generation: task, status, artifact, message."""
    for key, kind in (
        ("task", "task"),
        ("statusUpdate", "status"),
        ("artifactUpdate", "artifact"),
        ("message", "message"),
        ("msg", "message"),  # 0.3 ProtoJSON (HTTP+JSON)
    ):
        if key in event:
            return kind, event[key]
    kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact"}
    return kinds.get(event.get("kind", ""), "message"), event


class RemoteAgentProvider(ToolProvider):
    def __init__(
        self,
        config: RemoteAgentConfig,
        *,
        client: httpx.AsyncClient | None = None,
        max_call_depth: int = 3,
        timeout_s: float = 300.0,
    ) -> None:
        super().__init__()
        self.name = "remote"
        self._config = config
        # The operator configured these URLs (not a client): no outbound guard, but no proxy
        # from the environment either.
        self._client = client or httpx.AsyncClient(trust_env=False, timeout=30.0)
        self._max_call_depth = max_call_depth
        self._timeout_s = timeout_s
        self._spec: ToolSpec | None = None
        self._endpoint: Endpoint | None = None
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
            response = await self._client.get(
                self._config.card_url, headers=self._config.headers, timeout=10.0
            )
            response.raise_for_status()
            card = response.json()
            self._endpoint = choose_endpoint(card)
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
            self._status = None
            logger.info("remote_agent=<%s>, url=<%s> | ready", name, self._endpoint.url)
            return True
        except (httpx.HTTPError, ValueError, ToolError) as exc:
            self._status = f"the agent card at {self._config.card_url} is not usable: {exc}"
            if not quiet:  # one line per broken source, not one per retry
                logger.warning(
                    "remote_agent=<%s> | %s; retrying in the background",
                    self._config.card_url,
                    self._status,
                )
            return False

    async def aclose(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
        await self._client.aclose()

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
        if self._endpoint is not None and isinstance(state.get("taskId"), str):
            await self._cancel(self._endpoint, state["taskId"], dict(self._config.headers))

    async def _converse(
        self, text: str, depth: int, turn: TurnContext | None, *, task: dict[str, Any] | None
    ) -> Any:
        """Send `text` (a new task, or an answer on `task`), relay the agent's progress, and
        return its answer; its question becomes ours (ToolNeedsInput)."""
        endpoint = self._endpoint
        if endpoint is None:
            raise ToolError(f"the agent is unavailable: {self._status}")
        headers = dict(self._config.headers)
        if turn is not None and turn.trace is not None:
            headers.update(carrier_of(turn.trace))
        task_id: str | None = (task or {}).get("taskId")
        context_id: str | None = (task or {}).get("contextId")
        texts: list[str] = []
        state: str | None = None
        status_text = ""
        try:
            async for event in self._stream(endpoint, text, depth, headers, task):
                kind, payload = read_event(event)
                if kind == "message":
                    return _texts(payload.get("parts") or payload.get("content") or [])
                task_id = payload.get("taskId") or payload.get("id") or task_id
                context_id = payload.get("contextId") or context_id
                if kind == "artifact":
                    artifact = payload.get("artifact") or {}
                    parts = artifact.get("parts") or []
                    if payload.get("append"):
                        texts.append(_texts(parts))
                    else:
                        texts = [_texts(parts)] if not texts else [*texts, "\n", _texts(parts)]
                state = _state(payload) or state
                status_message = (payload.get("status") or {}).get("message") or {}
                status_text = _texts(
                    status_message.get("parts") or status_message.get("content") or []
                )
                if state == "TASK_STATE_WORKING" and kind == "status" and status_text:
                    report_progress(status_text)
                if state == "TASK_STATE_INPUT_REQUIRED" or state in _ENDS:
                    break
        except BaseException:
            # Our turn was canceled (or the call failed): the sub-agent's task goes too.
            if task_id is not None and state not in _ENDS:
                await self._cancel(endpoint, task_id, headers)
            raise
        if state == "TASK_STATE_INPUT_REQUIRED" and task_id is not None:
            # Its question is our user's to answer; the answer comes back through `resume`.
            raise ToolNeedsInput(
                status_text or "The agent needs more input.",
                {"taskId": task_id, "contextId": context_id, "depth": depth},
            )
        if state != "TASK_STATE_COMPLETED":
            why = f": {status_text}" if status_text else ""
            raise ToolError(f"the agent's task ended {state or 'without a state'}{why}")
        return "".join(texts)

    async def _stream(
        self,
        endpoint: Endpoint,
        text: str,
        depth: int,
        headers: dict[str, str],
        task: dict[str, Any] | None,
    ) -> AsyncIterator[dict[str, Any]]:
        message_id = str(uuid.uuid4())
        metadata = {CALL_DEPTH_KEY: depth}
        # An answer goes on the agent's task (and its context).
        continuing = {
            key: (task or {}).get(key)
            for key in ("taskId", "contextId")
            if isinstance((task or {}).get(key), str)
        }
        if endpoint.generation == "1.0":
            message = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
                "metadata": metadata,
                **continuing,
            }
            headers = {**headers, "A2A-Version": "1.0"}
        elif endpoint.binding == "JSONRPC":
            message = {
                "kind": "message",
                "messageId": message_id,
                "role": "user",
                "parts": [{"kind": "text", "text": text}],
                "metadata": metadata,
                **continuing,
            }
        else:
            message = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "content": [{"text": text}],
                "metadata": metadata,
                **continuing,
            }
        if endpoint.binding == "JSONRPC":
            method = "SendStreamingMessage" if endpoint.generation == "1.0" else "message/stream"
            body: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": message_id,
                "method": method,
                "params": {"message": message},
            }
            url = endpoint.url
        else:
            body = {"message": message}
            prefix = "" if endpoint.generation == "1.0" else "/v1"
            url = f"{endpoint.url.rstrip('/')}{prefix}/message:stream"
        async with self._client.stream(
            "POST",
            url,
            json=body,
            headers={**headers, "Accept": "text/event-stream"},
            timeout=httpx.Timeout(30.0, read=self._timeout_s),
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise ToolError(f"the agent answered HTTP {response.status_code}: {response.text}")
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                await response.aread()
                error = response.json().get("error", {})
                raise ToolError(f"the agent refused the message: {error.get('message', error)}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:].strip())
                if endpoint.binding == "JSONRPC":
                    if "error" in event:
                        raise ToolError(f"the agent failed: {event['error'].get('message')}")
                    event = event.get("result", {})
                elif "error" in event:
                    raise ToolError(f"the agent failed: {event['error'].get('message')}")
                yield event

    async def _cancel(self, endpoint: Endpoint, task_id: str, headers: dict[str, str]) -> None:
        try:
            if endpoint.binding == "JSONRPC":
                method = "CancelTask" if endpoint.generation == "1.0" else "tasks/cancel"
                body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task_id}}
                version = {"A2A-Version": "1.0"} if endpoint.generation == "1.0" else {}
                await self._client.post(endpoint.url, json=body, headers={**headers, **version})
            else:
                prefix = "" if endpoint.generation == "1.0" else "/v1"
                url = f"{endpoint.url.rstrip('/')}{prefix}/tasks/{task_id}:cancel"
                await self._client.post(url, json={}, headers=headers)
        except httpx.HTTPError as exc:
            logger.info("remote_agent=<%s> | cancelling %s failed: %s", self.name, task_id, exc)
