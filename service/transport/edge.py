"""The server interceptor at the edge: authentication, tenant authorisation, error mapping.

Health checking and reflection are exempt (Kubernetes probes carry no credentials). For every
other call the token is checked first, then the request's ``tenant`` against the token's
tenants (before any handler runs, so nothing about a forbidden tenant is ever looked up), then
the handler runs and any ``MnemosyneError`` becomes a rich status; anything else becomes INTERNAL
with no detail leaked to the caller.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import grpc

from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.observability import logs
from mnemosyne.transport.admission import Admission
from mnemosyne.transport.auth import Principal, TokenAuthenticator
from mnemosyne.transport.errors import rich_status

log = logging.getLogger("mnemosyne.rpc")

EXEMPT_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
ADMIN_METHODS = frozenset({"/mnemosyne.v1.AdminService/ListTenants", "/mnemosyne.v1.AdminService/AggregateStats"})


def _authorization(details: grpc.HandlerCallDetails) -> str | None:
    for key, value in details.invocation_metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


class _Undecodable:
    """What the request decoder gives for bytes it cannot take: the refusal, raised after auth."""

    __slots__ = ("error",)

    def __init__(self, error: MnemosyneError) -> None:
        self.error = error


def _decoder(deserializer: Callable[[bytes], Any], method: str, max_request_bytes: int) -> Callable[[bytes], Any]:
    """gRPC's request deserializer, turning what it cannot decode (a truncated message, invalid
    UTF-8 in a string field) or a request above the size limit into a refusal with a reason
    instead of gRPC's own INTERNAL "Exception deserializing request!"."""

    def decode(data: bytes) -> Any:
        if len(data) > max_request_bytes:
            return _Undecodable(
                InvalidArgument(
                    f"the request has {len(data)} bytes; the limit is {max_request_bytes} (max_request_bytes): "
                    "split it, e.g. a large RetainBatch into several",
                    reason="REQUEST_TOO_LARGE",
                )
            )
        try:
            return deserializer(data)
        except Exception as exc:
            return _Undecodable(
                InvalidArgument(
                    f"the request to {method} could not be decoded ({type(exc).__name__}): send a complete, valid "
                    "protobuf message; string fields must be valid UTF-8",
                    reason="REQUEST_UNDECODABLE",
                )
            )

    return decode


class EdgeInterceptor(grpc.ServerInterceptor):
    def __init__(
        self, authenticator: TokenAuthenticator | None, admission: Admission | None = None, *, max_request_bytes: int
    ) -> None:
        self._authenticator = authenticator
        self._admission = admission or Admission()
        self._max_request_bytes = max_request_bytes

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        method = details.method
        if handler is None or method.startswith(EXEMPT_PREFIXES):
            return handler
        self._admission.note_arrival()
        admission = self._admission
        principal: Principal | None = None
        auth_error: MnemosyneError | None = None
        if self._authenticator is not None:
            try:
                principal = self._authenticator.authenticate(_authorization(details))
            except MnemosyneError as exc:
                auth_error = exc

        def admit(request: Any) -> None:
            if auth_error is not None:
                raise auth_error
            if isinstance(request, _Undecodable):
                raise request.error
            if principal is None:
                return
            if method in ADMIN_METHODS:
                principal.check_admin()
            tenant = getattr(request, "tenant", None)
            if tenant is not None:
                principal.check_tenant(tenant)

        def fail(context: grpc.ServicerContext, exc: BaseException) -> None:
            # Servicers raise domain errors and never call context.abort themselves, so every
            # exception seen here is either a domain error or a fault of ours.
            if isinstance(exc, MnemosyneError):
                logs.note_failure_reason(exc.reason)
                context.abort_with_status(rich_status(exc))
            if isinstance(exc, NotImplementedError):  # generated base class of a pending service
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented yet")
            log.exception("unhandled error in %s", method)
            logs.note_failure_reason("INTERNAL")
            context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")

        decode = _decoder(handler.request_deserializer, method, self._max_request_bytes)
        if handler.unary_unary:
            inner = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    admission.enter()
                except Exception as exc:
                    fail(context, exc)
                try:
                    admit(request)
                    return inner(request, context)
                except Exception as exc:
                    fail(context, exc)
                finally:
                    admission.leave()

            return grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=decode, response_serializer=handler.response_serializer
            )
        if handler.unary_stream:
            inner_stream = handler.unary_stream

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                try:
                    admission.enter()
                except Exception as exc:
                    fail(context, exc)
                try:
                    admit(request)
                    yield from inner_stream(request, context)
                except Exception as exc:
                    fail(context, exc)
                finally:
                    admission.leave()

            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=decode, response_serializer=handler.response_serializer
            )
        return handler

