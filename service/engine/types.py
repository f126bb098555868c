"""Domain values passed between the engine and its callers (the transport, MemoryBrain)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class RetainStatus(str, enum.Enum):
    CREATED = "created"
    DUPLICATE = "duplicate"
    ENQUEUED = "enqueued"
    INVALID = "invalid"


@dataclass(frozen=True)
class RetainItem:
    text: str
    scope: str = "global"
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RetainOutcome:
    status: RetainStatus
    memory_id: int = 0
    event_id: int = 0
    error_reason: str = ""
    error_message: str = ""
    near_duplicate_of: tuple[int, ...] = ()
    # Older memories this write made wholly superseded (conflict adjudication, engine/conflicts.py).
    supersedes: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        # Spelled out, not ``asdict`` (which deep-copies field by field): a batch stores 500 of
        # these with its request id. Same keys, in field order.
        return {
            "status": self.status.value,
            "memory_id": self.memory_id,
            "event_id": self.event_id,
            "error_reason": self.error_reason,
            "error_message": self.error_message,
            "near_duplicate_of": list(self.near_duplicate_of),
            "supersedes": list(self.supersedes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RetainOutcome":
        return cls(
            status=RetainStatus(data["status"]),
            memory_id=int(data.get("memory_id", 0)),
            event_id=int(data.get("event_id", 0)),
            error_reason=data.get("error_reason", ""),
            error_message=data.get("error_message", ""),
            near_duplicate_of=tuple(data.get("near_duplicate_of", ())),
            supersedes=tuple(data.get("supersedes", ())),
        )


@dataclass(frozen=True)
class Memory:
    id: int
    scope: str
    text: str
    metadata: dict[str, str]
    created_at: float
    facts: list[tuple[str, str, str]]
    triples: list[tuple[str, str, str]]
    forgotten: bool = False
    superseded_by: int = 0  # a newer memory replaced all of this one's attribute facts
    superseded_at: float = 0.0
    merged_into: int = 0  # Dedup merged this memory into that one; Recall never returns it


@dataclass(frozen=True)
class DedupGroup:
    keep: int
    duplicates: tuple[int, ...]


@dataclass(frozen=True)
class DedupReport:
    groups: list[DedupGroup]
    merged: bool
    threshold: float


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float
    vector_score: float
    text_score: float


@dataclass(frozen=True)
class Recalled:
    """Recall's answer: the hits that fit the response budget, and the ids of those that did not."""

    hits: list[Hit]
    omitted_memory_ids: tuple[int, ...] = ()


class RecallMode(str, enum.Enum):
    HYBRID = "hybrid"
    VECTOR = "vector"
    TEXT = "text"


@dataclass(frozen=True)
class MemoryPage:
    memories: list[Memory]
    next_page_token: str


@dataclass(frozen=True)
class TenantStats:
    memories: int = 0
    forgotten: int = 0
    writes: int = 0
    model_calls: int = 0
    embed_calls: int = 0
    duplicates: int = 0
    ledger_entries: int = 0
    file_bytes: int = 0


@dataclass(frozen=True)
class IntegrityReport:
    valid: bool
    first_broken_at: int
    checked: int
    head_hash: str
    problems: list[tuple[int, int, str, str]]  # (ledger_seq, memory_id, kind, detail)


@dataclass(frozen=True)
class TenantPage:
    tenants: list[str]
    next_page_token: str
    damaged: list[str] = field(default_factory=list)  # of ``tenants``, those whose file is damaged


@dataclass(frozen=True)
class AggregateChunk:
    """Part of a cross-tenant aggregate. NOT one snapshot: each tenant's stats come from its own
    file read in its own transaction, at a slightly different moment (seed 001 §9.5)."""

    tenants: list[tuple[str, TenantStats, str]]  # (tenant, stats, error reason: "" when read)
    total: TenantStats | None = None  # set in the last chunk only (the tenants read)
    files_read: int = 0  # tenant files read so far (== transactions); final in the last chunk
    unreadable: int = 0  # of those, how many could not be read (their rows carry the reason)
