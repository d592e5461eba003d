"""The wire-facing error tree: each error class is one row of the table that maps it to its
JSON-RPC code, ErrorInfo reason, gRPC status and HTTP status (A2A 1.0.1 mapping, section 5.4).

The reason is the spec's rule: the error type's name in UPPER_SNAKE_CASE without `Error`
(TaskNotFoundError: TASK_NOT_FOUND), for our own errors too (StoreUnavailableError:
STORE_UNAVAILABLE); a subclass that declares no reason is a case of its parent's type
(UnsupportedMediaTypeError is a ContentTypeNotSupported). JSON-RPC's own errors are named as
JSON-RPC 2.0 names them ("Parse error": PARSE_ERROR, "Internal error": INTERNAL_ERROR), as both
official SDKs send them and their clients map them back to error types; a reason a client does
not know becomes an internal error there (the Go client's, for one).
tests/unit/test_error_reasons.py checks the table against the spec's list.

An error renders its own two bodies (`rest_body`, `jsonrpc_error`); which one a response carries
is chosen in one place, app.http.responses.error_response."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from agent.runtime import errors as runtime
from agent.runtime.admission import Overloaded
from agent.runtime.errors import TaskRuntimeError
from stores.base import StoreFull, StoreUnavailable, TaskUnreadable

logger = logging.getLogger(__name__)

ERROR_DOMAIN = "a2a-protocol.org"


class A2AError(Exception):
    """Base for errors rendered as a JSON-RPC error or an HTTP+JSON error body."""

    code: ClassVar[int] = -32603
    reason: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "Internal error"
    http_status: ClassVar[int] = 500
    status: ClassVar[str] = "INTERNAL"
    closes_connection: ClassVar[bool] = False
    """The request was cut short (its body not read whole): the connection cannot be reused."""

    def __init__(self, message: str | None = None, **metadata: str) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.metadata = metadata

    def http_headers(self) -> dict[str, str]:
        """Headers an HTTP response carrying this error must have (a challenge, a retry time)."""
        return {"Connection": "close"} if self.closes_connection else {}

    def details(self) -> list[dict[str, Any]]:
        return [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason,
                "domain": ERROR_DOMAIN,
                "metadata": self.metadata,
            }
        ]

    def rest_body(self, *, http_status: int | None = None) -> dict[str, Any]:
        """The HTTP+JSON (AIP-193) error body; `http_status` when the response's status is not
        the error's own (a framework error mapped onto the nearest A2A error)."""
        return {
            "error": {
                "code": http_status or self.http_status,
                "status": self.status,
                "message": self.message,
                "details": self.details(),
            }
        }

    def jsonrpc_error(self, request_id: str | int | None) -> dict[str, Any]:
        """The JSON-RPC 2.0 response carrying this error, answering `request_id`."""
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": self.code, "message": self.message, "data": self.details()},
        }


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


class MethodNotAllowedError(A2AError):
    """An HTTP method a route does not take (the framework's 405)."""

    code = -32600
    reason = "METHOD_NOT_ALLOWED"
    default_message = "HTTP method not allowed"
    http_status = 405
    status = "UNIMPLEMENTED"


class InvalidParamsError(A2AError):
    code = -32602
    reason = "INVALID_PARAMS"
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


class RetryLaterError(A2AError):
    """A refusal the client may retry after `retry_after_s` seconds. Says so three ways: ErrorInfo
    metadata `retryAfterSeconds`, a RetryInfo detail, and a `Retry-After` header."""

    default_retry_after_s: ClassVar[int] = 1

    def __init__(self, message: str | None = None, *, retry_after_s: int | None = None) -> None:
        self.retry_after_s = max(1, retry_after_s or self.default_retry_after_s)
        super().__init__(message, retryAfterSeconds=str(self.retry_after_s))

    def details(self) -> list[dict[str, Any]]:
        return [
            *super().details(),
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{self.retry_after_s}s",
            },
        ]

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class OverloadedError(RetryLaterError):
    """This replica is at a limit (or shutting down): retry here or on another replica."""

    reason = "OVERLOADED"
    default_message = "This server is at its limit; retry shortly"
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


class UnsupportedMediaTypeError(ContentTypeNotSupportedError):
    """A request body in a media type the binding does not take: ContentTypeNotSupported, with
    HTTP's own status for it (415)."""

    default_message = "Send the request body as application/json"
    http_status = 415
    status = "INVALID_ARGUMENT"


class VersionNotSupportedError(A2AError):
    code = -32009
    reason = "VERSION_NOT_SUPPORTED"
    default_message = "A2A version not supported"
    http_status = 400
    status = "FAILED_PRECONDITION"


class ExtensionSupportRequiredError(A2AError):
    """The agent requires an extension the request did not list in `A2A-Extensions`; ErrorInfo
    metadata `extensions` names them (comma-separated)."""

    code = -32008
    reason = "EXTENSION_SUPPORT_REQUIRED"
    default_message = "Extension support required"
    http_status = 400
    status = "FAILED_PRECONDITION"


class ExtendedAgentCardNotConfiguredError(A2AError):
    code = -32007
    reason = "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    default_message = "The agent has no extended agent card configured"
    http_status = 400
    status = "FAILED_PRECONDITION"


class TaskGenerationMismatchError(A2AError):
    """A2A 1.1: a send's `ifGenerationMatch` is not the task's generation; ErrorInfo metadata
    `taskId`, `expectedGeneration`, `currentGeneration` (decimal strings)."""

    code = -32010
    reason = "TASK_GENERATION_MISMATCH"
    default_message = "Task generation mismatch"
    http_status = 409
    status = "ABORTED"


def unreadable_task(task_id: str) -> TaskNotFoundError:
    """A task that is stored but cannot be loaded or rendered: for its client it is not accessible
    (TaskNotFound, as the spec words it: "not an existing or accessible task")."""
    return TaskNotFoundError(f"Task {task_id!r} cannot be read", taskId=task_id)


def http_error(status_code: int, message: str) -> A2AError:
    """An HTTP error the framework raised outside the bindings (no route, method not allowed)."""
    if status_code == 404:
        return MethodNotFoundError(message)
    if status_code == 405:
        return MethodNotAllowedError(message)
    if status_code >= 500:
        return InternalError()
    return InvalidRequestError(message)


_FROM_RUNTIME: dict[type[TaskRuntimeError], type[A2AError]] = {
    runtime.TaskNotFound: TaskNotFoundError,
    runtime.TaskNotCancelable: TaskNotCancelableError,
    runtime.ContextMismatch: InvalidParamsError,
    runtime.AnswerRejected: InvalidParamsError,
    runtime.TaskMovedOn: UnsupportedOperationError,
    runtime.ContextBusy: UnsupportedOperationError,
    runtime.TaskNotWaiting: UnsupportedOperationError,
    runtime.NoCheckpoint: UnsupportedOperationError,
    runtime.LeaseTaken: UnsupportedOperationError,
    runtime.GenerationMismatch: TaskGenerationMismatchError,
    TaskRuntimeError: UnsupportedOperationError,  # any other refusal of an operation on a task
}
"""The task runtime's refusals (agent/runtime/errors.py) on the wire: the runtime's message, and
the ids it carries as ErrorInfo metadata."""


def from_runtime(exc: TaskRuntimeError) -> A2AError:
    if isinstance(exc, runtime.GenerationMismatch):
        return TaskGenerationMismatchError(
            str(exc),
            taskId=exc.task_id or "",
            expectedGeneration=str(exc.expected),
            currentGeneration=str(exc.current),
        )
    wire = next(_FROM_RUNTIME[kind] for kind in type(exc).__mro__ if kind in _FROM_RUNTIME)
    ids = {"contextId": exc.context_id, "taskId": exc.task_id}
    return wire(str(exc), **{name: value for name, value in ids.items() if value is not None})


@contextmanager
def runtime_refusals() -> Iterator[None]:
    """Raise the runtime's refusals inside as their A2A errors (the handler's calls into it)."""
    try:
        yield
    except TaskRuntimeError as exc:
        raise from_runtime(exc) from exc


def as_a2a_error(exc: Exception, *, where: str) -> A2AError:
    """What a client is told about any failure: A2A errors as they are, an unreachable store as
    such, an unreadable task as not found, anything else as an internal error (logged here, never
    shown)."""
    if isinstance(exc, A2AError):
        return exc
    if isinstance(exc, TaskRuntimeError):
        return from_runtime(exc)
    if isinstance(exc, Overloaded | StoreFull):
        # Expected under load, and cheap for a client to provoke: not worth a log line each.
        logger.debug("%s | refused: %s", where, exc)
        return OverloadedError(str(exc), retry_after_s=exc.retry_after_s)
    if isinstance(exc, StoreUnavailable):
        logger.warning("%s | the store is unavailable: %s", where, exc)
        if exc.task_id is not None:  # a task was made: its id lets the client read it later
            return StoreUnavailableError(taskId=exc.task_id)
        return StoreUnavailableError()
    if isinstance(exc, TaskUnreadable):
        # The cause is the stored data, not this request: one line, no traceback.
        logger.warning("%s | task_id=<%s> | the stored task cannot be read", where, exc.task_id)
        return unreadable_task(exc.task_id)
    logger.error("%s | unexpected error", where, exc_info=exc)
    return InternalError()
