from google.api import annotations_pb2 as _annotations_pb2
from mnemosyne.v1 import memory_pb2 as _memory_pb2
from mnemosyne.v1 import revisions_pb2 as _revisions_pb2
from mnemosyne.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Record(_message.Message):
    __slots__ = ("key", "content")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    key: str
    content: str
    def __init__(self, key: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class RecordChange(_message.Message):
    __slots__ = ("op", "key", "content")
    class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OP_UNSPECIFIED: _ClassVar[RecordChange.Op]
        PUT: _ClassVar[RecordChange.Op]
        DELETE: _ClassVar[RecordChange.Op]
    OP_UNSPECIFIED: RecordChange.Op
    PUT: RecordChange.Op
    DELETE: RecordChange.Op
    OP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    op: RecordChange.Op
    key: str
    content: str
    def __init__(self, op: _Optional[_Union[RecordChange.Op, str]] = ..., key: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class AssembleContextRequest(_message.Message):
    __slots__ = ("tenant", "workspace", "query", "k", "consistency_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    workspace: str
    query: str
    k: int
    consistency_token: str
    def __init__(self, tenant: _Optional[str] = ..., workspace: _Optional[str] = ..., query: _Optional[str] = ..., k: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class AssembleContextResponse(_message.Message):
    __slots__ = ("global_records", "workspace_records", "memories", "omitted_records", "omitted_memory_ids", "consistency")
    GLOBAL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    OMITTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    global_records: _containers.RepeatedCompositeFieldContainer[Record]
    workspace_records: _containers.RepeatedCompositeFieldContainer[Record]
    memories: _containers.RepeatedCompositeFieldContainer[_memory_pb2.RecallHit]
    omitted_records: _containers.RepeatedCompositeFieldContainer[OmittedRecord]
    omitted_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    consistency: _types_pb2.ConsistencyReport
    def __init__(self, global_records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., workspace_records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., memories: _Optional[_Iterable[_Union[_memory_pb2.RecallHit, _Mapping]]] = ..., omitted_records: _Optional[_Iterable[_Union[OmittedRecord, _Mapping]]] = ..., omitted_memory_ids: _Optional[_Iterable[int]] = ..., consistency: _Optional[_Union[_types_pb2.ConsistencyReport, _Mapping]] = ...) -> None: ...

class OmittedRecord(_message.Message):
    __slots__ = ("scope", "key", "bytes")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    bytes: int
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class UpdateGlobalRequest(_message.Message):
    __slots__ = ("tenant", "content", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    content: str
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., content: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class UpdateGlobalResponse(_message.Message):
    __slots__ = ("updated", "consistency_token")
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    updated: bool
    consistency_token: str
    def __init__(self, updated: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class UpdateWorkspaceRequest(_message.Message):
    __slots__ = ("tenant", "workspace", "changes", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    workspace: str
    changes: _containers.RepeatedCompositeFieldContainer[RecordChange]
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., workspace: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[RecordChange, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class UpdateWorkspaceResponse(_message.Message):
    __slots__ = ("applied", "consistency_token")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    applied: int
    consistency_token: str
    def __init__(self, applied: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class GetRecordRequest(_message.Message):
    __slots__ = ("tenant", "scope", "key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    key: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetRecordResponse(_message.Message):
    __slots__ = ("record", "generation")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    record: Record
    generation: int
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ..., generation: _Optional[int] = ...) -> None: ...

class ListRecordsRequest(_message.Message):
    __slots__ = ("tenant", "scope", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRecordsResponse(_message.Message):
    __slots__ = ("records", "generation", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    generation: int
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., generation: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class EditRecordsRequest(_message.Message):
    __slots__ = ("tenant", "scope", "expected_generation", "changes", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    expected_generation: int
    changes: _containers.RepeatedCompositeFieldContainer[RecordChange]
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., expected_generation: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[RecordChange, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class EditRecordsResponse(_message.Message):
    __slots__ = ("generation", "consistency_token")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    generation: int
    consistency_token: str
    def __init__(self, generation: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ConsolidateRequest(_message.Message):
    __slots__ = ("tenant", "scope", "expected_generation", "changes", "receipt_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    expected_generation: int
    changes: _containers.RepeatedCompositeFieldContainer[RecordChange]
    receipt_id: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., expected_generation: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[RecordChange, _Mapping]]] = ..., receipt_id: _Optional[str] = ...) -> None: ...

class ConsolidateResponse(_message.Message):
    __slots__ = ("generation", "already_applied", "consistency_token")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ALREADY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    generation: int
    already_applied: bool
    consistency_token: str
    def __init__(self, generation: _Optional[int] = ..., already_applied: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ConsolidateSessionRequest(_message.Message):
    __slots__ = ("tenant", "thread")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    thread: str
    def __init__(self, tenant: _Optional[str] = ..., thread: _Optional[str] = ...) -> None: ...

class SessionScopeOutcome(_message.Message):
    __slots__ = ("thread", "scope", "receipt_id", "outcome", "generation", "model_calls", "conflicts")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[SessionScopeOutcome.Outcome]
        OUTCOME_APPLIED: _ClassVar[SessionScopeOutcome.Outcome]
        OUTCOME_ALREADY_APPLIED: _ClassVar[SessionScopeOutcome.Outcome]
        OUTCOME_NOTHING_NEW: _ClassVar[SessionScopeOutcome.Outcome]
        OUTCOME_GAVE_UP: _ClassVar[SessionScopeOutcome.Outcome]
    OUTCOME_UNSPECIFIED: SessionScopeOutcome.Outcome
    OUTCOME_APPLIED: SessionScopeOutcome.Outcome
    OUTCOME_ALREADY_APPLIED: SessionScopeOutcome.Outcome
    OUTCOME_NOTHING_NEW: SessionScopeOutcome.Outcome
    OUTCOME_GAVE_UP: SessionScopeOutcome.Outcome
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    thread: str
    scope: str
    receipt_id: str
    outcome: SessionScopeOutcome.Outcome
    generation: int
    model_calls: int
    conflicts: int
    def __init__(self, thread: _Optional[str] = ..., scope: _Optional[str] = ..., receipt_id: _Optional[str] = ..., outcome: _Optional[_Union[SessionScopeOutcome.Outcome, str]] = ..., generation: _Optional[int] = ..., model_calls: _Optional[int] = ..., conflicts: _Optional[int] = ...) -> None: ...

class ConsolidateSessionResponse(_message.Message):
    __slots__ = ("scopes", "consistency_token")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedCompositeFieldContainer[SessionScopeOutcome]
    consistency_token: str
    def __init__(self, scopes: _Optional[_Iterable[_Union[SessionScopeOutcome, _Mapping]]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListScopesRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ScopeSummary(_message.Message):
    __slots__ = ("scope", "generation", "records")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    scope: str
    generation: int
    records: int
    def __init__(self, scope: _Optional[str] = ..., generation: _Optional[int] = ..., records: _Optional[int] = ...) -> None: ...

class ListScopesResponse(_message.Message):
    __slots__ = ("scopes",)
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedCompositeFieldContainer[ScopeSummary]
    def __init__(self, scopes: _Optional[_Iterable[_Union[ScopeSummary, _Mapping]]] = ...) -> None: ...
