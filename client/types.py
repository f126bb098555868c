"""Plain values returned by the client (independent of the server's own types)."""

from __future__ import annotations

from dataclasses import dataclass, field

# The scope a memory goes to when none is named (the server's default too).
DEFAULT_SCOPE = "global"


@dataclass(frozen=True)
class Fact:
    kind: str
    value: str
    normalized: str


@dataclass(frozen=True)
class Triple:
    subject: str
    predicate: str
    object: str


@dataclass(frozen=True)
class ThreadRef:
    """A memory's place in a thread: the thread's id and a position in it (lower first)."""

    id: str
    position: int = 0


@dataclass(frozen=True)
class Memory:
    id: int
    scope: str
    text: str
    metadata: dict[str, str]
    created_at: float
    facts: list[Fact] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    forgotten: bool = False
    superseded_by: int = 0  # the newer memory that replaced this one's facts (0: current)
    superseded_at: float = 0.0
    merged_into: int = 0  # the memory Dedup merged this one into (0: not merged)
    occurred_at: float | None = None  # when it was said or happened (unix seconds), if the writer said
    thread: ThreadRef | None = None  # its thread and position, if the writer gave them
    updated_at: float = 0.0  # when update_memory last replaced its text (0: never updated)
    speaker: str = ""  # who said or wrote it, if the writer said
    forgotten_at: float = 0.0  # when it was forgotten (0: it is not); then only id, scope and times are left


@dataclass(frozen=True)
class MemoryVersion:
    """One version of a memory (list_memory_versions): 1 is the memory as retained."""

    version: int
    text: str
    metadata: dict[str, str]
    at: float
    current: bool = False


@dataclass(frozen=True)
class UpdateResult:
    """What update_memory did: the memory afterwards; ``updated`` is False when nothing changed."""

    memory: Memory
    updated: bool
    near_duplicate_of: list[int] = field(default_factory=list)
    supersedes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RetainResult:
    """status is one of "created", "duplicate", "enqueued", "invalid"."""

    status: str
    memory_id: int = 0
    event_id: int = 0
    error_reason: str = ""
    error_message: str = ""
    near_duplicate_of: tuple[int, ...] = ()
    supersedes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float
    vector_score: float
    text_score: float


@dataclass(frozen=True)
class MemoryPage:
    memories: list[Memory]
    next_page_token: str


@dataclass(frozen=True)
class IntegrityProblem:
    ledger_seq: int
    memory_id: int
    kind: str
    detail: str


@dataclass(frozen=True)
class IntegrityReport:
    valid: bool
    first_broken_at: int
    checked: int
    head_hash: str
    problems: list[IntegrityProblem]


@dataclass(frozen=True)
class Stats:
    memories: int
    forgotten: int
    writes: int
    model_calls: int
    embed_calls: int
    duplicates: int
    ledger_entries: int
    file_bytes: int


@dataclass(frozen=True)
class RetainItem:
    text: str
    scope: str = DEFAULT_SCOPE
    metadata: dict[str, str] = field(default_factory=dict)
    occurred_at: float | None = None  # when it was said or happened, unix seconds (microsecond precision)
    thread: ThreadRef | None = None
    speaker: str = ""  # who said or wrote it (optional)


@dataclass(frozen=True)
class Message:
    """One turn of a conversation for ``MemoryClient.retain_conversation``; ``name`` is who spoke
    (optional, beside the role)."""

    role: str
    content: str
    name: str = ""


@dataclass(frozen=True)
class Record:
    """A named record of a scope: a complete document."""

    key: str
    content: str


@dataclass(frozen=True)
class DuplicateGroup:
    keep: int
    duplicates: tuple[int, ...]


@dataclass(frozen=True)
class DedupResult:
    groups: list[DuplicateGroup]
    merged: bool
    threshold: float


@dataclass(frozen=True)
class RecordChange:
    """One change of a record batch: op "put" (with the complete content) or "delete"."""

    op: str
    key: str
    content: str = ""


@dataclass(frozen=True)
class ScopeRecords:
    """A scope's records and the generation they were read at (browser editing)."""

    records: list[Record]
    generation: int


@dataclass(frozen=True)
class AssembledContext:
    """What AssembleContext returned. The generations are host-only: never show them to a model."""

    global_records: list[Record]
    workspace_records: list[Record]
    memories: list[Hit]
    global_generation: int
    workspace_generation: int
    # Recalled memories the server left out to keep its response under ~3 MiB (get_memory each).
    omitted_memory_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ConsolidateResult:
    generation: int
    already_applied: bool


@dataclass(frozen=True)
class SessionOutcome:
    """What consolidating one scope of one session did (``consolidate_session``)."""

    thread: str
    scope: str
    receipt_id: str
    outcome: str  # "applied", "already_applied", "nothing_new" or "gave_up"
    generation: int  # the scope's generation after it
    model_calls: int  # model calls this call made for the scope
    conflicts: int  # newer writes met (and kept) between reading the record and committing


@dataclass(frozen=True)
class ErasureReceipt:
    """What the server's erasure log keeps of an erased tenant."""

    tenant: str
    erased_at: float  # seconds since the epoch
    token_name: str  # the token that asked ("" when the server runs without tokens)
    head_hash: str  # its audit chain's head hash before the erasure ("" for a damaged file)


@dataclass(frozen=True)
class BackupFile:
    name: str  # "database" or "inbox"
    size: int
    sha256: str


@dataclass(frozen=True)
class TenantBackup:
    """What a tenant's copy in a backup stream holds; its files' chunks follow."""

    tenant: str
    change_counter: int
    inbox_sequence: int
    head_hash: str
    ledger_entries: int
    memories: int
    last_event_id: int
    generations: dict[str, int]
    files: list[BackupFile]


@dataclass(frozen=True)
class BackupChunk:
    file: str
    data: bytes


@dataclass(frozen=True)
class BackupUnchanged:
    tenant: str


@dataclass(frozen=True)
class SkippedTenant:
    tenant: str
    reason: str
    message: str


@dataclass(frozen=True)
class BackupSummary:
    copied: int
    unchanged: int
    skipped: int
    bytes: int


BackupPart = TenantBackup | BackupChunk | BackupUnchanged | SkippedTenant | BackupSummary


@dataclass(frozen=True)
class ImportResult:
    tenant: str
    head_hash: str
    ledger_entries: int
    memories: int
    replaced: bool  # a tenant of that name was replaced


@dataclass(frozen=True)
class MoveResult:
    """A tenant moved between members (``MemoryClient.move_tenant``)."""

    tenant: str
    source: str
    destination: str
    epoch: int  # its ownership epoch on the destination
    head_hash: str
    bytes: int  # sent by this call (0 when the destination had them already)
    steps: list[str]  # the steps this call did (empty: the move was done already)
    memories: int


@dataclass(frozen=True)
class Caller:
    """Who the server takes the caller for (``MemoryClient.whoami``)."""

    name: str  # the token's name; "" on a server without tokens
    tenants: list[str]  # the tenants the token names; empty for an admin
    admin: bool


@dataclass(frozen=True)
class ScopeSummary:
    """A scope of a tenant with its generation and record count (``MemoryClient.list_scopes``)."""

    scope: str  # "global" or "workspace/<name>"
    generation: int
    records: int


@dataclass(frozen=True)
class TenantPage:
    tenants: list[str]
    next_page_token: str
    damaged: list[str] = field(default_factory=list)  # of ``tenants``, those whose file is damaged
    # A deployment of many members: those that did not answer (their tenants are missing).
    unanswered_members: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AggregateStats:
    """Stats of every tenant and their total. NOT one snapshot: ``files_read`` files were read in
    as many transactions while writes went on (``consistency`` says so in words)."""

    tenants: dict[str, Stats]
    total: Stats
    files_read: int
    consistency: str
    # Tenants whose stats could not be read, with the reason (e.g. TENANT_CORRUPT): not in the total.
    damaged: dict[str, str] = field(default_factory=dict)
    not_a_snapshot: bool = True
    # A deployment of many members: those that did not answer (their tenants are missing).
    unanswered_members: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HotPathStatus:
    """A tenant's asynchronous write mode: the flag, the queue and the persisted counters."""

    enabled: bool
    queue_depth: int
    oldest_pending_seconds: float
    accepted: int
    succeeded: int
    failed: int
    duplicates: int
    writes: int
    model_calls: int
    # Open operations a read is waiting for (a read given a consistency token): taken first.
    awaited: int = 0


@dataclass(frozen=True)
class FlushResult:
    """What the operations covered by a flush barrier did."""

    flushed: int
    succeeded: int
    failed: int
    failed_event_ids: list[int]


@dataclass(frozen=True)
class Event:
    """One operation of the log; status is "pending", "running", "succeeded" or "failed"."""

    event_id: int
    status: str
    kind: str
    accepted_at: float
    finished_at: float | None
    created_memory_ids: tuple[int, ...]
    duplicate_of_memory_ids: tuple[int, ...]
    merged_into_memory_ids: tuple[int, ...]
    near_duplicate_of: tuple[int, ...]
    error_reason: str
    error_message: str
    attempts: int
    latency_ms: float
    sequence: int = 0
    extracted: bool = False


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    next_page_token: str
