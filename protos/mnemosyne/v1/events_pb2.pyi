import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_STATUS_UNSPECIFIED: _ClassVar[EventStatus]
    PENDING: _ClassVar[EventStatus]
    RUNNING: _ClassVar[EventStatus]
    SUCCEEDED: _ClassVar[EventStatus]
    FAILED: _ClassVar[EventStatus]
EVENT_STATUS_UNSPECIFIED: EventStatus
PENDING: EventStatus
RUNNING: EventStatus
SUCCEEDED: EventStatus
FAILED: EventStatus

class Event(_message.Message):
    __slots__ = ("event_id", "status", "kind", "accepted_at", "finished_at", "created_memory_ids", "duplicate_of_memory_ids", "merged_into_memory_ids", "near_duplicate_of", "error_reason", "error_message", "attempts", "latency_ms", "sequence", "extracted")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    MERGED_INTO_MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    NEAR_DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EXTRACTED_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    status: EventStatus
    kind: str
    accepted_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    created_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    duplicate_of_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    merged_into_memory_ids: _containers.RepeatedScalarFieldContainer[int]
    near_duplicate_of: _containers.RepeatedScalarFieldContainer[int]
    error_reason: str
    error_message: str
    attempts: int
    latency_ms: float
    sequence: int
    extracted: bool
    def __init__(self, event_id: _Optional[int] = ..., status: _Optional[_Union[EventStatus, str]] = ..., kind: _Optional[str] = ..., accepted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_memory_ids: _Optional[_Iterable[int]] = ..., duplicate_of_memory_ids: _Optional[_Iterable[int]] = ..., merged_into_memory_ids: _Optional[_Iterable[int]] = ..., near_duplicate_of: _Optional[_Iterable[int]] = ..., error_reason: _Optional[str] = ..., error_message: _Optional[str] = ..., attempts: _Optional[int] = ..., latency_ms: _Optional[float] = ..., sequence: _Optional[int] = ..., extracted: _Optional[bool] = ...) -> None: ...

class GetEventRequest(_message.Message):
    __slots__ = ("tenant", "event_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    event_id: int
    def __init__(self, tenant: _Optional[str] = ..., event_id: _Optional[int] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("tenant", "status", "accepted_after", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AFTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    status: EventStatus
    accepted_after: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., status: _Optional[_Union[EventStatus, str]] = ..., accepted_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("tenant", "after_event_id", "after_sequence")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    after_event_id: int
    after_sequence: int
    def __init__(self, tenant: _Optional[str] = ..., after_event_id: _Optional[int] = ..., after_sequence: _Optional[int] = ...) -> None: ...
