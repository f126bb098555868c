import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mnemosyne.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RevisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REVISION_KIND_UNSPECIFIED: _ClassVar[RevisionKind]
    REVISION_KIND_RETAINED: _ClassVar[RevisionKind]
    REVISION_KIND_UPDATED: _ClassVar[RevisionKind]
    REVISION_KIND_REVERTED: _ClassVar[RevisionKind]
    REVISION_KIND_SUPERSEDED: _ClassVar[RevisionKind]
    REVISION_KIND_MERGED: _ClassVar[RevisionKind]
REVISION_KIND_UNSPECIFIED: RevisionKind
REVISION_KIND_RETAINED: RevisionKind
REVISION_KIND_UPDATED: RevisionKind
REVISION_KIND_REVERTED: RevisionKind
REVISION_KIND_SUPERSEDED: RevisionKind
REVISION_KIND_MERGED: RevisionKind

class Changer(_message.Message):
    __slots__ = ("surface", "token_name")
    SURFACE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_NAME_FIELD_NUMBER: _ClassVar[int]
    surface: str
    token_name: str
    def __init__(self, surface: _Optional[str] = ..., token_name: _Optional[str] = ...) -> None: ...

class MemoryRevision(_message.Message):
    __slots__ = ("revision", "kind", "at", "by", "changed", "version", "text", "metadata", "expires_at", "ledger_seq", "related_memory_id", "reverted_to")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REVISION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SEQ_FIELD_NUMBER: _ClassVar[int]
    RELATED_MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    REVERTED_TO_FIELD_NUMBER: _ClassVar[int]
    revision: int
    kind: RevisionKind
    at: _timestamp_pb2.Timestamp
    by: Changer
    changed: _containers.RepeatedScalarFieldContainer[str]
    version: int
    text: str
    metadata: _containers.ScalarMap[str, str]
    expires_at: _timestamp_pb2.Timestamp
    ledger_seq: int
    related_memory_id: int
    reverted_to: int
    def __init__(self, revision: _Optional[int] = ..., kind: _Optional[_Union[RevisionKind, str]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., by: _Optional[_Union[Changer, _Mapping]] = ..., changed: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ledger_seq: _Optional[int] = ..., related_memory_id: _Optional[int] = ..., reverted_to: _Optional[int] = ...) -> None: ...

class ListMemoryRevisionsRequest(_message.Message):
    __slots__ = ("tenant", "memory_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ...) -> None: ...

class ListMemoryRevisionsResponse(_message.Message):
    __slots__ = ("revisions",)
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[MemoryRevision]
    def __init__(self, revisions: _Optional[_Iterable[_Union[MemoryRevision, _Mapping]]] = ...) -> None: ...

class RevertMemoryRequest(_message.Message):
    __slots__ = ("tenant", "memory_id", "revision", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    revision: int
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ..., revision: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class RevertMemoryResponse(_message.Message):
    __slots__ = ("memory", "revision", "near_duplicate_of", "supersedes", "consistency_token")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    NEAR_DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memory: _types_pb2.Memory
    revision: int
    near_duplicate_of: _containers.RepeatedScalarFieldContainer[int]
    supersedes: _containers.RepeatedScalarFieldContainer[int]
    consistency_token: str
    def __init__(self, memory: _Optional[_Union[_types_pb2.Memory, _Mapping]] = ..., revision: _Optional[int] = ..., near_duplicate_of: _Optional[_Iterable[int]] = ..., supersedes: _Optional[_Iterable[int]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class RecordRevision(_message.Message):
    __slots__ = ("generation", "op", "content", "at", "by", "source", "ledger_seq")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SEQ_FIELD_NUMBER: _ClassVar[int]
    generation: int
    op: str
    content: str
    at: _timestamp_pb2.Timestamp
    by: Changer
    source: str
    ledger_seq: int
    def __init__(self, generation: _Optional[int] = ..., op: _Optional[str] = ..., content: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., by: _Optional[_Union[Changer, _Mapping]] = ..., source: _Optional[str] = ..., ledger_seq: _Optional[int] = ...) -> None: ...

class ListRecordRevisionsRequest(_message.Message):
    __slots__ = ("tenant", "scope", "key")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    key: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class ListRecordRevisionsResponse(_message.Message):
    __slots__ = ("revisions", "generation")
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[RecordRevision]
    generation: int
    def __init__(self, revisions: _Optional[_Iterable[_Union[RecordRevision, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...

class RevertRecordRequest(_message.Message):
    __slots__ = ("tenant", "scope", "key", "generation", "expected_generation", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    key: str
    generation: int
    expected_generation: int
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., key: _Optional[str] = ..., generation: _Optional[int] = ..., expected_generation: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class RevertRecordResponse(_message.Message):
    __slots__ = ("generation", "consistency_token")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    generation: int
    consistency_token: str
    def __init__(self, generation: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...
