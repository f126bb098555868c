import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Fact(_message.Message):
    __slots__ = ("kind", "value", "normalized")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    value: str
    normalized: str
    def __init__(self, kind: _Optional[str] = ..., value: _Optional[str] = ..., normalized: _Optional[str] = ...) -> None: ...

class Triple(_message.Message):
    __slots__ = ("subject", "predicate", "object")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    subject: str
    predicate: str
    object: str
    def __init__(self, subject: _Optional[str] = ..., predicate: _Optional[str] = ..., object: _Optional[str] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "scope", "text", "metadata", "created_at", "facts", "triples", "forgotten", "superseded_by", "superseded_at", "merged_into", "occurred_at", "thread", "updated_at", "speaker", "forgotten_at", "expires_at")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    TRIPLES_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_AT_FIELD_NUMBER: _ClassVar[int]
    MERGED_INTO_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    scope: str
    text: str
    metadata: _containers.ScalarMap[str, str]
    created_at: _timestamp_pb2.Timestamp
    facts: _containers.RepeatedCompositeFieldContainer[Fact]
    triples: _containers.RepeatedCompositeFieldContainer[Triple]
    forgotten: bool
    superseded_by: int
    superseded_at: _timestamp_pb2.Timestamp
    merged_into: int
    occurred_at: _timestamp_pb2.Timestamp
    thread: ThreadRef
    updated_at: _timestamp_pb2.Timestamp
    speaker: str
    forgotten_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., scope: _Optional[str] = ..., text: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., facts: _Optional[_Iterable[_Union[Fact, _Mapping]]] = ..., triples: _Optional[_Iterable[_Union[Triple, _Mapping]]] = ..., forgotten: _Optional[bool] = ..., superseded_by: _Optional[int] = ..., superseded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., merged_into: _Optional[int] = ..., occurred_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., thread: _Optional[_Union[ThreadRef, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., speaker: _Optional[str] = ..., forgotten_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ThreadRef(_message.Message):
    __slots__ = ("id", "position")
    ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    id: str
    position: int
    def __init__(self, id: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class ConversationMessage(_message.Message):
    __slots__ = ("role", "content", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RetainResult(_message.Message):
    __slots__ = ("status", "memory_id", "event_id", "error_reason", "error_message", "near_duplicate_of", "supersedes")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[RetainResult.Status]
        CREATED: _ClassVar[RetainResult.Status]
        DUPLICATE: _ClassVar[RetainResult.Status]
        ENQUEUED: _ClassVar[RetainResult.Status]
        INVALID: _ClassVar[RetainResult.Status]
    STATUS_UNSPECIFIED: RetainResult.Status
    CREATED: RetainResult.Status
    DUPLICATE: RetainResult.Status
    ENQUEUED: RetainResult.Status
    INVALID: RetainResult.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NEAR_DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDES_FIELD_NUMBER: _ClassVar[int]
    status: RetainResult.Status
    memory_id: int
    event_id: int
    error_reason: str
    error_message: str
    near_duplicate_of: _containers.RepeatedScalarFieldContainer[int]
    supersedes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, status: _Optional[_Union[RetainResult.Status, str]] = ..., memory_id: _Optional[int] = ..., event_id: _Optional[int] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ..., near_duplicate_of: _Optional[_Iterable[int]] = ..., supersedes: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsistencyReport(_message.Message):
    __slots__ = ("failed_event_ids", "waited_ms")
    FAILED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    failed_event_ids: _containers.RepeatedScalarFieldContainer[int]
    waited_ms: float
    def __init__(self, failed_event_ids: _Optional[_Iterable[int]] = ..., waited_ms: _Optional[float] = ...) -> None: ...
