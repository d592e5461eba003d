"""Strict validation of A2A 0.3 wire payloads, independent of the server's own code.

* JSON-RPC payloads: the 0.3 JSON Schema (`schemas/a2a-v0.3.0.schema.json`, a copy of the spec's
  file kept beside this module), by definition name (`SendMessageSuccessResponse`, `Task`, ...);
* HTTP+JSON payloads: ProtoJSON of the 0.3 proto as the official a2a-sdk ships it
  (`a2a.compat.v0_3.a2a_v0_3_pb2`), parsed with unknown fields rejected.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from a2a.compat.v0_3 import a2a_v0_3_pb2
from google.protobuf import json_format
from jsonschema import Draft7Validator

_SCHEMA_FILE = Path(__file__).with_name("schemas") / "a2a-v0.3.0.schema.json"


@functools.cache
def _definitions() -> dict[str, Any]:
    return json.loads(_SCHEMA_FILE.read_text())["definitions"]


@functools.cache
def _validator(definition: str) -> Draft7Validator:
    schema = {"$ref": f"#/definitions/{definition}", "definitions": _definitions()}
    return Draft7Validator(schema)


def assert_valid_v03(definition: str, payload: Any) -> Any:
    """Raise AssertionError unless `payload` is a valid 0.3 `definition` (JSON Schema)."""
    problems = [
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in _validator(definition).iter_errors(payload)
    ]
    assert not problems, f"not a valid 0.3 {definition}: {problems}\n{payload!r}"
    return payload


def assert_valid_v03_proto(message: str, payload: Any) -> Any:
    """Raise AssertionError unless `payload` is the ProtoJSON of the 0.3 proto `message`."""
    try:
        return json_format.ParseDict(
            payload, getattr(a2a_v0_3_pb2, message)(), ignore_unknown_fields=False
        )
    except json_format.ParseError as exc:
        raise AssertionError(f"not a valid 0.3 {message}: {exc}\n{payload!r}") from exc
