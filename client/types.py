"""Plain values the client takes and returns (frozen dataclasses, independent of the server's own
types); the protos' comments (protos/mnemosyne/v1) say the same of each field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The scope a memory goes to when none is named (the server's default too).
DEFAULT_SCOPE = "global"


@dataclass(frozen=True)
class Fact:
    """A structured fact the extractor found in a memory's text: ``kind`` ("identifier", "email",
    "date", "quantity", "statement"), ``value`` as written ("5 days"), ``normalized`` the form
    matched on ("2023-05-08" for "8 May 2023"; may equal ``value``)."""

    kind: str
    value: str
    normalized: str


@dataclass(frozen=True)
class Triple:
    """A subject-predicate-object statement found in a memory's text ("customer", "requested", "a
    refund")."""

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
    """One retained memory: its ``id`` (unique in its tenant, never reused), ``scope``, ``text``,
    ``metadata``, ``created_at`` (unix seconds) and what extraction found (``facts``,
    ``triples``). A ``forgotten`` memory keeps only its id, scope and times (its text is "")."""

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
    expires_at: float | None = None  # when it expires (unix seconds; None: never), docs/expiry.md


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
    """What retaining one item did. ``status`` is "created" (``memory_id`` the new memory),
    "duplicate" (``memory_id`` the memory already holding the text in its scope), "enqueued"
    (``event_id`` its hot-path operation) or, in a batch, "invalid" (``error_reason`` and
    ``error_message`` say why; the other items are unaffected). ``near_duplicate_of`` names live
    memories it nearly repeats (never merged here); ``supersedes`` the older memories whose facts
    it replaced."""

    status: str
    memory_id: int = 0
    event_id: int = 0
    error_reason: str = ""
    error_message: str = ""
    near_duplicate_of: tuple[int, ...] = ()
    supersedes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Hit:
    """One recalled memory and its scores: ``score`` the fused relevance (higher is better,
    comparable within one recall only), ``vector_score`` the embeddings' cosine, ``text_score``
    the BM25 relevance (0 when the text did not match)."""

    memory: Memory
    score: float
    vector_score: float
    text_score: float


@dataclass(frozen=True)
class MemoryPage:
    """A page of memories (``list_memories``); ``next_page_token`` is "" on the last page."""

    memories: list[Memory]
    next_page_token: str


@dataclass(frozen=True)
class IntegrityProblem:
    """One thing ``verify_integrity`` found wrong: the ledger entry it is attributed to, the memory
    concerned (0: none), its ``kind`` ("BODY_MISMATCH", "CHAIN_BROKEN", "MEMORY_MISSING",
    "UNRECORDED_MEMORY", ...) and a sentence for a person."""

    ledger_seq: int
    memory_id: int
    kind: str
    detail: str


@dataclass(frozen=True)
class IntegrityReport:
    """The integrity verdict of a tenant: ``valid`` when the audit chain recomputes and every memory
    matches its entry; ``first_broken_at`` the first bad entry (0 when valid); ``checked``
    entries; ``head_hash`` the chain's last hash (keep it elsewhere to detect a rewrite of the
    whole file); ``problems`` (at most 100)."""

    valid: bool
    first_broken_at: int
    checked: int
    head_hash: str
    problems: list[IntegrityProblem]


@dataclass(frozen=True)
class MinuteFigures:
    """One minute of a tenant's figures (``start`` in unix seconds): memories accepted for
    writing, recalls and fast writes failed for good in it; the gauges sampled in it (None when
    none was): the most open fast writes, the oldest one's age in seconds, the files' size."""

    start: float
    writes: int
    recalls: int
    failed_events: int
    hot_path_depth: int | None
    oldest_pending_seconds: float | None
    file_bytes: int | None


@dataclass(frozen=True)
class TenantFigures:
    """A tenant's figures for charts: its last hour (``minutes``, oldest first, counted in memory
    on the member that owns it since ``counting_since``), its live memories over its life
    (``memories``: (unix seconds, count) pairs) and, now, its files' size and open fast writes."""

    counting_since: float
    minutes: list[MinuteFigures]
    memories: list[tuple[float, int]]
    file_bytes: int
    hot_path_depth: int
    oldest_pending_seconds: float


@dataclass(frozen=True)
class TenantFiguresRow:
    """A tenant's last hour (writes, recalls, failed fast writes) and its files' size now."""

    tenant: str
    file_bytes: int
    writes: int
    recalls: int
    failed_events: int


@dataclass(frozen=True)
class TenantsFigures:
    """The ``tenants`` three ways: the ``largest`` files, the ``busiest`` in the last hour, and the
    ``failing`` (fast writes failed in the last hour); on a deployment of many members, every
    member's, less those of the ``unanswered_members``."""

    tenants: int
    counting_since: float
    largest: list[TenantFiguresRow]
    busiest: list[TenantFiguresRow]
    failing: list[TenantFiguresRow]
    unanswered_members: list[str]


@dataclass(frozen=True)
class Stats:
    """A tenant's counters, kept in its file: live and ``forgotten`` memories, ``writes`` (memories
    created), extraction (``model_calls``) and embedding calls, exact ``duplicates`` found,
    audit ledger entries and the size of its files in bytes; with replication to object storage,
    how far its replica is behind: the age in seconds of its oldest commit not yet there and the
    WAL bytes since its last confirmed sync (both 0 when caught up, and without replication)."""

    memories: int
    forgotten: int
    writes: int
    model_calls: int
    embed_calls: int
    duplicates: int
    ledger_entries: int
    file_bytes: int
    replication_lag_seconds: float = 0.0
    replication_lag_bytes: int = 0


@dataclass(frozen=True)
class RetainItem:
    """One item of ``retain_batch``: its text, scope ("global" or "workspace/<name>"), metadata,
    and optionally when it was said or happened, its place in a thread, who said it and when it
    expires (as for ``MemoryClient.retain``)."""

    text: str
    scope: str = DEFAULT_SCOPE
    metadata: dict[str, str] = field(default_factory=dict)
    occurred_at: float | None = None  # when it was said or happened, unix seconds (microsecond precision)
    thread: ThreadRef | None = None
    speaker: str = ""  # who said or wrote it (optional)
    expires_at: float | None = None  # when it expires, unix seconds (None: the tenant's default), docs/expiry.md


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
    """Near duplicates found by Dedup: the memory kept (``keep``, the oldest) and those that merge
    into it."""

    keep: int
    duplicates: tuple[int, ...]


@dataclass(frozen=True)
class ReembedProgress:
    """Where a tenant's move to ``embedder`` stands after one ``reembed_tenant`` step: ``done`` of
    its ``total`` memories have their new vector; ``finished`` once it runs on that embedder
    (``switched``: the vectors the switching step replaced, 0 for every other step)."""

    embedder: str
    done: int
    total: int
    finished: bool
    switched: int


@dataclass(frozen=True)
class DedupResult:
    """What ``dedup`` found: the groups, whether they were ``merged``, the similarity threshold
    used."""

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
    """What ``consolidate`` did: the generation its receipt produced, and whether the receipt had
    been applied already (nothing changed now)."""

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
    """One file of a tenant's copy: "database" (the tenant file) or "inbox" (its hot-path inbox),
    its size in bytes and the SHA-256 of its bytes (hex)."""

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

    def figures(self) -> dict[str, Any]:
        """The copy's figures as a backup's and an export's manifest record them (JSON values)."""
        return {
            "change_counter": self.change_counter,
            "inbox_sequence": self.inbox_sequence,
            "head_hash": self.head_hash,
            "ledger_entries": self.ledger_entries,
            "memories": self.memories,
            "last_event_id": self.last_event_id,
            "generations": dict(sorted(self.generations.items())),
        }


@dataclass(frozen=True)
class BackupChunk:
    """The next bytes of a file (``file``: "database" or "inbox") of the tenant last announced in a
    backup or export stream."""

    file: str
    data: bytes


@dataclass(frozen=True)
class BackupUnchanged:
    """A tenant the caller's earlier backup holds as it is (named in ``known``, unchanged): not
    copied again."""

    tenant: str


@dataclass(frozen=True)
class SkippedTenant:
    """A tenant a backup could not copy (the others go on): the reason (TENANT_CORRUPT, or
    TENANT_NOT_FOUND: erased meanwhile) and a sentence for a person."""

    tenant: str
    reason: str
    message: str


@dataclass(frozen=True)
class BackupSummary:
    """The end of a backup stream: tenants copied, unchanged and skipped, and the bytes sent."""

    copied: int
    unchanged: int
    skipped: int
    bytes: int


BackupPart = TenantBackup | BackupChunk | BackupUnchanged | SkippedTenant | BackupSummary


@dataclass(frozen=True)
class ImportResult:
    """A tenant ``import_tenant`` installed: its head hash, ledger entries and live memories."""

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
class MemberChange:
    """What a member did of a change of the member list (``MemoryClient.change_members``)."""

    member: str  # the member that answered
    creations_waited: int  # begun: the creations of tenants under way it waited for
    previous_done: bool  # completed: it runs the new list, its previous list is done with


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
    """A page of tenant ids in lexical order (``list_tenants``); ``next_page_token`` is "" on the
    last page."""

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
    """A page of hot-path events in id order (``list_events``); ``next_page_token`` is "" on the
    last page."""

    events: list[Event]
    next_page_token: str


@dataclass(frozen=True)
class WebhookSecret:
    """A webhook's signing secret, as listed: its id (to retire it) and first characters."""

    id: int
    hint: str
    created_at: float


@dataclass(frozen=True)
class Webhook:
    """A webhook subscription (docs/webhooks.md). ``kinds`` are the payloads' type names
    ("memory.created", ...); ``failing_since`` and ``paused_at`` are 0 when it is not."""

    id: int
    url: str
    kinds: tuple[str, ...]
    include_text: bool
    secrets: tuple[WebhookSecret, ...]
    created_at: float
    pending_deliveries: int
    failing_since: float
    paused_at: float
    pause_reason: str


@dataclass(frozen=True)
class CreatedWebhook:
    """A webhook just made or given a secret, with the secrets made for it (shown only here)."""

    webhook: Webhook
    secrets: tuple[str, ...]


@dataclass(frozen=True)
class WebhookDelivery:
    """One delivery of one change: ``delivery_id`` is the webhook-id header (the same on every attempt)."""

    delivery_id: str
    kind: str
    at: float
    delivered: bool
    attempts: int
    next_attempt_at: float
    last_attempt_at: float
    last_status_code: int
    last_error: str
    delivered_at: float
    memory_id: int
    event_id: int


@dataclass(frozen=True)
class WebhookDeliveryPage:
    """A page of a webhook's deliveries, newest first."""

    deliveries: list[WebhookDelivery]
    next_page_token: str


@dataclass(frozen=True)
class MemoryRevision:
    """One change to a memory (list_memory_revisions, docs/revisions.md): its ``kind``
    ("retained", "updated", "reverted", "superseded", "merged"), when, who (``surface``,
    ``token_name``), what ``changed``, the ``text`` and ``metadata`` it left (content ``version``),
    its ``expires_at`` then, the audit ledger entry, the other memory of a supersession or merge,
    and the revision a revert restored."""

    revision: int
    kind: str
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
    """One change to a record (list_record_revisions): the scope's ``generation`` it published,
    ``op`` ("put", "delete"), the ``content`` after it, when, who, the method (``source``) and the
    ledger entry."""

    generation: int
    op: str
    content: str
    at: float
    surface: str
    token_name: str
    source: str
    ledger_seq: int


@dataclass(frozen=True)
class ExpiryPolicy:
    """A tenant's expiry policy (docs/expiry.md): new memories expire ``default_ttl_seconds`` after
    they are accepted (0: never), an update extends an expiring memory's when ``update_extends``,
    and an expired memory is erased ``grace_seconds`` after it expired."""

    default_ttl_seconds: int = 0
    update_extends: bool = False
    grace_seconds: int = 7 * 86400
