"""Domain errors to gRPC statuses: the ONE table, and the rich status every error carries; and
each gRPC status's HTTP status (the standard mapping of google/rpc/code.proto) for the JSON API.

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
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
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


def rich_status(status: status_pb2.Status) -> grpc.Status:
    return rpc_status.to_status(status)


class Relayed(Exception):
    """Another member's error status (the owner of a forwarded call's tenant), answered to the
    caller as it came."""

    def __init__(self, status: status_pb2.Status, reason: str) -> None:
        super().__init__(status.message)
        self.status = status
        self.reason = reason

    @classmethod
    def of(cls, status: status_pb2.Status, code_name: str) -> Relayed:
        """The owner's ``status``, its reason its ErrorInfo's (``code_name`` without one)."""
        reason = next((info.reason for info in map(error_info, status.details) if info is not None), code_name)
        return cls(status, reason)

    @property
    def metadata(self) -> dict[str, str]:
        """The ErrorInfo metadata of the owner's refusal ({} without one)."""
        info = next((info for info in map(error_info, self.status.details) if info is not None), None)
        return dict(info.metadata) if info is not None else {}


def error_info(detail: any_pb2.Any) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo a status detail holds, None for another detail."""
    if not detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
        return None
    info = error_details_pb2.ErrorInfo()
    detail.Unpack(info)
    return info


# google/rpc/code.proto's HTTP mapping, as grpc-gateway and Envoy's transcoder apply it.
HTTP_STATUS_BY_CODE: dict[int, int] = {
    code.value[0]: http
    for code, http in {
        grpc.StatusCode.OK: 200,
        grpc.StatusCode.CANCELLED: 499,
        grpc.StatusCode.UNKNOWN: 500,
        grpc.StatusCode.INVALID_ARGUMENT: 400,
        grpc.StatusCode.DEADLINE_EXCEEDED: 504,
        grpc.StatusCode.NOT_FOUND: 404,
        grpc.StatusCode.ALREADY_EXISTS: 409,
        grpc.StatusCode.PERMISSION_DENIED: 403,
        grpc.StatusCode.UNAUTHENTICATED: 401,
        grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
        grpc.StatusCode.FAILED_PRECONDITION: 400,
        grpc.StatusCode.ABORTED: 409,
        grpc.StatusCode.OUT_OF_RANGE: 400,
        grpc.StatusCode.UNIMPLEMENTED: 501,
        grpc.StatusCode.INTERNAL: 500,
        grpc.StatusCode.UNAVAILABLE: 503,
        grpc.StatusCode.DATA_LOSS: 500,
    }.items()
}
# Refusals that HTTP has a more precise status for than their gRPC code's (all INVALID_ARGUMENT).
HTTP_STATUS_BY_REASON: dict[str, int] = {
    "REQUEST_TOO_LARGE": 413,
    "CONTENT_TYPE_UNSUPPORTED": 415,
    "CONTENT_ENCODING_UNSUPPORTED": 415,
    "TRANSFER_ENCODING_UNSUPPORTED": 501,
    "METHOD_NOT_ALLOWED": 405,
}


def http_status(status: status_pb2.Status, reason: str) -> int:
    return HTTP_STATUS_BY_REASON.get(reason) or HTTP_STATUS_BY_CODE.get(status.code, 500)
