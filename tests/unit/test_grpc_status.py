"""Every wire error as a gRPC client sees it: the status code of the 1.0.1 table (spec section
5.4) and the `google.rpc.Status` details (ErrorInfo in the a2a-protocol.org domain; RetryInfo
when the client may retry)."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from app import errors
from app.grpc.calls import status_of
from app.http.errors import RateLimitedError, UnauthenticatedError

CASES = [
    (errors.TaskNotFoundError(taskId="t"), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
    (errors.TaskNotCancelableError(), grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE"),
    (
        errors.PushNotificationNotSupportedError(),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    (
        errors.UnsupportedOperationError(),
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
    ),
    (
        errors.ContentTypeNotSupportedError(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "CONTENT_TYPE_NOT_SUPPORTED",
    ),
    (
        errors.ExtendedAgentCardNotConfiguredError(),
        grpc.StatusCode.FAILED_PRECONDITION,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    ),
    (
        errors.VersionNotSupportedError(),
        grpc.StatusCode.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
    ),
    (errors.InvalidParamsError(), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS"),
    (errors.InternalError(), grpc.StatusCode.INTERNAL, "INTERNAL_ERROR"),
    (errors.StoreUnavailableError(), grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE"),
    (UnauthenticatedError(), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
]


@pytest.mark.parametrize(
    ("error", "code", "reason"), CASES, ids=lambda case: getattr(case, "reason", "")
)
def test_an_error_is_its_status_with_its_error_info(error, code, reason) -> None:
    status = status_of(error)
    assert status.code == code.value[0] and status.message == error.message
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain) == (reason, "a2a-protocol.org")
    assert dict(info.metadata) == error.metadata


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.OverloadedError(retry_after_s=3), grpc.StatusCode.UNAVAILABLE),
        (RateLimitedError(retry_after_s=3), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_a_refusal_to_retry_says_when(error, code) -> None:
    status = status_of(error)
    assert status.code == code.value[0]
    retry = error_details_pb2.RetryInfo()
    assert status.details[1].Unpack(retry) and retry.retry_delay.seconds == 3
