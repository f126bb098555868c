"""Domain errors of Mnemosyne.

Every error a caller can cause or observe is a :class:`MnemosyneError` with a stable
UPPER_SNAKE ``reason`` (Google AIP-193). The kind of error is its class; the transport maps each
class to exactly one gRPC status code in one table (``mnemosyne.transport.errors``), so nothing
below the transport knows about gRPC::

    MnemosyneError
    ├── InvalidArgument      the request itself is wrong (bad tenant id, empty text, k too big)
    ├── NotFound             the named thing does not exist in this tenant
    ├── FailedPrecondition   the system is not in a state that allows the call
    ├── Conflict             an optimistic-concurrency check failed (stale generation, reused key)
    ├── PermissionDenied     the caller may not touch this tenant
    ├── Unauthenticated      no or unknown credentials
    ├── ResourceExhausted    a limit, quota or the disk is full
    ├── DeadlineExceeded     a bounded wait ran out
    ├── Unavailable          the service is shutting down or briefly cannot serve
    ├── DataLoss             a tenant's file is damaged (not ours, wrong schema, corrupt)
    └── InternalError        a fault of ours, never of the caller
"""

from __future__ import annotations

from collections.abc import Mapping


class MnemosyneError(Exception):
    """Base of every Mnemosyne error: a message for people and a stable reason for programs."""

    default_reason = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.metadata: dict[str, str] = dict(metadata or {})
        # When retrying the same call makes sense, after how long (sent as google.rpc.RetryInfo).
        self.retry_after_seconds = retry_after_seconds

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason}: {self.message})"


class InvalidArgument(MnemosyneError):
    default_reason = "INVALID_ARGUMENT"


class NotFound(MnemosyneError):
    default_reason = "NOT_FOUND"


class FailedPrecondition(MnemosyneError):
    default_reason = "FAILED_PRECONDITION"


class Conflict(MnemosyneError):
    default_reason = "CONFLICT"


class PermissionDenied(MnemosyneError):
    default_reason = "PERMISSION_DENIED"


class Unauthenticated(MnemosyneError):
    default_reason = "UNAUTHENTICATED"


class ResourceExhausted(MnemosyneError):
    default_reason = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(MnemosyneError):
    default_reason = "DEADLINE_EXCEEDED"


class Unavailable(MnemosyneError):
    default_reason = "UNAVAILABLE"


class DataLoss(MnemosyneError):
    default_reason = "DATA_LOSS"


class Unimplemented(MnemosyneError):
    default_reason = "UNIMPLEMENTED"


class InternalError(MnemosyneError):
    default_reason = "INTERNAL"
