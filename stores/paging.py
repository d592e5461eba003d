"""Opaque list cursors: base64url of the sort key of the last task on the previous page."""

from __future__ import annotations

import base64
import binascii
import json

from stores.base import InvalidPageToken


def encode_cursor(timestamp_ms: int, task_id: str) -> str:
    raw = json.dumps({"t": timestamp_ms, "id": task_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return int(payload["t"]), str(payload["id"])
    except (binascii.Error, ValueError, KeyError, TypeError, OverflowError) as exc:
        raise InvalidPageToken(f"invalid page token {token!r}") from exc
