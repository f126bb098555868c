from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExpiryPolicy(_message.Message):
    __slots__ = ("default_ttl_seconds", "update_extends", "grace_seconds")
    DEFAULT_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_EXTENDS_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    default_ttl_seconds: int
    update_extends: bool
    grace_seconds: int
    def __init__(self, default_ttl_seconds: _Optional[int] = ..., update_extends: _Optional[bool] = ..., grace_seconds: _Optional[int] = ...) -> None: ...

class GetExpiryPolicyRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class GetExpiryPolicyResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: ExpiryPolicy
    def __init__(self, policy: _Optional[_Union[ExpiryPolicy, _Mapping]] = ...) -> None: ...

class SetExpiryPolicyRequest(_message.Message):
    __slots__ = ("tenant", "policy")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    policy: ExpiryPolicy
    def __init__(self, tenant: _Optional[str] = ..., policy: _Optional[_Union[ExpiryPolicy, _Mapping]] = ...) -> None: ...

class SetExpiryPolicyResponse(_message.Message):
    __slots__ = ("policy", "consistency_token")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    policy: ExpiryPolicy
    consistency_token: str
    def __init__(self, policy: _Optional[_Union[ExpiryPolicy, _Mapping]] = ..., consistency_token: _Optional[str] = ...) -> None: ...
