"""The edge: every call of our services passes here, whatever its surface, in this order.

1. the envelope (transport/envelope.py, the one call wrapper): the request id (the client's
   ``x-request-id`` when sane, else a fresh one) is set for every log record of the call and
   echoed in its initial metadata when the client sent one;
2. the shutdown gate (admission): UNAVAILABLE / SHUTTING_DOWN once shutdown began;
3. the form of the request's ``tenant`` (TENANT_INVALID, whoever asks: it reveals nothing) and
   of the metadata any call may carry (``check_call_metadata``), then authentication, then a
   request that could not be decoded is refused (REQUEST_UNDECODABLE, REQUEST_TOO_LARGE), then authorisation of the admin methods and of the request's ``tenant``
   — before any handler runs, so nothing about a forbidden tenant is ever looked up; a call for
   a tenant another member owns is then forwarded to it (transport/cluster/forwarding.py);
4. the servicer method, run by its kind (transport/call.py): on a worker thread in the tenant's
   fair share, or on the event loop as a waiting call or a stream (of responses, or of requests:
   a client stream is authorised by its first message), each counted by admission;
5. errors: the envelope maps an error to its ``google.rpc.Status`` (transport/errors.py: the one
   table), with its reason in the access record; anything else is INTERNAL with no detail leaked;
6. telemetry again (the envelope): the latency histogram by method and code, the access record.

Steps 2-4 are the surface-independent methods ``begin``, ``answer``, ``answer_stream`` and
``answer_client_stream``. Every surface calls them inside an envelope: gRPC
(transport/grpc/handlers.py, the handlers wrapped once, when the services are registered: no
interceptor runs per call), HTTP/JSON (transport/http/json_api.py), the mem0 paths
(transport/http/mem0.py) and the MCP endpoint's calls in process (transport/in_process.py), so no rule
here is written twice. Health checking and reflection are registered without this edge:
Kubernetes probes carry no credentials.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from typing import Any

from mnemosyne.engine import changers
from mnemosyne.engine.consistency import WritesOpen, level_of
from mnemosyne.engine.limits import validate_tenant
from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.runtime import tracing
from mnemosyne.transport import telemetry
from mnemosyne.transport.admission import Admission, Lane
from mnemosyne.transport.auth import Principal, TokenAuthenticator, sent_authorization
from mnemosyne.transport.call import Call
from mnemosyne.transport.cluster.forwarding import Forwarder
from mnemosyne.transport.cluster.link import LINK_PORT_KEY
from mnemosyne.transport.consistency import LEVEL_KEY, carries
from mnemosyne.transport.envelope import CallEnvelope, Refuse
from mnemosyne.transport.send_stall import SEND_STALL_SECONDS

ADMIN_METHODS = frozenset(
    {
        "/mnemosyne.v1.AdminService/ListTenants",
        "/mnemosyne.v1.AdminService/AggregateStats",
        "/mnemosyne.v1.AdminService/ListTenantFigures",
        "/mnemosyne.v1.AdminService/EraseTenant",
        "/mnemosyne.v1.AdminService/ReembedTenant",
        "/mnemosyne.v1.AdminService/Backup",
        "/mnemosyne.v1.AdminService/ImportTenant",
        "/mnemosyne.v1.AdminService/MoveTenant",
        "/mnemosyne.v1.AdminService/ActivateTenant",
        "/mnemosyne.v1.AdminService/ChangeMembers",
    }
)
IMPORT_TENANT = "/mnemosyne.v1.AdminService/ImportTenant"
# Requests that may leave ``tenant`` empty: an import then installs the manifest's tenant.
TENANT_OPTIONAL_METHODS = frozenset({IMPORT_TENANT})
# Asked of one member about its own file (a move's steps): answered there, never forwarded.
MEMBER_LOCAL_METHODS = frozenset({"/mnemosyne.v1.AdminService/MoveTenant", "/mnemosyne.v1.AdminService/ActivateTenant"})
SERVER = ""  # the admission key of calls that name no tenant (Ping, the admin fan-outs)
EVERY_TENANT = frozenset({"*"})  # what a call reaches when the server checks no tokens
# Whether a request's type has a tenant field, by type: ``begin`` asks it of every call, and
# ``hasattr`` answers no by raising and catching an AttributeError each time.
_NAMES_TENANT: dict[type, bool] = {}


class Kind(enum.Enum):
    """How a servicer method runs (transport/call.py)."""

    BLOCKING = "blocking"  # a plain function: on a worker thread, in the tenant's fair share
    READING = "reading"  # a plain function marked @reading: on a reader thread, in the tenant's share
    SNAPSHOT_READ = "snapshot_read"  # marked @snapshot_read: on the event loop when alone and quick, else as READING
    WAITING = "waiting"  # an ``async def`` marked @waiting: on the event loop, counted as waiting
    ON_LOOP = "on_loop"  # an ``async def`` that never blocks (Ping)
    STREAM = "stream"  # an ``async def`` generator: a server stream


# The kinds run on a thread (or, for a lone quick snapshot read, the loop), and their lane.
_ON_THREADS = {Kind.BLOCKING: Lane.WORKERS, Kind.READING: Lane.READERS, Kind.SNAPSHOT_READ: Lane.LOOP}


def _is_move_step(method: str, request: Any) -> bool:
    """An ImportTenant of a move (its ``move_epoch`` set): answered by the member it is sent to."""
    return method == IMPORT_TENANT and bool(request.move_epoch)


def check_call_metadata(metadata: Sequence[tuple[str, str]]) -> None:
    """The metadata any call may carry, in a form no call takes, refused before it runs whatever
    the method: ``x-request-id`` sent twice (REQUEST_ID_INVALID: which one the caller meant is its
    to say; the first was taken), a ``mnemosyne-consistency-level`` that is no level
    (CONSISTENCY_LEVEL_INVALID, as a write refused it: a read ignored it). A level a read is given
    is otherwise harmless: only a write's token and a Flush read it."""
    request_ids = 0
    levels: list[str] = []
    for key, value in metadata:
        if key == "x-request-id":
            request_ids += 1
        elif key == LEVEL_KEY:
            levels.append(value)
    if request_ids > 1:
        raise InvalidArgument(
            f"x-request-id is sent {request_ids} times: send one request id a call", reason="REQUEST_ID_INVALID"
        )
    if levels:
        level_of(levels)


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


_RAISE_IT = "or raise --max-request-bytes (MNEMOSYNE_MAX_REQUEST_BYTES) on the server"


def too_large(size: int, max_request_bytes: int, *, from_json: bool = False) -> Undecodable:
    """A request whose protobuf encoding is over ``max_request_bytes``: a gRPC request, or
    (``from_json``) the one an HTTP JSON body decodes to, the body itself within its own limit."""
    what = f"the request has {size} bytes; the limit is {max_request_bytes} (--max-request-bytes)"
    if from_json:
        what = (
            f"the request this JSON body decodes to has {size} bytes as protobuf, over its limit of "
            f"{max_request_bytes} (--max-request-bytes; the body itself may have twice that)"
        )
    return Undecodable(
        InvalidArgument(
            f"{what}: split it, e.g. a large RetainBatch into several, {_RAISE_IT}",
            reason="REQUEST_TOO_LARGE",
            metadata={"limit": str(max_request_bytes)},
        )
    )


def body_too_large(max_request_bytes: int) -> InvalidArgument:
    """An HTTP body over its limit, twice ``max_request_bytes`` (JSON takes more bytes than
    protobuf), refused unread: its size is not known, only that it is larger."""
    limit = 2 * max_request_bytes
    return InvalidArgument(
        f"the body is larger than {limit} bytes, the limit of an HTTP body (twice --max-request-bytes, "
        f"{max_request_bytes}): split it, e.g. a large batch into several, {_RAISE_IT}",
        reason="REQUEST_TOO_LARGE",
        metadata={"limit": str(limit)},
    )


def decoder(deserializer: Callable[[bytes], Any], method: str, max_request_bytes: int) -> Callable[[bytes], Any]:
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


async def client_stream_requests(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A client stream's requests for its servicer, ``first`` (already read: it was authorised as
    a unary call's request is) and then ``rest``; a stream that ended before its first is
    STREAM_EMPTY, a request that could not be decoded its decoder's refusal."""
    if first is None:
        raise InvalidArgument("the stream ended before its first message", reason="STREAM_EMPTY")
    yield first
    async for request in rest:
        if isinstance(request, Undecodable):
            raise request.error
        yield request


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
        wait_for_writes: Callable[[Call, WritesOpen], Awaitable[None]] | None = None,
        send_stall_seconds: float = SEND_STALL_SECONDS,
    ) -> None:
        self._authenticator = authenticator
        self.forwarder = forwarder
        # A call for a tenant a move brought here, not active yet, first lets the move finish
        # itself (transport/cluster/moves.py ``MoveDriver.finish``).
        self._finish_move = finish_move
        # A read given a consistency token whose writes are open waits for them here
        # (transport/consistency.py ``wait``), then runs again.
        self._wait_for_writes = wait_for_writes
        self._admission = admission
        self.max_request_bytes = max_request_bytes
        self.recorder = recorder
        # How long a stream's answer may wait on a client that takes none of it (transport/send_stall.py).
        self.send_stall_seconds = send_stall_seconds

    @property
    def admission(self) -> Admission:
        """What counts and shares the server's work (transport/admission.py): the MCP endpoint
        counts its sessions there."""
        return self._admission

    def envelope(
        self, method: str, sent_request_id: str | None, refuse: Refuse, carrier: tracing.Headers = ()
    ) -> CallEnvelope:
        """The envelope of one call (transport/envelope.py), recorded by this edge's telemetry;
        ``carrier``: the call's metadata or headers (a caller's trace context)."""
        return CallEnvelope(self.recorder, method, sent_request_id, refuse, carrier)

    # -- the steps every call takes, whatever its transport ------------------------------------

    def begin(
        self,
        method: str,
        request: Any,
        metadata: Sequence[tuple[str, str]],
        deadline: float | None,
        *,
        surface: str = "grpc",
    ) -> Call:
        """Steps 2 and 3: admit the call and authorise it; its Call (pair with ``answer`` or
        ``answer_stream``, which let it go). Raises the refusal. ``deadline``: time.monotonic().
        ``surface``: what the call came through ("grpc", "http", "mem0", "mcp"), which with the
        token's name is who the revisions of its changes are by (engine/changers.py)."""
        self._admission.enter()
        try:
            names_tenant = _NAMES_TENANT.get(type(request))
            if names_tenant is None:
                names_tenant = _NAMES_TENANT[type(request)] = hasattr(request, "tenant")
            tenant = request.tenant if names_tenant else SERVER
            if names_tenant and (tenant or method not in TENANT_OPTIONAL_METHODS):
                # The form of the id first: a property of the request alone, so its refusal tells
                # nothing of the server's tenants or tokens; a malformed id is TENANT_INVALID
                # whoever asks, never TOKEN_MISSING or TENANT_FORBIDDEN.
                validate_tenant(tenant)
            check_call_metadata(metadata)
            principal = self.authenticate(metadata)
            if isinstance(request, Undecodable):
                raise request.error
            if principal is not None:
                if method in ADMIN_METHODS:
                    principal.check_admin()
                if names_tenant:
                    principal.check_tenant(tenant)
            tracing.tenant(tenant)  # on the call's span when the operator allows it
            forward_to, pending, entry = None, False, ""
            if self.forwarder is not None:
                entry = self.forwarder.arrived_by_hop(metadata)
                if tenant != SERVER and method not in MEMBER_LOCAL_METHODS and not _is_move_step(method, request):
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
            reaches=principal.tenants if principal is not None else EVERY_TENANT,
        )
        call.method, call.forward_to, call.move_pending = method, forward_to, pending
        if entry and self.forwarder is not None and self.forwarder.link_port:
            # The entry member learns where this member's link listens (transport/cluster/link.py),
            # from the answer's initial metadata: a stream its reader leaves has no trailers.
            call.initial_metadata.append((LINK_PORT_KEY, str(self.forwarder.link_port)))
        # The call's own context (its task's), copied to the thread that runs it (admission.py).
        changers.set_changer(surface, call.principal)
        return call

    async def _settle(self, call: Call) -> None:
        """A call for a tenant a move brought here first lets the move finish (checked by the
        caller: ``call.move_pending``, so that every other call skips a coroutine)."""
        if self._finish_move is not None:
            await self._finish_move(call)

    def authenticate(self, metadata: Iterable[tuple[str, str]]) -> Principal | None:
        """The caller of a call's metadata or headers, by its one ``authorization`` (None when the
        server checks no tokens); raises UNAUTHENTICATED. ``begin`` asks it of every call."""
        if self._authenticator is None:
            return None
        return self._authenticator.authenticate(sent_authorization(metadata))

    async def answer(self, kind: Kind, implementation: Callable[..., Any], request: Any, call: Call) -> Any:
        """Step 4 for a unary method: its response, or its exception. A call for a tenant another
        member owns is forwarded there (on the event loop: the owner's admission counts its work)."""
        admission = self._admission
        try:
            if call.move_pending:
                await self._settle(call)
            if call.forward_to is not None and self.forwarder is not None:
                with admission.cut_when_calls_end():  # waits on the owner, not here
                    return await self.forwarder.unary(call.forward_to, call.method, request, call)
            if kind in _ON_THREADS:
                return await self._run(kind, implementation, request, call)
            if kind is Kind.WAITING:
                with admission.waiting(call.tenant):
                    call.holds_place = True
                    return await implementation(request, call)
            return await implementation(request, call)
        finally:
            admission.leave()

    async def _run(self, kind: Kind, implementation: Callable[..., Any], request: Any, call: Call) -> Any:
        """A plain method on its lane (a read given a consistency token on a reader thread: where
        its writes stand is read under the hot path's inbox lock); while the writes of its token
        are open, it waits for them as a waiting call, holding no thread, and runs again."""
        lane = _ON_THREADS[kind]
        if lane is Lane.LOOP and carries(request, call):
            lane = Lane.READERS
        while True:
            try:
                return await self._admission.run(call.tenant, implementation, request, call, lane=lane)
            except WritesOpen as pending:
                if self._wait_for_writes is None:
                    raise
                with self._admission.waiting(call.tenant):
                    call.holds_place = True
                    try:
                        await self._wait_for_writes(call, pending)
                    finally:
                        call.holds_place = False

    async def answer_stream(
        self, implementation: Callable[..., AsyncGenerator[Any, None]], request: Any, call: Call
    ) -> AsyncGenerator[Any, None]:
        """Step 4 for a server stream: its messages, counted as an open stream while it lasts;
        one still open when a shutdown's grace period ends answers SHUTTING_DOWN (the surface's
        loop, which also waits for its client, holds ``cut_when_calls_end`` too)."""
        try:
            with self._admission.stream(call.tenant), self._admission.cut_when_calls_end():
                call.holds_place = True
                if call.move_pending:
                    await self._settle(call)
                messages = (
                    self.forwarder.stream(call.forward_to, call.method, request, call)
                    if call.forward_to is not None and self.forwarder is not None
                    else implementation(request, call)
                )
                async with aclosing(messages):  # closed as this one is (a client that left)
                    async for message in messages:
                        yield message
        finally:
            self._admission.leave()

    async def answer_client_stream(
        self, implementation: Callable[..., Awaitable[Any]], messages: AsyncIterator[Any], call: Call
    ) -> Any:
        """Step 4 for a client stream: its response, counted as an open stream while it lasts
        (SHUTTING_DOWN should a shutdown's grace period end first)."""
        try:
            with self._admission.stream(call.tenant), self._admission.cut_when_calls_end():
                call.holds_place = True
                if call.move_pending:
                    await self._settle(call)
                if call.forward_to is not None and self.forwarder is not None:
                    return await self.forwarder.client_stream(call.forward_to, call.method, messages, call)
                return await implementation(messages, call)
        finally:
            self._admission.leave()
