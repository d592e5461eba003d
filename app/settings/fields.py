"""The field types behind `Settings`: how a value is read from the environment and checked.

Kept beside the settings groups so that they read as one table (name, type, default,
description) and each check is written once, as the type of the fields it applies to.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_settings import NoDecode

from agent.extensions import AgentExtension, extensions_from
from agent.llm.fallbacks import ModelRoute, fallback_models
from agent.llm.params import model_params
from agent.outbound import OutboundPolicy
from stores.rate_limit import RateLimit
from stores.tenants import check_tenant_names

REDIS_SCHEMES = ("redis://", "rediss://", "redis+cluster://", "rediss+cluster://")


def split_commas(value: object) -> object:
    """`a, b,,c` -> `["a", "b", "c"]`; a list (from code) is taken as it is."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def extended_card_fields(value: str) -> dict[str, Any]:
    """A2A_EXTENDED_CARD as an object: inline JSON (it starts with `{` or `[`), else a file path."""
    text = value
    if not value.lstrip().startswith(("{", "[")):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the extended card file {value!r}: {exc}") from exc
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the extended card is not valid JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise ValueError("the extended card must be a JSON object")
    return fields


def declared_extensions(value: object) -> list[AgentExtension]:
    """A2A_EXTENSIONS: inline JSON (it starts with `[`), else the path of a JSON or YAML file,
    holding a list of `{uri, description, required, params}`; a list from code as it is."""
    if not isinstance(value, str):
        return extensions_from(value, where="A2A_EXTENSIONS")
    text, source = value, "A2A_EXTENSIONS"
    if not value.lstrip().startswith("["):
        source = value
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the extensions file {value!r}: {exc}") from exc
    if source.endswith((".yaml", ".yml")):
        import yaml  # type: ignore[import-untyped]  # only for a YAML file

        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{source} is not valid YAML: {exc}") from exc
    else:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not valid JSON: {exc}") from exc
    return extensions_from(document, where=source)


def _outbound_allow(value: list[str]) -> list[str]:
    OutboundPolicy.parse(value)  # raises ValueError naming the entry that is neither form
    return value


def _redis_scheme(value: str | None) -> str | None:
    if value and not value.startswith(REDIS_SCHEMES):
        raise ValueError(
            "REDIS_URL must start with redis://, rediss://, redis+cluster:// or rediss+cluster://"
        )
    return value


def _extended_card(value: str | None) -> str | None:
    if value:
        extended_card_fields(value)  # raises ValueError saying what is wrong with it
    return value


def _rate_limit(value: str | None) -> str | None:
    if value is not None:
        RateLimit.parse(value)  # raises ValueError with the accepted forms
    return value


def _tenant_names(value: list[str]) -> list[str]:
    check_tenant_names(value)  # raises ValueError saying what is wrong with the first bad one
    return value


def _tenant_name(value: str | None) -> str | None:
    if value is not None:
        check_tenant_names([value])
    return value


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _from_environment(text: str, where: str) -> str:
    """`${VAR}` replaced by the environment variable VAR (unset: ValueError): a key given by
    reference, so that the setting itself holds no secret (an agents file does the same)."""

    def variable(match: re.Match[str]) -> str:
        if (found := os.environ.get(match[1])) is None:
            raise ValueError(f"{where}: environment variable {match[1]} is not set")
        return found

    return _VARIABLE.sub(variable, text)


def _model_routes(value: object) -> object:
    if isinstance(value, list) and all(isinstance(item, ModelRoute) for item in value):
        return value  # from code, or a copy of checked settings
    return [
        ModelRoute(
            model=entry["model"].strip(),
            api_base=entry.get("api_base") or None,
            api_key=_from_environment(entry["api_key"], f"LLM_FALLBACK_MODELS[{index}].api_key")
            if entry.get("api_key")
            else None,
        )
        for index, entry in enumerate(fallback_models(value))
    ]


CommaList = Annotated[list[str], NoDecode, BeforeValidator(split_commas)]
"""A comma-separated list in the environment (not JSON)."""
OutboundAllowList = Annotated[CommaList, AfterValidator(_outbound_allow)]
"""Networks (CIDR) and host names, each checked when the settings are read."""
RedisUrl = Annotated[str | None, AfterValidator(_redis_scheme)]
ExtendedCard = Annotated[str | None, AfterValidator(_extended_card)]
RateLimitSpec = Annotated[str | None, AfterValidator(_rate_limit)]
ExtensionList = Annotated[list[AgentExtension], NoDecode, BeforeValidator(declared_extensions)]
"""A2A_EXTENSIONS: declarations read (inline or from a file) and checked at start-up."""
ModelParams = Annotated[dict[str, Any], NoDecode, BeforeValidator(model_params)]
"""LLM_PARAMS: a JSON object (a YAML object in an agents file), checked for the adapter's keys."""
FallbackModels = Annotated[list[ModelRoute], NoDecode, BeforeValidator(_model_routes)]
"""LLM_FALLBACK_MODELS: a JSON list of `{model, api_base, api_key}`, each checked."""
TenantName = Annotated[str | None, AfterValidator(_tenant_name)]
TenantNames = Annotated[CommaList, AfterValidator(_tenant_names)]


Port = Annotated[int, Field(ge=1, le=65535)] | None
"""A TCP port, or None (unset)."""
