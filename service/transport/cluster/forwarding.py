"""The forwarding hop: a call for a tenant another member owns, sent on to that owner.

Any member is an entry point (docs/scale-out.md). The edge (transport/edge.py) admits and
authenticates every call as usual; a call for a tenant the hash gives to another member is then
forwarded in one hop as the same gRPC method with the same request message, whether it came over
gRPC, HTTP/JSON, SSE or MCP (which calls the gRPC API): unary, server-streaming and
client-streaming alike, over the member link once it is connected (transport/cluster/link.py),
which carries the same. Carried: the caller's token (the owner
authenticates and authorises it again), its request id and the ``mnemosyne-*`` metadata, the
deadline, and cancellation (the hop is cancelled with the call). The owner's response metadata
and status, with its details, come back as they were.

Metadata on the hop:

* ``x-mnemosyne-route: OWNER`` — the member the caller means to reach. A member never forwards
  a call routed to itself: it serves it or refuses it NOT_OWNER (naming the owner and the
  member list), which is how a client routing by a stale list is corrected, and why a hop is
  never taken twice;
* member-internal: ``x-mnemosyne-forwarded-by: ENTRY`` with ``x-mnemosyne-member-key``, a key
  the members of one deployment share (derived from the member list and the token hashes). The
  owner believes a call was forwarded only with the right key; a client's own
  ``x-mnemosyne-*-forwarded-*`` metadata is dropped at the entry and ignored at the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2

from mnemosyne.engine.moves import Membership, Placement
from mnemosyne.errors import DeadlineExceeded, Unavailable
from mnemosyne.observability.metrics import ServerMetrics
from mnemosyne.runtime import tracing
from mnemosyne.transport.call import Call, metadata_value
from mnemosyne.transport.cluster.link import LINK_PORT_KEY, LinkLost, LinkTls, MemberLink, MemberLinks
from mnemosyne.transport.errors import Relayed

ROUTE_KEY = "x-mnemosyne-route"
FORWARDED_BY_KEY = "x-mnemosyne-forwarded-by"
MEMBER_KEY_KEY = "x-mnemosyne-member-key"
_INTERNAL = frozenset({FORWARDED_BY_KEY, MEMBER_KEY_KEY})
# Response metadata that is the transport's own, not the owner's answer (the request id's echo
# is the entry's own, as for any call).
_TRANSPORT_KEYS = frozenset(
    {"content-type", "grpc-status", "grpc-message", "grpc-status-details-bin", "date", "x-request-id"}
)
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # The connection to a member stays open however long no call needs it (gRPC's default
    # closes it after 30 idle minutes; the next hop would pay the reconnect).
    ("grpc.client_idle_timeout_ms", 2**31 - 1),
)
# A forwarded server stream whose owner said nothing yet is taken as accepted after this long
# (an HTTP client then gets its event stream; a refusal comes well before).
_STREAM_ACCEPTED_SECONDS = 0.5
# How long an admin fan-out waits for each member without a deadline of its own.
ASK_SECONDS = 30.0


def member_key(membership: Membership, token_hashes: Sequence[str]) -> str:
    """The key the members of one deployment share: the same member list and tokens give the same key."""
    material = "\n".join([membership.describe(), str(membership.epoch), *sorted(token_hashes)]).encode()
    return hmac.new(b"mnemosyne member key", material, hashlib.sha256).hexdigest()


def _pass_on(metadata: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The caller's metadata the owner needs: its token, request id and ``mnemosyne-*`` keys
    (not the HTTP or HTTP/2 transport's headers, and never member-internal keys)."""
    return [(k, v) for k, v in metadata if k in ("authorization", "x-request-id") or k.startswith("mnemosyne-")]


def _answered(metadata: Any) -> list[tuple[str, str]]:
    return [
        (k, v)
        for k, v in metadata or ()
        if isinstance(v, str) and k not in _TRANSPORT_KEYS and not k.startswith("x-mnemosyne-")
    ]


def _learn_link(links: MemberLinks, owner: str, initial_metadata: Any) -> None:
    """The owner tells its member link's port in a gRPC hop's initial metadata: connect to it."""
    port = next((v for k, v in initial_metadata or () if k == LINK_PORT_KEY), None)
    if isinstance(port, str):
        links.told(owner, port)


class Forwarder:
    def __init__(
        self,
        membership: Membership,
        services: Sequence[descriptor.ServiceDescriptor],
        *,
        enabled: bool,
        key: str,
        metrics: ServerMetrics | None,
        credentials: grpc.ChannelCredentials | None = None,
        placement: Callable[[str], Placement] | None = None,
        link: bool = False,
        link_tls: LinkTls | None = None,
    ) -> None:
        self.membership = membership
        # Where a tenant is served as this member knows it (store/pool.py ``placement``: its file
        # here, or its home); None: by the hash alone.
        self.placement = placement or (lambda tenant: Placement(membership.owner(tenant)))
        self.enabled = enabled
        self._key = key
        self._metrics = metrics
        self._credentials = credentials
        self._channels: dict[str, grpc.aio.Channel] = {}
        # The member link (transport/cluster/link.py): the unary hops' way once connected; None: off.
        self._links = MemberLinks(membership.addresses, bytes.fromhex(key), link_tls) if link else None
        # This member's own link port, told to a member whose call arrived by a gRPC hop (0: none).
        self.link_port = 0
        self._callables: dict[tuple[str, str, bool], Any] = {}
        self._responses: dict[str, Any] = {
            f"/{service.full_name}/{method.name}": message_factory.GetMessageClass(method.output_type)
            for service in services
            for method in service.methods
        }

    @property
    def shared_secret(self) -> bytes:
        """A secret every member of the deployment has (the member key's bytes)."""
        return bytes.fromhex(self._key)

    # -- deciding ---------------------------------------------------------------------------------

    def owner_elsewhere(self, tenant: str, metadata: Sequence[tuple[str, str]]) -> str | None:
        """The member to forward a call for ``tenant`` to, or None to answer it here: where this
        member knows it is served (its file here, or its home: store/pool.py ``locate``). Raises
        NOT_OWNER for a tenant served elsewhere when the call is routed here by a stale list or
        by a hop, or forwarding is off."""
        membership = self.membership
        placed = self.placement(tenant)
        owner = placed.where
        if owner == membership.me:
            return None
        routed_here = self.routed_here(metadata)
        hopped = self._hopped(metadata)
        if hopped and self.enabled and placed.moved_epoch and not self._came_from(metadata, owner):
            # A tombstone here, and a call another member sent here (its home for the tenant
            # during a rebalance): on to the destination, which has the tenant's file and never
            # forwards a call for it — one hop more, at most. A client's call is refused
            # NOT_OWNER instead, naming the destination, so that it corrects its route.
            return owner
        if routed_here and membership.owner(tenant) == membership.me and self.enabled and not hopped:
            # The caller's list is right, the tenant is not here (yet, or still): during a
            # rebalance it is where its file is. Only a caller's own call is sent on so: a call
            # that came by a hop is never forwarded again.
            return owner
        if routed_here or not self.enabled:
            raise membership.not_owner(
                tenant,
                owner,
                "your member list is out of date (the refusal carries the current one)"
                if routed_here
                else "this member does not forward (--no-forwarding)",
                moved_epoch=placed.moved_epoch,
            )
        return owner

    def routed_here(self, metadata: Sequence[tuple[str, str]]) -> bool:
        """Whether the caller meant this very member (a fan-out asks each member for its own part)."""
        return any(k == ROUTE_KEY and v == self.membership.me for k, v in metadata)

    def _came_from(self, metadata: Sequence[tuple[str, str]], member: str) -> bool:
        return self._hopped(metadata) and any(k == FORWARDED_BY_KEY and v == member for k, v in metadata)

    def _hopped(self, metadata: Sequence[tuple[str, str]]) -> bool:
        sent = metadata_value(metadata, MEMBER_KEY_KEY) or ""
        return bool(sent) and hmac.compare_digest(sent, self._key)

    def from_member(self, metadata: Sequence[tuple[str, str]]) -> bool:
        """Whether a call comes from a member of this deployment (it carries the member key)."""
        return self._hopped(metadata)

    def arrived_by_hop(self, metadata: Sequence[tuple[str, str]]) -> str:
        """The entry member of a call forwarded here, proven by the member key; "" otherwise
        (member-internal metadata from a client is ignored)."""
        if not self._hopped(metadata):
            return ""
        entry = metadata_value(metadata, FORWARDED_BY_KEY) or ""
        if entry and self._metrics is not None:
            self._metrics.forwarded_in.inc()
        return entry

    # -- forwarding -------------------------------------------------------------------------------

    def _channel(self, member: str) -> grpc.aio.Channel:
        channel = self._channels.get(member)
        if channel is None:
            address = self.membership.addresses.get(member)
            if address is None:  # named by a tenant's file here (a move's), not by this member's list
                raise Unavailable(
                    f"the tenant is served by member {member}, which is not in this member's list "
                    f"({self.membership.describe()}): this member's --members is out of date; restart it "
                    "with the current list, or call the owner",
                    reason="OWNER_UNAVAILABLE",
                    metadata={"owner": member, "owner_address": ""},
                    retry_after_seconds=1.0,
                )
            channel = (
                grpc.aio.secure_channel(address, self._credentials, options=_CHANNEL_OPTIONS)
                if self._credentials is not None
                else grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
            )
            self._channels[member] = channel
        return channel

    def _hop(self, owner: str, call: Call, traced: tracing.HopSpan, *, asked: bool = False) -> dict[str, Any]:
        """The metadata and timeout of the hop to ``owner``; ``asked``: a fan-out's question to
        each member (not counted as forwarded, and bounded by ASK_SECONDS); ``traced``: the hop's
        span, whose trace context the owner continues."""
        if self._metrics is not None and not asked:
            self._metrics.forwarded.inc()
        metadata = [
            *_pass_on(call.metadata),
            *traced.headers,
            (ROUTE_KEY, owner),
            (FORWARDED_BY_KEY, self.membership.me),
            (MEMBER_KEY_KEY, self._key),
        ]
        deadline = call.deadline
        timeout = None if deadline is None else deadline - time.monotonic()
        if asked:
            timeout = ASK_SECONDS if timeout is None else min(timeout, ASK_SECONDS)
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded("the call's deadline passed before it reached its owner", reason="DEADLINE_PASSED")
        return {"metadata": tuple(metadata), "timeout": timeout}

    def _relayed(self, owner: str, code: grpc.StatusCode, message: str, trailing: Any) -> Exception:
        """The owner's refusal as it came; a hop that failed on the way as UNAVAILABLE naming the owner."""
        details = next((v for k, v in trailing or () if k == "grpc-status-details-bin"), None)
        if isinstance(details, bytes):
            return Relayed.of(status_pb2.Status.FromString(details), code.name)
        return self._unreachable(owner, code, message)

    def _unreachable(self, owner: str, code: grpc.StatusCode, message: str) -> Exception:
        """A hop that failed on the way: its deadline passed, or the owner could not be reached."""
        address = self.membership.addresses[owner]
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            error: Exception = DeadlineExceeded(
                f"the tenant's owner, member {owner} ({address}), did not answer within the call's deadline",
                reason="DEADLINE_EXCEEDED",
                metadata={"owner": owner, "owner_address": address},
            )
        else:
            error = Unavailable(
                f"the tenant's owner, member {owner} ({address}), cannot be reached ({code.name}: "
                f"{message}); retry shortly — no other member serves its tenants",
                reason="OWNER_UNAVAILABLE",
                metadata={"owner": owner, "owner_address": address},
                retry_after_seconds=1.0,
            )
        return error

    @contextlib.contextmanager
    def _traced(self, owner: str, method: str) -> Iterator[tracing.HopSpan]:
        """The hop's trace span (runtime/tracing.py), ended with the hop, failed or not."""
        traced = tracing.hop(f"forward {method.strip('/')}", **{"mnemosyne.member": owner, "rpc.system": "grpc"})
        try:
            yield traced
        except BaseException as exc:
            # A caller that left (a closed stream, a cancelled call) is no failure of the hop.
            traced.end(None if isinstance(exc, (GeneratorExit, asyncio.CancelledError)) else exc)
            raise
        traced.end(None)

    @contextlib.contextmanager
    def _answered_by(self, owner: str, hop: Any) -> Iterator[None]:
        """How every hop ends: the owner's refusal as it came (``Relayed``), a failure on the way
        as UNAVAILABLE naming the owner; the hop cancelled with the call (a no-op once it ended)."""
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            raise self._relayed(owner, exc.code(), exc.details() or "", exc.trailing_metadata()) from None
        finally:
            hop.cancel()

    def _channel_for(self, owner: str, method: str, kind: str, *, raw: bool) -> Any:
        """The hop's multi-callable (made once per member, method and form); ``raw``: its responses
        stay the owner's bytes (relayed as they are)."""
        key = (owner, method, raw)
        multi = self._callables.get(key)
        if multi is None:
            multi = self._callables[key] = getattr(self._channel(owner), kind)(
                method,
                request_serializer=_serialize,
                response_deserializer=_unchanged if raw else self._responses[method].FromString,
            )
        return multi

    async def unary(self, owner: str, method: str, request: Any, call: Call, *, asked: bool = False) -> Any:
        return await self._one_answer(owner, method, "unary_unary", request, call, asked=asked)

    async def client_stream(self, owner: str, method: str, messages: AsyncIterator[Any], call: Call) -> Any:
        return await self._one_answer(owner, method, "stream_unary", messages, call)

    async def _one_answer(
        self, owner: str, method: str, kind: str, sent: Any, call: Call, *, asked: bool = False
    ) -> Any:
        """A hop answered by one response (a unary call, a client stream): over the member link
        when it is connected, else a gRPC call (whose answer may tell the owner's link port)."""
        # The link serves our services' methods (not the mem0 relay: transport/http/mem0.py).
        linked = not asked and method in self._responses
        links = self._links if linked else None
        link = links.ready(owner) if links is not None else None
        if link is not None:
            return await self._linked(link, owner, method, sent, call, client_stream=kind == "stream_unary")
        multi = self._channel_for(owner, method, kind, raw=call.answers_bytes and not asked)
        with self._traced(owner, method) as traced:
            hop = multi(sent, **self._hop(owner, call, traced, asked=asked))
            with self._answered_by(owner, hop):
                response = await hop
                initial = await hop.initial_metadata()
                call.send_initial_metadata(_answered(initial))
                call.set_trailing_metadata(_answered(await hop.trailing_metadata()))
                if links is not None:
                    _learn_link(links, owner, initial)
                return response

    async def _linked(
        self, link: MemberLink, owner: str, method: str, sent: Any, call: Call, *, client_stream: bool
    ) -> Any:
        """A unary hop or a client stream's (``sent``: its messages) over the member link: the same
        metadata, deadline and answer as a gRPC hop."""
        with self._traced(owner, method) as traced:
            hop = self._hop(owner, call, traced)
            timeout = hop["timeout"]
            if self._metrics is not None:
                self._metrics.forwarded_linked.inc()
            try:
                async with asyncio.timeout(timeout):
                    answer = await (
                        link.client_stream(method, _each_serialized(sent), hop["metadata"], timeout)
                        if client_stream
                        else link.call(method, _serialize(sent), hop["metadata"], timeout)
                    )
            except TimeoutError:
                raise self._unreachable(owner, grpc.StatusCode.DEADLINE_EXCEEDED, "") from None
            except LinkLost as exc:
                raise self._unreachable(owner, grpc.StatusCode.UNAVAILABLE, str(exc)) from None
            refusal = answer.refusal()
            if refusal is not None:
                raise Relayed.of(refusal, grpc.StatusCode.UNKNOWN.name)
            call.send_initial_metadata(_answered(answer.initial_metadata))
            call.set_trailing_metadata(_answered(answer.trailing_metadata))
            return answer.response if call.answers_bytes else self._responses[method].FromString(answer.response)

    def stream(
        self, owner: str, method: str, request: Any, call: Call, *, asked: bool = False
    ) -> AsyncGenerator[Any, None]:
        """A server stream's hop: over the member link when it is connected, else a gRPC call."""
        link = self._links.ready(owner) if self._links is not None and not asked else None
        if link is not None:
            return self._linked_stream(link, owner, method, request, call)
        return self._grpc_stream(owner, method, request, call, asked=asked)

    async def _linked_stream(
        self, link: MemberLink, owner: str, method: str, request: Any, call: Call
    ) -> AsyncGenerator[Any, None]:
        """A server stream over the member link: the same metadata, acceptance and answer as a
        gRPC hop's; the entry's reading paces the owner (link.py's CREDIT)."""
        with self._traced(owner, method) as traced:
            hop = self._hop(owner, call, traced)
            if self._metrics is not None:
                self._metrics.forwarded_linked.inc()
            try:
                stream = await link.stream(method, _serialize(request), hop["metadata"], hop["timeout"])
            except LinkLost as exc:
                raise self._unreachable(owner, grpc.StatusCode.UNAVAILABLE, str(exc)) from None
            try:
                await stream.first_word(_STREAM_ACCEPTED_SECONDS)
                if stream.refusal is not None:
                    raise Relayed.of(stream.refusal, grpc.StatusCode.UNKNOWN.name)
                if call.stepped is not None:  # an HTTP client gets its event stream now
                    call.stepped.set()
                decode = None if call.answers_bytes else self._responses[method].FromString
                headed = False
                async for data in stream.messages():
                    if not headed and stream.initial_metadata is not None:
                        headed = True
                        call.send_initial_metadata(_answered(stream.initial_metadata))
                    yield data if decode is None else decode(data)
                if stream.refusal is not None:
                    raise Relayed.of(stream.refusal, grpc.StatusCode.UNKNOWN.name)
                if not headed and stream.initial_metadata is not None:
                    call.send_initial_metadata(_answered(stream.initial_metadata))
                call.set_trailing_metadata(_answered(stream.trailing_metadata))
            except LinkLost as exc:
                raise self._unreachable(owner, grpc.StatusCode.UNAVAILABLE, str(exc)) from None
            finally:
                link.end_stream(stream)

    async def _grpc_stream(
        self, owner: str, method: str, request: Any, call: Call, *, asked: bool = False
    ) -> AsyncGenerator[Any, None]:
        multi = self._channel_for(owner, method, "unary_stream", raw=call.answers_bytes and not asked)
        with self._traced(owner, method) as traced:
            hop = multi(request, **self._hop(owner, call, traced, asked=asked))
            with self._answered_by(owner, hop):
                started = asyncio.ensure_future(hop.initial_metadata())
                await asyncio.wait({started}, timeout=_STREAM_ACCEPTED_SECONDS)
                if started.done():
                    call.send_initial_metadata(_answered(started.result()))
                    if self._links is not None and not asked:
                        _learn_link(self._links, owner, started.result())
                    code = await hop.code() if hop.done() else grpc.StatusCode.OK
                    if code != grpc.StatusCode.OK:
                        raise self._relayed(owner, code, await hop.details() or "", await hop.trailing_metadata())
                else:
                    started.cancel()
                if call.stepped is not None:  # an HTTP client gets its event stream now
                    call.stepped.set()
                async for message in hop:
                    yield message

    async def ask_member(self, member: str, method: str, kind: str, sent: Any, call: Call, timeout: float) -> Any:
        """A member-to-member call on the caller's behalf (a move's import and activation): its
        token, routed to ``member``, within ``timeout``; the member's refusal as it came."""
        multi = self._channel_for(member, method, kind, raw=False)
        with call.waiting_on_members(), self._traced(member, method) as traced:
            metadata = self._hop(member, call, traced, asked=True)["metadata"]
            hop = multi(sent, metadata=metadata, timeout=timeout)
            with self._answered_by(member, hop):
                return await hop

    async def close(self) -> None:
        channels, self._channels, self._callables = list(self._channels.values()), {}, {}
        await asyncio.gather(*(channel.close() for channel in channels))
        if self._links is not None:
            await self._links.close()


async def _each_serialized(messages: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    async for message in messages:
        yield _serialize(message)


def _unchanged(data: bytes) -> bytes:
    return data


def _serialize(message: Any) -> bytes:
    """A request message's bytes; bytes as they are (a relayed mem0 request, transport/http/mem0.py)."""
    if isinstance(message, bytes):
        return message
    data: bytes = message.SerializeToString()
    return data
