"""The agents one server hosts, each with its engine built once from its own settings.

    no AGENTS_FILE:  one agent, from the environment, at `/`
    AGENTS_FILE:     one agent per entry, under `/{name}`, its name the tenant of every request
                     made there; the first also at `/` (a request naming no tenant is the
                     first agent's, so `/` and `/{first}/` are one scope)

Each agent's settings are the environment's with the file's keys over them; from them its model
client, toolbox (functions, MCP sessions, remote agents: one set per agent, even when two agents
list the same MCP server), hooks and `Agent`. `Agents.for_tenant` is the one lookup from a
request's tenant (any binding) to its agent; `Agents.agent_of` the runtime's, from a task's owner
(stores.tenants.tenant_of): a new turn, a resumed one and a takeover all run with the agent the
task was made with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent.agent import Agent
from agent.hooks import ApprovalRequired, HookChain, HookLoadError, Hooks, load_hooks
from agent.llm.base import LLMClient
from agent.loop import AgentLoop
from agent.tck_profile import TCK_PROFILE, TckHooks
from agent.tools.base import ToolLoadError, ToolProvider
from agent.tools.toolbox import Toolbox
from app.a2a.card import declared_extensions, signed_extended_card
from app.a2a.card_signing import CardSigner
from app.engine import build_llm, build_toolbox
from app.extensions import Extensions
from app.settings import Settings
from app.settings.agents_file import AgentDefinition, AgentsFileError, load_agents_file
from stores.base import MessageStore
from stores.models import Message
from stores.tenants import tenant_of

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class HostedAgent:
    """One agent this server serves: its card's fields and its engine."""

    name: str | None
    """Its name (path, tenant); None for the one agent of a server without AGENTS_FILE."""
    settings: Settings
    """The environment's settings with the agent's own over them."""
    skills: list[dict[str, Any]] | None
    """The card's skills as the file gives them; None: the card lists the tools."""
    toolbox: Toolbox
    llm: LLMClient
    hooks: list[Hooks]
    hook_chain: HookChain
    agent: Agent
    extensions: Extensions
    """The A2A extensions its card declares and its requests activate: the file's `extensions`
    (else A2A_EXTENSIONS), then its own hooks' and tool sources'."""

    @property
    def path(self) -> str:
        """Where it is served: `/{name}`, or "" (the root) for a server's single agent."""
        return f"/{self.name}" if self.name else ""


class Agents:
    """The hosted agents, in the file's order (the first is also the root's)."""

    def __init__(self, hosted: list[HostedAgent]) -> None:
        assert hosted
        self.all = hosted
        self.first = hosted[0]
        self._by_name = {agent.name: agent for agent in hosted if agent.name}

    @property
    def names(self) -> list[str]:
        """The agents' names (the tenants served); empty without AGENTS_FILE."""
        return list(self._by_name)

    def for_tenant(self, tenant: str | None) -> HostedAgent | None:
        """The agent a request's tenant names (None: the root's, the first); None if no agent
        has that name. Without AGENTS_FILE every tenant is the one agent's."""
        if tenant is None or not self._by_name:
            return self.first
        return self._by_name.get(tenant)

    def extensions_of(self, tenant: str | None) -> Extensions:
        """The extensions of the agent a request's checked tenant names (the edge's lookup)."""
        return (self.for_tenant(tenant) or self.first).extensions

    def agent_of(self, owner: str) -> Agent:
        """The agent that runs the turns of `owner`'s tasks (the runtime's lookup)."""
        hosted = self.for_tenant(tenant_of(owner))
        if hosted is None:  # a task of an agent since removed from the file
            logger.warning("owner=<%s> | no agent of this name any more: the first runs it", owner)
            hosted = self.first
        return hosted.agent

    async def reply_directly(self, owner: str, message: Message) -> str | None:
        return await self._owners(owner).hook_chain.reply_directly(owner, message)

    def label_of(self, owner: str) -> str:
        """The name of the agent that runs `owner`'s tasks, for metrics: its name in the
        agents file, else AGENT_NAME."""
        hosted = self._owners(owner)
        return hosted.name or hosted.settings.agent_name

    def _owners(self, owner: str) -> HostedAgent:
        return self.for_tenant(tenant_of(owner)) or self.first

    def toolboxes(self) -> list[Toolbox]:
        return [agent.toolbox for agent in self.all]

    def tool_names(self) -> list[str]:
        return sorted({tool.name for agent in self.all for tool in agent.toolbox.tools})

    def sources_down(self) -> dict[str, Any]:
        """The tool sources that are down, and why; by agent with AGENTS_FILE (readiness)."""
        down = [
            (agent.name, {name: why for name, why in agent.toolbox.statuses().items() if why})
            for agent in self.all
        ]
        if not self._by_name:
            return down[0][1]
        return {str(name): sources for name, sources in down if sources}

    def extended_card(
        self,
        signer: CardSigner | None,
        url: str,
        with_v03: bool,
        tenant: str | None,
        with_v11: bool = False,
    ) -> dict[str, Any] | None:
        """The extended card of the tenant's agent, its interfaces under `url` + its path (the
        1.1 ones too `with_v11`: asked for in 1.1)."""
        hosted = self.for_tenant(tenant) or self.first
        return signed_extended_card(
            hosted.settings,
            hosted.toolbox,
            signer,
            hosted.extensions,
            url + hosted.path,
            with_v03,
            skills=hosted.skills,
            signing_base=url,
            agent=hosted.name,
            with_v11=with_v11,
        )


def agent_definitions(settings: Settings) -> list[AgentDefinition] | None:
    """The agents of AGENTS_FILE (AgentsFileError), or None when it is unset."""
    if not settings.agents_file:
        return None
    if settings.a2a_tenants or settings.a2a_tenant:
        raise AgentsFileError(
            settings.agents_file,
            "A2A_TENANTS and A2A_TENANT do not apply with AGENTS_FILE (the agents are the tenants)",
        )
    return load_agents_file(settings.agents_file)


def agent_settings(settings: Settings, definition: AgentDefinition) -> Settings:
    """The environment's settings with the agent's own over them (each checked by its type).
    The agent's `extensions` replace A2A_EXTENSIONS rather than add to it, so that an agent can
    drop what the server requires of the others."""
    own = {} if definition.extensions is None else {"a2a_extensions": definition.extensions}
    return settings.model_copy(
        update={
            **definition.overrides,
            **own,
            "agent_name": definition.name,
            "agent_description": definition.description or settings.agent_description,
        }
    )


def build_agents(
    settings: Settings,
    *,
    messages: MessageStore,
    tools: list[Callable[..., Any]],
    hooks: list[Hooks],
    llm: LLMClient | None,
    tool_providers: list[ToolProvider],
) -> Agents:
    """Every agent's engine. What an embedding program adds (tools, hooks, providers, a model
    client) goes to every agent. A tool or hook that does not import: AgentsFileError (with a
    file) naming the agent and the key, else ToolLoadError / HookLoadError."""
    definitions = agent_definitions(settings)
    if definitions is None:
        return Agents([_build(settings, None, None, messages, tools, hooks, llm, tool_providers)])
    assert settings.agents_file is not None
    hosted = []
    for definition in definitions:
        try:
            hosted.append(
                _build(
                    agent_settings(settings, definition),
                    definition.name,
                    definition.skills,
                    messages,
                    tools,
                    hooks,
                    llm,
                    tool_providers,
                )
            )
        except ToolLoadError as exc:
            raise AgentsFileError(
                settings.agents_file, str(exc), agent=definition.name, key="tools"
            ) from exc
        except HookLoadError as exc:
            raise AgentsFileError(
                settings.agents_file, str(exc), agent=definition.name, key="hooks"
            ) from exc
    return Agents(hosted)


def _build(
    settings: Settings,
    name: str | None,
    skills: list[dict[str, Any]] | None,
    messages: MessageStore,
    tools: list[Callable[..., Any]],
    hooks: Iterable[Hooks],
    llm: LLMClient | None,
    tool_providers: list[ToolProvider],
) -> HostedAgent:
    toolbox = build_toolbox(settings, tools=tools, providers=tool_providers)
    tck = [TckHooks()] if settings.agent_profile == TCK_PROFILE else []
    registered = [*load_hooks(settings.agent_hooks), *tck, *hooks]
    if settings.agent_tools_requiring_approval:
        registered.append(ApprovalRequired(settings.agent_tools_requiring_approval))
    hook_chain = HookChain(registered, failure_mode=settings.agent_hook_failure_mode)
    llm_client = llm or build_llm(settings)
    loop = AgentLoop(
        llm_client,
        toolbox,
        system_prompt=settings.agent_system_prompt,
        max_iterations=settings.agent_max_iterations,
        hooks=hook_chain,
        tool_failure_mode=settings.agent_tool_failure_mode,
        max_consecutive_tool_errors=settings.agent_max_consecutive_tool_errors,
        ask_user_tool=settings.agent_ask_user_tool,
        finish_tool=settings.agent_finish_tool,
        max_messages=settings.agent_history_max_messages,
        stream_reasoning=settings.agent_reasoning == "stream",
    )
    return HostedAgent(
        name=name,
        settings=settings,
        skills=skills,
        toolbox=toolbox,
        llm=llm_client,
        hooks=registered,
        hook_chain=hook_chain,
        agent=Agent(loop, messages, history_max_messages=settings.agent_history_max_messages),
        extensions=declared_extensions(settings, [*registered, *toolbox.providers]),
    )
