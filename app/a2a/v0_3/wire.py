"""A2A 0.3 at the edge: 0.3 requests become 1.0 params, 1.0 results and events become 0.3.

The handler and the engine speak only 1.0; a 0.3 caller is served by translating its request into
the 1.0 params the operations already take, and their 1.0 JSON back into 0.3. 0.3 has two JSON
dialects, one per binding:

- JSON-RPC (`JSONRPC`): the 0.3 JSON Schema: `kind` discriminators (`"kind": "task"`, parts
  `{"kind": "text" | "file" | "data"}`), lowercase states (`input-required`), roles `user`/`agent`,
  `final` on status updates, push configs nested as `{taskId, pushNotificationConfig}`;
- HTTP+JSON (`REST`, under `/v1/`): the ProtoJSON of the 0.3 proto: `content` instead of `parts`,
  file parts `{file: {fileWithBytes | fileWithUri, mimeType, name}}`, data parts
  `{data: {data: {...}}}`, `TASK_STATE_CANCELLED`, push configs named
  `tasks/{id}/pushNotificationConfigs/{configId}`. Its clients send proto field names
  (`message_id`), so every field is read in either spelling.

A request in the other generation's shape fails here, with -32602 naming the field in 0.3 terms.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from app.a2a.wire import render_event
from app.errors import InvalidParamsError
from app.http.json_body import JsonObject, render_json
from stores.models import JournalEntry


class Dialect(enum.Enum):
    JSONRPC = "jsonrpc"
    REST = "rest"


_STATES_V1 = (
    "SUBMITTED",
    "WORKING",
    "INPUT_REQUIRED",
    "COMPLETED",
    "CANCELED",
    "FAILED",
    "REJECTED",
    "AUTH_REQUIRED",
)
_JSON_STATE = {f"TASK_STATE_{name}": name.lower().replace("_", "-") for name in _STATES_V1}
_JSON_STATE["TASK_STATE_UNSPECIFIED"] = "unknown"
# The 0.3 proto spells it with two Ls; every other name is the 1.0 one.
_PROTO_STATE = {name: name for name in _JSON_STATE} | {
    "TASK_STATE_CANCELED": "TASK_STATE_CANCELLED"
}
_ROLE_FROM_JSON = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLE_TO_JSON = {value: key for key, value in _ROLE_FROM_JSON.items()}

_ENDS_STREAM = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_FAILED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
"""States after which a 0.3 status update says `final`: 0.3 streams end at an interruption too."""


def _snake(camel: str) -> str:
    return "".join(f"_{char.lower()}" if char.isupper() else char for char in camel)


def _get(obj: JsonObject, camel: str) -> Any:
    """A field in its JSON name or its proto name (`messageId` or `message_id`)."""
    value = obj.get(camel)
    return obj.get(_snake(camel)) if value is None else value


def _object(value: Any, where: str) -> JsonObject:
    if not isinstance(value, dict):
        raise InvalidParamsError(f"{where} must be an object", field=where)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidParamsError(f"{where} must be an array", field=where)
    return value


def _copy_fields(source: JsonObject, names: tuple[str, ...]) -> JsonObject:
    return {name: value for name in names if (value := _get(source, name)) is not None}


def _drop_none(obj: JsonObject) -> JsonObject:
    return {key: value for key, value in obj.items() if value is not None}


# --- requests: 0.3 in, 1.0 params out ---------------------------------------------------------


def part_in(part: Any, where: str, dialect: Dialect) -> JsonObject:
    part = _object(part, where)
    metadata = {"metadata": part["metadata"]} if part.get("metadata") is not None else {}
    kind = part.get("kind") if dialect is Dialect.JSONRPC else None
    if kind is None:  # the proto dialect has no kind; a JSON-RPC part may omit it, as SDKs allow
        kind = next((name for name in ("text", "file", "data") if name in part), None)
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidParamsError(f"{where}.text must be a string", field=f"{where}.text")
        return {"text": text, **metadata}
    if kind == "file":
        return _file_part_in(_object(part.get("file"), f"{where}.file"), f"{where}.file", dialect)
    if kind == "data":
        data = part.get("data")
        if dialect is Dialect.REST:
            data = _object(data, f"{where}.data").get("data")
        return {"data": _object(data, f"{where}.data"), **metadata}
    shape = (
        '"kind": "text", "file" or "data"' if dialect is Dialect.JSONRPC else "text, file or data"
    )
    raise InvalidParamsError(f"{where} is not an A2A 0.3 part: it needs {shape}", field=where)


def _file_part_in(file: JsonObject, where: str, dialect: Dialect) -> JsonObject:
    if dialect is Dialect.JSONRPC:
        content, uri = file.get("bytes"), file.get("uri")
        names = {"mediaType": file.get("mimeType"), "filename": file.get("name")}
    else:
        content, uri = _get(file, "fileWithBytes"), _get(file, "fileWithUri")
        names = {"mediaType": _get(file, "mimeType"), "filename": file.get("name")}
    if (content is None) == (uri is None):
        fields = "bytes or uri" if dialect is Dialect.JSONRPC else "fileWithBytes or fileWithUri"
        raise InvalidParamsError(f"{where} needs exactly one of {fields}", field=where)
    return _drop_none({"raw": content, "url": uri, **names})


def message_in(message: Any, where: str, dialect: Dialect) -> JsonObject:
    message = _object(message, where)
    role = message.get("role")
    if dialect is Dialect.JSONRPC:
        if role not in _ROLE_FROM_JSON:
            raise InvalidParamsError(
                f'{where}.role must be "user" or "agent" (A2A 0.3), not {role!r}',
                field=f"{where}.role",
            )
        role = _ROLE_FROM_JSON[role]
        parts_name = "parts"
    else:
        if role not in _ROLE_TO_JSON:
            raise InvalidParamsError(
                f'{where}.role must be "ROLE_USER" or "ROLE_AGENT", not {role!r}',
                field=f"{where}.role",
            )
        parts_name = "content"
    parts = _list(message.get(parts_name), f"{where}.{parts_name}")
    if not parts:
        raise InvalidParamsError(
            f"{where}.{parts_name} must hold at least one part", field=f"{where}.{parts_name}"
        )
    converted = _copy_fields(
        message, ("messageId", "contextId", "taskId", "metadata", "extensions", "referenceTaskIds")
    )
    converted["role"] = role
    converted["parts"] = [
        part_in(part, f"{where}.{parts_name}[{index}]", dialect) for index, part in enumerate(parts)
    ]
    return converted


def push_config_in(config: Any, where: str) -> JsonObject:
    """A 0.3 PushNotificationConfig (either dialect) as the fields of a 1.0 one."""
    config = _object(config, where)
    converted = _copy_fields(config, ("id", "url", "token"))
    authentication = config.get("authentication")
    if authentication is not None:
        authentication = _object(authentication, f"{where}.authentication")
        schemes = _list(authentication.get("schemes"), f"{where}.authentication.schemes")
        converted["authentication"] = _drop_none(
            {
                "scheme": schemes[0] if schemes else None,
                "credentials": authentication.get("credentials"),
            }
        )
    return converted


def send_params_in(params: JsonObject, dialect: Dialect) -> JsonObject:
    """`message/send` params (JSON-RPC) or a `/v1/message:send` body (REST) as 1.0 params."""
    message_name = "message" if dialect is Dialect.JSONRPC else "request"
    message = params.get(message_name)
    if message is None and dialect is Dialect.REST:
        message, message_name = params.get("message"), "message"
    if message is None:
        raise InvalidParamsError(f"{message_name} is required", field=message_name)
    converted: JsonObject = {"message": message_in(message, message_name, dialect)}
    if params.get("metadata") is not None:
        converted["metadata"] = params["metadata"]
    configuration = params.get("configuration")
    if configuration is not None:
        configuration = _object(configuration, "configuration")
        v1 = _copy_fields(configuration, ("acceptedOutputModes", "historyLength"))
        blocking = configuration.get("blocking")
        if blocking is None and dialect is Dialect.REST:
            # A proto3 bool left out is false: a 0.3 REST client asking not to wait sends a
            # configuration without `blocking` (a2a-python's 0.3 server reads it so too).
            blocking = False
        if blocking is not None:
            if not isinstance(blocking, bool):
                raise InvalidParamsError(
                    "configuration.blocking must be a boolean", field="configuration.blocking"
                )
            v1["returnImmediately"] = not blocking
        push_name = "pushNotificationConfig" if dialect is Dialect.JSONRPC else "pushNotification"
        push = _get(configuration, push_name)
        if push is not None:
            v1["taskPushNotificationConfig"] = push_config_in(push, f"configuration.{push_name}")
        converted["configuration"] = v1
    return converted


def task_query_in(params: JsonObject) -> JsonObject:
    """`tasks/get`, `tasks/cancel`, `tasks/resubscribe` params (`{id, historyLength}`)."""
    return _copy_fields(params, ("id", "historyLength", "metadata"))


DEFAULT_PUSH_CONFIG_ID = "default"
"""The id of a 0.3 config set without one: 0.3 treats it as the task's one config (a second
set without an id replaces it), and 0.3 clients ask for it by this name."""


def set_push_config_in(params: JsonObject) -> JsonObject:
    """`tasks/pushNotificationConfig/set` params as a 1.0 TaskPushNotificationConfig."""
    config = push_config_in(params.get("pushNotificationConfig"), "pushNotificationConfig")
    return {"id": DEFAULT_PUSH_CONFIG_ID, **config, "taskId": _get(params, "taskId")}


def push_config_ref_in(params: JsonObject) -> JsonObject:
    """`tasks/pushNotificationConfig/get|list|delete` params (`{id, pushNotificationConfigId}`)."""
    converted = {"taskId": params.get("id")}
    config_id = _get(params, "pushNotificationConfigId")
    if config_id is not None:
        converted["id"] = config_id
    return converted


# --- results and events: 1.0 in, 0.3 out ------------------------------------------------------


def part_out(part: JsonObject, dialect: Dialect) -> JsonObject:
    metadata = {"metadata": part["metadata"]} if part.get("metadata") is not None else {}
    if "text" in part:
        text = {"text": part["text"]}
        return ({"kind": "text"} | text if dialect is Dialect.JSONRPC else text) | metadata
    if "data" in part:
        # 1.0 data is any JSON value; 0.3 data is an object, so a non-object is wrapped.
        data = part["data"] if isinstance(part["data"], dict) else {"value": part["data"]}
        if dialect is Dialect.JSONRPC:
            return {"kind": "data", "data": data} | metadata
        return {"data": {"data": data}} | metadata
    if dialect is Dialect.JSONRPC:
        file = {"bytes": part.get("raw"), "uri": part.get("url")}
        file |= {"mimeType": part.get("mediaType"), "name": part.get("filename")}
        return {"kind": "file", "file": _drop_none(file)} | metadata
    file = {"fileWithBytes": part.get("raw"), "fileWithUri": part.get("url")}
    file |= {"mimeType": part.get("mediaType"), "name": part.get("filename")}
    return {"file": _drop_none(file)} | metadata


def _parts_out(parts: list[JsonObject], dialect: Dialect) -> list[JsonObject]:
    return [part_out(part, dialect) for part in parts]


def message_out(message: JsonObject, dialect: Dialect) -> JsonObject:
    converted = {key: value for key, value in message.items() if key not in ("parts", "role")}
    parts = _parts_out(message.get("parts", []), dialect)
    if dialect is Dialect.JSONRPC:
        role = _ROLE_TO_JSON.get(message.get("role", ""), "agent")
        return {"kind": "message", "role": role, "parts": parts} | converted
    converted.pop("referenceTaskIds", None)  # not in the 0.3 proto
    return {"role": message.get("role", "ROLE_AGENT"), "content": parts} | converted


def _status_out(status: JsonObject, dialect: Dialect) -> JsonObject:
    states = _JSON_STATE if dialect is Dialect.JSONRPC else _PROTO_STATE
    converted = dict(status)
    converted["state"] = states.get(status.get("state", ""), states["TASK_STATE_UNSPECIFIED"])
    if "message" in status:
        converted["message"] = message_out(status["message"], dialect)
    return converted


def _artifact_out(artifact: JsonObject, dialect: Dialect) -> JsonObject:
    return artifact | {"parts": _parts_out(artifact.get("parts", []), dialect)}


def task_out(task: JsonObject, dialect: Dialect) -> JsonObject:
    converted = dict(task)
    converted["status"] = _status_out(task.get("status", {}), dialect)
    if "artifacts" in task:
        converted["artifacts"] = [_artifact_out(item, dialect) for item in task["artifacts"]]
    if "history" in task:
        converted["history"] = [message_out(item, dialect) for item in task["history"]]
    return {"kind": "task"} | converted if dialect is Dialect.JSONRPC else converted


def status_update_out(event: JsonObject, dialect: Dialect) -> JsonObject:
    final = event.get("status", {}).get("state") in _ENDS_STREAM
    converted = event | {"status": _status_out(event.get("status", {}), dialect), "final": final}
    return {"kind": "status-update"} | converted if dialect is Dialect.JSONRPC else converted


def artifact_update_out(event: JsonObject, dialect: Dialect) -> JsonObject:
    converted = event | {"artifact": _artifact_out(event.get("artifact", {}), dialect)}
    return {"kind": "artifact-update"} | converted if dialect is Dialect.JSONRPC else converted


_RESPONSE_OUT: dict[str, Callable[[JsonObject, Dialect], JsonObject]] = {
    "task": task_out,
    "message": message_out,
    "statusUpdate": status_update_out,
    "artifactUpdate": artifact_update_out,
}


def response_out(response: JsonObject, dialect: Dialect) -> JsonObject:
    """A 1.0 SendMessageResponse or StreamResponse (`{"task": ...}`, `{"statusUpdate": ...}`):
    in JSON-RPC 0.3 the bare object with its `kind`; in REST 0.3 the same wrapper, converted."""
    for name, convert in _RESPONSE_OUT.items():
        if name in response:
            converted = convert(response[name], dialect)
            return converted if dialect is Dialect.JSONRPC else {name: converted}
    raise ValueError(f"not a StreamResponse: {sorted(response)}")


def push_config_out(config: JsonObject, dialect: Dialect) -> JsonObject:
    """A 1.0 TaskPushNotificationConfig (flat) as the 0.3 one (nested)."""
    nested = _copy_fields(config, ("id", "url", "token"))
    authentication = config.get("authentication")
    if authentication:
        nested["authentication"] = _drop_none(
            {
                "schemes": [authentication["scheme"]] if authentication.get("scheme") else [],
                "credentials": authentication.get("credentials"),
            }
        )
    task_id = config.get("taskId", "")
    if dialect is Dialect.JSONRPC:
        return {"taskId": task_id, "pushNotificationConfig": nested}
    name = f"tasks/{task_id}/pushNotificationConfigs/{nested.get('id', '')}"
    return {"name": name, "pushNotificationConfig": nested}


def entry_renderer(dialect: Dialect) -> Callable[[JournalEntry], bytes]:
    """A journal entry as a 0.3 stream event in `dialect`: JSON-RPC's
    (`{"kind": "status-update", ..., "final": ...}`) or ProtoJSON's (`{"statusUpdate": {...}}`)."""

    def render(entry: JournalEntry) -> bytes:
        return render_json(response_out(render_event(entry.event), dialect))

    return render
