import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetTenantFiguresRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class MinuteFigures(_message.Message):
    __slots__ = ("start", "writes", "recalls", "failed_events", "hot_path_depth", "oldest_pending_seconds", "file_bytes")
    START_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    RECALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    HOT_PATH_DEPTH_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    writes: int
    recalls: int
    failed_events: int
    hot_path_depth: int
    oldest_pending_seconds: float
    file_bytes: int
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., writes: _Optional[int] = ..., recalls: _Optional[int] = ..., failed_events: _Optional[int] = ..., hot_path_depth: _Optional[int] = ..., oldest_pending_seconds: _Optional[float] = ..., file_bytes: _Optional[int] = ...) -> None: ...

class MemoriesAt(_message.Message):
    __slots__ = ("at", "memories")
    AT_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    memories: int
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., memories: _Optional[int] = ...) -> None: ...

class GetTenantFiguresResponse(_message.Message):
    __slots__ = ("counting_since", "minutes", "memories", "file_bytes", "hot_path_depth", "oldest_pending_seconds")
    COUNTING_SINCE_FIELD_NUMBER: _ClassVar[int]
    MINUTES_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOT_PATH_DEPTH_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    counting_since: _timestamp_pb2.Timestamp
    minutes: _containers.RepeatedCompositeFieldContainer[MinuteFigures]
    memories: _containers.RepeatedCompositeFieldContainer[MemoriesAt]
    file_bytes: int
    hot_path_depth: int
    oldest_pending_seconds: float
    def __init__(self, counting_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., minutes: _Optional[_Iterable[_Union[MinuteFigures, _Mapping]]] = ..., memories: _Optional[_Iterable[_Union[MemoriesAt, _Mapping]]] = ..., file_bytes: _Optional[int] = ..., hot_path_depth: _Optional[int] = ..., oldest_pending_seconds: _Optional[float] = ...) -> None: ...

class ListTenantFiguresRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class TenantFiguresRow(_message.Message):
    __slots__ = ("tenant", "file_bytes", "writes", "recalls", "failed_events")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    RECALLS_FIELD_NUMBER: _ClassVar[int]
    FAILED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    file_bytes: int
    writes: int
    recalls: int
    failed_events: int
    def __init__(self, tenant: _Optional[str] = ..., file_bytes: _Optional[int] = ..., writes: _Optional[int] = ..., recalls: _Optional[int] = ..., failed_events: _Optional[int] = ...) -> None: ...

class ListTenantFiguresResponse(_message.Message):
    __slots__ = ("tenants", "counting_since", "largest", "busiest", "failing", "unanswered_members")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    COUNTING_SINCE_FIELD_NUMBER: _ClassVar[int]
    LARGEST_FIELD_NUMBER: _ClassVar[int]
    BUSIEST_FIELD_NUMBER: _ClassVar[int]
    FAILING_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    tenants: int
    counting_since: _timestamp_pb2.Timestamp
    largest: _containers.RepeatedCompositeFieldContainer[TenantFiguresRow]
    busiest: _containers.RepeatedCompositeFieldContainer[TenantFiguresRow]
    failing: _containers.RepeatedCompositeFieldContainer[TenantFiguresRow]
    unanswered_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenants: _Optional[int] = ..., counting_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., largest: _Optional[_Iterable[_Union[TenantFiguresRow, _Mapping]]] = ..., busiest: _Optional[_Iterable[_Union[TenantFiguresRow, _Mapping]]] = ..., failing: _Optional[_Iterable[_Union[TenantFiguresRow, _Mapping]]] = ..., unanswered_members: _Optional[_Iterable[str]] = ...) -> None: ...

class VerifyIntegrityRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class IntegrityProblem(_message.Message):
    __slots__ = ("ledger_seq", "memory_id", "kind", "detail")
    LEDGER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ledger_seq: int
    memory_id: int
    kind: str
    detail: str
    def __init__(self, ledger_seq: _Optional[int] = ..., memory_id: _Optional[int] = ..., kind: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class VerifyIntegrityResponse(_message.Message):
    __slots__ = ("valid", "first_broken_at", "checked", "head_hash", "problems")
    VALID_FIELD_NUMBER: _ClassVar[int]
    FIRST_BROKEN_AT_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    valid: bool
    first_broken_at: int
    checked: int
    head_hash: str
    problems: _containers.RepeatedCompositeFieldContainer[IntegrityProblem]
    def __init__(self, valid: _Optional[bool] = ..., first_broken_at: _Optional[int] = ..., checked: _Optional[int] = ..., head_hash: _Optional[str] = ..., problems: _Optional[_Iterable[_Union[IntegrityProblem, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("memories", "forgotten", "writes", "model_calls", "embed_calls", "duplicates", "ledger_entries", "file_bytes", "replication_lag_seconds", "replication_lag_bytes")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    EMBED_CALLS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    memories: int
    forgotten: int
    writes: int
    model_calls: int
    embed_calls: int
    duplicates: int
    ledger_entries: int
    file_bytes: int
    replication_lag_seconds: float
    replication_lag_bytes: int
    def __init__(self, memories: _Optional[int] = ..., forgotten: _Optional[int] = ..., writes: _Optional[int] = ..., model_calls: _Optional[int] = ..., embed_calls: _Optional[int] = ..., duplicates: _Optional[int] = ..., ledger_entries: _Optional[int] = ..., file_bytes: _Optional[int] = ..., replication_lag_seconds: _Optional[float] = ..., replication_lag_bytes: _Optional[int] = ...) -> None: ...

class DedupRequest(_message.Message):
    __slots__ = ("tenant", "merge", "threshold", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    merge: bool
    threshold: float
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., merge: _Optional[bool] = ..., threshold: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class DuplicateGroup(_message.Message):
    __slots__ = ("keep_memory_id", "duplicate_memory_ids")
    KEEP_MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    keep_memory_id: int
    duplicate_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keep_memory_id: _Optional[int] = ..., duplicate_memory_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DedupResponse(_message.Message):
    __slots__ = ("groups", "merged", "threshold", "consistency_token")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DuplicateGroup]
    merged: bool
    threshold: float
    consistency_token: str
    def __init__(self, groups: _Optional[_Iterable[_Union[DuplicateGroup, _Mapping]]] = ..., merged: _Optional[bool] = ..., threshold: _Optional[float] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "next_page_token", "damaged", "unanswered_members")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DAMAGED_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedScalarFieldContainer[str]
    next_page_token: str
    damaged: _containers.RepeatedScalarFieldContainer[str]
    unanswered_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenants: _Optional[_Iterable[str]] = ..., next_page_token: _Optional[str] = ..., damaged: _Optional[_Iterable[str]] = ..., unanswered_members: _Optional[_Iterable[str]] = ...) -> None: ...

class AggregateStatsRequest(_message.Message):
    __slots__ = ("chunk_size",)
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    def __init__(self, chunk_size: _Optional[int] = ...) -> None: ...

class AggregateStatsChunk(_message.Message):
    __slots__ = ("tenants", "total", "not_a_snapshot", "files_read", "consistency", "unanswered_members")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NOT_A_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    FILES_READ_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantStats]
    total: StatsResponse
    not_a_snapshot: bool
    files_read: int
    consistency: str
    unanswered_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantStats, _Mapping]]] = ..., total: _Optional[_Union[StatsResponse, _Mapping]] = ..., not_a_snapshot: _Optional[bool] = ..., files_read: _Optional[int] = ..., consistency: _Optional[str] = ..., unanswered_members: _Optional[_Iterable[str]] = ...) -> None: ...

class TenantStats(_message.Message):
    __slots__ = ("tenant", "stats", "error_reason")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    stats: StatsResponse
    error_reason: str
    def __init__(self, tenant: _Optional[str] = ..., stats: _Optional[_Union[StatsResponse, _Mapping]] = ..., error_reason: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("name", "tenants", "admin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenants: _containers.RepeatedScalarFieldContainer[str]
    admin: bool
    def __init__(self, name: _Optional[str] = ..., tenants: _Optional[_Iterable[str]] = ..., admin: _Optional[bool] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReembedTenantRequest(_message.Message):
    __slots__ = ("tenant", "embedder", "chunk_size")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    embedder: str
    chunk_size: int
    def __init__(self, tenant: _Optional[str] = ..., embedder: _Optional[str] = ..., chunk_size: _Optional[int] = ...) -> None: ...

class ReembedTenantResponse(_message.Message):
    __slots__ = ("embedder", "done", "total", "finished", "switched")
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    SWITCHED_FIELD_NUMBER: _ClassVar[int]
    embedder: str
    done: int
    total: int
    finished: bool
    switched: int
    def __init__(self, embedder: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., finished: _Optional[bool] = ..., switched: _Optional[int] = ...) -> None: ...

class EraseTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ErasureReceipt(_message.Message):
    __slots__ = ("tenant", "erased_at", "token_name", "head_hash")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ERASED_AT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_NAME_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    erased_at: _timestamp_pb2.Timestamp
    token_name: str
    head_hash: str
    def __init__(self, tenant: _Optional[str] = ..., erased_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., token_name: _Optional[str] = ..., head_hash: _Optional[str] = ...) -> None: ...

class EraseTenantResponse(_message.Message):
    __slots__ = ("receipt",)
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: ErasureReceipt
    def __init__(self, receipt: _Optional[_Union[ErasureReceipt, _Mapping]] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ("tenants", "known")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedScalarFieldContainer[str]
    known: _containers.RepeatedCompositeFieldContainer[BackedUpTenant]
    def __init__(self, tenants: _Optional[_Iterable[str]] = ..., known: _Optional[_Iterable[_Union[BackedUpTenant, _Mapping]]] = ...) -> None: ...

class BackedUpTenant(_message.Message):
    __slots__ = ("tenant", "change_counter", "inbox_sequence", "head_hash")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_COUNTER_FIELD_NUMBER: _ClassVar[int]
    INBOX_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    change_counter: int
    inbox_sequence: int
    head_hash: str
    def __init__(self, tenant: _Optional[str] = ..., change_counter: _Optional[int] = ..., inbox_sequence: _Optional[int] = ..., head_hash: _Optional[str] = ...) -> None: ...

class BackupFile(_message.Message):
    __slots__ = ("name", "size", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class TenantBackup(_message.Message):
    __slots__ = ("tenant", "change_counter", "inbox_sequence", "head_hash", "ledger_entries", "memories", "last_event_id", "generations", "files")
    class GenerationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_COUNTER_FIELD_NUMBER: _ClassVar[int]
    INBOX_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    change_counter: int
    inbox_sequence: int
    head_hash: str
    ledger_entries: int
    memories: int
    last_event_id: int
    generations: _containers.ScalarMap[str, int]
    files: _containers.RepeatedCompositeFieldContainer[BackupFile]
    def __init__(self, tenant: _Optional[str] = ..., change_counter: _Optional[int] = ..., inbox_sequence: _Optional[int] = ..., head_hash: _Optional[str] = ..., ledger_entries: _Optional[int] = ..., memories: _Optional[int] = ..., last_event_id: _Optional[int] = ..., generations: _Optional[_Mapping[str, int]] = ..., files: _Optional[_Iterable[_Union[BackupFile, _Mapping]]] = ...) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("file", "data")
    FILE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    file: str
    data: bytes
    def __init__(self, file: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class SkippedTenant(_message.Message):
    __slots__ = ("tenant", "reason", "message")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    reason: str
    message: str
    def __init__(self, tenant: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class BackupSummary(_message.Message):
    __slots__ = ("copied", "unchanged", "skipped", "bytes")
    COPIED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    copied: int
    unchanged: int
    skipped: int
    bytes: int
    def __init__(self, copied: _Optional[int] = ..., unchanged: _Optional[int] = ..., skipped: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ("tenant", "chunk", "unchanged", "skipped", "summary")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    tenant: TenantBackup
    chunk: BackupChunk
    unchanged: str
    skipped: SkippedTenant
    summary: BackupSummary
    def __init__(self, tenant: _Optional[_Union[TenantBackup, _Mapping]] = ..., chunk: _Optional[_Union[BackupChunk, _Mapping]] = ..., unchanged: _Optional[str] = ..., skipped: _Optional[_Union[SkippedTenant, _Mapping]] = ..., summary: _Optional[_Union[BackupSummary, _Mapping]] = ...) -> None: ...

class ExportTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ExportTenantResponse(_message.Message):
    __slots__ = ("manifest", "chunk")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    manifest: TenantBackup
    chunk: BackupChunk
    def __init__(self, manifest: _Optional[_Union[TenantBackup, _Mapping]] = ..., chunk: _Optional[_Union[BackupChunk, _Mapping]] = ...) -> None: ...

class ImportTenantRequest(_message.Message):
    __slots__ = ("tenant", "manifest", "replace", "chunk", "move_epoch", "move_source")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    MOVE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MOVE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    manifest: TenantBackup
    replace: bool
    chunk: BackupChunk
    move_epoch: int
    move_source: str
    def __init__(self, tenant: _Optional[str] = ..., manifest: _Optional[_Union[TenantBackup, _Mapping]] = ..., replace: _Optional[bool] = ..., chunk: _Optional[_Union[BackupChunk, _Mapping]] = ..., move_epoch: _Optional[int] = ..., move_source: _Optional[str] = ...) -> None: ...

class MoveTenantRequest(_message.Message):
    __slots__ = ("tenant", "destination")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    destination: str
    def __init__(self, tenant: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class MoveTenantResponse(_message.Message):
    __slots__ = ("tenant", "source", "destination", "epoch", "head_hash", "bytes", "steps", "memories")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    source: str
    destination: str
    epoch: int
    head_hash: str
    bytes: int
    steps: _containers.RepeatedScalarFieldContainer[str]
    memories: int
    def __init__(self, tenant: _Optional[str] = ..., source: _Optional[str] = ..., destination: _Optional[str] = ..., epoch: _Optional[int] = ..., head_hash: _Optional[str] = ..., bytes: _Optional[int] = ..., steps: _Optional[_Iterable[str]] = ..., memories: _Optional[int] = ...) -> None: ...

class ChangeMembersRequest(_message.Message):
    __slots__ = ("to", "complete")
    TO_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    to: str
    complete: bool
    def __init__(self, to: _Optional[str] = ..., complete: _Optional[bool] = ...) -> None: ...

class ChangeMembersResponse(_message.Message):
    __slots__ = ("member", "creations_waited", "previous_done")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    CREATIONS_WAITED_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DONE_FIELD_NUMBER: _ClassVar[int]
    member: str
    creations_waited: int
    previous_done: bool
    def __init__(self, member: _Optional[str] = ..., creations_waited: _Optional[int] = ..., previous_done: _Optional[bool] = ...) -> None: ...

class ActivateTenantRequest(_message.Message):
    __slots__ = ("tenant", "epoch", "head_hash")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    epoch: int
    head_hash: str
    def __init__(self, tenant: _Optional[str] = ..., epoch: _Optional[int] = ..., head_hash: _Optional[str] = ...) -> None: ...

class ActivateTenantResponse(_message.Message):
    __slots__ = ("tenant", "epoch", "activated")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    epoch: int
    activated: bool
    def __init__(self, tenant: _Optional[str] = ..., epoch: _Optional[int] = ..., activated: _Optional[bool] = ...) -> None: ...

class ImportTenantResponse(_message.Message):
    __slots__ = ("tenant", "head_hash", "ledger_entries", "memories", "replaced")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    head_hash: str
    ledger_entries: int
    memories: int
    replaced: bool
    def __init__(self, tenant: _Optional[str] = ..., head_hash: _Optional[str] = ..., ledger_entries: _Optional[int] = ..., memories: _Optional[int] = ..., replaced: _Optional[bool] = ...) -> None: ...
