"""The wire-facing error tree: each error class is one row of the table that maps it to its
JSON-RPC code, ErrorInfo reason, and HTTP status (A2A 1.0.1 mapping) for the REST binding."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from stores.base import StoreUnavailable

logger = logging.getLogger(__name__)

ERROR_DOMAIN = "a2a-protocol.org"


class A2AError(Exception):
    """Base for errors rendered as a JSON-RPC error or an HTTP+JSON error body."""

    code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "Internal error"
    http_status: ClassVar[int] = 500
    status: ClassVar[str] = "INTERNAL"

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
    http_status = 400
    status = "INVALID_ARGUMENT"


class InvalidRequestError(A2AError):
    code = -32600
    reason = "INVALID_REQUEST"
    default_message = "Request payload validation error"
    http_status = 400
    status = "INVALID_ARGUMENT"


class MethodNotFoundError(A2AError):
    code = -32601
    reason = "METHOD_NOT_FOUND"
    default_message = "Method not found"
    http_status = 404
    status = "NOT_FOUND"


class InvalidParamsError(A2AError):
    code = -32602
    reason = "INVALID_ARGUMENT"
    default_message = "Invalid parameters"
    http_status = 400
    status = "INVALID_ARGUMENT"


class InternalError(A2AError):
    pass


class StoreUnavailableError(A2AError):
    reason = "STORE_UNAVAILABLE"
    default_message = "The task store is unavailable; retry later"
    http_status = 503
    status = "UNAVAILABLE"


class TaskNotFoundError(A2AError):
    code = -32001
    reason = "TASK_NOT_FOUND"
    default_message = "Task not found"
    http_status = 404
    status = "NOT_FOUND"


class TaskNotCancelableError(A2AError):
    code = -32002
    reason = "TASK_NOT_CANCELABLE"
    default_message = "Task cannot be canceled"
    http_status = 400
    status = "FAILED_PRECONDITION"


class PushNotificationNotSupportedError(A2AError):
    code = -32003
    reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"
    default_message = "Push Notification is not supported"
    http_status = 400
    status = "FAILED_PRECONDITION"


class UnsupportedOperationError(A2AError):
    code = -32004
    reason = "UNSUPPORTED_OPERATION"
    default_message = "This operation is not supported"
    http_status = 400
    status = "FAILED_PRECONDITION"


class ContentTypeNotSupportedError(A2AError):
    code = -32005
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    default_message = "Incompatible content types"
    http_status = 400
    status = "INVALID_ARGUMENT"


class VersionNotSupportedError(A2AError):
    code = -32009
    reason = "VERSION_NOT_SUPPORTED"
    default_message = "A2A version not supported"
    http_status = 400
    status = "FAILED_PRECONDITION"


def as_a2a_error(exc: Exception, *, where: str) -> A2AError:
    """What a client is told about any failure: A2A errors as they are, an unreachable store as
    such, anything else as an internal error (logged here, never shown)."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, StoreUnavailable):
        logger.warning("%s | the store is unavailable: %s", where, exc)
        return StoreUnavailableError()
    logger.error("%s | unexpected error", where, exc_info=exc)
    return InternalError()
