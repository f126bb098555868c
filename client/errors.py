"""Exceptions raised by the Mnemosyne client.

Every failed call raises a subclass of :class:`MnemosyneClientError` chosen by the gRPC status
code; ``reason`` is the stable ``google.rpc.ErrorInfo`` reason the server sent (e.g.
``GENERATION_MISMATCH``), ``code`` the ``grpc.StatusCode``. Each is a ``ServiceError`` of the
shared host flows (``mnemosyne.host.protocol``), which read ``code_name``, ``reason`` and
``message``::

    MnemosyneClientError
    ├── InvalidArgumentError      INVALID_ARGUMENT
    │   ├── TokenInvalidError     TOKEN_INVALID: a consistency token this tenant's server did not issue
    │   └── TokenForeignError     TOKEN_FOREIGN: another tenant's consistency token
    ├── NotFoundError             NOT_FOUND
    ├── FailedPreconditionError   FAILED_PRECONDITION
    │   └── TimelineChangedError  TIMELINE_CHANGED: the tenant was restored or replaced since the token
    ├── AbortedError              ABORTED (stale generation, reused request id)
    ├── PermissionDeniedError     PERMISSION_DENIED
    ├── UnauthenticatedError      UNAUTHENTICATED
    ├── ResourceExhaustedError    RESOURCE_EXHAUSTED
    ├── DeadlineExceededError     DEADLINE_EXCEEDED
    │   └── ConsistencyDeadlineExceededError  CONSISTENCY_DEADLINE_EXCEEDED: the token's writes were
    │                             still open at the deadline (metadata open_event_ids)
    ├── UnavailableError          UNAVAILABLE (retried for reads and for writes with a request_id)
    ├── DataLossError             DATA_LOSS (the tenant's file is damaged: reason TENANT_CORRUPT)
    └── ServerError               anything else (INTERNAL, UNKNOWN, UNIMPLEMENTED, ...)

The consistency-token errors (docs/hot-path.md "Read your own writes") are raised for a token the
caller passed and for the client's own session token alike. For the session's token, the client
has already dropped it when TOKEN_INVALID, TOKEN_FOREIGN or TIMELINE_CHANGED is raised: the writes it named are gone (the tenant was restored, replaced, or erased and made
again), so read again (the next read waits for nothing) and write again what you still need.
After CONSISTENCY_DEADLINE_EXCEEDED the token is kept (its writes are still queued): call again
with a longer deadline, or opt out for that read (``consistency_token=""``).
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from mnemosyne.host.protocol import ServiceError


class MnemosyneClientError(ServiceError):
    """A failed call: ``code`` the ``grpc.StatusCode``, ``reason`` the ErrorInfo reason,
    ``message`` the server's words (a ``ServiceError`` of the shared host flows, host/protocol.py)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        metadata: dict[str, str],
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(code.name, reason, message, metadata)
        self.code = code
        self.metadata = metadata
        # The server's google.rpc.RetryInfo: retrying the same call makes sense after this long.
        self.retry_after_seconds = retry_after_seconds


class InvalidArgumentError(MnemosyneClientError): ...


class NotFoundError(MnemosyneClientError): ...


class FailedPreconditionError(MnemosyneClientError): ...


class AbortedError(MnemosyneClientError): ...


class PermissionDeniedError(MnemosyneClientError): ...


class UnauthenticatedError(MnemosyneClientError): ...


class ResourceExhaustedError(MnemosyneClientError): ...


class DeadlineExceededError(MnemosyneClientError): ...


class UnavailableError(MnemosyneClientError): ...


class DataLossError(MnemosyneClientError): ...


class ServerError(MnemosyneClientError): ...


class TokenInvalidError(InvalidArgumentError): ...


class TokenForeignError(InvalidArgumentError): ...


class TimelineChangedError(FailedPreconditionError): ...


class ConsistencyDeadlineExceededError(DeadlineExceededError): ...


_BY_CODE: dict[grpc.StatusCode, type[MnemosyneClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
}
# The reasons with a class of their own under their code's.
_BY_REASON: dict[tuple[grpc.StatusCode, str], type[MnemosyneClientError]] = {
    (grpc.StatusCode.INVALID_ARGUMENT, "TOKEN_INVALID"): TokenInvalidError,
    (grpc.StatusCode.INVALID_ARGUMENT, "TOKEN_FOREIGN"): TokenForeignError,
    (grpc.StatusCode.FAILED_PRECONDITION, "TIMELINE_CHANGED"): TimelineChangedError,
    (grpc.StatusCode.DEADLINE_EXCEEDED, "CONSISTENCY_DEADLINE_EXCEEDED"): ConsistencyDeadlineExceededError,
}


def error_class(code: grpc.StatusCode, reason: str) -> type[MnemosyneClientError]:
    """The class of a failure with ``code`` and ``reason``."""
    return _BY_REASON.get((code, reason)) or _BY_CODE.get(code, ServerError)


def _details(error: grpc.RpcError) -> list[any_pb2.Any]:
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a failed call's RpcError is also its grpc.Call
    except ValueError:  # a malformed status from something that is not our server
        return []
    return list(status.details) if status is not None else []


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo detail of a failed call, if the server sent one."""
    for detail in _details(error):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def retry_delay(error: grpc.RpcError) -> float | None:
    """The RetryInfo delay of a failed call in seconds, if the server sent one."""
    for detail in _details(error):
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            return int(retry.retry_delay.ToNanoseconds()) / 1e9
    return None


# Codes a call ends with, without an ErrorInfo, when what answered at the address is no Mnemosyne
# server: nothing listening, an HTTP/1 server, a TLS mismatch (UNAVAILABLE); a gRPC server of other
# services (UNIMPLEMENTED).
_NOT_MNEMOSYNE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED})


def typed(error: ServiceError) -> MnemosyneClientError:
    """The typed error of a refusal a shared host flow made itself (host/protocol.py: a reply
    without its generation, records that kept changing)."""
    if isinstance(error, MnemosyneClientError):
        return error
    code = grpc.StatusCode[error.code_name]
    return error_class(code, error.reason)(code, error.reason, error.message, dict(error.metadata))


def from_rpc_error(error: grpc.RpcError, target: str = "") -> MnemosyneClientError:
    """The typed error of a failed call. ``target``: the address the call went to; a failure that
    did not come from a Mnemosyne server (no ErrorInfo) then asks whether one listens there, with
    gRPC's own words after it. The code and reason stay those of the failure."""
    code = error.code()
    info = error_info(error)
    reason = info.reason if info is not None else code.name
    metadata = dict(info.metadata) if info is not None else {}
    message = error.details() or ""
    if info is None and target and code in _NOT_MNEMOSYNE:
        message = f"is a Mnemosyne server listening at {target}? ({message})"
    return error_class(code, reason)(code, reason, message, metadata, retry_delay(error))
