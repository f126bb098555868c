from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class HotPathRequest(_message.Message):
    __slots__ = ("tenant", "timeout_seconds")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    timeout_seconds: float
    def __init__(self, tenant: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class HotPathStatus(_message.Message):
    __slots__ = ("enabled", "queue_depth", "oldest_pending_seconds", "accepted", "succeeded", "failed", "duplicates", "writes", "model_calls", "awaited")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    AWAITED_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    queue_depth: int
    oldest_pending_seconds: float
    accepted: int
    succeeded: int
    failed: int
    duplicates: int
    writes: int
    model_calls: int
    awaited: int
    def __init__(self, enabled: _Optional[bool] = ..., queue_depth: _Optional[int] = ..., oldest_pending_seconds: _Optional[float] = ..., accepted: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., duplicates: _Optional[int] = ..., writes: _Optional[int] = ..., model_calls: _Optional[int] = ..., awaited: _Optional[int] = ...) -> None: ...

class FlushRequest(_message.Message):
    __slots__ = ("tenant", "timeout_seconds", "consistency_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    timeout_seconds: float
    consistency_token: str
    def __init__(self, tenant: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class FlushResponse(_message.Message):
    __slots__ = ("flushed", "succeeded", "failed", "failed_event_ids")
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    flushed: int
    succeeded: int
    failed: int
    failed_event_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, flushed: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., failed_event_ids: _Optional[_Iterable[int]] = ...) -> None: ...
