"""AGENTS_FILE in one process: each agent's extended card, /agents without a file, the settings
that do not mix with a file, and what an embedding program passes going to every agent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from app.agents import build_agents
from app.main import create_app
from app.settings import Settings
from app.settings.agents_file import AgentsFileError
from stores.memory import InMemoryStores
from stores.tenants import tenant_owner

KEY = "k-" + "b" * 30
HEADERS = {"X-API-Key": KEY, "A2A-Version": "1.0"}
SKILL = {"id": "fix", "name": "Fix", "description": "Fixes things.", "tags": ["x"]}
AGENTS = f"""
agents:
  - name: first
    system_prompt: FIRST
  - name: second
    description: The second one.
    skills: [{json.dumps(SKILL)}]
"""


def client_for(settings: Settings) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(settings))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


def agents_file(tmp_path: Path, text: str = AGENTS) -> str:
    path = tmp_path / "agents.yaml"
    path.write_text(text)
    return str(path)


async def test_each_agent_has_its_extended_card_under_its_path(tmp_path: Path) -> None:
    extra = {"id": "billing", "name": "Billing", "description": "Invoices.", "tags": ["money"]}
    settings = Settings(
        redis_url=None,
        agents_file=agents_file(tmp_path),
        a2a_api_keys=f"alice:{KEY}",
        a2a_extended_card=json.dumps({"skills": [extra]}),
    )
    async with client_for(settings) as client:
        extended = (await client.get("/second/extendedAgentCard", headers=HEADERS)).json()
        assert extended["name"] == "second"
        assert extended["skills"] == [SKILL, extra]
        urls = {interface["url"] for interface in extended["supportedInterfaces"]}
        assert urls == {"http://127.0.0.1:8000/second"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}
        over_rpc = await client.post("/second/", json=body, headers=HEADERS)
        assert over_rpc.json()["result"] == extended
        at_root = await client.post("/", json=body, headers=HEADERS)
        assert at_root.json()["result"]["name"] == "first"


async def test_without_a_file_agents_lists_the_one_agent_at_the_root() -> None:
    async with client_for(Settings(redis_url=None, agent_name="Solo")) as client:
        listed = (await client.get("/agents")).json()
    assert listed == {
        "agents": [
            {
                "name": "Solo",
                "description": Settings().agent_description,
                "url": "http://127.0.0.1:8000/.well-known/agent-card.json",
            }
        ]
    }


def test_tenant_settings_do_not_mix_with_a_file(tmp_path: Path) -> None:
    settings = Settings(redis_url=None, agents_file=agents_file(tmp_path), a2a_tenants=["acme"])
    with pytest.raises(AgentsFileError, match="A2A_TENANTS and A2A_TENANT do not apply"):
        create_app(settings)


def test_a_hook_that_does_not_import_names_the_agent_and_the_key(tmp_path: Path) -> None:
    text = "agents:\n  - name: a\n  - name: b\n    hooks: [no_such_module_43:Hook]\n"
    settings = Settings(redis_url=None, agents_file=agents_file(tmp_path, text))
    with pytest.raises(AgentsFileError, match=r"agent 'b': key 'hooks': .*no_such_module_43"):
        create_app(settings)


def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


def test_an_embedding_programs_tools_go_to_every_agent_and_owners_find_theirs(
    tmp_path: Path,
) -> None:
    settings = Settings(redis_url=None, agents_file=agents_file(tmp_path))
    agents = build_agents(
        settings,
        messages=InMemoryStores.create(ttl_s=60).messages,
        tools=[shout],
        hooks=[],
        llm=None,
        tool_providers=[],
    )
    assert agents.names == ["first", "second"]
    for agent in agents.all:
        assert "shout" in [tool.name for tool in agent.toolbox.tools]
    assert agents.agent_of(tenant_owner("second", "anonymous")) is agents.all[1].agent
    assert agents.agent_of(tenant_owner("first", "api-key:alice")) is agents.first.agent
    assert agents.for_tenant(None) is agents.first
    assert agents.for_tenant("third") is None
    assert agents.all[1].settings.agent_system_prompt == Settings().agent_system_prompt
    assert agents.first.settings.agent_system_prompt == "FIRST"
