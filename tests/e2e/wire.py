"""Strict validation of A2A 1.0 wire payloads against the a2a-sdk protobuf types.

``assert_valid(kind, payload)`` checks that ``payload`` (a decoded JSON value)

* parses as the proto message for ``kind`` with ProtoJSON, rejecting unknown fields and bad
  enum strings (``google.protobuf.json_format.ParseDict(..., ignore_unknown_fields=False)``);
* uses the camelCase JSON names on output (ProtoJSON *accepts* snake_case, A2A output must not
  use it), enum values as strings (not integers);
* carries every field annotated ``[(google.api.field_behavior) = REQUIRED]`` in the proto
  (required repeated fields must be non-empty, except ``ListTasksResponse.tasks``);
* sets exactly one member of each real ``oneof`` (Part content, StreamResponse payload, ...);
* validates against the A2A 1.0 JSON Schema bundle (``schemas/a2a-v1.0.0.schema.json``, a copy of
  the spec's file kept beside this module, so the tests need nothing outside the repository).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from a2a.types import a2a_pb2
from google.api import field_behavior_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

KINDS: dict[str, type] = {
    "task": a2a_pb2.Task,
    "message": a2a_pb2.Message,
    "send_message_response": a2a_pb2.SendMessageResponse,
    "stream_response": a2a_pb2.StreamResponse,
    "list_tasks_response": a2a_pb2.ListTasksResponse,
    "agent_card": a2a_pb2.AgentCard,
    "status_update": a2a_pb2.TaskStatusUpdateEvent,
    "artifact_update": a2a_pb2.TaskArtifactUpdateEvent,
    "artifact": a2a_pb2.Artifact,
}

_REQUIRED = field_behavior_pb2.REQUIRED
# Required repeated fields that may legitimately be empty on the wire.
_MAY_BE_EMPTY = {"lf.a2a.v1.ListTasksResponse.tasks"}
# Well-known types whose JSON form is free-form (not walked).
_OPAQUE = {
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Timestamp",
    "google.protobuf.Duration",
    "google.protobuf.Any",
    "google.protobuf.Empty",
}

# ISO-8601 UTC with Z suffix (SPEC 5.6.1).
_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")


class WireError(AssertionError):
    pass


# The A2A 1.0 JSON Schema bundle (vendored from the spec, so a clone needs nothing beside it).
_SCHEMA_FILE = Path(__file__).with_name("schemas") / "a2a-v1.0.0.schema.json"
_SCHEMA_OF_KIND = {
    "task": "Task",
    "message": "Message",
    "send_message_response": "Send Message Response",
    "stream_response": "Stream Response",
    "list_tasks_response": "List Tasks Response",
    "agent_card": "Agent Card",
    "status_update": "Task Status Update Event",
    "artifact_update": "Task Artifact Update Event",
    "artifact": "Artifact",
}


@functools.cache
def _schema_validators() -> dict[str, Draft202012Validator]:
    """One validator per kind; `$ref`s like `lf.a2a.v1.Task.jsonschema.json` resolve in-bundle."""
    definitions = json.loads(_SCHEMA_FILE.read_text())["definitions"]
    resources = []
    for title, schema in definitions.items():
        package = "google.protobuf" if title in ("Struct", "Timestamp", "Value") else "lf.a2a.v1"
        uri = f"{package}.{title.replace(' ', '')}.jsonschema.json"
        resources.append((uri, Resource.from_contents(schema, default_specification=DRAFT202012)))
    registry = Registry().with_resources(resources)
    return {
        kind: Draft202012Validator(definitions[title], registry=registry)
        for kind, title in _SCHEMA_OF_KIND.items()
    }


def _schema_problems(kind: str, payload: Any) -> list[str]:
    validator = _schema_validators()[kind]
    return [
        f"JSON Schema: {'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(payload)
    ]


V03_CARD_MEMBERS = ("protocolVersion", "url", "preferredTransport", "additionalInterfaces")
V03_CARD_MEMBERS += ("supportsAuthenticatedExtendedCard", "security")
V03_SCHEME_MEMBERS = ("type", "in", "name", "scheme", "bearerFormat")


def without_v03_members(card: dict[str, Any]) -> dict[str, Any]:
    """The card as a 1.0 client reads it: without the 0.3 members served beside the 1.0 ones
    (a 1.0 parser ignores them; the strict check here would not)."""
    view = {key: value for key, value in card.items() if key not in V03_CARD_MEMBERS}
    if "securitySchemes" in view:
        view["securitySchemes"] = {
            name: {key: value for key, value in scheme.items() if key not in V03_SCHEME_MEMBERS}
            for name, scheme in view["securitySchemes"].items()
        }
    return view


def card_url_set(card: dict[str, Any]) -> set[str]:
    """Every URL a card names: its interfaces' (1.0 and 0.3) and the 0.3 `url`."""
    return (
        {interface["url"] for interface in card["supportedInterfaces"]}
        | {interface["url"] for interface in card.get("additionalInterfaces", [])}
        | ({card["url"]} if "url" in card else set())
    )


def assert_valid(kind: str, payload: Any) -> Any:
    """Raise ``AssertionError`` unless ``payload`` is a valid A2A 1.0 ``kind``; return the proto."""
    if kind == "agent_card" and isinstance(payload, dict):
        payload = without_v03_members(payload)
    try:
        cls = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r}; known: {sorted(KINDS)}") from None
    if not isinstance(payload, dict):
        raise WireError(
            f"{kind}: expected a JSON object, got {type(payload).__name__}: {payload!r}"
        )
    try:
        msg = json_format.ParseDict(payload, cls(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise WireError(
            f"{kind}: not a valid {cls.DESCRIPTOR.full_name}: {exc}\n{payload!r}"
        ) from exc
    problems = _schema_problems(kind, payload)
    _walk(cls.DESCRIPTOR, payload, kind, problems)
    if problems:
        raise WireError(f"{kind}: " + "; ".join(problems) + f"\npayload: {payload!r}")
    return msg


def is_valid(kind: str, payload: Any) -> bool:
    try:
        assert_valid(kind, payload)
    except AssertionError:
        return False
    return True


def _walk(desc: Descriptor, obj: dict[str, Any], path: str, problems: list[str]) -> None:
    by_json = {f.json_name: f for f in desc.fields}
    by_name = {f.name: f for f in desc.fields}
    for key in obj:
        if key not in by_json:
            if key in by_name:
                problems.append(
                    f"{path}.{key}: snake_case key on output, expected {by_name[key].json_name!r}"
                )
            # unknown keys are already rejected by ParseDict
    for f in desc.fields:
        present = f.json_name in obj
        value = obj.get(f.json_name)
        behaviors = list(f.GetOptions().Extensions[field_behavior_pb2.field_behavior])
        if _REQUIRED in behaviors:
            if not present or value is None:
                problems.append(f"{path}.{f.json_name}: required field missing")
            elif _is_repeated(f) and not value and f.full_name not in _MAY_BE_EMPTY:
                problems.append(f"{path}.{f.json_name}: required list is empty")
        if not present or value is None:
            continue
        if f.type == FieldDescriptor.TYPE_ENUM:
            vals = value if _is_repeated(f) else [value]
            for v in vals:
                if not isinstance(v, str):
                    problems.append(f"{path}.{f.json_name}: enum must be a string, got {v!r}")
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            sub = f.message_type
            if sub.full_name == "google.protobuf.Timestamp":
                if not (isinstance(value, str) and _TS_RE.match(value)):
                    problems.append(
                        f"{path}.{f.json_name}: timestamp must be UTC with 'Z' "
                        f"suffix, got {value!r}"
                    )
                continue
            if sub.full_name in _OPAQUE:
                continue
            if sub.GetOptions().map_entry:
                vf = sub.fields_by_name["value"]
                if (
                    vf.type == FieldDescriptor.TYPE_MESSAGE
                    and vf.message_type.full_name not in _OPAQUE
                ):
                    for k, v in value.items():
                        if isinstance(v, dict):
                            _walk(vf.message_type, v, f"{path}.{f.json_name}[{k!r}]", problems)
                continue
            items = value if _is_repeated(f) else [value]
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    p = f"{path}.{f.json_name}" + (f"[{i}]" if _is_repeated(f) else "")
                    _walk(sub, item, p, problems)
    for oneof in desc.oneofs:
        if _is_synthetic(oneof):
            continue
        set_members = [f.json_name for f in oneof.fields if obj.get(f.json_name) is not None]
        if len(set_members) != 1:
            problems.append(
                f"{path}: oneof {oneof.name!r} needs exactly one of "
                f"{[f.json_name for f in oneof.fields]}, got {set_members}"
            )


def _is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)
    if rep is not None:
        return bool(rep)
    return f.label == FieldDescriptor.LABEL_REPEATED


def _is_synthetic(oneof: Any) -> bool:
    # proto3 ``optional`` fields are wrapped in synthetic oneofs named ``_<field>``.
    if len(oneof.fields) == 1 and oneof.name == "_" + oneof.fields[0].name:
        return True
    return False


# ---- small accessors shared by the tests ------------------------------------------------------


def parts_text(parts: list[dict[str, Any]] | None) -> str:
    return "".join(p.get("text", "") for p in (parts or []))


def message_text(message: dict[str, Any] | None) -> str:
    return parts_text((message or {}).get("parts"))


def artifact_text(task: dict[str, Any]) -> str:
    return "".join(parts_text(a.get("parts")) for a in task.get("artifacts") or [])
