"""Settings: the only place the environment is read. Each field is the env var of the same name,
and a row of the README's configuration table, in its order (a test keeps the two equal); how a
value is parsed and checked is its type (`fields`). The fields are grouped by the system they
configure, one module each; `Settings` is all of them, in the table's order."""

from __future__ import annotations

from typing import Any

from pydantic_settings import SettingsConfigDict

from app.settings.callers import CallerSettings
from app.settings.capacity import CapacitySettings
from app.settings.database import Database
from app.settings.engine import EngineSettings
from app.settings.fields import extended_card_fields
from app.settings.operations import OperationsSettings
from app.settings.server import ServerSettings


class Settings(
    OperationsSettings, CallerSettings, CapacitySettings, EngineSettings, ServerSettings
):
    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    @property
    def public_url(self) -> str | None:
        """A2A_PUBLIC_URL without a trailing slash (clients append `/message:send` to it)."""
        return self.a2a_public_url.rstrip("/") if self.a2a_public_url else None

    @property
    def database(self) -> Database | None:
        """DATABASE_URL, parsed (checked when the settings were read), or None when unset."""
        if self.database_url is None:
            return None
        return Database.parse(self.database_url.get_secret_value())

    @property
    def extended_card(self) -> dict[str, Any] | None:
        """The extended card's fields (A2A_EXTENDED_CARD), or None when there is none."""
        return extended_card_fields(self.a2a_extended_card) if self.a2a_extended_card else None

    @property
    def tracing_enabled(self) -> bool:
        return bool(self.otel_exporter_otlp_endpoint or self.otel_exporter_otlp_traces_endpoint)

    @property
    def otlp_metrics_enabled(self) -> bool:
        return bool(self.otel_exporter_otlp_endpoint or self.otel_exporter_otlp_metrics_endpoint)

    @property
    def uses_demo_model(self) -> bool:
        return not self.llm_model and self.agent_profile == "default"


def configuration_table() -> str:
    """The README's configuration table, rendered from the fields (a test keeps them equal)."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
        shown = "(unset)" if default is None or default == [] else f"`{default}`"
        rows.append(f"| `{name.upper()}` | {shown} | {field.description} |")
    return "\n".join(rows)
