"""Request limits: what one message or one read may ask of the server.

The counts are checked on the raw parsed JSON, before model validation, so a refused request costs
no more than its parse: a 1.5 MB body of 100,000 parts is refused at the first look at `parts`,
not after building 100,000 models. Each refusal is -32602 / HTTP 400 naming the field and the
limit (`field`, and the limit's name, in the error's metadata).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from app.errors import InvalidParamsError

if TYPE_CHECKING:
    from app.settings import Settings


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestLimits:
    max_parts: int = 100
    max_text_chars: int = 100_000
    max_file_bytes: int = 5 * 1024 * 1024
    max_metadata_bytes: int = 16 * 1024
    max_history_length: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> RequestLimits:
        return cls(
            max_parts=settings.a2a_max_parts,
            max_text_chars=settings.a2a_max_text_chars,
            max_file_bytes=settings.a2a_max_file_bytes,
            max_metadata_bytes=settings.a2a_max_metadata_bytes,
            max_history_length=settings.a2a_max_history_length,
        )

    def check_message_params(self, params: Any) -> None:
        """SendMessage params as parsed JSON (before validation): raise InvalidParamsError at the
        first value beyond a limit. Values of the wrong type are left to the model to refuse."""
        if not isinstance(params, dict):
            return
        self._check_metadata(params.get("metadata"), "metadata")
        message = params.get("message")
        if not isinstance(message, dict):
            return
        self._check_metadata(message.get("metadata"), "message.metadata")
        parts = message.get("parts")
        if not isinstance(parts, list):
            return
        if len(parts) > self.max_parts:
            raise _beyond(
                "message.parts",
                f"has {len(parts)} parts; at most {self.max_parts} are allowed",
                maxParts=self.max_parts,
            )
        for index, part in enumerate(parts):
            if isinstance(part, dict):
                self._check_part(part, f"message.parts[{index}]")

    def check_history_length(self, value: int | None) -> None:
        if value is not None and value > self.max_history_length:
            raise _beyond(
                "historyLength",
                f"is {value}; at most {self.max_history_length} is allowed",
                maxHistoryLength=self.max_history_length,
            )

    def _check_part(self, part: dict[str, Any], where: str) -> None:
        text = part.get("text")
        if isinstance(text, str) and len(text) > self.max_text_chars:
            raise _beyond(
                f"{where}.text",
                f"has {len(text)} characters; at most {self.max_text_chars} are allowed",
                maxTextChars=self.max_text_chars,
            )
        raw = part.get("raw")
        if isinstance(raw, str):
            size = len(raw.rstrip("=")) * 3 // 4  # the decoded size of the base64 text
            if size > self.max_file_bytes:
                raise _beyond(
                    f"{where}.raw",
                    f"holds {size} bytes; at most {self.max_file_bytes} are allowed inline",
                    maxFileBytes=self.max_file_bytes,
                )
        self._check_metadata(part.get("metadata"), f"{where}.metadata")

    def _check_metadata(self, metadata: Any, where: str) -> None:
        if metadata is None:
            return
        try:
            size = len(orjson.dumps(metadata))
        except (TypeError, orjson.JSONEncodeError):
            return  # not JSON-shaped (cannot come off the wire): the model refuses it
        if size > self.max_metadata_bytes:
            raise _beyond(
                where,
                f"is {size} bytes as JSON; at most {self.max_metadata_bytes} are allowed",
                maxMetadataBytes=self.max_metadata_bytes,
            )


def _beyond(field: str, problem: str, **limit: int) -> InvalidParamsError:
    return InvalidParamsError(
        f"Invalid parameters: {field} {problem}",
        field=field,
        **{name: str(value) for name, value in limit.items()},
    )
