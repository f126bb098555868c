"""Domain errors to gRPC statuses: the ONE table, and the rich status every error carries.

Every error leaves the server as a ``google.rpc.Status`` whose details hold a
``google.rpc.ErrorInfo`` with a stable ``reason`` and the domain ``mnemosyne.v1``, so a client in
any language can branch on the reason without parsing the message.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from mnemosyne import errors

ERROR_DOMAIN = "mnemosyne.v1"

STATUS_BY_ERROR: dict[type[errors.MnemosyneError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Conflict: grpc.StatusCode.ABORTED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.DataLoss: grpc.StatusCode.DATA_LOSS,
    errors.InternalError: grpc.StatusCode.INTERNAL,
}


def status_code_for(error: errors.MnemosyneError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.INTERNAL


def to_status_proto(error: errors.MnemosyneError) -> status_pb2.Status:
    """The ``google.rpc.Status`` of an error: its code, message, ``ErrorInfo`` and, when a retry
    makes sense, ``RetryInfo`` with the delay to wait."""
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    details = [any_pb2.Any()]
    details[0].Pack(info)
    if error.retry_after_seconds is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromNanoseconds(int(error.retry_after_seconds * 1e9))
        details.append(any_pb2.Any())
        details[1].Pack(retry)
    return status_pb2.Status(code=status_code_for(error).value[0], message=error.message, details=details)


def rich_status(error: errors.MnemosyneError) -> grpc.Status:
    return rpc_status.to_status(to_status_proto(error))
