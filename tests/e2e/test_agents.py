"""AGENTS_FILE: three agents on one real server, each with its prompt, tools, card and scope.

Every agent is driven on JSON-RPC (`/{name}/`), HTTP+JSON (`/{name}/message:send`), and through
the root with `params.tenant`; the fake model records what each call received. The root is the
first agent. A bad file stops the server with exit 2 and one line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.client.transports.rest import RestTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

from tests.e2e.harness import (
    A2A_HEADERS,
    RpcClient,
    ServerProcess,
    SSEStream,
    assert_error,
    new_id,
    send_params,
    server_command,
    state_of,
    stream_results,
)
from tests.e2e.wire import artifact_text
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

TOOLS = "tests.e2e.tools_module"
AGENTS_YAML = f"""
agents:
  - name: triage
    description: Sorts requests.
    system_prompt: PROMPT-TRIAGE sorts.
    tools: [{TOOLS}:add]
    skills:
      - id: sort
        name: Sort
        description: Sorts a request.
        tags: [triage]
        examples: ["Where does this go?"]
  - name: research
    description: Finds things.
    system_prompt: PROMPT-RESEARCH finds.
    tools: "{TOOLS}:slow_echo"
    tools_requiring_approval: [slow_echo]
  - name: writer
    system_prompt: PROMPT-WRITER writes.
    tools: []
    ask_user_tool: false
    mcp_servers: "{{not json"
"""
NAMES = ["triage", "research", "writer"]
PROMPTS = {name: f"PROMPT-{name.upper()}" for name in NAMES}
FUNCTIONS = {"triage": {"add"}, "research": {"slow_echo"}, "writer": set()}


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    path = tmp_path_factory.mktemp("agents") / "agents.yaml"
    path.write_text(AGENTS_YAML)
    with ServerProcess(fake_llm.base_url, env={"AGENTS_FILE": str(path)}).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30, headers=A2A_HEADERS) as c:
        yield c


@pytest.fixture(scope="module")
def clients(server):
    """A JSON-RPC client per agent (`/{name}/`), and the root's under ""."""
    made = {name: RpcClient(server.url, endpoint=f"/{name}/") for name in NAMES}
    made[""] = RpcClient(server.url)
    yield made
    for client in made.values():
        client.close()


def model_call(fake_llm, marker: str) -> dict:
    (call,) = fake_llm.requests_for(marker)
    return call


def prompt_and_tools(call: dict) -> tuple[str, set[str]]:
    system = [m["content"] for m in call["messages"] if m["role"] == "system"]
    tools = {tool["function"]["name"] for tool in call.get("tools") or []}
    return " ".join(system), tools


@pytest.mark.parametrize("name", NAMES)
def test_each_agents_model_call_has_only_its_prompt_and_tools(clients, fake_llm, marker, name):
    fake_llm.script(text(f"{name} answers.", when_user_contains=marker))
    task = clients[name].send(f"hello {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == f"{name} answers."
    system, tools = prompt_and_tools(model_call(fake_llm, marker))
    assert PROMPTS[name] in system
    assert not [other for other in NAMES if other != name and PROMPTS[other] in system]
    functions = tools & {"add", "slow_echo"}
    assert functions == FUNCTIONS[name], tools
    assert ("ask_user" in tools) is (name != "writer"), tools


@pytest.mark.parametrize("name", NAMES)
def test_each_agent_on_http_json(http, fake_llm, marker, name):
    fake_llm.script(text("over REST", when_user_contains=marker))
    sent = http.post(f"/{name}/message:send", json=send_params(f"rest {marker}"))
    assert sent.status_code == 200, sent.text
    task = sent.json()["task"]
    got = http.get(f"/{name}/tasks/{task['id']}")
    assert got.status_code == 200 and got.json()["id"] == task["id"]
    assert PROMPTS[name] in prompt_and_tools(model_call(fake_llm, marker))[0]


def test_an_agent_streams_on_both_bindings(clients, http, fake_llm, marker):
    fake_llm.script(
        text(["streamed ", "over JSON-RPC"], when_user_contains=f"{marker}-j"),
        text(["streamed ", "over REST"], when_user_contains=f"{marker}-r"),
    )
    params = send_params(f"s {marker}-j")
    events = clients["writer"].stream_all("SendStreamingMessage", params, id=f"{marker}-id")
    results = stream_results(events, f"{marker}-id")
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED", results
    with http.stream(
        "POST", "/writer/message:stream", json=send_params(f"s {marker}-r")
    ) as response:
        assert response.status_code == 200
        rest = [event.data for event in SSEStream(response, None).sse_events()]
    assert state_of(rest[-1]) == "TASK_STATE_COMPLETED", rest
    for suffix in ("j", "r"):
        call = model_call(fake_llm, f"{marker}-{suffix}")
        assert PROMPTS["writer"] in prompt_and_tools(call)[0]


@pytest.mark.parametrize("name", NAMES)
def test_the_root_with_params_tenant_reaches_the_agent(clients, fake_llm, marker, name):
    fake_llm.script(text("via root", when_user_contains=marker))
    result = clients[""].result("SendMessage", {**send_params(f"root {marker}"), "tenant": name})
    assert PROMPTS[name] in prompt_and_tools(model_call(fake_llm, marker))[0]
    task_id = result["task"]["id"]
    assert clients[name].get_task(task_id)["id"] == task_id


def test_approvals_are_the_agents_own_and_a_resumed_turn_runs_with_its_agent(
    clients, fake_llm, marker
):
    fake_llm.script(
        tool_calls([("slow_echo", {"text": "ECHOED", "seconds": 0})], when_user_contains=marker),
        text("echo done", when_user_contains=marker),
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=f"{marker}-t"),
        text("added", when_user_contains=f"{marker}-t"),
    )
    task = clients["research"].send(f"echo it {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    answer = send_params("APPROVE", task_id=task["id"], context_id=task["contextId"])
    done = clients["research"].result("SendMessage", answer)["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    first, resumed = fake_llm.requests_for(marker)
    for call in (first, resumed):
        assert prompt_and_tools(call)[0] == "PROMPT-RESEARCH finds."
    assert [m for m in resumed["messages"] if m["role"] == "tool" and "ECHOED" in str(m)]
    # triage's `add` needs no approval: approvals are per agent
    added = clients["triage"].send(f"add {marker}-t")
    assert added["status"]["state"] == "TASK_STATE_COMPLETED", added["status"]


def test_the_root_is_the_first_agent(clients, http, fake_llm, marker):
    fake_llm.script(text("first", when_user_contains=marker))
    at_root = clients[""].send(f"root {marker}")
    assert PROMPTS["triage"] in prompt_and_tools(model_call(fake_llm, marker))[0]
    assert clients["triage"].get_task(at_root["id"])["id"] == at_root["id"]
    fake_llm.script(text("first again", when_user_contains=f"{marker}-2"))
    at_first = clients["triage"].send(f"first {marker}-2")
    assert clients[""].get_task(at_first["id"])["id"] == at_first["id"]
    assert http.get(f"/tasks/{at_first['id']}").status_code == 200
    root_card = http.get("/.well-known/agent-card.json").json()
    assert root_card["name"] == "triage"
    assert root_card["supportedInterfaces"][0]["url"] == str(http.base_url).rstrip("/")


def test_a_task_of_one_agent_is_not_found_through_another(clients, http, fake_llm, marker):
    fake_llm.script(text("mine", when_user_contains=marker))
    task = clients["research"].send(f"private {marker}")
    for other in ("triage", "writer"):
        assert_error(clients[other].error("GetTask", {"id": task["id"]}), -32001)
        assert http.get(f"/{other}/tasks/{task['id']}").status_code == 404
    listed = {t["id"] for t in clients["research"].result("ListTasks", {})["tasks"]}
    assert task["id"] in listed
    for other in ("triage", "writer"):
        others = {t["id"] for t in clients[other].result("ListTasks", {})["tasks"]}
        assert task["id"] not in others
    rest_list = http.get("/research/tasks").json()["tasks"]
    assert task["id"] in {t["id"] for t in rest_list}


def test_one_context_id_with_two_agents_is_two_conversations(clients, fake_llm, marker):
    context_id = new_id("ctx-")
    fake_llm.script(
        text("TRIAGE-SAID-THIS", when_user_contains=f"{marker}-a"),
        text("research first", when_user_contains=f"{marker}-b"),
        text("triage again", when_user_contains=f"{marker}-c"),
    )
    clients["triage"].send(f"one {marker}-a", context_id=context_id)
    clients["research"].send(f"two {marker}-b", context_id=context_id)
    clients["triage"].send(f"three {marker}-c", context_id=context_id)
    research = model_call(fake_llm, f"{marker}-b")["messages"]
    assert not [m for m in research if "TRIAGE-SAID-THIS" in str(m.get("content"))], research
    assert [m["role"] for m in research if m["role"] != "system"] == ["user"]
    again = model_call(fake_llm, f"{marker}-c")["messages"]
    assert [m for m in again if "TRIAGE-SAID-THIS" in str(m.get("content"))], again


def test_each_agent_has_its_card(http, server):
    for name in NAMES:
        response = http.get(f"/{name}/.well-known/agent-card.json")
        assert response.status_code == 200, response.text
        card = response.json()
        assert card["name"] == name
        interfaces = card["supportedInterfaces"]
        assert {i["url"] for i in interfaces} == {f"{server.url}/{name}"}
        assert not [i for i in interfaces if "tenant" in i]
    triage = http.get("/triage/.well-known/agent-card.json").json()
    assert triage["description"].startswith("Sorts requests.")
    assert triage["skills"] == [
        {
            "id": "sort",
            "name": "Sort",
            "description": "Sorts a request.",
            "tags": ["triage"],
            "examples": ["Where does this go?"],
        }
    ]


def test_agents_lists_every_agent_with_its_card_url(http, server):
    listed = http.get("/agents").json()["agents"]
    assert [agent["name"] for agent in listed] == NAMES
    assert [agent["url"] for agent in listed] == [
        f"{server.url}/{name}/.well-known/agent-card.json" for name in NAMES
    ]
    assert listed[0]["description"].startswith("Sorts requests.")
    forwarded = http.get("/agents", headers={"Host": "localhost:1234"}).json()["agents"]
    assert forwarded[1]["url"] == "http://localhost:1234/research/.well-known/agent-card.json"


def test_an_unknown_name_is_not_found_on_every_binding(http, clients):
    params = send_params("nobody")
    assert (
        http.post(
            "/nobody/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        ).status_code
        == 404
    )
    assert http.post("/nobody/message:send", json=params).status_code == 404
    assert http.get("/nobody/tasks").status_code == 404
    assert http.get("/nobody/.well-known/agent-card.json").status_code == 404
    payload = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params}
    refused = http.post("/", json={**payload, "params": {**params, "tenant": "nobody"}})
    assert refused.status_code == 404
    error = refused.json()["error"]
    assert error["code"] == -32602
    assert error["data"][0]["reason"] == "TENANT_NOT_FOUND"


SDK_TRANSPORTS = {
    "jsonrpc-1.0": JsonRpcTransport,
    "rest-1.0": RestTransport,
    "jsonrpc-0.3": CompatJsonRpcTransport,
    "rest-0.3": CompatRestTransport,
}


@pytest.mark.parametrize("kind", sorted(SDK_TRANSPORTS))
async def test_the_sdk_client_resolves_an_agents_card_and_talks_to_it(
    server, fake_llm, marker, kind
):
    fake_llm.script(text("hello from research", when_user_contains=marker))
    base = f"{server.url}/research"
    transport = SDK_TRANSPORTS[kind]
    version = {"A2A-Version": kind.rpartition("-")[2]}
    async with httpx.AsyncClient(trust_env=False, timeout=30, headers=version) as client:
        card = await A2ACardResolver(client, base).get_agent_card()
        assert card.name == "research"
        sdk = transport(client, card, base)
        message = Message(message_id=new_id("m-"), role=Role.ROLE_USER, parts=[Part(text=marker)])
        blocking = SendMessageConfiguration(return_immediately=False)
        result = await sdk.send_message(SendMessageRequest(message=message, configuration=blocking))
    assert result.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert PROMPTS["research"] in prompt_and_tools(model_call(fake_llm, marker))[0]


def test_readiness_names_the_agent_whose_tool_source_is_down(http):
    ready = http.get("/readyz").json()
    assert ready["status"] == "ready"
    assert list(ready["toolSourcesDown"]) == ["writer"], ready
    assert list(ready["toolSourcesDown"]["writer"]) == ["mcp"], ready


BROKEN = {
    "unknown key": ("agents:\n  - name: a\n    colour: red\n", ["agent 'a'", "key 'colour'"]),
    "duplicate name": ("agents:\n  - name: a\n  - name: a\n", ["agent 'a'", "key 'name'"]),
    "invalid name": ("agents:\n  - name: Not_OK\n", ["agent 'Not_OK'", "key 'name'"]),
    "yaml error": ("agents: [\n  - name: a\n", ["not valid YAML"]),
    "tool that does not import": (
        "agents:\n  - name: a\n  - name: b\n    tools: [no_such_module_43:tool]\n",
        ["agent 'b'", "key 'tools'", "no_such_module_43"],
    ),
    "missing file": (None, ["cannot read the file"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_file_stops_the_server_with_one_line(tmp_path: Path, fake_llm, case):
    body, expected = BROKEN[case]
    path = tmp_path / "agents.yaml"
    if body is not None:
        path.write_text(body)
    process = ServerProcess(fake_llm.base_url, env={"AGENTS_FILE": str(path)})
    env = process.environment()
    process.cleanup()
    done = subprocess.run(
        server_command(9),  # never bound: the file is refused first
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"a2a-server: invalid agents file: {path}: ")
    for part in expected:
        assert part in lines[0]
