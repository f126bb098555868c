"""Every domain value passed between the engine and its callers (the transport, MemoryBrain):
memories and their writes, recall, events and the hot path, workspace records, administration."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

# The scope of Global memory: a memory or record without a scope is in it.
GLOBAL_SCOPE = "global"


class RetainStatus(str, enum.Enum):
    CREATED = "created"
    DUPLICATE = "duplicate"
    ENQUEUED = "enqueued"
    INVALID = "invalid"


@dataclass(frozen=True)
class ThreadRef:
    """A memory's place in a thread: the thread's id and a position in it (lower first)."""

    id: str
    position: int


@dataclass(frozen=True)
class RetainItem:
    text: str
    scope: str = GLOBAL_SCOPE
    metadata: dict[str, str] = field(default_factory=dict)
    occurred_at: int | None = None  # when it was said or happened: unix microseconds
    thread: ThreadRef | None = None
    speaker: str | None = None  # who said or wrote it
    expires_at: float | None = None  # when it expires: unix seconds (None: the tenant's default, or never)


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
    def from_json(cls, data: dict[str, Any]) -> RetainOutcome:
        return cls(
            status=RetainStatus(data["status"]),
            memory_id=int(data.get("memory_id", 0)),
            event_id=int(data.get("event_id", 0)),
            error_reason=data.get("error_reason", ""),
            error_message=data.get("error_message", ""),
            near_duplicate_of=tuple(data.get("near_duplicate_of", ())),
            supersedes=tuple(data.get("supersedes", ())),
        )


@dataclass(frozen=True, slots=True)
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
    occurred_at: int | None = None  # unix microseconds, as the writer gave it
    thread: ThreadRef | None = None
    updated_at: float = 0.0  # when UpdateMemory wrote its current text (0: never updated)
    speaker: str | None = None  # who said or wrote it, as the writer gave it (trimmed)
    forgotten_at: float = 0.0  # when it was forgotten (0: it is not); then only id, scope and times are left
    expires_at: float | None = None  # when it expires (unix seconds; None: never)


@dataclass(frozen=True)
class MemoryVersion:
    """One version of a memory: its text and metadata and when it became current."""

    version: int  # 1 is the memory as retained
    text: str
    metadata: dict[str, str]
    at: float
    current: bool = False  # the memory's text now


@dataclass(frozen=True)
class UpdateOutcome:
    """What UpdateMemory did: the memory afterwards, and the rules of a new write applied to it."""

    memory: Memory
    updated: bool  # False when the text and metadata were already these (nothing written)
    near_duplicate_of: tuple[int, ...] = ()
    supersedes: tuple[int, ...] = ()
    revision: int = 0  # the revision the change added (0: nothing written)


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
class ReembedProgress:
    """Where a tenant's move to ``embedder`` stands after one step (engine/reembed.py): ``done`` of
    its ``total`` memories have their new vector; ``finished`` once the tenant runs on it
    (``switched``: the vectors the step that switched replaced, 0 for every other step)."""

    embedder: str
    done: int
    total: int
    finished: bool
    switched: int


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
    replication_lag_seconds: float = 0.0  # its oldest commit not yet in object storage (store/replicas.py ``lag``)
    replication_lag_bytes: int = 0

    def plus(self, other: TenantStats) -> TenantStats:
        """A total of two: each count summed, the lag in seconds the larger (a sum of ages is none)."""
        summed = {name: getattr(self, name) + getattr(other, name) for name in self.__dataclass_fields__}
        summed["replication_lag_seconds"] = max(self.replication_lag_seconds, other.replication_lag_seconds)
        return TenantStats(**summed)


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
    file read in its own transaction, at a slightly different moment (the specification's §9.5, docs/seed-mapping.md)."""

    tenants: list[tuple[str, TenantStats, str]]  # (tenant, stats, error reason: "" when read)
    total: TenantStats | None = None  # set in the last chunk only (the tenants read)
    files_read: int = 0  # tenant files read so far (== transactions); final in the last chunk
    unreadable: int = 0  # of those, how many could not be read (their rows carry the reason)


@dataclass(frozen=True)
class MinuteFigures:
    """One minute of a tenant's figures, as the member that owns it counted them in memory.
    The gauges are None when nothing sampled them in that minute."""

    start: float  # unix seconds, the minute's first second
    writes: int = 0  # memories accepted for writing (synchronous or fast)
    recalls: int = 0
    failed_events: int = 0  # fast writes that failed for good
    hot_path_depth: int | None = None  # the most open fast writes seen in the minute
    oldest_pending_seconds: float | None = None  # the oldest open fast write's age, at most
    file_bytes: int | None = None  # the tenant's files' size, last seen in the minute


@dataclass(frozen=True)
class TenantFigures:
    """A tenant's own figures for its charts (engine/figures.py)."""

    counting_since: float  # unix seconds: when this member began counting (its start)
    minutes: list[MinuteFigures]  # the last hour, oldest first, every minute
    memories_at: list[tuple[float, int]]  # (unix seconds, live memories) over the tenant's life
    file_bytes: int = 0
    hot_path_depth: int = 0
    oldest_pending_seconds: float = 0.0


@dataclass(frozen=True)
class TenantHour:
    """A tenant's totals of the last hour on this member, with its files' size now."""

    tenant: str
    file_bytes: int = 0
    writes: int = 0
    recalls: int = 0
    failed_events: int = 0


@dataclass(frozen=True)
class TenantsFigures:
    """Across the tenants of this member: the largest, the busiest, those with failed events."""

    tenants: int
    counting_since: float
    largest: list[TenantHour]
    busiest: list[TenantHour]
    failing: list[TenantHour]


# -- conversations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str = ""  # who spoke, beside the role (optional)


# -- events and the hot path ----------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    event_id: int
    status: str
    kind: str
    accepted_at: float
    finished_at: float | None
    created_memory_ids: tuple[int, ...] = ()
    duplicate_of_memory_ids: tuple[int, ...] = ()
    merged_into_memory_ids: tuple[int, ...] = ()
    near_duplicate_of: tuple[int, ...] = ()
    error_reason: str = ""
    error_message: str = ""
    attempts: int = 0
    latency_ms: float = 0.0
    extracted: bool = False
    sequence: int = 0  # the transition's position (WatchEvents); 0 elsewhere


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    next_page_token: str


@dataclass(frozen=True)
class HotPathState:
    enabled: bool
    queue_depth: int
    oldest_pending_seconds: float
    accepted: int
    succeeded: int
    failed: int
    duplicates: int
    writes: int
    model_calls: int
    awaited: int = 0  # open operations a read waits for (taken ahead of the backlog)


@dataclass(frozen=True)
class FlushOutcome:
    flushed: int
    succeeded: int
    failed: int
    failed_event_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Transitions:
    """A chunk of a tenant's event transitions, for WatchEvents."""

    events: list[Event]
    through_sequence: int  # resume after this one
    more: bool  # a full chunk: read again at once


@dataclass(frozen=True)
class Barrier:
    """What a Flush (or a Disable) waits for: every operation accepted up to ``up_to_id``."""

    up_to_id: int
    covered: list[int]  # the operations open when it began


# -- workspace records (host-owned generations) -----------------------------------------------------


@dataclass(frozen=True)
class RecordChange:
    """One change of a batch: ``op`` is "put" (create or replace with ``content``) or "delete"."""

    op: str
    key: str
    content: str = ""


@dataclass(frozen=True)
class OmittedRecord:
    """A record an assembled context had no room for (fetch it with GetRecord)."""

    scope: str
    key: str
    bytes: int


@dataclass(frozen=True)
class AssembledContext:
    global_records: list[tuple[str, str]]
    workspace_records: list[tuple[str, str]]
    global_generation: int
    workspace_generation: int
    memories: list[Hit] = field(default_factory=list)
    # What did not fit the response budget (check.RESPONSE_BUDGET_BYTES), to be fetched one by one.
    omitted_records: list[OmittedRecord] = field(default_factory=list)
    omitted_memory_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScopeRecords:
    records: list[tuple[str, str]]
    generation: int
    next_page_token: str = ""


@dataclass(frozen=True)
class ScopeSummary:
    """A scope of a tenant: its generation and how many records it holds."""

    scope: str
    generation: int
    records: int


@dataclass(frozen=True)
class WriteResult:
    """What a record write produced: the new generation and how many changes it applied."""

    generation: int
    applied: int
    already_applied: bool = False

    def to_json(self) -> str:
        return json.dumps({"generation": self.generation, "applied": self.applied})

    @classmethod
    def from_json(cls, text: str, *, already_applied: bool) -> WriteResult:
        data = json.loads(text)
        return cls(int(data["generation"]), int(data["applied"]), already_applied)


# What consolidating one scope of a session did (engine/consolidator.py).
APPLIED = "applied"
ALREADY_APPLIED = "already_applied"
NOTHING_NEW = "nothing_new"
GAVE_UP = "gave_up"


@dataclass(frozen=True)
class ScopeOutcome:
    """What consolidating one scope of one session did."""

    thread: str
    scope: str
    receipt_id: str
    outcome: str  # APPLIED, ALREADY_APPLIED, NOTHING_NEW or GAVE_UP
    generation: int  # the scope's generation after it (the receipt's, when applied)
    model_calls: int  # model calls made by this run for this scope (0 when journaled or applied)
    conflicts: int  # newer writes met (and merged on top of, unless it gave up)


# -- webhooks (engine/webhooks/, docs/webhooks.md) ----------------------------------------------

# The kinds of change a webhook subscription may ask for, as the payloads' ``type`` names them.
WEBHOOK_KINDS = (
    "memory.created",
    "memory.updated",
    "memory.forgotten",
    "memory.expired",
    "record.changed",
    "fast_write.succeeded",
    "fast_write.failed",
    "consolidation.applied",
)


@dataclass(frozen=True)
class WebhookSecret:
    """A signing secret of a subscription: its id, and its first characters (the whole secret is
    shown once, when it is made)."""

    id: int
    hint: str
    created_at: float


@dataclass(frozen=True)
class Webhook:
    """A tenant's webhook subscription, as it stands."""

    id: int
    url: str
    kinds: tuple[str, ...]
    include_text: bool
    secrets: tuple[WebhookSecret, ...]
    created_at: float
    pending: int  # deliveries not yet delivered
    failing_since: float | None  # its deliveries fail since then (None: the last one succeeded)
    paused_at: float | None  # paused (nothing is sent) since then
    pause_reason: str


@dataclass(frozen=True)
class NewWebhookSecrets:
    """A subscription just made or given a secret, with the secrets made for it (shown once)."""

    webhook: Webhook
    secrets: tuple[str, ...]


@dataclass(frozen=True)
class WebhookDelivery:
    """One delivery of one change to one subscription: its log entry."""

    delivery_id: str  # the webhook-id header: the same on every attempt
    kind: str
    at: float  # when the change committed
    status: str  # pending | delivered
    attempts: int
    next_attempt_at: float | None  # pending: when it is tried next
    last_attempt_at: float | None
    last_status_code: int  # the receiver's last HTTP status (0: none, e.g. refused or timed out)
    last_error: str
    delivered_at: float | None
    memory_id: int
    event_id: int


@dataclass(frozen=True)
class WebhookDeliveryPage:
    deliveries: tuple[WebhookDelivery, ...]
    next_page_token: str


# -- expiry and revisions (docs/expiry.md, docs/revisions.md) ------------------------------------


@dataclass(frozen=True)
class ExpiryPolicy:
    """A tenant's expiry policy (docs/expiry.md)."""

    default_ttl_seconds: int = (
        0  # a new memory without its own expires_at expires this long after acceptance (0: never)
    )
    update_extends: bool = False  # an update moves an expiring memory's expires_at to now + default_ttl_seconds
    grace_seconds: int = 7 * 86400  # expired memories are erased this long after their expires_at


@dataclass(frozen=True)
class MemoryRevision:
    """One revision of a memory: the change, who made it, and the content it left."""

    revision: int
    kind: str  # "retained", "updated", "reverted", "superseded", "merged"
    at: float
    surface: str
    token_name: str
    changed: tuple[str, ...]
    version: int
    text: str
    metadata: dict[str, str]
    expires_at: float | None
    ledger_seq: int
    related_memory_id: int = 0
    reverted_to: int = 0


@dataclass(frozen=True)
class RecordRevision:
    """One revision of a record."""

    generation: int
    op: str  # "put" or "delete"
    content: str
    at: float
    surface: str
    token_name: str
    source: str
    ledger_seq: int
