"""The wire-facing error tree. Each error knows its JSON-RPC code and ErrorInfo reason; the
HTTP status of each code is in one table for the REST binding."""

from __future__ import annotations

from typing import Any, ClassVar

ERROR_DOMAIN = "a2a-protocol.org"


class A2AError(Exception):
    """Base for errors rendered as a JSON-RPC error or an HTTP+JSON error body."""

    code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, **metadata: str) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.metadata = metadata

    def details(self) -> list[dict[str, Any]]:
        return [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason,
                "domain": ERROR_DOMAIN,
                "metadata": self.metadata,
            }
        ]


class JSONParseError(A2AError):
    code = -32700
    reason = "PARSE_ERROR"
    default_message = "Invalid JSON payload"


class InvalidRequestError(A2AError):
    code = -32600
    reason = "INVALID_REQUEST"
    default_message = "Request payload validation error"


class MethodNotFoundError(A2AError):
    code = -32601
    reason = "METHOD_NOT_FOUND"
    default_message = "Method not found"


class InvalidParamsError(A2AError):
    code = -32602
    reason = "INVALID_ARGUMENT"
    default_message = "Invalid parameters"


class InternalError(A2AError):
    pass


class StoreUnavailableError(A2AError):
    reason = "STORE_UNAVAILABLE"
    default_message = "The task store is unavailable; retry later"


class TaskNotFoundError(A2AError):
    code = -32001
    reason = "TASK_NOT_FOUND"
    default_message = "Task not found"


class TaskNotCancelableError(A2AError):
    code = -32002
    reason = "TASK_NOT_CANCELABLE"
    default_message = "Task cannot be canceled"


class PushNotificationNotSupportedError(A2AError):
    code = -32003
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    default_message = "Push Notification is not supported"


class UnsupportedOperationError(A2AError):
    code = -32004
    reason = "UNSUPPORTED_OPERATION"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(A2AError):
    code = -32005
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    default_message = "Incompatible content types"


class VersionNotSupportedError(A2AError):
    code = -32009
    reason = "VERSION_NOT_SUPPORTED"
    default_message = "A2A version not supported"


HTTP_STATUS: dict[int, int] = {
    -32700: 400,
    -32600: 400,
    -32601: 404,
    -32602: 400,
    -32603: 500,
    -32001: 404,
    -32002: 400,
    -32003: 400,
    -32004: 400,
    -32005: 400,
    -32009: 400,
}
"""A2A 1.0.1 mapping of error codes to HTTP statuses (for the HTTP+JSON binding)."""
