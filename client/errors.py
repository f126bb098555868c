"""Exceptions raised by the Mnemosyne client.

Every failed call raises a subclass of :class:`MnemosyneClientError` chosen by the gRPC status
code; ``reason`` is the stable ``google.rpc.ErrorInfo`` reason the server sent (e.g.
``GENERATION_MISMATCH``), ``code`` the ``grpc.StatusCode``. Each is a ``ServiceError`` of the
shared host flows (``mnemosyne.host.protocol``), which read ``code_name``, ``reason`` and
``message``::

    MnemosyneClientError
    ├── InvalidArgumentError      INVALID_ARGUMENT
    │   ├── RequestInvalidError   refused before sending: the arguments make no request (a ValueError too)
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

from typing import TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from mnemosyne.host.protocol import ServiceError

D = TypeVar("D", bound=Message)


class MnemosyneClientError(ServiceError):
    """A failed call: ``code`` the ``grpc.StatusCode``, ``reason`` the ErrorInfo reason (stable,
    UPPER_SNAKE: branch on it, not on the message), ``message`` the server's words for a person,
    ``metadata`` the ErrorInfo's details (e.g. the limit and the value past it),
    ``retry_after_seconds`` the server's RetryInfo delay (None: retrying soon will not help). A
    ``ServiceError`` of the shared host flows (host/protocol.py). Catch it to catch every failure
    of a call; the subclasses below follow the gRPC code."""

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


class InvalidArgumentError(MnemosyneClientError):
    """INVALID_ARGUMENT: the request itself is wrong (TEXT_EMPTY, TEXT_TOO_LONG, TENANT_INVALID,
    K_OUT_OF_RANGE, ...); the message says which field and what is allowed. Fix the request;
    sending it again fails again."""


class RequestInvalidError(InvalidArgumentError, ValueError):
    """INVALID_ARGUMENT raised by the client before anything is sent: its arguments make no
    request (REQUEST_UNDECODABLE: a text holding a lone surrogate, which UTF-8 cannot encode, as
    the server refuses invalid UTF-8, or an argument of the wrong type, named; NUMBER_INVALID: a
    number past its field's range, or an integer argument that is no whole number;
    RECALL_MODE_INVALID, HOT_PATH_ACTION_INVALID, WEBHOOK_KINDS_INVALID: a name the method does
    not know). Also a ``ValueError``, as Python's own refusal of such a value is."""


class ArgumentTypeError(RequestInvalidError, TypeError):
    """A ``RequestInvalidError`` for an argument of the wrong type (a number for a text, 1.5 for an
    integer), named with what it takes; also a ``TypeError``, as Python's own refusal of one is."""


class NotFoundError(MnemosyneClientError):
    """NOT_FOUND: what the call names does not exist (MEMORY_NOT_FOUND, EVENT_NOT_FOUND,
    RECORD_NOT_FOUND, TENANT_NOT_FOUND, THREAD_NOT_FOUND)."""


class FailedPreconditionError(MnemosyneClientError):
    """FAILED_PRECONDITION: the request is well formed but the state refuses it (MEMORY_DUPLICATE,
    MEMORY_MERGED, FORGET_TOO_MANY, TENANT_EXISTS, OBSERVATION_MISSING, NOT_OWNER, ...); change
    the state or the request first."""


class AbortedError(MnemosyneClientError):
    """ABORTED: a concurrency check failed. GENERATION_MISMATCH: another write came first,
    assemble the context again (never retry with a newer generation); IDEMPOTENCY_KEY_REUSED
    or RECEIPT_REUSED: the id came with another payload before; RECORDS_CHANGED: a listing's
    records changed under it, list again."""


class PermissionDeniedError(MnemosyneClientError):
    """PERMISSION_DENIED: the token is known but may not do this (TENANT_FORBIDDEN: it does not
    name the tenant; ADMIN_REQUIRED: the call needs an admin token)."""


class UnauthenticatedError(MnemosyneClientError):
    """UNAUTHENTICATED: the server needs a token and got none (TOKEN_MISSING), a malformed one
    (TOKEN_MALFORMED) or an unknown one (TOKEN_UNKNOWN): pass ``token`` to ``MemoryClient``."""


class ResourceExhaustedError(MnemosyneClientError):
    """RESOURCE_EXHAUSTED: a limit was reached. ``<LIMIT>_REACHED`` (the server's admission
    limits) carries ``retry_after_seconds``, and the client waits and retries a call that is safe
    to repeat; QUOTA_MEMORIES, QUOTA_BYTES (the tenant's quota), RECORDS_LIMIT and DISK_FULL do
    not pass by waiting."""


class DeadlineExceededError(MnemosyneClientError):
    """DEADLINE_EXCEEDED: the call outlived its deadline (the client's ``timeout``), or a wait on
    the server did (HOT_PATH_DEADLINE_EXCEEDED: a flush or disable, its metadata naming the
    remaining queue depth). A write may have been done: repeat it with the same request id."""


class UnavailableError(MnemosyneClientError):
    """UNAVAILABLE: nothing answered, or the server cannot serve now (SHUTTING_DOWN,
    TENANT_BUSY, TENANT_MOVING, OWNER_UNAVAILABLE, MEMBERS_CHANGING, FILE_LIMIT, REPLICA_UNREACHABLE).
    Raised after the client's own retries (at once when the server names no retry delay: no wait
    clears it, e.g. REPLICA_UNREACHABLE for a replica URL or keys that are wrong); safe
    to repeat a read, or a write with the same request id."""


class DataLossError(MnemosyneClientError):
    """DATA_LOSS: the tenant's file is damaged (TENANT_CORRUPT) or a copy did not arrive whole
    (MOVE_HEAD_MISMATCH). Other tenants are unaffected; restore the tenant from a backup."""


class ServerError(MnemosyneClientError):
    """Any other code (INTERNAL, UNKNOWN, UNIMPLEMENTED, ...): a fault of the server, or no
    Mnemosyne server at the address (the message then asks whether one listens there)."""


class TokenInvalidError(InvalidArgumentError):
    """TOKEN_INVALID: a consistency token that is not one (damaged, forged, or signed with another
    secret). Drop it and read without it; nothing was read."""


class TokenForeignError(InvalidArgumentError):
    """TOKEN_FOREIGN: a consistency token of another tenant. Send each tenant its own tokens."""


class TimelineChangedError(FailedPreconditionError):
    """TIMELINE_CHANGED: the tenant was restored, replaced (import, restore) or erased since the token's
    writes: they may not exist any more. The session drops the token; read again without it."""


class ConsistencyDeadlineExceededError(DeadlineExceededError):
    """CONSISTENCY_DEADLINE_EXCEEDED: the read's deadline passed before the token's writes were
    visible (a long backlog). The token stays; retry later, or read without it."""


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
    except (ValueError, DecodeError):  # a malformed status from something that is not our server
        return []
    return list(status.details) if status is not None else []


def _detail(error: grpc.RpcError, kind: type[D]) -> D | None:
    """The first detail of type ``kind`` of a failed call, or None. One that cannot be decoded (a
    broken server's) is as none, as a status that cannot be is: the call's code and the other
    details stay, never protobuf's DecodeError instead of the failure."""
    for detail in _details(error):
        if detail.TypeName() == kind.DESCRIPTOR.full_name:
            unpacked = kind()
            try:
                detail.Unpack(unpacked)
            except DecodeError:
                continue
            return unpacked
    return None


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ``google.rpc.ErrorInfo`` detail of a failed call (``reason``, ``domain``,
    ``metadata``), or None when the server sent none (it was no Mnemosyne server)."""
    return _detail(error, error_details_pb2.ErrorInfo)


def retry_delay(error: grpc.RpcError) -> float | None:
    """The ``google.rpc.RetryInfo`` delay of a failed call in seconds, or None when the server
    sent none."""
    retry = _detail(error, error_details_pb2.RetryInfo)
    return int(retry.retry_delay.ToNanoseconds()) / 1e9 if retry is not None else None


# Codes a call ends with, without an ErrorInfo, when what answered at the address is no Mnemosyne
# server: nothing listening, an HTTP/1 server, a TLS mismatch (UNAVAILABLE); a gRPC server of other
# services (UNIMPLEMENTED).
_NOT_MNEMOSYNE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED})


def typed(error: ServiceError) -> MnemosyneClientError:
    """The typed client error of ``error``, a refusal a shared host flow made itself
    (host/protocol.py: a reply without its generation, records that kept changing); a client
    error is returned as it is."""
    if isinstance(error, MnemosyneClientError):
        return error
    code = grpc.StatusCode[error.code_name]
    return error_class(code, error.reason)(code, error.reason, error.message, dict(error.metadata))


def from_rpc_error(error: grpc.RpcError, target: str = "", note: str = "") -> MnemosyneClientError:
    """The typed error of a failed call (the class of its code, its ErrorInfo reason and
    metadata, its RetryInfo delay), for calls made with a stub of your own. ``target``: the
    address the call went to; a failure that did not come from a Mnemosyne server (no
    ErrorInfo) then asks whether one listens there, with gRPC's own words after it. The code and
    reason stay those of the failure (the code's name when there is no ErrorInfo). ``note``: said
    after the message, in parentheses (the client's own words on the failure)."""
    code = error.code()
    info = error_info(error)
    reason = info.reason if info is not None else code.name
    metadata = dict(info.metadata) if info is not None else {}
    message = error.details() or ""
    if info is None and target and code in _NOT_MNEMOSYNE:
        message = f"is a Mnemosyne server listening at {target}? ({message})"
    if note:
        message = f"{message} ({note})"
    return error_class(code, reason)(code, reason, message, metadata, retry_delay(error))
