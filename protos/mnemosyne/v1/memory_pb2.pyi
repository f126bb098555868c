import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mnemosyne.v1 import expiry_pb2 as _expiry_pb2
from mnemosyne.v1 import revisions_pb2 as _revisions_pb2
from mnemosyne.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecallMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECALL_MODE_UNSPECIFIED: _ClassVar[RecallMode]
    RECALL_MODE_HYBRID: _ClassVar[RecallMode]
    RECALL_MODE_VECTOR: _ClassVar[RecallMode]
    RECALL_MODE_TEXT: _ClassVar[RecallMode]
RECALL_MODE_UNSPECIFIED: RecallMode
RECALL_MODE_HYBRID: RecallMode
RECALL_MODE_VECTOR: RecallMode
RECALL_MODE_TEXT: RecallMode

class RetainRequest(_message.Message):
    __slots__ = ("tenant", "text", "scope", "metadata", "request_id", "fast", "messages", "occurred_at", "thread", "speaker", "expires_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FAST_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    text: str
    scope: str
    metadata: _containers.ScalarMap[str, str]
    request_id: str
    fast: bool
    messages: _containers.RepeatedCompositeFieldContainer[_types_pb2.ConversationMessage]
    occurred_at: _timestamp_pb2.Timestamp
    thread: _types_pb2.ThreadRef
    speaker: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, tenant: _Optional[str] = ..., text: _Optional[str] = ..., scope: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., fast: _Optional[bool] = ..., messages: _Optional[_Iterable[_Union[_types_pb2.ConversationMessage, _Mapping]]] = ..., occurred_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., thread: _Optional[_Union[_types_pb2.ThreadRef, _Mapping]] = ..., speaker: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetainResponse(_message.Message):
    __slots__ = ("result", "consistency_token")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    result: _types_pb2.RetainResult
    consistency_token: str
    def __init__(self, result: _Optional[_Union[_types_pb2.RetainResult, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class RetainItem(_message.Message):
    __slots__ = ("text", "scope", "metadata", "occurred_at", "thread", "speaker", "expires_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    text: str
    scope: str
    metadata: _containers.ScalarMap[str, str]
    occurred_at: _timestamp_pb2.Timestamp
    thread: _types_pb2.ThreadRef
    speaker: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, text: _Optional[str] = ..., scope: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., occurred_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., thread: _Optional[_Union[_types_pb2.ThreadRef, _Mapping]] = ..., speaker: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetainBatchRequest(_message.Message):
    __slots__ = ("tenant", "items", "request_id", "fast")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FAST_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    items: _containers.RepeatedCompositeFieldContainer[RetainItem]
    request_id: str
    fast: bool
    def __init__(self, tenant: _Optional[str] = ..., items: _Optional[_Iterable[_Union[RetainItem, _Mapping]]] = ..., request_id: _Optional[str] = ..., fast: _Optional[bool] = ...) -> None: ...

class RetainBatchResponse(_message.Message):
    __slots__ = ("results", "consistency_token")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_types_pb2.RetainResult]
    consistency_token: str
    def __init__(self, results: _Optional[_Iterable[_Union[_types_pb2.RetainResult, _Mapping]]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("tenant", "query", "k", "scopes", "metadata_equals", "mode", "consistency_token")
    class MetadataEqualsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    METADATA_EQUALS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    query: str
    k: int
    scopes: _containers.RepeatedScalarFieldContainer[str]
    metadata_equals: _containers.ScalarMap[str, str]
    mode: RecallMode
    consistency_token: str
    def __init__(self, tenant: _Optional[str] = ..., query: _Optional[str] = ..., k: _Optional[int] = ..., scopes: _Optional[_Iterable[str]] = ..., metadata_equals: _Optional[_Mapping[str, str]] = ..., mode: _Optional[_Union[RecallMode, str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class RecallHit(_message.Message):
    __slots__ = ("memory", "score", "vector_score", "text_score")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SCORE_FIELD_NUMBER: _ClassVar[int]
    TEXT_SCORE_FIELD_NUMBER: _ClassVar[int]
    memory: _types_pb2.Memory
    score: float
    vector_score: float
    text_score: float
    def __init__(self, memory: _Optional[_Union[_types_pb2.Memory, _Mapping]] = ..., score: _Optional[float] = ..., vector_score: _Optional[float] = ..., text_score: _Optional[float] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ("hits", "omitted_memory_ids", "consistency")
    HITS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[RecallHit]
    omitted_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    consistency: _types_pb2.ConsistencyReport
    def __init__(self, hits: _Optional[_Iterable[_Union[RecallHit, _Mapping]]] = ..., omitted_memory_ids: _Optional[_Iterable[int]] = ..., consistency: _Optional[_Union[_types_pb2.ConsistencyReport, _Mapping]] = ...) -> None: ...

class GetMemoryRequest(_message.Message):
    __slots__ = ("tenant", "memory_id", "consistency_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    consistency_token: str
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class GetMemoryResponse(_message.Message):
    __slots__ = ("memory", "consistency")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    memory: _types_pb2.Memory
    consistency: _types_pb2.ConsistencyReport
    def __init__(self, memory: _Optional[_Union[_types_pb2.Memory, _Mapping]] = ..., consistency: _Optional[_Union[_types_pb2.ConsistencyReport, _Mapping]] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("tenant", "scope", "page_size", "page_token", "include_forgotten", "newest_first", "thread", "metadata_equals", "consistency_token")
    class MetadataEqualsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_EQUALS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scope: str
    page_size: int
    page_token: str
    include_forgotten: bool
    newest_first: bool
    thread: str
    metadata_equals: _containers.ScalarMap[str, str]
    consistency_token: str
    def __init__(self, tenant: _Optional[str] = ..., scope: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_forgotten: _Optional[bool] = ..., newest_first: _Optional[bool] = ..., thread: _Optional[str] = ..., metadata_equals: _Optional[_Mapping[str, str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "next_page_token", "consistency")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[_types_pb2.Memory]
    next_page_token: str
    consistency: _types_pb2.ConsistencyReport
    def __init__(self, memories: _Optional[_Iterable[_Union[_types_pb2.Memory, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., consistency: _Optional[_Union[_types_pb2.ConsistencyReport, _Mapping]] = ...) -> None: ...

class ForgetMemoryRequest(_message.Message):
    __slots__ = ("tenant", "memory_id", "request_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForgetMemoryResponse(_message.Message):
    __slots__ = ("memory_id", "forgotten", "consistency_token")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memory_id: int
    forgotten: bool
    consistency_token: str
    def __init__(self, memory_id: _Optional[int] = ..., forgotten: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class UpdateMemoryRequest(_message.Message):
    __slots__ = ("tenant", "memory_id", "text", "metadata", "replace_metadata", "request_id", "expires_at", "clear_expires_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REPLACE_METADATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CLEAR_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    text: str
    metadata: _containers.ScalarMap[str, str]
    replace_metadata: bool
    request_id: str
    expires_at: _timestamp_pb2.Timestamp
    clear_expires_at: bool
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., replace_metadata: _Optional[bool] = ..., request_id: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., clear_expires_at: _Optional[bool] = ...) -> None: ...

class UpdateMemoryResponse(_message.Message):
    __slots__ = ("memory", "updated", "near_duplicate_of", "supersedes", "consistency_token")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    NEAR_DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memory: _types_pb2.Memory
    updated: bool
    near_duplicate_of: _containers.RepeatedScalarFieldContainer[int]
    supersedes: _containers.RepeatedScalarFieldContainer[int]
    consistency_token: str
    def __init__(self, memory: _Optional[_Union[_types_pb2.Memory, _Mapping]] = ..., updated: _Optional[bool] = ..., near_duplicate_of: _Optional[_Iterable[int]] = ..., supersedes: _Optional[_Iterable[int]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ForgetMemoriesRequest(_message.Message):
    __slots__ = ("tenant", "metadata_equals", "scope", "request_id")
    class MetadataEqualsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    METADATA_EQUALS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    metadata_equals: _containers.ScalarMap[str, str]
    scope: str
    request_id: str
    def __init__(self, tenant: _Optional[str] = ..., metadata_equals: _Optional[_Mapping[str, str]] = ..., scope: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForgetMemoriesResponse(_message.Message):
    __slots__ = ("forgotten_count", "consistency_token")
    FORGOTTEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    forgotten_count: int
    consistency_token: str
    def __init__(self, forgotten_count: _Optional[int] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListMemoryVersionsRequest(_message.Message):
    __slots__ = ("tenant", "memory_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    memory_id: int
    def __init__(self, tenant: _Optional[str] = ..., memory_id: _Optional[int] = ...) -> None: ...

class MemoryVersion(_message.Message):
    __slots__ = ("version", "text", "metadata", "at", "current")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    version: int
    text: str
    metadata: _containers.ScalarMap[str, str]
    at: _timestamp_pb2.Timestamp
    current: bool
    def __init__(self, version: _Optional[int] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., current: _Optional[bool] = ...) -> None: ...

class ListMemoryVersionsResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[MemoryVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[MemoryVersion, _Mapping]]] = ...) -> None: ...
