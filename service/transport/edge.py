"""The edge: every call of our services passes here, over gRPC or HTTP, in this order.

1. telemetry: the request id (the client's ``x-request-id`` when sane, else a fresh one) is set
   for every log record of the call and echoed in its initial metadata when the client sent one;
2. the shutdown gate (admission): UNAVAILABLE / SHUTTING_DOWN once shutdown began;
3. the form of the request's ``tenant`` (TENANT_INVALID, whoever asks: it reveals nothing), then
   authentication, then a request that could not be decoded is refused (REQUEST_UNDECODABLE,
   REQUEST_TOO_LARGE), then authorisation of the admin methods and of the request's ``tenant``
   — before any handler runs, so nothing about a forbidden tenant is ever looked up;
4. the servicer method, run by its kind (transport/call.py): on a worker thread in the tenant's
   fair share, or on the event loop as a waiting call or a stream (of responses, or of requests:
   a client stream is authorised by its first message), each counted by admission;
5. errors: a ``MnemosyneError`` becomes its ``google.rpc.Status`` (transport/errors.py: the one
   table), with its reason in the access record; anything else is INTERNAL with no detail leaked;
6. telemetry again: the latency histogram by method and code, and the access record.

Steps 2-5 are the surface-independent methods ``begin``, ``answer``, ``answer_stream``,
``answer_client_stream`` and ``failure``; ``service`` wraps them into gRPC handlers and transport/http/json_api.py into HTTP
routes, so no rule here is written twice. Health checking and reflection are registered without
this edge: Kubernetes probes carry no credentials. The handlers are wrapped once, when the
services are registered (no interceptor runs per call).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2

from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.store.pool import validate_tenant
from mnemosyne.transport import telemetry
from mnemosyne.transport.admission import Admission, Lane
from mnemosyne.transport.auth import Principal, TokenAuthenticator
from mnemosyne.transport.call import Call
from mnemosyne.transport.cluster.forwarding import Forwarder, Relayed
from mnemosyne.transport.errors import rich_status, status_code_for, to_status_proto

log = logging.getLogger("mnemosyne.rpc")

ADMIN_METHODS = frozenset(
    {
        "/mnemosyne.v1.AdminService/ListTenants",
        "/mnemosyne.v1.AdminService/AggregateStats",
        "/mnemosyne.v1.AdminService/EraseTenant",
        "/mnemosyne.v1.AdminService/Backup",
        "/mnemosyne.v1.AdminService/ImportTenant",
        "/mnemosyne.v1.AdminService/MoveTenant",
        "/mnemosyne.v1.AdminService/ActivateTenant",
    }
)
# Requests that may leave ``tenant`` empty: an import then installs the manifest's tenant.
TENANT_OPTIONAL_METHODS = frozenset({"/mnemosyne.v1.AdminService/ImportTenant"})
# Asked of one member about its own file (a move's steps): answered there, never forwarded.
MEMBER_LOCAL_METHODS = frozenset({"/mnemosyne.v1.AdminService/MoveTenant", "/mnemosyne.v1.AdminService/ActivateTenant"})
SERVER = ""  # the admission key of calls that name no tenant (Ping, the admin fan-outs)


class Kind(enum.Enum):
    """How a servicer method runs (transport/call.py)."""

    BLOCKING = "blocking"  # a plain function: on a worker thread, in the tenant's fair share
    READING = "reading"  # a plain function marked @reading: on a reader thread, in the tenant's share
    SNAPSHOT_READ = "snapshot_read"  # marked @snapshot_read: on the event loop when alone and quick, else as READING
    WAITING = "waiting"  # an ``async def`` marked @waiting: on the event loop, counted as waiting
    ON_LOOP = "on_loop"  # an ``async def`` that never blocks (Ping)
    STREAM = "stream"  # an ``async def`` generator: a server stream


def kind_of(implementation: Callable[..., Any]) -> Kind:
    if inspect.isasyncgenfunction(implementation):
        return Kind.STREAM
    if not inspect.iscoroutinefunction(implementation):
        if getattr(implementation, "on_loop", False):
            return Kind.SNAPSHOT_READ
        return Kind.READING if getattr(implementation, "reading", False) else Kind.BLOCKING
    return Kind.WAITING if getattr(implementation, "waiting", False) else Kind.ON_LOOP


class Undecodable:
    """What a request decoder gives for bytes it cannot take: the refusal, raised after auth."""

    __slots__ = ("error",)

    def __init__(self, error: MnemosyneError) -> None:
        self.error = error


def too_large(size: int, max_request_bytes: int) -> Undecodable:
    return Undecodable(
        InvalidArgument(
            f"the request has {size} bytes; the limit is {max_request_bytes} (max_request_bytes): "
            "split it, e.g. a large RetainBatch into several",
            reason="REQUEST_TOO_LARGE",
        )
    )


def _decoder(deserializer: Callable[[bytes], Any], method: str, max_request_bytes: int) -> Callable[[bytes], Any]:
    """The request deserializer, turning what it cannot decode (a truncated message, invalid
    UTF-8 in a string field) or a request above the size limit into a refusal with a reason
    instead of gRPC's own error."""

    def decode(data: bytes) -> Any:
        if len(data) > max_request_bytes:
            return too_large(len(data), max_request_bytes)
        try:
            return deserializer(data)
        except Exception as exc:
            return Undecodable(
                InvalidArgument(
                    f"the request to {method} could not be decoded ({type(exc).__name__}): send a complete, valid "
                    "protobuf message; string fields must be valid UTF-8",
                    reason="REQUEST_UNDECODABLE",
                )
            )

    return decode


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("ascii", "replace")


class Outcome:
    """How a call ended, for the histogram and the access record."""

    __slots__ = ("code", "reason")

    def __init__(self) -> None:
        self.code = "OK"
        self.reason = ""


class Edge:
    def __init__(
        self,
        authenticator: TokenAuthenticator | None,
        admission: Admission,
        *,
        max_request_bytes: int,
        recorder: telemetry.Recorder,
        forwarder: Forwarder | None = None,
        finish_move: Callable[[Call], Awaitable[None]] | None = None,
    ) -> None:
        self._authenticator = authenticator
        self.forwarder = forwarder
        # A call for a tenant a move brought here, not active yet, first lets the move finish
        # itself (transport/cluster/moves.py ``MoveDriver.finish``).
        self._finish_move = finish_move
        self._admission = admission
        self.max_request_bytes = max_request_bytes
        self.recorder = recorder

    # -- the steps every call takes, whatever its transport ------------------------------------

    def begin(self, method: str, request: Any, metadata: Sequence[tuple[str, str]], deadline: float | None) -> Call:
        """Steps 2 and 3: admit the call and authorise it; its Call (pair with ``answer`` or
        ``answer_stream``, which let it go). Raises the refusal. ``deadline``: time.monotonic()."""
        self._admission.enter()
        try:
            if hasattr(request, "tenant") and (request.tenant or method not in TENANT_OPTIONAL_METHODS):
                # The form of the id first: a property of the request alone, so its refusal tells
                # nothing of the server's tenants or tokens; a malformed id is TENANT_INVALID
                # whoever asks, never TOKEN_MISSING or TENANT_FORBIDDEN.
                validate_tenant(request.tenant)
            principal = self.authenticate(next((v for k, v in metadata if k == "authorization"), None))
            if isinstance(request, Undecodable):
                raise request.error
            if principal is not None:
                if method in ADMIN_METHODS:
                    principal.check_admin()
                if hasattr(request, "tenant"):
                    principal.check_tenant(request.tenant)
            tenant = getattr(request, "tenant", SERVER)
            forward_to, pending = None, False
            if self.forwarder is not None:
                self.forwarder.arrived_by_hop(metadata)
                if tenant != SERVER and method not in MEMBER_LOCAL_METHODS and not getattr(request, "move_epoch", 0):
                    forward_to = self.forwarder.owner_elsewhere(tenant, metadata)
                    pending = forward_to is None and bool(self.forwarder.placement(tenant).pending_from)
        except BaseException:
            self._admission.leave()
            raise
        call = Call(
            metadata,
            tenant=tenant,
            admission=self._admission,
            deadline=deadline,
            principal=principal.name if principal is not None else "",
            reaches=principal.tenants if principal is not None else frozenset({"*"}),
        )
        call.method, call.forward_to, call.move_pending = method, forward_to, pending
        return call

    async def _settle(self, call: Call) -> None:
        if call.move_pending and self._finish_move is not None:
            await self._finish_move(call)

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller of an ``authorization`` value (None when the server checks no tokens);
        raises UNAUTHENTICATED. ``begin`` runs it for every call."""
        return None if self._authenticator is None else self._authenticator.authenticate(authorization)

    async def answer(self, kind: Kind, implementation: Callable[..., Any], request: Any, call: Call) -> Any:
        """Step 4 for a unary method: its response, or its exception. A call for a tenant another
        member owns is forwarded there (on the event loop: the owner's admission counts its work)."""
        admission = self._admission
        try:
            await self._settle(call)
            if call.forward_to is not None and self.forwarder is not None:
                return await self.forwarder.unary(call.forward_to, call.method, request, call)
            if kind is Kind.BLOCKING:
                return await admission.run(call.tenant, implementation, request, call)
            if kind is Kind.READING:
                return await admission.run(call.tenant, implementation, request, call, lane=Lane.READERS)
            if kind is Kind.SNAPSHOT_READ:
                return await admission.run(call.tenant, implementation, request, call, lane=Lane.LOOP)
            if kind is Kind.WAITING:
                with admission.waiting(call.tenant):
                    call.holds_place = True
                    return await implementation(request, call)
            return await implementation(request, call)
        finally:
            admission.leave()

    async def answer_stream(
        self, implementation: Callable[..., AsyncIterator[Any]], request: Any, call: Call
    ) -> AsyncIterator[Any]:
        """Step 4 for a server stream: its messages, counted as an open stream while it lasts."""
        try:
            with self._admission.stream(call.tenant):
                call.holds_place = True
                await self._settle(call)
                messages = (
                    self.forwarder.stream(call.forward_to, call.method, request, call)
                    if call.forward_to is not None and self.forwarder is not None
                    else implementation(request, call)
                )
                async for message in messages:
                    yield message
        finally:
            self._admission.leave()

    async def answer_client_stream(
        self, implementation: Callable[..., Awaitable[Any]], messages: AsyncIterator[Any], call: Call
    ) -> Any:
        """Step 4 for a client stream: its response, counted as an open stream while it lasts."""
        try:
            with self._admission.stream(call.tenant):
                call.holds_place = True
                await self._settle(call)
                if call.forward_to is not None and self.forwarder is not None:
                    return await self.forwarder.client_stream(call.forward_to, call.method, messages, call)
                return await implementation(messages, call)
        finally:
            self._admission.leave()

    @staticmethod
    def failure(exc: BaseException, outcome: Outcome, method: str) -> status_pb2.Status:
        """Step 5: the status an error answers with (noted in ``outcome``)."""
        if isinstance(exc, Relayed):  # the owner's answer to a forwarded call, as it came
            outcome.code = next((c.name for c in grpc.StatusCode if c.value[0] == exc.status.code), "UNKNOWN")
            outcome.reason = exc.reason
            return exc.status
        if isinstance(exc, MnemosyneError):
            outcome.code, outcome.reason = status_code_for(exc).name, exc.reason
            return to_status_proto(exc)
        log.error("unhandled error in %s", method, exc_info=exc)
        outcome.code = outcome.reason = "INTERNAL"
        return to_status_proto(MnemosyneError("internal error; the server log has the details", reason="INTERNAL"))

    # -- gRPC ------------------------------------------------------------------------------------

    def service(self, service: descriptor.ServiceDescriptor, servicer: object) -> grpc.GenericRpcHandler:
        """The gRPC handlers of every method of ``service``, each wrapped by the edge."""
        handlers = {}
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            request_type = message_factory.GetMessageClass(method.input_type)
            response_type = message_factory.GetMessageClass(method.output_type)
            decode = _decoder(request_type.FromString, path, self.max_request_bytes)
            implementation = getattr(servicer, method.name)
            if method.client_streaming:
                handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                    self._grpc_client_stream(path, implementation, request_type),
                    request_deserializer=decode,
                    response_serializer=_serializer(response_type),
                )
            elif method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._grpc_stream(path, implementation),
                    request_deserializer=decode,
                    response_serializer=_serializer(response_type),
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._grpc_unary(path, implementation),
                    request_deserializer=decode,
                    response_serializer=_serializer(response_type),
                )
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _grpc_begin(
        self, method: str, request: Any, context: grpc.aio.ServicerContext[Any, Any], metadata: list[tuple[str, str]]
    ) -> Call:
        remaining = context.time_remaining()
        call = self.begin(method, request, metadata, time.monotonic() + remaining if remaining is not None else None)
        call.answers_bytes = True  # a forwarded call's response passes through as the owner's bytes
        return call

    async def _grpc_fail(
        self, context: grpc.aio.ServicerContext[Any, Any], exc: BaseException, outcome: Outcome, method: str
    ) -> None:
        """Answer with the error's status (abort raises, ending the call)."""
        status = rich_status(self.failure(exc, outcome, method))
        await context.abort(status.code, status.details, status.trailing_metadata)

    @staticmethod
    async def _send_initial(
        context: grpc.aio.ServicerContext[Any, Any], call: Call | None, echo: tuple[tuple[str, str], ...]
    ) -> None:
        metadata = (*(call.initial_metadata if call else ()), *echo)
        if metadata:
            await context.send_initial_metadata(metadata)

    @classmethod
    async def _send_metadata(
        cls, context: grpc.aio.ServicerContext[Any, Any], call: Call, echo: tuple[tuple[str, str], ...]
    ) -> None:
        """A unary answer's initial and trailing metadata."""
        await cls._send_initial(context, call, echo)
        if call.trailing_metadata:
            context.set_trailing_metadata(tuple(call.trailing_metadata))

    def _grpc_unary(self, method: str, implementation: Callable[..., Any]) -> Callable[..., Any]:
        kind, recorder = kind_of(implementation), self.recorder

        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            metadata = _metadata(context)
            echo, token = recorder.begin(_sent_request_id(metadata))
            outcome = Outcome()
            try:
                call = self._grpc_begin(method, request, context, metadata)
                response = await self.answer(kind, implementation, request, call)
                await self._send_metadata(context, call, echo)
                return response
            except asyncio.CancelledError:
                outcome.code = "CANCELLED"  # the client went away
                raise
            except Exception as exc:
                await self._send_initial(context, None, echo)
                await self._grpc_fail(context, exc, outcome, method)
            finally:
                recorder.end(method, outcome.code, outcome.reason, started, token)

        return handle

    def _grpc_client_stream(
        self, method: str, implementation: Callable[..., Awaitable[Any]], request_type: Callable[[], Any]
    ) -> Callable[..., Any]:
        """A client stream (ImportTenant): its first message is admitted and authorised as a unary
        call's request is, and the servicer reads the messages (that one first) as an async
        iterator; a message that cannot be decoded ends the call with its refusal. Counted and
        bounded as an open stream. gRPC only (there is no JSON form of a client stream)."""
        recorder = self.recorder

        async def handle(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            metadata = _metadata(context)
            echo, token = recorder.begin(_sent_request_id(metadata))
            outcome = Outcome()
            try:
                stream = requests.__aiter__()
                first = await anext(stream, None)
                call = self._grpc_begin(method, first if first is not None else request_type(), context, metadata)

                async def messages() -> AsyncIterator[Any]:
                    if first is None:
                        raise InvalidArgument("the stream ended before its first message", reason="STREAM_EMPTY")
                    yield first
                    async for message in stream:
                        if isinstance(message, Undecodable):
                            raise message.error
                        yield message

                response = await self.answer_client_stream(implementation, messages(), call)
                await self._send_metadata(context, call, echo)
                return response
            except asyncio.CancelledError:
                outcome.code = "CANCELLED"  # the client went away
                raise
            except Exception as exc:
                await self._send_initial(context, None, echo)
                await self._grpc_fail(context, exc, outcome, method)
            finally:
                recorder.end(method, outcome.code, outcome.reason, started, token)

        return handle

    def _grpc_stream(self, method: str, implementation: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        recorder = self.recorder

        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            started = time.perf_counter()
            metadata = _metadata(context)
            echo, token = recorder.begin(_sent_request_id(metadata))
            outcome = Outcome()
            sent = False
            try:
                call = self._grpc_begin(method, request, context, metadata)
                async for message in self.answer_stream(implementation, request, call):
                    if not sent:
                        await self._send_initial(context, call, echo)
                        sent = True
                    yield message
                if not sent:
                    await self._send_initial(context, call, echo)
            except (asyncio.CancelledError, GeneratorExit):
                outcome.code = "CANCELLED"  # the client went away
                raise
            except Exception as exc:
                if not sent:
                    await self._send_initial(context, None, echo)
                await self._grpc_fail(context, exc, outcome, method)
            finally:
                recorder.end(method, outcome.code, outcome.reason, started, token)

        return handle


def _serializer(response_type: Any) -> Callable[[Any], bytes]:
    """The response serializer, passing through the bytes of a forwarded call's response."""
    serialize = response_type.SerializeToString

    def serialized(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialized


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> list[tuple[str, str]]:
    """The call's metadata as text, read once per call (the request id and ``begin`` use it)."""
    return [(k, _text(v)) for k, v in context.invocation_metadata() or ()]


def _sent_request_id(metadata: list[tuple[str, str]]) -> str | None:
    return next((v for k, v in metadata if k == "x-request-id"), None)
