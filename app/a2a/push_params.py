"""A push-notification config on the wire: its webhook URL checked, the stored config rendered."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from agent.outbound import OutboundPolicy
from app.errors import InvalidParamsError
from app.http.json_body import JsonObject
from stores.models import PushConfig

__all__ = ["check_push_url", "render_push_config"]


def render_push_config(config: PushConfig) -> JsonObject:
    """A stored config as the 1.0 TaskPushNotificationConfig (flat)."""
    return config.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"generation", "task_generations"}
    )


def check_push_url(url: str, policy: OutboundPolicy) -> None:
    """A webhook URL must be http(s) with a host, and not name a loopback, private, link-local
    or metadata address (or `localhost`) unless A2A_PUSH_ALLOWED_HOSTS allows it: -32602 naming
    `url`. No DNS here (a name is checked where it is resolved, at delivery, by the guard)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise InvalidParamsError(f"url {url!r} is not a URL: {exc}", field="url") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidParamsError(
            f"url {url!r} must be an http or https URL with a host", field="url"
        )
    if policy.allows_name(host):
        return
    if host == "localhost" or host.endswith(".localhost"):
        raise InvalidParamsError(
            f"url {url!r} names this server's own host; webhooks must be reachable addresses"
            " (allow it with A2A_PUSH_ALLOWED_HOSTS)",
            field="url",
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    reason = policy.refusal(host, address)
    if reason is not None:
        raise InvalidParamsError(
            f"url {url!r} is refused: the address is {reason}"
            " (allow it with A2A_PUSH_ALLOWED_HOSTS)",
            field="url",
        )
