"""AGENTS_FILE: many agents on one server, declared in one YAML or JSON file (docs/agents.md).

    agents:
      - name: triage                 # URL-safe: the agent is served under /triage
        description: Sorts requests.
        skills: [{id: sort, name: Sort, description: ..., tags: [triage]}]
        system_prompt: You sort requests.      # AGENT_SYSTEM_PROMPT, for this agent
        model: openai/gpt-4o-mini              # LLM_MODEL
        api_key: ${OPENAI_API_KEY}             # from the environment, never inline

Each agent's keys are the AGENT_* and LLM_* settings, lower-case, without the prefix; a key left
out inherits the environment's value. The file is checked against the JSON Schema built here from
the settings (`docs/agents.schema.json`, kept equal by a test; `python -m app.settings.agents_file`
prints it), then each agent's values by the settings' own types. Any problem is an
`AgentsFileError`: one line naming the file, the agent and the key.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import jsonschema  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo

from stores.tenants import tenant_name_problem

AGENT_NAME = r"^[a-z0-9][a-z0-9-]*$"
"""An agent's name: a path segment (`/{name}/...`), a tenant name and a key part, unencoded."""
PREFIXES = ("agent_", "llm_")
NOT_PER_AGENT = {"agent_name", "agent_description"}
"""Settings whose per-agent form is the agent's own `name` and `description`."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

SKILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An A2A AgentSkill of the agent's card.",
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "examples": {"type": "array", "items": {"type": "string"}},
        "inputModes": {"type": "array", "items": {"type": "string"}},
        "outputModes": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "name", "description", "tags"],
    "additionalProperties": False,
}
# Settings a file writes in YAML's own shapes, as well as in the environment's string form.
_STRUCTURED = {
    "mcp_servers": {"type": "object", "description": "The `mcpServers` object, in YAML."},
    "remote_agents": {"type": "array", "items": {"type": ["string", "object"]}},
    "fallback_models": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "model": {"type": "string", "minLength": 1},
                "api_base": {"type": "string"},
                "api_key": {"type": "string"},
            },
            "required": ["model"],
            "additionalProperties": False,
        },
    },
}


class AgentsFileError(ValueError):
    """An agents file the server cannot serve: one line, naming the file, the agent, the key."""

    def __init__(self, path: str, why: str, *, agent: str | None = None, key: str | None = None):
        where = "".join(
            [path, f": agent {agent!r}" if agent else "", f": key {key!r}" if key else ""]
        )
        super().__init__(f"{where}: {why}")


@dataclass(frozen=True, kw_only=True)
class AgentDefinition:
    """One agent of the file: its card's name, description and skills, and its settings."""

    name: str
    description: str | None = None
    skills: list[dict[str, Any]] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    """Setting name (`agent_system_prompt`) -> value, checked by the setting's type."""


def _as_json_text(value: object) -> object:
    return json.dumps(value) if isinstance(value, dict | list) else value


@cache
def agent_settings_model() -> type[BaseModel]:
    """Every AGENT_* / LLM_* setting under its short name (`system_prompt`), each optional."""
    from app.settings import Settings  # the package imports this module's users, not this

    fields: dict[str, Any] = {}
    for name, info in Settings.model_fields.items():
        if not name.startswith(PREFIXES) or name in NOT_PER_AGENT:
            continue
        key = name.removeprefix("agent_").removeprefix("llm_")
        kind: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        if key in _STRUCTURED:  # YAML's object or list, passed on as the JSON text it reads
            kind = Annotated[kind, BeforeValidator(_as_json_text)]
        fields[name] = (kind, Field(None, alias=key, description=info.description))
    return create_model(
        "AgentSettings", __config__=ConfigDict(extra="forbid", populate_by_name=False), **fields
    )


def per_agent_keys() -> dict[str, str]:
    """A file's per-agent key -> the setting it stands for (`model` -> `llm_model`)."""
    return {str(info.alias): name for name, info in agent_settings_model().model_fields.items()}


def _property_schema(name: str, info: FieldInfo) -> dict[str, Any]:
    kind: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    schema = TypeAdapter(kind).json_schema()
    schema.pop("title", None)
    if schema.get("type") == "array":  # a YAML list, or the environment's comma-separated form
        schema = {"anyOf": [schema, {"type": "string"}]}
    elif schema.get("anyOf") and {"type": "null"} in schema["anyOf"]:
        schema["anyOf"].remove({"type": "null"})
        if len(schema["anyOf"]) == 1:
            schema = schema["anyOf"][0]
    if (key := str(info.alias)) in _STRUCTURED:
        schema = {"anyOf": [_STRUCTURED[key], {"type": "string"}]}
    return {"description": info.description, **schema}


@cache
def agents_file_schema() -> dict[str, Any]:
    """The JSON Schema of an agents file (docs/agents.schema.json)."""
    properties: dict[str, Any] = {
        "name": {
            "type": "string",
            "pattern": AGENT_NAME,
            "maxLength": 64,
            "description": "The agent's name: its path (`/{name}`), tenant and card name.",
        },
        "description": {"type": "string", "description": "The agent's card description."},
        "skills": {
            "type": "array",
            "items": SKILL_SCHEMA,
            "description": "The card's skills (A2A AgentSkill objects).",
        },
    }
    for name, info in agent_settings_model().model_fields.items():
        properties[str(info.alias)] = _property_schema(name, info)
    agent = {
        "type": "object",
        "properties": properties,
        "required": ["name"],
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "a2a-agent-server agents file (AGENTS_FILE)",
        "description": "Agents served by one server, each under /{name}; the first also at /."
        " Per agent: any AGENT_* or LLM_* setting, lower-case, without its prefix; unset keys"
        " inherit the environment's value; ${VAR} is replaced by the environment variable VAR.",
        "type": "object",
        "properties": {"agents": {"type": "array", "minItems": 1, "items": agent}},
        "required": ["agents"],
        "additionalProperties": False,
    }


def _read(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AgentsFileError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentsFileError(path, f"not valid JSON: {exc}") from exc
    import yaml  # type: ignore[import-untyped]

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AgentsFileError(path, "not valid YAML: " + " ".join(str(exc).split())) from exc


def _expand(value: Any, path: str, agent: str | None, key: str | None) -> Any:
    """`${VAR}` in every string, from the environment (an unset variable is an error)."""
    if isinstance(value, str):

        def variable(match: re.Match[str]) -> str:
            if (found := os.environ.get(match[1])) is None:
                why = f"environment variable {match[1]} is not set"
                raise AgentsFileError(path, why, agent=agent, key=key)
            return found

        return _VARIABLE.sub(variable, value)
    if isinstance(value, list):
        return [_expand(item, path, agent, key) for item in value]
    if isinstance(value, dict):
        return {name: _expand(item, path, agent, key) for name, item in value.items()}
    return value


def _schema_error(path: str, document: Any, error: jsonschema.ValidationError) -> AgentsFileError:
    where = list(error.absolute_path)
    agent: str | None = None
    key = None
    if len(where) >= 2 and where[0] == "agents" and isinstance(where[1], int):
        entry = document["agents"][where[1]]
        name = entry.get("name") if isinstance(entry, dict) else None
        agent = name if isinstance(name, str) else f"#{where[1] + 1}"
        key = ".".join(str(part) for part in where[2:]) or None
    else:
        key = ".".join(str(part) for part in where) or None
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        unknown = [name for name in error.instance if name not in allowed]
        prefix = f"{key}." if key else ""
        return AgentsFileError(path, "unknown key", agent=agent, key=prefix + str(unknown[0]))
    if error.validator == "pattern" and key == "name":
        why = f"{error.instance!r} is not an agent name: lower-case letters, digits and '-'"
        return AgentsFileError(path, why, agent=agent, key=key)
    return AgentsFileError(path, " ".join(error.message.split())[:300], agent=agent, key=key)


def load_agents_file(path: str) -> list[AgentDefinition]:
    """The agents of the file at `path`, checked (AgentsFileError)."""
    document = _read(path)
    errors = sorted(
        jsonschema.Draft202012Validator(agents_file_schema()).iter_errors(document),
        key=lambda error: (list(error.absolute_path)[:2] != [], error.path),
    )
    if errors:
        raise _schema_error(path, document, errors[0])
    model, keys = agent_settings_model(), per_agent_keys()
    definitions: list[AgentDefinition] = []
    seen: set[str] = set()
    for entry in document["agents"]:
        name = entry["name"]
        if (problem := tenant_name_problem(name)) is not None:
            raise AgentsFileError(path, problem.replace("tenant", "name"), agent=name, key="name")
        if name in seen:
            raise AgentsFileError(path, "a second agent of this name", agent=name, key="name")
        seen.add(name)
        values = {
            key: _expand(value, path, name, key)
            for key, value in entry.items()
            if key not in ("name",)
        }
        settings = {key: value for key, value in values.items() if key in keys}
        try:
            checked = model.model_validate(settings)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else None
            why = str(first["msg"]).removeprefix("Value error, ")
            raise AgentsFileError(path, why, agent=name, key=key) from exc
        definitions.append(
            AgentDefinition(
                name=name,
                description=values.get("description"),
                skills=values.get("skills"),
                overrides={field: getattr(checked, field) for field in checked.model_fields_set},
            )
        )
    return definitions


if __name__ == "__main__":  # python -m app.settings.agents_file > docs/agents.schema.json
    sys.stdout.write(json.dumps(agents_file_schema(), indent=2) + "\n")
