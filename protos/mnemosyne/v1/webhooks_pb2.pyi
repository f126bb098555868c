from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WebhookKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEBHOOK_KIND_UNSPECIFIED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_MEMORY_CREATED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_MEMORY_UPDATED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_MEMORY_FORGOTTEN: _ClassVar[WebhookKind]
    WEBHOOK_KIND_MEMORY_EXPIRED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_RECORD_CHANGED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_FAST_WRITE_SUCCEEDED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_FAST_WRITE_FAILED: _ClassVar[WebhookKind]
    WEBHOOK_KIND_CONSOLIDATION_APPLIED: _ClassVar[WebhookKind]
WEBHOOK_KIND_UNSPECIFIED: WebhookKind
WEBHOOK_KIND_MEMORY_CREATED: WebhookKind
WEBHOOK_KIND_MEMORY_UPDATED: WebhookKind
WEBHOOK_KIND_MEMORY_FORGOTTEN: WebhookKind
WEBHOOK_KIND_MEMORY_EXPIRED: WebhookKind
WEBHOOK_KIND_RECORD_CHANGED: WebhookKind
WEBHOOK_KIND_FAST_WRITE_SUCCEEDED: WebhookKind
WEBHOOK_KIND_FAST_WRITE_FAILED: WebhookKind
WEBHOOK_KIND_CONSOLIDATION_APPLIED: WebhookKind

class WebhookSecret(_message.Message):
    __slots__ = ("id", "hint", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    hint: str
    created_at: float
    def __init__(self, id: _Optional[int] = ..., hint: _Optional[str] = ..., created_at: _Optional[float] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ("id", "url", "kinds", "include_text", "secrets", "created_at", "pending_deliveries", "failing_since", "paused_at", "pause_reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TEXT_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    FAILING_SINCE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_AT_FIELD_NUMBER: _ClassVar[int]
    PAUSE_REASON_FIELD_NUMBER: _ClassVar[int]
    id: int
    url: str
    kinds: _containers.RepeatedScalarFieldContainer[WebhookKind]
    include_text: bool
    secrets: _containers.RepeatedCompositeFieldContainer[WebhookSecret]
    created_at: float
    pending_deliveries: int
    failing_since: float
    paused_at: float
    pause_reason: str
    def __init__(self, id: _Optional[int] = ..., url: _Optional[str] = ..., kinds: _Optional[_Iterable[_Union[WebhookKind, str]]] = ..., include_text: _Optional[bool] = ..., secrets: _Optional[_Iterable[_Union[WebhookSecret, _Mapping]]] = ..., created_at: _Optional[float] = ..., pending_deliveries: _Optional[int] = ..., failing_since: _Optional[float] = ..., paused_at: _Optional[float] = ..., pause_reason: _Optional[str] = ...) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("tenant", "url", "kinds", "include_text", "secrets")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TEXT_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    url: str
    kinds: _containers.RepeatedScalarFieldContainer[WebhookKind]
    include_text: bool
    secrets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[str] = ..., url: _Optional[str] = ..., kinds: _Optional[_Iterable[_Union[WebhookKind, str]]] = ..., include_text: _Optional[bool] = ..., secrets: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secrets", "consistency_token")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    secrets: _containers.RepeatedScalarFieldContainer[str]
    consistency_token: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., secrets: _Optional[_Iterable[str]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks",)
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[Webhook]
    def __init__(self, webhooks: _Optional[_Iterable[_Union[Webhook, _Mapping]]] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("tenant", "webhook_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    webhook_id: int
    def __init__(self, tenant: _Optional[str] = ..., webhook_id: _Optional[int] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ("deleted", "consistency_token")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    consistency_token: str
    def __init__(self, deleted: _Optional[bool] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class RotateWebhookSecretRequest(_message.Message):
    __slots__ = ("tenant", "webhook_id", "secret", "retire_secret_ids")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    RETIRE_SECRET_IDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    webhook_id: int
    secret: str
    retire_secret_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tenant: _Optional[str] = ..., webhook_id: _Optional[int] = ..., secret: _Optional[str] = ..., retire_secret_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class RotateWebhookSecretResponse(_message.Message):
    __slots__ = ("webhook", "secret", "consistency_token")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    secret: str
    consistency_token: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., secret: _Optional[str] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ResumeWebhookRequest(_message.Message):
    __slots__ = ("tenant", "webhook_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    webhook_id: int
    def __init__(self, tenant: _Optional[str] = ..., webhook_id: _Optional[int] = ...) -> None: ...

class ResumeWebhookResponse(_message.Message):
    __slots__ = ("webhook", "consistency_token")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    consistency_token: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...

class ListWebhookDeliveriesRequest(_message.Message):
    __slots__ = ("tenant", "webhook_id", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    webhook_id: int
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., webhook_id: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("delivery_id", "kind", "at", "delivered", "attempts", "next_attempt_at", "last_attempt_at", "last_status_code", "last_error", "delivered_at", "memory_id", "event_id")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    kind: WebhookKind
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
    def __init__(self, delivery_id: _Optional[str] = ..., kind: _Optional[_Union[WebhookKind, str]] = ..., at: _Optional[float] = ..., delivered: _Optional[bool] = ..., attempts: _Optional[int] = ..., next_attempt_at: _Optional[float] = ..., last_attempt_at: _Optional[float] = ..., last_status_code: _Optional[int] = ..., last_error: _Optional[str] = ..., delivered_at: _Optional[float] = ..., memory_id: _Optional[int] = ..., event_id: _Optional[int] = ...) -> None: ...

class ListWebhookDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[WebhookDelivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[WebhookDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
