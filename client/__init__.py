"""The Python client of Mnemosyne. It imports only the generated protos and its own modules."""

from mnemosyne.client.errors import (
    AbortedError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    MnemosyneClientError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    ServerError,
    UnauthenticatedError,
    UnavailableError,
)
from mnemosyne.client.memory_client import MemoryClient
from mnemosyne.client.types import (
    Fact,
    Hit,
    IntegrityProblem,
    IntegrityReport,
    Memory,
    MemoryPage,
    RetainItem,
    RetainResult,
    Stats,
    Triple,
)

__all__ = [
    "AbortedError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "Fact",
    "Hit",
    "IntegrityProblem",
    "IntegrityReport",
    "InvalidArgumentError",
    "Memory",
    "MemoryClient",
    "MemoryPage",
    "MnemosyneClientError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RetainItem",
    "RetainResult",
    "ServerError",
    "Stats",
    "Triple",
    "UnauthenticatedError",
    "UnavailableError",
]
