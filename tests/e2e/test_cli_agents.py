"""`a2a` against a real server that hosts two agents (AGENTS_FILE): `a2a agents` lists them as
`GET /agents` does, and every command given `URL/{name}` talks to that agent only (its card, its
system prompt at the model, its tasks); app/client reaches it on both HTTP bindings of its card."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest
import yaml

from app.client.a2a_client import A2AClient, state_of
from tests.e2e.harness import ServerProcess
from tests.e2e.test_cli_client import a2a
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(120)

AGENTS = [
    {
        "name": "triage",
        "description": "Sorts requests.",
        "system_prompt": "You are the TRIAGE agent.",
    },
    {
        "name": "writer",
        "description": "Writes short answers.",
        "system_prompt": "You are the WRITER agent.",
    },
]


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    agents_file = tmp_path_factory.mktemp("agents") / "agents.yaml"
    agents_file.write_text(yaml.safe_dump({"agents": AGENTS}))
    env = {"AGENTS_FILE": str(agents_file)}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


def system_prompt_of(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def test_agents_lists_what_the_server_lists(server):
    listed = httpx.get(f"{server.url}/agents", timeout=10).json()["agents"]
    as_json = a2a("agents", server.url, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == listed
    assert [agent["name"] for agent in listed] == ["triage", "writer"]
    plain = a2a("agents", server.url)
    assert (plain.returncode, plain.stderr) == (0, "")
    assert plain.stdout.splitlines() == [
        f"triage  {server.url}/triage/.well-known/agent-card.json  Sorts requests.",
        f"writer  {server.url}/writer/.well-known/agent-card.json  Writes short answers.",
    ]
    # Given one agent (URL/{name}), it lists the server that agent is one of.
    assert a2a("agents", f"{server.url}/writer").stdout == plain.stdout
    # Each listed card URL is that agent's card, as `a2a card` reads it from URL/{name}.
    for agent in listed:
        card = json.loads(a2a("card", f"{server.url}/{agent['name']}", "--json").stdout)
        assert (card["name"], card["description"]) == (agent["name"], agent["description"])


@pytest.mark.parametrize("name", ["triage", "writer"])
def test_every_command_takes_url_slash_name(server, fake_llm, marker, name):
    agent_url, other_url = (
        f"{server.url}/{name}",
        f"{server.url}/" + ("writer" if name == "triage" else "triage"),
    )
    fake_llm.script(text(f"{name} answers.", when_user_contains=marker))
    sent = a2a("send", agent_url, f"hello {marker}")
    assert (sent.returncode, sent.stdout) == (0, f"{name} answers.\n"), sent.stderr
    (request,) = fake_llm.requests_for(marker)
    assert f"You are the {name.upper()} agent." in system_prompt_of(request)
    listed = a2a("tasks", agent_url, "--json")
    (task,) = [
        json.loads(line) for line in listed.stdout.splitlines() if marker in line
    ]  # the agent's own task, found at its URL ...
    got = a2a("get", agent_url, task["id"], "--json")
    assert json.loads(got.stdout)["status"]["state"] == "TASK_STATE_COMPLETED"
    # ... and not through the other agent.
    assert marker not in a2a("tasks", other_url, "--json").stdout
    elsewhere = a2a("get", other_url, task["id"])
    assert elsewhere.returncode == 1 and elsewhere.stderr.startswith("error: "), elsewhere.stderr
    # A trailing slash and the card's own URL name the same agent.
    for url in (f"{agent_url}/", f"{agent_url}/.well-known/agent-card.json"):
        assert json.loads(a2a("get", url, task["id"], "--json").stdout)["id"] == task["id"]


def test_an_unknown_name_is_one_line_and_exit_1(server):
    missing = a2a("send", f"{server.url}/nobody", "hi")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "(HTTP 404)" in missing.stderr, missing.stderr


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_the_client_reaches_an_agent_on_each_binding_its_card_offers(
    server, fake_llm, marker, binding
):
    """app/client (the CLI's and the remote-agent tools' wire code) on the interface of the
    agent's card for each binding: the call reaches that agent, within it only."""
    fake_llm.script(text("over " + binding, when_user_contains=marker))
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        writer = await A2AClient.connect(http, f"{server.url}/writer")
        # The client asks for the card in 1.1: each binding's 1.0 and 1.1 interfaces, one URL.
        interfaces = [
            entry
            for entry in writer.card["supportedInterfaces"]
            if entry["protocolBinding"] == binding and entry["protocolVersion"].startswith("1.")
        ]
        assert [entry["protocolVersion"] for entry in interfaces] == ["1.0", "1.1"]
        assert {entry["url"] for entry in interfaces} == {f"{server.url}/writer"}
        interface = interfaces[0]
        writer.endpoint = replace(writer.endpoint, url=interface["url"], binding=binding)
        events = [event async for event in writer.stream(writer.message(f"bind {marker}"))]
        task_id = events[0].payload["id"]
        assert state_of(events[-1].payload) == "TASK_STATE_COMPLETED"
        (request,) = fake_llm.requests_for(marker)
        assert "You are the WRITER agent." in system_prompt_of(request)
        assert task_id in [task["id"] for task in await writer.list_tasks()]
        triage = await A2AClient.connect(http, f"{server.url}/triage")
        triage.endpoint = replace(triage.endpoint, binding=binding, url=f"{server.url}/triage")
        assert task_id not in [task["id"] for task in await triage.list_tasks()]
