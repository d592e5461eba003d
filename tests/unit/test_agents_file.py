"""AGENTS_FILE: the file read and checked, each agent's settings over the environment's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.agents import agent_settings
from app.settings import Settings
from app.settings.agents_file import AgentsFileError, agents_file_schema, load_agents_file

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "agents.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_schema_in_the_repository_is_the_one_the_settings_make() -> None:
    """docs/agents.schema.json: regenerate with `python -m app.settings.agents_file`."""
    stored = json.loads((ROOT / "docs" / "agents.schema.json").read_text())
    assert stored == agents_file_schema()


def test_the_example_file_loads() -> None:
    agents = load_agents_file(str(ROOT / "examples" / "agents.yaml"))
    assert [agent.name for agent in agents] == ["triage", "writer"]


def test_an_agents_keys_override_the_environment_and_the_rest_inherit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret")
    path = write(
        tmp_path,
        """
agents:
  - name: research
    description: Finds things.
    system_prompt: You research.
    tools: [a:b, "c:d"]
    tools_requiring_approval: "x, y"
    api_key: ${MY_KEY}
    model: openai/gpt-4o-mini
    mcp_servers: {mcpServers: {fs: {command: fs-server}}}
    remote_agents: [http://127.0.0.1:9/]
""",
    )
    [definition] = load_agents_file(path)
    base = Settings(redis_url=None, agent_max_iterations=7, llm_api_base="http://127.0.0.1:1")
    merged = agent_settings(base, definition)
    assert merged.agent_name == "research"
    assert merged.agent_description == "Finds things."
    assert merged.agent_system_prompt == "You research."
    assert merged.agent_tools == ["a:b", "c:d"]
    assert merged.agent_tools_requiring_approval == ["x", "y"]
    assert merged.llm_api_key is not None and merged.llm_api_key.get_secret_value() == "sk-secret"
    assert merged.llm_model == "openai/gpt-4o-mini"
    assert json.loads(merged.agent_mcp_servers or "") == {
        "mcpServers": {"fs": {"command": "fs-server"}}
    }
    assert json.loads(merged.agent_remote_agents or "") == ["http://127.0.0.1:9/"]
    # inherited
    assert (merged.agent_max_iterations, merged.llm_api_base) == (7, "http://127.0.0.1:1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "agents:\n  - name: a\n    colour: red\n",
            "agents.yaml: agent 'a': key 'colour': unknown key",
        ),
        (
            "agents:\n  - name: a\n  - name: a\n",
            "agents.yaml: agent 'a': key 'name': a second agent of this name",
        ),
        ("agents:\n  - name: Bad_Name\n", "agents.yaml: agent 'Bad_Name': key 'name': 'Bad_Name'"),
        (
            "agents:\n  - name: tasks\n",
            "agents.yaml: agent 'tasks': key 'name': name 'tasks' is reserved",
        ),
        ("agents: [\n", "agents.yaml: not valid YAML"),
        (
            "agents:\n  - name: a\n    max_iterations: 0\n",
            "agents.yaml: agent 'a': key 'max_iterations'",
        ),
        (
            "agents:\n  - name: a\n    api_key: ${NO_SUCH_VARIABLE_43}\n",
            "agents.yaml: agent 'a': key 'api_key': environment variable NO_SUCH_VARIABLE_43 is not set",
        ),
        ("agents: []\n", "agents.yaml: key 'agents'"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_the_agent_and_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(AgentsFileError) as caught:
        load_agents_file(write(tmp_path, text))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path) + "/")
    assert expected in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AgentsFileError, match=r"missing\.yaml: cannot read the file"):
        load_agents_file(str(tmp_path / "missing.yaml"))


def test_a_json_file_is_read_as_json(tmp_path: Path) -> None:
    path = write(tmp_path, '{"agents": [{"name": "a", "max_iterations": 2}]}', "agents.json")
    [definition] = load_agents_file(path)
    assert definition.overrides == {"agent_max_iterations": 2}


def test_an_agents_extensions_replace_a2a_extensions(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
agents:
  - name: strict
    extensions: [{uri: "urn:ext:a", required: true, params: {x: 1}}]
  - name: none
    extensions: []
  - name: inherits
""",
    )
    strict, none, inherits = load_agents_file(path)
    base = Settings(redis_url=None, a2a_extensions='[{"uri": "urn:ext:server"}]')
    [own] = agent_settings(base, strict).a2a_extensions
    assert (own.uri, own.required, own.params) == ("urn:ext:a", True, {"x": 1})
    assert agent_settings(base, none).a2a_extensions == []
    assert [ext.uri for ext in agent_settings(base, inherits).a2a_extensions] == ["urn:ext:server"]


@pytest.mark.parametrize(
    ("extensions", "why"),
    [
        ("[{required: true}]", "'uri' is a required property"),
        ('[{uri: "a b"}]', "without spaces or commas"),
        ('[{uri: "urn:x", color: red}]', "unknown key"),
        ('[{uri: "urn:x"}, {uri: "urn:x"}]', "declared twice"),
        ('[{uri: "urn:x", required: "yes"}]', "is not of type 'boolean'"),
    ],
)
def test_a_bad_extension_is_named(tmp_path: Path, extensions: str, why: str) -> None:
    path = write(tmp_path, f"agents:\n  - name: a\n    extensions: {extensions}\n")
    with pytest.raises(AgentsFileError, match=f"agent 'a': key 'extensions[^']*': .*{why}"):
        load_agents_file(path)
