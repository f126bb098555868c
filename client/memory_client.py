"""``MemoryClient``: the Python client of a Mnemosyne server.

Methods are named after the specification's API (retain, recall, retain_batch, ...) and return plain dataclasses
from ``mnemosyne.client.types``; failures raise ``mnemosyne.client.errors`` exceptions. Calls
that fail with UNAVAILABLE are retried with backoff when repeating them is safe: reads, and
writes that carry a request id (every write gets one unless the caller passes its own), for a
retry window (15 s by default, client/retry_window.py), so a restart of the server is ridden out.

Session consistency, by default: the client keeps the newest consistency token its writes of each
tenant returned and sends it with its next reads and writes of that tenant, so a read waits for
this client's own writes still queued (host/consistency.py; docs/hot-path.md "Read your own
writes"). ``session_consistency=False`` turns it off for the client, ``consistency_token=""`` for
one read; ``consistency_token=TOKEN`` makes a read wait for that token (from another client) alone.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import grpc
from google.protobuf.message import Message

from mnemosyne.client import convert, types
from mnemosyne.client.errors import (
    AbortedError,
    FailedPreconditionError,
    InvalidArgumentError,
    MnemosyneClientError,
    from_rpc_error,
    typed,
)
from mnemosyne.client.retry_window import (
    MAX_RETRIES,
    RETRY_WINDOW_SECONDS,
    RetryBudget,
    window_problem,
)
from mnemosyne.client.routing import MEMBER_ID_PATTERN, ROUTE_KEY, RoutingChannel, not_followed
from mnemosyne.client.tracing import trace_metadata
from mnemosyne.client.unsendable import (
    checked_chunk,
    checked_timeout,
    refused,
    refusing_unsendable,
    sending,
    unknown_name,
)
from mnemosyne.host import protocol as host_protocol
from mnemosyne.host.consistency import (
    FLUSH_WAIT_SECONDS,
    MAX_TENANTS,
    SessionTokens,
    caller_token_metadata,
    flush_request,
    role_of,
    token_metadata,
)
from mnemosyne.host.protocol import (
    GLOBAL_GENERATION_KEY,
    WORKSPACE_GENERATION_KEY,
    Answer,
    Ask,
    Flow,
    ServiceError,
    generation_from,
    server_wait,
)
from mnemosyne.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    events_pb2,
    events_pb2_grpc,
    expiry_pb2,
    hot_path_pb2,
    hot_path_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    revisions_pb2,
    webhooks_pb2,
    webhooks_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)

T = TypeVar("T")
M = TypeVar("M", bound=Message)

# The server's default max_request_bytes: a larger request is refused (REQUEST_TOO_LARGE) here,
# before it is sent, with the reason the server would give.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# Responses stay under ~3 MiB plus one item; accept more than gRPC's default 4 MiB anyway, for a
# server whose limits were raised.
# gRPC waits between attempts to connect to a server that is down, 1 s at first, 1.6 times longer
# each time, up to 2 minutes, and a process's clients of one address share that wait: a server
# back after a minute's restart would be left alone for minutes. The client tries every 0.1 s at
# first, at most every 0.5 s (well within the window its calls retry for, waiting at most 1 s
# between tries: client/retry_window.py), on its own connection.
_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.use_local_subchannel_pool", 1),
)

_MODES = {
    "hybrid": memory_pb2.RECALL_MODE_HYBRID,
    "vector": memory_pb2.RECALL_MODE_VECTOR,
    "text": memory_pb2.RECALL_MODE_TEXT,
}
_CHANGE_OPS = {"put": workspace_pb2.RecordChange.PUT, "delete": workspace_pb2.RecordChange.DELETE}


def new_request_id() -> str:
    """A fresh idempotency key (32 hex digits), what a write sends when its caller gives none."""
    return uuid.uuid4().hex


# What an ``authorization`` header (gRPC metadata, HTTP) can carry of a token: printable ASCII.
_TOKEN_TEXT = re.compile(r"[ -~]+")


def token_problem(token: str) -> str:
    """Why ``token`` cannot be sent as a bearer token (a character no request header carries), or
    "" when it can."""
    if _TOKEN_TEXT.fullmatch(token):
        return ""
    bad = next((c for c in token if not _TOKEN_TEXT.fullmatch(c)), "")
    return (
        f"the token holds {bad!r} (U+{ord(bad):04X}), which no request header carries: a token is printable ASCII "
        "(TOKEN_MALFORMED)"
        if bad
        else "the token is empty (TOKEN_MALFORMED)"
    )


@refusing_unsendable
class MemoryClient:
    """A connection to one Mnemosyne server (or to every member of a deployment).

    ``target`` is ``host:port``; ``token`` a bearer token (sent as ``authorization`` metadata:
    printable ASCII, else ValueError naming the character, TOKEN_MALFORMED);
    ``credentials`` TLS channel credentials (``grpc.ssl_channel_credentials(...)``) for a TLS
    server; ``timeout`` the per-call deadline in seconds (the whole call's, its retries
    included). A call that is safe to repeat (a read, a write carrying a request id) is tried again
    after UNAVAILABLE (one the server names, its reason: only when it names a retry delay, its word
    that waiting clears it), or after a refusal for a server limit that names a retry delay, for
    ``retry_window`` seconds (15 by default, 0 to 3600; never past the call's deadline): a call in
    flight across a restart of the server, or made while it is down, is answered by the server
    back, and one to a server that stays gone raises ``UnavailableError`` within the window. The
    waits between tries: the delay the refusal names (at most 5 s), else a backoff from 0.1 s,
    doubling, at most 1 s, each a random part of it (client/retry_window.py). ``retries`` bounds
    the tries by a count too (0 to ``MAX_RETRIES``, 100; 0: never tried again; None, the default:
    as many as the window holds). A call not safe to repeat is never tried again.
    ``options`` gRPC channel options, added to the client's own. ``members``:
    on a deployment of many members, all of them (``ID=HOST:PORT,...`` or ``@FILE``, as the
    servers take ``--members``, or a mapping; a list that cannot be used raises
    ``MemberListError``, a ValueError): each call then goes straight to the member owning its
    tenant (client/routing.py), and ``target`` is not used (``""`` will do; without ``members``, an empty
    one raises ``RequestInvalidError`` TARGET_EMPTY).
    ``session_consistency``: keep the newest consistency token of each tenant this client wrote
    and send it with the client's next reads and writes of that tenant (the default; at most
    ``session_tenants`` tenants, the least recently used forgotten first), so the client reads its
    own writes, fast ones included. ``max_request_bytes``: the largest message sent (a request, each of a stream's; 16 MiB, the
    server's default --max-request-bytes); raise it with the server's. The client may be shared by threads. Use it as a context
    manager, or ``close()`` it.

    Every failed call raises a ``MnemosyneClientError`` (``mnemosyne.client.errors``) whose class
    follows the gRPC code and whose ``reason`` is the server's. Each method names the reasons of
    its own; any call may also fail with ``UnauthenticatedError`` (TOKEN_MISSING, TOKEN_UNKNOWN,
    TOKEN_MALFORMED: pass the right ``token``), ``PermissionDeniedError`` (TENANT_FORBIDDEN: the
    token does not name the tenant; ADMIN_REQUIRED: the call needs an admin token),
    ``InvalidArgumentError`` (TENANT_INVALID: a tenant id is 1-63 of ``a-z0-9_-``, starting with a
    letter or digit; REQUEST_TOO_LARGE: the request, or any message a stream sends, is over
    ``max_request_bytes``, 16 MiB as the server's default --max-request-bytes, refused here before
    it is sent; raise both to send more), ``RequestInvalidError`` (an ``InvalidArgumentError`` and a ``ValueError``, raised here
    before anything is sent: REQUEST_UNDECODABLE, a text holding a lone surrogate; NUMBER_INVALID,
    a number past its field's range; OCCURRED_AT_INVALID, EXPIRES_AT_INVALID, TIMESTAMP_INVALID, a
    time that is NaN, infinite, or outside the years 1 to 9999), ``ResourceExhaustedError`` (``<LIMIT>_REACHED``: a server admission limit, waited out
    and retried when the call is safe to repeat; DISK_FULL), ``UnavailableError`` (the server is
    unreachable, SHUTTING_DOWN, TENANT_BUSY, TENANT_MOVING, OWNER_UNAVAILABLE, FILE_LIMIT: retried,
    then raised; REPLICA_UNREACHABLE for a replica URL or keys that are wrong: raised at once), ``DeadlineExceededError`` (the call outlived ``timeout``), ``DataLossError``
    (TENANT_CORRUPT: the tenant's file is damaged) and ``FailedPreconditionError`` (NOT_OWNER: a
    member that does not hold the tenant; a client given ``members`` follows it on its own). A
    read or write carrying a session token may also fail with the token's own errors:
    ``TokenInvalidError``, ``TokenForeignError``, ``TimelineChangedError`` and
    ``ConsistencyDeadlineExceededError`` (docs/hot-path.md says what to do for each).
    """

    def __init__(
        self,
        target: str,
        token: str | None = None,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 30.0,
        retries: int | None = None,
        retry_window: float = RETRY_WINDOW_SECONDS,
        options: Sequence[tuple[str, Any]] = (),
        members: str | Mapping[str, str] | None = None,
        session_consistency: bool = True,
        session_tenants: int = MAX_TENANTS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1:
            raise ValueError(f"max_request_bytes is a whole number of bytes from 1, not {max_request_bytes!r}")
        self.max_request_bytes = max_request_bytes
        if retries is not None and not 0 <= retries <= MAX_RETRIES:  # below, no call was ever tried
            raise refused("NUMBER_INVALID", f"MemoryClient: retries is {retries}; it takes 0 to {MAX_RETRIES}")
        if window_problem(retry_window):  # NaN, an infinity or below 0: no window to end the retries
            raise refused("NUMBER_INVALID", window_problem(retry_window))
        if session_tenants < 1:
            raise refused("NUMBER_INVALID", f"MemoryClient: session_tenants is {session_tenants}; it takes 1 or more")
        if token and token_problem(token):
            raise ValueError(token_problem(token))  # else every call fails INTERNAL ("Invalid metadata")
        if members is None and not target.strip():  # gRPC's own words: UNKNOWN "the target uri is not valid"
            raise refused("TARGET_EMPTY", "MemoryClient: target is empty; give the server's HOST:PORT, or members")
        self.target = target
        self._closed = False
        self._session = SessionTokens(session_tenants) if session_consistency else None
        self._token_metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        given = {name for name, _ in options}
        options = [*(o for o in _CHANNEL_OPTIONS if o[0] not in given), *options]

        def channel_to(address: str) -> grpc.Channel:
            return (
                grpc.secure_channel(address, credentials, options=options)
                if credentials is not None
                else grpc.insecure_channel(address, options=options)
            )

        self._channel = RoutingChannel(members, channel_to) if members is not None else channel_to(target)
        checked_timeout(timeout)
        self._timeout = timeout
        self._retries = retries
        self._retry_window = float(retry_window)
        self.memory = memory_pb2_grpc.MemoryServiceStub(self._channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self._channel)
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(self._channel)
        self.hot_path_stub = hot_path_pb2_grpc.HotPathServiceStub(self._channel)
        self.events = events_pb2_grpc.EventsServiceStub(self._channel)
        self.webhooks = webhooks_pb2_grpc.WebhookServiceStub(self._channel)
        self._stubs = {
            "mnemosyne.v1.MemoryService": self.memory,
            "mnemosyne.v1.AdminService": self.admin,
            "mnemosyne.v1.WorkspaceService": self.workspace,
            "mnemosyne.v1.HotPathService": self.hot_path_stub,
            "mnemosyne.v1.EventsService": self.events,
            "mnemosyne.v1.WebhookService": self.webhooks,
        }

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel the calls go through (a ``RoutingChannel`` with ``members``): for
        stubs of your own, with ``call_metadata``."""
        return self._channel

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """The metadata every call of this client carries (its token, and the caller's trace
        context when OpenTelemetry is installed), to send with a stub's call."""
        return self._metadata

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        # Read at each call: the trace context is the caller's current span (client/tracing.py).
        # So every call of a closed client is refused here, not with grpc's ValueError.
        if self._closed:
            raise FailedPreconditionError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "CLIENT_CLOSED",
                "this MemoryClient is closed (close(), or the end of its with block): make a new one",
                {},
            )
        return (*self._token_metadata, *trace_metadata())

    def close(self) -> None:
        """Close the channel (and every member's); the client cannot be used after: a call then
        raises ``FailedPreconditionError`` CLIENT_CLOSED."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        method: Callable[..., T],
        request: Any,
        *,
        retry: bool,
        metadata: Iterable[tuple[str, str]] = (),
        timeout: float | None = None,
        session: bool = True,
    ) -> T:
        """Invoke a stub method with this client's token, deadline (``timeout``, else the
        client's), retries and typed errors: what every method here does, for a stub's method of
        your own (``self.memory.Retain``, ...).

        ``retry``: the call is safe to repeat (a read, or a write carrying a request id); then it
        is tried again after UNAVAILABLE and after a refusal naming a retry delay, within the
        client's retry window and ``timeout``, which its tries share. ``metadata`` is
        sent beside the token. ``session``: the call carries the session's consistency tokens
        (host/consistency.py says which calls do). Returns the response. Raises
        ``InvalidArgumentError`` (REQUEST_TOO_LARGE) before sending a request over ``max_request_bytes``, and the
        call's typed error."""
        sending()
        metadata = tuple(metadata)
        self._sendable(request)
        deadline = checked_timeout(timeout or None) or self._timeout
        tenant = getattr(request, "tenant", "")
        tracked = self._session if session else None
        sent = tracked.outgoing(request, metadata) if tracked is not None else ()
        metadata = (*self._metadata, *metadata, *token_metadata(sent))
        try:
            for older in sent[:-1]:  # writes that overlapped: their tokens are waited for first
                self._call_waiting(self.hot_path_stub.Flush, flush_request(tenant, older), FLUSH_WAIT_SECONDS)
            result = self._retrying(
                lambda left: method(request, timeout=left, metadata=metadata),
                retry=retry,
                timeout=deadline,
                tenant=tenant,
            )
        except MnemosyneClientError as error:
            if tracked is not None:
                tracked.refused(tenant, sent, error.reason)
            raise
        if tracked is not None:
            # A stub's with_call answers (response, call).
            tracked.answered(request, sent, result[0] if isinstance(result, tuple) else result)
        return result

    def _sendable(self, message: M) -> M:
        """``message`` if it is at most ``max_request_bytes`` encoded, else ``InvalidArgumentError``
        REQUEST_TOO_LARGE. Every message this client sends goes through it: a unary call's request,
        a server stream's, each of an import's (gRPC core refuses one over twice the server's
        --max-request-bytes itself, without ErrorInfo)."""
        size = message.ByteSize()
        if size > self.max_request_bytes:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "REQUEST_TOO_LARGE",
                f"the request has {size} bytes; this client's limit is {self.max_request_bytes} "
                "(MemoryClient(max_request_bytes=...), by default the server's default --max-request-bytes): "
                "split it, e.g. a large batch into several, or raise both, the server's first",
                {"limit": str(self.max_request_bytes)},
            )
        return message

    def consistency_token(self, tenant: str) -> str | None:
        """The consistency token of this client's latest write of ``tenant`` (None: none kept, or
        session consistency is off): give it to another client's read (``consistency_token=``)
        to make that read wait for this client's writes."""
        return self._session.newest(tenant) if self._session is not None else None

    def _failed(self, error: grpc.RpcError, tenant: str = "") -> MnemosyneClientError:
        """The typed error of a failed call for ``tenant``, naming the address the call went to."""
        routed = isinstance(self._channel, RoutingChannel)
        where = self._channel.address_of(tenant) if isinstance(self._channel, RoutingChannel) else self.target
        return from_rpc_error(error, where, not_followed(error, routed))

    def _retrying(
        self, attempt: Callable[[float | None], T], *, retry: bool, timeout: float | None, tenant: str = ""
    ) -> T:
        """``attempt(seconds)`` (the seconds left of the call's ``timeout``, its try's deadline)
        until it succeeds; when ``retry`` (the call is safe to repeat: a read, or a write carrying
        a request id), tried again after UNAVAILABLE and after RESOURCE_EXHAUSTED that names a
        retry delay (google.rpc.RetryInfo: the server's admission limits), within the client's
        retry window and ``retries`` (client/retry_window.py says how long each wait is)."""
        # Not gRPC's wait_for_ready, which holds a call until the channel connects: it would hold
        # one to a server that is gone until the call's deadline (30 s, an hour for a move) and
        # raise DEADLINE_EXCEEDED in place of UNAVAILABLE and its cause, would hold the calls not
        # safe to repeat alike, and cannot help a call whose connection broke once it was sent
        # (UNAVAILABLE all the same). Tries bounded by the window, each failing fast while the
        # server is down, end in the server's own error.
        budget = RetryBudget(self._retry_window, self._retries, timeout)
        while True:
            try:
                return attempt(budget.left())
            except grpc.RpcError as exc:
                error = self._failed(exc, tenant)
                wait = budget.wait_after(error) if retry else None
                if wait is None:
                    raise error from exc
                time.sleep(wait)

    # -- the calls of the shared host flows (host/protocol.py) --------------------------------------

    def ask(self, ask: Ask, *, consistency_token: str | None = None) -> Answer:
        """Make one call of a host flow (host/protocol.py) with this client's token, deadline
        (outlasting the call's wait on the server), retries and typed errors; a read carries the
        session's consistency tokens, or ``consistency_token`` instead (``""``: none). Returns
        the response with its initial and trailing metadata. ``MemoryHost`` runs its flows
        through it."""
        service, method = ask.method.rsplit("/", 2)[1:]
        stub = getattr(self._stubs[service], method).with_call
        timeout = max(self._timeout, ask.wait_seconds + 10.0) if ask.wait_seconds else None
        metadata = ask.metadata
        if consistency_token is not None and role_of(ask.request) == "read":
            try:
                metadata = (*metadata, *caller_token_metadata(consistency_token))
            except ServiceError as error:
                raise typed(error) from None
        session = consistency_token is None or role_of(ask.request) != "read"
        response, call = self.call(stub, ask.request, retry=True, metadata=metadata, timeout=timeout, session=session)
        return Answer(response, call.initial_metadata() or (), call.trailing_metadata() or ())

    def run(self, flow: Flow[T], *, consistency_token: str | None = None) -> T:
        """Run a host flow (host/protocol.py) to its result, its calls made by ``ask`` (its reads
        with ``consistency_token`` when given). Raises the typed client error of a failed call,
        or of what the flow itself refuses."""
        try:
            return host_protocol.run(flow, lambda ask: self.ask(ask, consistency_token=consistency_token))
        except ServiceError as error:
            if isinstance(error, MnemosyneClientError):
                raise
            raise typed(error) from None

    # -- memories -------------------------------------------------------------------------------

    def retain(
        self,
        tenant: str,
        text: str,
        scope: str = types.DEFAULT_SCOPE,
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        *,
        fast: bool = False,
        occurred_at: float | None = None,
        thread: types.ThreadRef | None = None,
        speaker: str = "",
        expires_at: float | None = None,
    ) -> types.RetainResult:
        """Retain one text as a memory of ``tenant``; committed (readable by a recall) when this
        returns, unless ``fast`` and the tenant's hot path is enabled: then only queued.

        ``scope`` is "global" or "workspace/<name>"; ``metadata`` string pairs kept with it (recall
        and list filter on them); ``request_id`` makes a retry after a lost reply return the first
        result (one is made when omitted). ``occurred_at`` (unix seconds) is when it was said or
        happened, ``thread`` its place in a thread, ``speaker`` who said or wrote it (all
        optional, docs/recall-quality.md); ``expires_at`` (unix seconds) when it expires (unset:
        the tenant's default, docs/expiry.md). Returns a ``RetainResult``: "created" (``memory_id``
        the new memory), "duplicate" (``memory_id`` the memory that holds the same text in the
        scope) or "enqueued" (``event_id``, see ``get_event`` and ``hot_path("flush")``), with the
        memories it is a near duplicate of or supersedes. Raises ``InvalidArgumentError``
        (TEXT_EMPTY, TEXT_TOO_LONG, TEXT_INVALID, SCOPE_INVALID, METADATA_INVALID,
        METADATA_TOO_LARGE, OCCURRED_AT_INVALID, THREAD_INVALID, SPEAKER_INVALID,
        REQUEST_ID_INVALID), ``AbortedError`` (IDEMPOTENCY_KEY_REUSED: the request id came with
        another payload before), ``ResourceExhaustedError`` (QUOTA_MEMORIES, QUOTA_BYTES: the
        tenant's quota)."""
        request = memory_pb2.RetainRequest(
            tenant=tenant,
            text=text,
            scope=scope,
            metadata=dict(metadata or {}),
            request_id=request_id or new_request_id(),
            fast=fast,
        )
        convert.place(request, occurred_at, thread, speaker, expires_at)
        return convert.retain_result_from_proto(self.call(self.memory.Retain, request, retry=True).result)

    def retain_batch(
        self,
        tenant: str,
        items: Sequence[types.RetainItem | str],
        request_id: str | None = None,
        *,
        fast: bool = False,
    ) -> list[types.RetainResult]:
        """Retain many items, each on its own: one bad item never loses the others (not atomic as
        a whole). ``items`` are texts (to the global scope) or ``RetainItem``s; ``request_id`` and
        ``fast`` are the whole batch's, as for ``retain``.

        Returns one ``RetainResult`` per item, in order; an item refused for its content has
        status "invalid" with its ``error_reason`` (a reason ``retain`` would raise) and
        ``error_message``. Raises ``InvalidArgumentError`` (BATCH_EMPTY, BATCH_TOO_LARGE: more
        items than the server's --max-batch-items, 1,000 by default; REQUEST_ID_INVALID),
        ``AbortedError`` (IDEMPOTENCY_KEY_REUSED) and ``ResourceExhaustedError`` (QUOTA_MEMORIES,
        QUOTA_BYTES)."""
        proto_items = [convert.retain_item_to_proto(i) for i in items]
        request = memory_pb2.RetainBatchRequest(
            tenant=tenant, items=proto_items, request_id=request_id or new_request_id(), fast=fast
        )
        return [
            convert.retain_result_from_proto(r) for r in self.call(self.memory.RetainBatch, request, retry=True).results
        ]

    def recall(
        self,
        tenant: str,
        query: str,
        k: int = 0,
        scopes: Sequence[str] | None = None,
        filters: Mapping[str, str] | None = None,
        *,
        mode: str = "hybrid",
        consistency_token: str | None = None,
    ) -> list[types.Hit]:
        """The ``k`` memories of ``tenant`` most relevant to ``query``, best first.

        ``query`` is free text (never query syntax); ``scopes`` keeps only memories of those
        scopes (all when empty); ``filters`` only memories whose metadata has each pair exactly;
        ``mode`` is "hybrid" (vectors fused with full-text BM25), "vector" or "text".
        ``consistency_token``: None waits for this client's own writes of the tenant (session
        consistency), ``""`` for none, a token for the writes it names (as does every read
        below). Returns ``Hit``s: the memory and its fused, vector and text scores (comparable
        within one answer). Raises ``RequestInvalidError`` (RECALL_MODE_INVALID; a ``ValueError``)
        for another ``mode``; ``InvalidArgumentError`` (QUERY_EMPTY, QUERY_INVALID: a NUL,
        QUERY_TOO_LONG, K_OUT_OF_RANGE: 1 to the server's --max-k, 100 by default; 0 is the server's
        default, 5 or its --max-k when lower; SCOPE_INVALID, METADATA_INVALID)."""
        if mode not in _MODES:
            raise unknown_name("RECALL_MODE_INVALID", "mode", _MODES, mode)
        request = memory_pb2.RecallRequest(
            tenant=tenant,
            query=query,
            k=k,
            scopes=list(scopes or ()),
            metadata_equals=dict(filters or {}),
            mode=_MODES[mode],
        )
        response = self._read(self.memory.Recall, request, consistency_token)
        return convert.hits_from_proto(response.hits)

    def _read(self, method: Callable[..., T], request: Any, consistency_token: str | None) -> T:
        """A read that waits for the session's writes, or for ``consistency_token``'s ("": none)."""
        if consistency_token:
            request.consistency_token = consistency_token
        return self.call(method, request, retry=True, session=consistency_token is None)

    def get_memory(self, tenant: str, memory_id: int, *, consistency_token: str | None = None) -> types.Memory:
        """One memory of ``tenant`` by id, forgotten or merged ones included (as history).
        Raises ``NotFoundError`` (MEMORY_NOT_FOUND) for an id the tenant never had."""
        request = memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=memory_id)
        return convert.memory_from_proto(self._read(self.memory.GetMemory, request, consistency_token).memory)

    def list_memories(
        self,
        tenant: str,
        scope: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_forgotten: bool = False,
        *,
        newest_first: bool = False,
        thread: str = "",
        metadata_equals: Mapping[str, str] | None = None,
        consistency_token: str | None = None,
    ) -> types.MemoryPage:
        """A page of ``tenant``'s memories in id order (``newest_first``: the reverse); with
        ``thread``, only that thread's, in thread order.

        ``scope`` keeps one scope (all when empty); ``page_size`` is 1 to the server's
        --max-page-size (1,000 by default), 0 the server's default (100, or its --max-page-size
        when lower); ``page_token`` the previous page's
        ``next_page_token`` ("" for the first); ``include_forgotten`` lists forgotten memories too
        (without their text); ``metadata_equals`` keeps memories whose metadata has each pair.
        Returns a ``MemoryPage``, whose ``next_page_token`` is "" on the last page. Raises
        ``InvalidArgumentError`` (PAGE_SIZE_OUT_OF_RANGE, PAGE_TOKEN_INVALID: a token of another
        listing, order or filter; SCOPE_INVALID, THREAD_INVALID, METADATA_INVALID)."""
        request = memory_pb2.ListMemoriesRequest(
            tenant=tenant,
            scope=scope,
            page_size=page_size,
            page_token=page_token,
            include_forgotten=include_forgotten,
            newest_first=newest_first,
            thread=thread,
            metadata_equals=dict(metadata_equals or {}),
        )
        return convert.memory_page_from_proto(self._read(self.memory.ListMemories, request, consistency_token))

    def forget(self, tenant: str, memory_id: int, request_id: str | None = None) -> bool:
        """Forget a memory: everything it held (text, metadata, facts, embedding, earlier versions)
        is erased from the tenant's files; its id, scope and times stay, and the audit chain
        records the forget. ``request_id`` as for ``retain``.

        Returns False when it was forgotten already (nothing changed). Raises ``NotFoundError``
        (MEMORY_NOT_FOUND) for an id the tenant never had."""
        request = memory_pb2.ForgetMemoryRequest(
            tenant=tenant, memory_id=memory_id, request_id=request_id or new_request_id()
        )
        return bool(self.call(self.memory.ForgetMemory, request, retry=True).forgotten)

    def update_memory(
        self,
        tenant: str,
        memory_id: int,
        text: str = "",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        *,
        expires_at: float | None = None,
        clear_expires_at: bool = False,
    ) -> types.UpdateResult:
        """Replace a memory's text (``text``; "" keeps it) and metadata (``metadata``; None keeps
        it, {} clears it) under its id, as a new write would make them; the old text is kept as
        an earlier version (``list_memory_versions``). ``expires_at`` (unix seconds) gives it a new
        expiry, ``clear_expires_at`` makes it never expire (docs/expiry.md). ``request_id`` as for
        ``retain``.

        Returns an ``UpdateResult``: the memory now, ``updated`` False when nothing changed, and
        the memories the new text is a near duplicate of or supersedes. Raises
        ``NotFoundError`` (MEMORY_NOT_FOUND: unknown or forgotten), ``FailedPreconditionError``
        (MEMORY_DUPLICATE: another memory holds that text, named in the error's ``metadata``;
        MEMORY_MERGED: Dedup merged it into another), ``InvalidArgumentError`` (UPDATE_EMPTY and
        the text and metadata reasons of ``retain``)."""
        request = memory_pb2.UpdateMemoryRequest(
            tenant=tenant,
            memory_id=memory_id,
            text=text,
            metadata=dict(metadata or {}),
            replace_metadata=metadata is not None,
            request_id=request_id or new_request_id(),
            clear_expires_at=clear_expires_at,
        )
        if expires_at is not None:
            request.expires_at.CopyFrom(convert.timestamp(expires_at, field="expires_at", reason="EXPIRES_AT_INVALID"))
        return convert.update_result_from_proto(self.call(self.memory.UpdateMemory, request, retry=True))

    def forget_memories(
        self, tenant: str, metadata_equals: Mapping[str, str], scope: str = "", request_id: str | None = None
    ) -> int:
        """Forget every memory of ``tenant`` whose metadata has each pair of ``metadata_equals``
        (in ``scope`` only, when given), atomically: all of them or none. ``request_id`` as for
        ``retain``.

        Returns how many were forgotten. Raises ``InvalidArgumentError`` (FILTER_EMPTY: give at
        least one pair; METADATA_INVALID, SCOPE_INVALID) and ``FailedPreconditionError``
        (FORGET_TOO_MANY: more than 10,000 match; narrow the filter)."""
        request = memory_pb2.ForgetMemoriesRequest(
            tenant=tenant, metadata_equals=dict(metadata_equals), scope=scope, request_id=request_id or new_request_id()
        )
        return int(self.call(self.memory.ForgetMemories, request, retry=True).forgotten_count)

    def list_memory_versions(self, tenant: str, memory_id: int) -> list[types.MemoryVersion]:
        """A memory's versions, oldest first (1 is the memory as retained, the last is current),
        each with the time it became current. Raises ``NotFoundError`` (MEMORY_NOT_FOUND: unknown,
        or forgotten: its forget erased them all)."""
        request = memory_pb2.ListMemoryVersionsRequest(tenant=tenant, memory_id=memory_id)
        return convert.versions_from_proto(self.call(self.memory.ListMemoryVersions, request, retry=True))

    def list_memory_revisions(self, tenant: str, memory_id: int) -> list[types.MemoryRevision]:
        """Every change to a memory, oldest first (docs/revisions.md): none for a forgotten one.
        Raises ``NotFoundError`` (MEMORY_NOT_FOUND: unknown)."""
        request = revisions_pb2.ListMemoryRevisionsRequest(tenant=tenant, memory_id=memory_id)
        return convert.memory_revisions_from_proto(self.call(self.memory.ListMemoryRevisions, request, retry=True))

    def revert_memory(
        self, tenant: str, memory_id: int, revision: int, request_id: str | None = None
    ) -> types.UpdateResult:
        """Restore the text and metadata a memory had after ``revision``, as a new revision.

        Returns an ``UpdateResult`` (``updated`` False when it had them already). Raises
        ``NotFoundError`` (MEMORY_NOT_FOUND, REVISION_NOT_FOUND), ``FailedPreconditionError``
        (MEMORY_DUPLICATE: another memory holds that text; MEMORY_MERGED)."""
        request = revisions_pb2.RevertMemoryRequest(
            tenant=tenant, memory_id=memory_id, revision=revision, request_id=request_id or new_request_id()
        )
        return convert.revert_result_from_proto(self.call(self.memory.RevertMemory, request, retry=True))

    def get_expiry_policy(self, tenant: str) -> types.ExpiryPolicy:
        """The tenant's expiry policy (docs/expiry.md)."""
        request = expiry_pb2.GetExpiryPolicyRequest(tenant=tenant)
        return convert.expiry_policy_from_proto(self.call(self.memory.GetExpiryPolicy, request, retry=True).policy)

    def set_expiry_policy(self, tenant: str, policy: types.ExpiryPolicy) -> types.ExpiryPolicy:
        """Replace the tenant's expiry policy; returns it. Raises ``InvalidArgumentError``
        (EXPIRY_POLICY_INVALID)."""
        request = expiry_pb2.SetExpiryPolicyRequest(tenant=tenant, policy=convert.expiry_policy_to_proto(policy))
        return convert.expiry_policy_from_proto(self.call(self.memory.SetExpiryPolicy, request, retry=True).policy)

    # -- admin ----------------------------------------------------------------------------------

    def verify_integrity(self, tenant: str) -> types.IntegrityReport:
        """Recompute ``tenant``'s audit chain and check every memory against its entry.

        Returns an ``IntegrityReport``: ``valid``, the first broken entry, the entries checked,
        the chain's head hash (keep it elsewhere to detect a rewrite of the whole file) and the
        problems found. A tampered file is a report, not an error; a tenant without data is
        valid with nothing checked."""
        r = self.call(self.admin.VerifyIntegrity, admin_pb2.VerifyIntegrityRequest(tenant=tenant), retry=True)
        return convert.integrity_from_proto(r)

    def stats(self, tenant: str) -> types.Stats:
        """``tenant``'s counters, kept in its file: memories, forgotten, writes, model and embedding
        calls, duplicates, ledger entries, file bytes (a ``Stats``; all 0 for a tenant without
        data)."""
        r = self.call(self.admin.Stats, admin_pb2.StatsRequest(tenant=tenant), retry=True)
        return convert.stats_from_proto(r)

    def tenant_figures(self, tenant: str) -> types.TenantFigures:
        """``tenant``'s figures for charts (a ``TenantFigures``): its last hour per minute, as
        the member that owns it counted them in memory since its start, and its live memories
        over its life."""
        r = self.call(self.admin.GetTenantFigures, admin_pb2.GetTenantFiguresRequest(tenant=tenant), retry=True)
        return convert.tenant_figures_from_proto(r)

    def list_tenant_figures(self, limit: int = 0) -> types.TenantsFigures:
        """The largest, busiest and failing tenants (admin token), ``limit`` rows each (1 to 100;
        0: 10), from the counters in memory and the files' sizes (on a deployment, every
        member's). Raises ``InvalidArgumentError`` (LIMIT_OUT_OF_RANGE)."""
        r = self.call(self.admin.ListTenantFigures, admin_pb2.ListTenantFiguresRequest(limit=limit), retry=True)
        return convert.tenants_figures_from_proto(r)

    def ping(self) -> None:
        """Ask the server to answer (and nothing else): raises ``UnavailableError`` when none does
        at ``target``, and the token's errors."""
        self.call(self.admin.Ping, admin_pb2.PingRequest(), retry=True)

    # -- conversations and dedup ----------------------------------------------------------------

    def retain_conversation(
        self,
        tenant: str,
        messages: Sequence[types.Message | Mapping[str, str] | tuple[str, str]],
        scope: str = types.DEFAULT_SCOPE,
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        *,
        fast: bool = False,
        occurred_at: float | None = None,
        thread: types.ThreadRef | None = None,
        speaker: str = "",
        expires_at: float | None = None,
    ) -> types.RetainResult:
        """Retain a multi-turn conversation as one operation (one memory, one fingerprint): the same
        conversation submitted again is reported as a duplicate of the first.

        ``messages`` are ``Message``s, ``{"role", "content", "name"?}`` mappings or ``(role,
        content)`` pairs; the memory's text is the transcript, a "role: content" line each.
        ``scope``, ``metadata``, ``request_id`` and ``fast`` are as for ``retain``;
        ``occurred_at``, ``thread``, ``speaker`` and ``expires_at`` are the whole conversation's (without
        ``speaker``, the one ``name`` its messages share, if any). Returns its ``RetainResult``.
        Raises ``InvalidArgumentError`` (MESSAGES_EMPTY, MESSAGES_TOO_MANY: over 1,000;
        MESSAGE_EMPTY, MESSAGE_ROLE_INVALID: a role is 1-64 letters, digits, spaces, ".", "_"
        or "-"; TEXT_TOO_LONG and the other reasons of ``retain``)."""
        request = memory_pb2.RetainRequest(
            tenant=tenant,
            messages=convert.conversation_messages(messages),
            scope=scope,
            metadata=dict(metadata or {}),
            request_id=request_id or new_request_id(),
            fast=fast,
        )
        convert.place(request, occurred_at, thread, speaker, expires_at)
        return convert.retain_result_from_proto(self.call(self.memory.Retain, request, retry=True).result)

    def dedup(
        self, tenant: str, *, merge: bool = False, threshold: float = 0.0, request_id: str | None = None
    ) -> types.DedupResult:
        """Find ``tenant``'s near duplicates (same scope, embeddings at least ``threshold``
        similar, the same numbers, dates and identifiers); with ``merge=True``, retire each group
        into its oldest memory (the others keep their text as history and leave recall).

        ``threshold`` is 0-1 (0: the server's default); ``request_id`` makes a retried merge
        return the first call's groups. Returns a ``DedupResult``: the groups, whether they were
        merged, the threshold used. Raises ``InvalidArgumentError`` (THRESHOLD_INVALID)."""
        request = admin_pb2.DedupRequest(
            tenant=tenant, merge=merge, threshold=threshold, request_id=request_id or new_request_id()
        )
        return convert.dedup_from_proto(self.call(self.admin.Dedup, request, retry=True))

    def reembed_tenant(self, tenant: str, embedder: str, *, chunk_size: int = 0) -> types.ReembedProgress:
        """One step of moving ``tenant`` to ``embedder`` ("minilm" or "hashing") while it serves
        (admin token): ``chunk_size`` memories embedded (0: the server's 256), or the switch. Call
        again until the result is ``finished``; an interrupted move goes on where it stopped.
        Raises ``NotFoundError`` (TENANT_NOT_FOUND), ``InvalidArgumentError`` (EMBEDDER_UNKNOWN)."""
        request = admin_pb2.ReembedTenantRequest(tenant=tenant, embedder=embedder, chunk_size=chunk_size)
        return convert.reembed_progress_from_proto(self.call(self.admin.ReembedTenant, request, retry=True))

    # -- records (host-owned generations; see docs/host-protocol.md) ------------------------------
    #
    # The generation arguments and results below are for host code only. A model gets its tools
    # from ``MemoryHost``, which keeps generations out of everything the model sees.

    def assemble_context(
        self, tenant: str, workspace: str, query: str | None = None, k: int = 0, *, consistency_token: str | None = None
    ) -> types.AssembledContext:
        """Records of Global and ``workspace`` (+ the ``k`` memories recalled for ``query``: 0 the
        server's default, as for ``recall``), with
        the exact generations read in the same snapshot (from the response metadata): host code
        keeps them and sends them back with ``update_global`` and ``update_workspace``.

        Records the server left out to keep its response small (``omitted_records``) are fetched
        one by one and must carry the same generation; if one changed meanwhile, the context is
        assembled again (up to three times), so records and generations always belong together.
        Recalled memories left out are named in ``omitted_memory_ids`` (``get_memory`` each).
        ``consistency_token``: as for ``recall``. Returns an ``AssembledContext``. Raises
        ``InvalidArgumentError`` (WORKSPACE_INVALID and the query reasons of ``recall``)."""
        assembled = self.run(host_protocol.assemble(tenant, workspace, query, k), consistency_token=consistency_token)
        return types.AssembledContext(
            global_records=[convert.record_from_proto(r) for r in assembled.global_records],
            workspace_records=[convert.record_from_proto(r) for r in assembled.workspace_records],
            memories=convert.hits_from_proto(assembled.memories),
            global_generation=assembled.global_generation,
            workspace_generation=assembled.workspace_generation,
            omitted_memory_ids=assembled.omitted_memory_ids,
        )

    def update_global(self, tenant: str, content: str, observed_generation: int, request_id: str | None = None) -> int:
        """Replace the Global MEMORY.md record with ``content`` if the Global generation is still
        ``observed_generation`` (the one ``assemble_context`` returned); ``request_id`` makes a
        retry after a lost reply return the first result.

        Returns the new generation. Raises ``AbortedError`` (GENERATION_MISMATCH: another write
        came first; assemble the context again, never retry with a newer generation),
        ``InvalidArgumentError`` (RECORD_CONTENT_INVALID, RECORD_TOO_LARGE: over the server's
        --max-record-bytes, 256 KiB by default)."""
        request = workspace_pb2.UpdateGlobalRequest(
            tenant=tenant, content=content, request_id=request_id or new_request_id()
        )
        _, call = self.call(
            self.workspace.UpdateGlobal.with_call,
            request,
            retry=True,
            metadata=((GLOBAL_GENERATION_KEY, str(observed_generation)),),
        )
        return _generation(call.trailing_metadata(), GLOBAL_GENERATION_KEY)

    def update_workspace(
        self,
        tenant: str,
        workspace: str,
        changes: Sequence[types.RecordChange],
        observed_generation: int,
        request_id: str | None = None,
    ) -> int:
        """Apply ``changes`` (``RecordChange`` puts of whole records and deletes) to ``workspace``
        as one generation, all or none, if its generation is still ``observed_generation``;
        ``request_id`` as for ``update_global``.

        Returns the new generation. Raises ``AbortedError`` (GENERATION_MISMATCH, as for
        ``update_global``), ``InvalidArgumentError`` (WORKSPACE_INVALID, CHANGES_EMPTY,
        CHANGES_TOO_MANY, CHANGE_OP_INVALID, RECORD_KEY_INVALID, RECORD_KEY_DUPLICATE,
        RECORD_CONTENT_INVALID, RECORD_TOO_LARGE), ``NotFoundError`` (RECORD_NOT_FOUND: a delete
        of a missing record) and ``ResourceExhaustedError`` (RECORDS_LIMIT: the workspace would
        hold more than the server's --max-records-per-workspace)."""
        request = workspace_pb2.UpdateWorkspaceRequest(
            tenant=tenant,
            workspace=workspace,
            changes=_changes_to_proto(changes),
            request_id=request_id or new_request_id(),
        )
        _, call = self.call(
            self.workspace.UpdateWorkspace.with_call,
            request,
            retry=True,
            metadata=((WORKSPACE_GENERATION_KEY, str(observed_generation)),),
        )
        return _generation(call.trailing_metadata(), WORKSPACE_GENERATION_KEY)

    def list_records(self, tenant: str, scope: str) -> types.ScopeRecords:
        """All of ``scope``'s records and their generation (browser editing), following the pages
        the server returns; a listing the records changed during is started again (three times
        at most).

        Returns ``ScopeRecords``. Raises ``AbortedError`` (RECORDS_CHANGED: they kept changing)
        and ``InvalidArgumentError`` (SCOPE_INVALID)."""
        for _attempt in range(3):
            records: list[types.Record] = []
            token = ""
            try:
                while True:
                    r = self.call(
                        self.workspace.ListRecords,
                        workspace_pb2.ListRecordsRequest(tenant=tenant, scope=scope, page_token=token),
                        retry=True,
                    )
                    records.extend(convert.record_from_proto(x) for x in r.records)
                    token = r.next_page_token
                    if not token:
                        return types.ScopeRecords(records=records, generation=r.generation)
            except AbortedError as exc:
                if exc.reason != "RECORDS_CHANGED":
                    raise
        raise AbortedError(
            grpc.StatusCode.ABORTED, "RECORDS_CHANGED", f"the {scope} records kept changing while they were listed", {}
        )

    def list_scopes(self, tenant: str) -> list[types.ScopeSummary]:
        """The tenant's scopes: "global" first, then each workspace that has records, by name;
        each a ``ScopeSummary`` with its generation and record count."""
        r = self.call(self.workspace.ListScopes, workspace_pb2.ListScopesRequest(tenant=tenant), retry=True)
        return convert.scopes_from_proto(r)

    def get_record(self, tenant: str, scope: str, key: str) -> tuple[types.Record, int]:
        """The record ``key`` of ``scope`` and the scope's generation, read together (browser
        editing). Raises ``NotFoundError`` (RECORD_NOT_FOUND), ``InvalidArgumentError``
        (SCOPE_INVALID, RECORD_KEY_INVALID)."""
        r = self.call(
            self.workspace.GetRecord, workspace_pb2.GetRecordRequest(tenant=tenant, scope=scope, key=key), retry=True
        )
        return convert.record_from_proto(r.record), r.generation

    def edit_records(
        self,
        tenant: str,
        scope: str,
        changes: Sequence[types.RecordChange],
        expected_generation: int,
        request_id: str | None = None,
    ) -> int:
        """Apply ``changes`` to ``scope`` as one generation, all or none, if its generation is
        still ``expected_generation`` (the browser's edit: the generation it read is an argument,
        not metadata). ``request_id`` as for ``update_global``.

        Returns the new generation. Raises ``AbortedError`` (GENERATION_MISMATCH) and the
        reasons of ``update_workspace``."""
        request = workspace_pb2.EditRecordsRequest(
            tenant=tenant,
            scope=scope,
            expected_generation=expected_generation,
            changes=_changes_to_proto(changes),
            request_id=request_id or new_request_id(),
        )
        return int(self.call(self.workspace.EditRecords, request, retry=True).generation)

    def list_record_revisions(self, tenant: str, scope: str, key: str) -> tuple[list[types.RecordRevision], int]:
        """A record's revisions, oldest first, and the scope's generation (docs/revisions.md).
        Raises ``NotFoundError`` (RECORD_NOT_FOUND)."""
        request = revisions_pb2.ListRecordRevisionsRequest(tenant=tenant, scope=scope, key=key)
        response = self.call(self.workspace.ListRecordRevisions, request, retry=True)
        return convert.record_revisions_from_proto(response), response.generation

    def revert_record(
        self,
        tenant: str,
        scope: str,
        key: str,
        generation: int,
        expected_generation: int,
        request_id: str | None = None,
    ) -> int:
        """Put the content ``key`` had at ``generation`` as a new generation, if the scope is still
        at ``expected_generation``; returns the new generation. Raises ``AbortedError``
        (GENERATION_MISMATCH: nothing written), ``NotFoundError`` (REVISION_NOT_FOUND)."""
        request = revisions_pb2.RevertRecordRequest(
            tenant=tenant,
            scope=scope,
            key=key,
            generation=generation,
            expected_generation=expected_generation,
            request_id=request_id or new_request_id(),
        )
        return int(self.call(self.workspace.RevertRecord, request, retry=True).generation)

    def consolidate(
        self, tenant: str, scope: str, changes: Sequence[types.RecordChange], expected_generation: int, receipt_id: str
    ) -> types.ConsolidateResult:
        """Apply a session consolidation's ``changes`` to ``scope`` exactly once per
        ``receipt_id`` (safe to retry: a receipt already applied returns its first result and
        changes nothing), if the scope's generation is still ``expected_generation``.

        Returns a ``ConsolidateResult``: the generation the receipt produced, and whether it had
        been applied already. Raises ``AbortedError`` (GENERATION_MISMATCH; RECEIPT_REUSED: the
        receipt id came with other changes), ``InvalidArgumentError`` (RECEIPT_ID_INVALID and the
        reasons of ``update_workspace``)."""
        request = workspace_pb2.ConsolidateRequest(
            tenant=tenant,
            scope=scope,
            expected_generation=expected_generation,
            changes=_changes_to_proto(changes),
            receipt_id=receipt_id,
        )
        r = self.call(self.workspace.Consolidate, request, retry=True)
        return convert.consolidate_from_proto(r)

    def consolidate_session(self, tenant: str, thread: str = "") -> list[types.SessionOutcome]:
        """Consolidate the session of ``thread`` (finished now), or every finished one without a
        thread (idle for the server's --consolidate-idle-seconds), into the MEMORY.md record of
        each scope its memories are in, each receipt exactly once (safe to retry: a receipt
        already applied is reported ``already_applied``; docs/consolidation.md).

        Returns a ``SessionOutcome`` per thread and scope. Raises ``NotFoundError``
        (THREAD_NOT_FOUND) and ``InvalidArgumentError`` (THREAD_INVALID)."""
        request = workspace_pb2.ConsolidateSessionRequest(tenant=tenant, thread=thread)
        return convert.session_outcomes_from_proto(self.call(self.workspace.ConsolidateSession, request, retry=True))

    # -- cross-tenant administration (admin token) ---------------------------------------------

    def whoami(self) -> types.Caller:
        """The caller as the server sees it (a ``Caller``): its token's name, the tenants it may
        reach, whether it is an admin."""
        return convert.caller_from_proto(self.call(self.admin.WhoAmI, admin_pb2.WhoAmIRequest(), retry=True))

    def list_tenants(self, page_size: int = 0, page_token: str = "") -> types.TenantPage:
        """A page of the server's tenants in lexical order (admin token): ``page_size`` up to the
        server's --max-page-size (0: 1,000, or that cap when lower), ``page_token`` the previous
        page's ``next_page_token``.

        Returns a ``TenantPage``, naming the tenants whose file is damaged and, on a deployment,
        the members that did not answer. Raises ``InvalidArgumentError``
        (PAGE_SIZE_OUT_OF_RANGE, PAGE_TOKEN_INVALID)."""
        r = self.call(
            self.admin.ListTenants, admin_pb2.ListTenantsRequest(page_size=page_size, page_token=page_token), retry=True
        )
        return convert.tenant_page_from_proto(r)

    def erase_tenant(self, tenant: str) -> types.ErasureReceipt:
        """Remove the tenant and everything of it from the server (admin token): its file, its
        write-ahead log, its hot-path inbox. Backups taken before still hold it.

        Returns the ``ErasureReceipt`` the server's erasure log keeps. Not retried: a second call
        after a lost reply is NOT_FOUND. Raises ``NotFoundError`` (TENANT_NOT_FOUND: no data) and
        ``UnavailableError`` (TENANT_BUSY: its calls did not end within 10 s; nothing was erased)."""
        r = self.call(self.admin.EraseTenant, admin_pb2.EraseTenantRequest(tenant=tenant), retry=False)
        self._timeline_ended(tenant)
        return convert.erasure_receipt_from_proto(r.receipt)

    def _timeline_ended(self, tenant: str) -> None:
        """This client erased ``tenant`` or installed another copy of it: the session's tokens of
        it name writes that are gone (the server would answer them TIMELINE_CHANGED), so they go."""
        if self._session is not None:
            self._session.forget(tenant)

    def move_tenant(
        self, tenant: str, destination: str, *, member: str = "", timeout: float = 3600.0
    ) -> types.MoveResult:
        """Move ``tenant`` to member ``destination`` (admin token), asked of the member holding
        its file (``member``, the source: the call is routed to it; docs/scale-out.md, "Moving
        tenants"). Safe to repeat: asked again it finishes an interrupted move. ``timeout``
        bounds the whole move, in seconds.

        Returns a ``MoveResult``: the epoch, head hash, bytes sent and the steps this call did.
        Raises ``InvalidArgumentError`` (DESTINATION_INVALID: not another member of the list),
        ``NotFoundError`` (TENANT_NOT_FOUND: no file on ``member``), ``FailedPreconditionError``
        (NO_MEMBERS: the server runs alone; MOVE_ELSEWHERE: it is moving to another member,
        finish that move first; MOVE_NOT_ACTIVE: it was moved to ``member`` and is not active
        yet; TENANT_HELD_ELSEWHERE) and ``DataLossError`` (MOVE_HEAD_MISMATCH: the destination's
        copy differs; the tenant stays fenced on the source, run the move again)."""
        metadata = ((ROUTE_KEY, _member_id(member)),) if member else ()
        deadline = checked_timeout(timeout)
        r = self._retrying(
            lambda left: self.admin.MoveTenant(
                admin_pb2.MoveTenantRequest(tenant=tenant, destination=destination),
                timeout=left,
                metadata=(*self._metadata, *metadata),
            ),
            retry=True,
            timeout=deadline,
            tenant=tenant,
        )
        return types.MoveResult(
            r.tenant, r.source, r.destination, r.epoch, r.head_hash, r.bytes, list(r.steps), r.memories
        )

    def activate_tenant(self, tenant: str, epoch: int, head_hash: str, *, member: str = "") -> bool:
        """A move's last step, asked of its destination ``member`` (admin token; the source
        asks it, ``move_tenant`` needs no help): the tenant imported there at ``epoch`` with
        ``head_hash`` is served from now on.

        Returns whether it was activated now (False: it was already). Raises
        ``FailedPreconditionError`` (MOVE_NOT_IMPORTED: no import waits here at ``epoch``) and
        ``DataLossError`` (MOVE_HEAD_MISMATCH: the imported chain ends elsewhere)."""
        metadata = ((ROUTE_KEY, _member_id(member)),) if member else ()
        request = admin_pb2.ActivateTenantRequest(tenant=tenant, epoch=epoch, head_hash=head_hash)
        return bool(self.call(self.admin.ActivateTenant, request, retry=True, metadata=metadata).activated)

    def change_members(self, to: str, *, complete: bool = False) -> types.MemberChange:
        """Begin (or, ``complete``, complete) a change to the member list ``to`` on the member this
        client calls (admin token; ``mnemosyne rebalance`` asks each member; docs/scale-out.md,
        "Changing the member list"). Begun, the member creates no tenant another member owns by
        ``to`` (UNAVAILABLE MEMBERS_CHANGING) and answers once the creations under way ended (and,
        on a member back on a new volume with replication, once it restored its tenants).
        Raises ``InvalidArgumentError`` (CONFIG_INVALID: ``to`` is no member list),
        ``FailedPreconditionError`` (NO_MEMBERS; MEMBER_CHANGE_NOT_BEGUN: completing a change
        this member was not told of) and ``UnavailableError`` (MEMBERS_CHANGING: creations under
        way did not end in time; RESTORING_FROM_REPLICA: its restore did not; retry)."""
        request = admin_pb2.ChangeMembersRequest(to=to, complete=complete)
        r = self.call(self.admin.ChangeMembers, request, retry=True)
        return types.MemberChange(r.member, r.creations_waited, r.previous_done)

    def backup(
        self,
        tenants: Sequence[str] = (),
        known: Mapping[str, tuple[int, int] | tuple[int, int, str]] | None = None,
        timeout: float = 3600.0,
    ) -> Iterator[types.BackupPart]:
        """The parts of a backup stream of ``tenants`` (all when empty; admin token): per tenant its
        ``TenantBackup`` then its files' ``BackupChunk``s, ``BackupUnchanged`` for a tenant
        ``known`` already holds (tenant -> (change counter, inbox sequence), and its audit chain's
        head hash: with it, a tenant erased and made again since is copied), ``SkippedTenant``
        for one that could not be copied, and a final ``BackupSummary``. ``mnemosyne backup``
        writes a backup directory from it; ``timeout`` bounds the whole stream, in seconds.
        Raises ``NotFoundError`` (TENANT_NOT_FOUND: a named tenant has no data),
        ``InvalidArgumentError`` (TENANT_INVALID: a tenant of ``tenants`` or ``known`` is no tenant
        id) and ``UnavailableError`` (RESTORING_FROM_REPLICA: a server on a new volume still restores its
        tenants from object storage after a minute; retry) before the first part. Opened while the
        server is down or restarting, it is opened again within the client's retry window; one that
        failed after its first part raises."""
        request = admin_pb2.BackupRequest(
            tenants=list(tenants),
            known=[
                admin_pb2.BackedUpTenant(
                    tenant=t, change_counter=c, inbox_sequence=i, head_hash=head[0] if head else ""
                )
                for t, (c, i, *head) in (known or {}).items()
            ],
        )
        self._sendable(request)
        yield from self._reopened(
            lambda left: self.admin.Backup(request, timeout=left, metadata=self._metadata),
            timeout=checked_timeout(timeout),
            made=convert.backup_part_from_proto,
        )

    def export_tenant(self, tenant: str, timeout: float = 3600.0) -> Iterator[types.TenantBackup | types.BackupChunk]:
        """One tenant as a consistent snapshot (its own token or an admin token): its manifest
        (``TenantBackup``), then its files' ``BackupChunk``s. ``mnemosyne export`` writes them
        as a tenant archive; ``timeout`` bounds the stream, in seconds. Opened while the server is
        down or restarting, it is opened again within the client's retry window; one that failed
        after its first part raises (export again). Raises ``NotFoundError`` (TENANT_NOT_FOUND)."""
        request = self._sendable(admin_pb2.ExportTenantRequest(tenant=tenant))
        yield from self._reopened(
            lambda left: self.admin.ExportTenant(request, timeout=left, metadata=self._metadata),
            timeout=checked_timeout(timeout),
            tenant=tenant,
            made=convert.export_part_from_proto,
        )

    def import_tenant(
        self,
        manifest: types.TenantBackup,
        chunks: Iterable[types.BackupChunk],
        *,
        tenant: str = "",
        replace: bool = False,
        timeout: float = 3600.0,
    ) -> types.ImportResult:
        """Install an export (``manifest`` and its ``chunks``, as ``export_tenant`` gave them) on
        this server (admin token) as ``tenant`` (the manifest's when empty); ``replace`` lets it
        overwrite a tenant of that name. Not retried.

        Returns an ``ImportResult``. Raises ``InvalidArgumentError`` (ARCHIVE_TRUNCATED,
        ARCHIVE_MISMATCH, CHAIN_INVALID, MANIFEST_MISMATCH: the files are not what the manifest
        says; nothing was installed; REQUEST_TOO_LARGE, before it is sent: the manifest or a chunk
        is over ``max_request_bytes``, a chunk's refusal cancelling the import, nothing installed;
        ``ArgumentTypeError`` REQUEST_UNDECODABLE, so too: a chunk that is no ``BackupChunk`` of
        a text ``file`` and bytes ``data``, named by its position from 1) and ``FailedPreconditionError`` (TENANT_EXISTS: pass ``replace``).
        An exception ``chunks`` raises (a file it reads gone) cancels the import, nothing
        installed, and is raised itself, as it was, when the call has ended."""
        copy = convert.tenant_backup_to_proto(manifest)
        # Named in the request even when it is the manifest's, so that a deployment of many
        # members routes the import to that tenant's owner (the first message's tenant).
        tenant = tenant or copy.tenant
        first = admin_pb2.ImportTenantRequest(tenant=tenant, manifest=copy, replace=replace)
        rest = (
            admin_pb2.ImportTenantRequest(chunk=admin_pb2.BackupChunk(file=c.file, data=c.data))
            for c in (checked_chunk(chunk, position) for position, chunk in enumerate(chunks, 1))
        )
        response = self._client_stream(self.admin.ImportTenant, first, rest, timeout=timeout, tenant=tenant)
        result = convert.import_result_from_proto(response)
        self._timeline_ended(result.tenant)
        return result

    def _client_stream(self, method: Any, first: M, rest: Iterable[M], *, timeout: float, tenant: str) -> Any:
        """The response of ``method``'s client stream of ``first`` then ``rest`` (made as they are
        sent: an archive's chunks as they are read), each message through ``_sendable``: ``first``
        refused before the call; a later one, or an exception of the caller's own iterable (a file
        it reads gone), cancels it, that refusal or the caller's exception itself raised when the
        call has ended (raised in gRPC's request iterator, it would be logged and answered
        UNKNOWN; ending the stream early could complete what was sent)."""
        self._sendable(first)
        stopped: list[Exception] = []  # the refusal or the caller's exception that cancelled the call
        calls: list[grpc.Future[Any]] = []
        started = threading.Event()

        def messages() -> Iterator[M]:
            yield first
            try:  # making a message too (a chunk of the wrong type is refused as it is made)
                for message in rest:
                    yield self._sendable(message)
            except Exception as error:  # not GeneratorExit: gRPC closing the stream is no fault
                stopped.append(error)
                started.wait()  # the call, to cancel (gRPC may ask for messages before it is returned)
                for call in calls:
                    call.cancel()

        try:
            try:
                calls.append(method.future(messages(), timeout=checked_timeout(timeout), metadata=self._metadata))
            finally:
                started.set()
            return calls[0].result()
        except grpc.FutureCancelledError:
            pass  # only a stopped stream cancels it
        except grpc.RpcError as exc:
            if not stopped:  # else the server answered first: the caller's own fault comes first
                raise self._failed(exc, tenant) from exc
        # Raised here, outside the handlers, it stays as it was raised: its traceback, and its
        # cause and context those of the caller's code, not gRPC's cancellation.
        raise stopped[0]

    def aggregate_stats(self, chunk_size: int = 0) -> types.AggregateStats:
        """Every tenant's stats and their total (admin token), read from the whole stream of
        chunks (``chunk_size`` tenants each, 0: 100): NOT one snapshot, each tenant's stats come
        from its own transaction. Returns ``AggregateStats``; a tenant whose file is damaged is
        in its ``damaged``, not in the total. A read: opened while the server is down or
        restarting, it is opened again within the client's retry window; one that failed after
        its first chunk raises. Raises ``InvalidArgumentError`` (CHUNK_SIZE_INVALID)."""
        tenants: dict[str, types.Stats] = {}
        damaged: dict[str, str] = {}
        total = convert.stats_from_proto(admin_pb2.StatsResponse())  # until the last chunk names it
        files_read, consistency, unanswered = 0, "", []
        request = self._sendable(admin_pb2.AggregateStatsRequest(chunk_size=chunk_size))
        chunks: Iterator[admin_pb2.AggregateStatsChunk] = self._reopened(
            lambda left: self.admin.AggregateStats(request, timeout=left, metadata=self._metadata),
            timeout=self._timeout,
            made=lambda chunk: chunk,
        )
        for chunk in chunks:
            for row in chunk.tenants:
                if row.error_reason:
                    damaged[row.tenant] = row.error_reason
                else:
                    tenants[row.tenant] = convert.stats_from_proto(row.stats)
            if chunk.HasField("total"):
                total = convert.stats_from_proto(chunk.total)
                files_read, consistency = chunk.files_read, chunk.consistency
                unanswered = list(chunk.unanswered_members)
        return types.AggregateStats(
            tenants=tenants,
            total=total,
            files_read=files_read,
            consistency=consistency,
            damaged=damaged,
            unanswered_members=unanswered,
        )

    # -- hot path and events --------------------------------------------------------------------

    @overload
    def hot_path(self, tenant: str, action: Literal["flush"], timeout_seconds: float = 0.0) -> types.FlushResult: ...
    @overload
    def hot_path(
        self, tenant: str, action: Literal["enable", "disable", "status"], timeout_seconds: float = 0.0
    ) -> types.HotPathStatus: ...
    @overload
    def hot_path(
        self, tenant: str, action: str, timeout_seconds: float = 0.0
    ) -> types.HotPathStatus | types.FlushResult: ...
    def hot_path(
        self, tenant: str, action: str, timeout_seconds: float = 0.0, *, consistency_token: str = ""
    ) -> types.HotPathStatus | types.FlushResult:
        """Act on ``tenant``'s hot path (fast, queued writes): ``action`` is "enable", "disable",
        "status" or "flush" (the specification's memory_hot_path).

        "flush" blocks until every fast write accepted before it has finished (with
        ``consistency_token``: only the writes that token names) and returns a ``FlushResult``
        (its succeeded ones are then readable); "disable" stops queueing and waits for the queue
        to drain. Both wait at most ``timeout_seconds`` (0: the server's 30) and then raise
        ``DeadlineExceededError`` (HOT_PATH_DEADLINE_EXCEEDED) whose metadata names the remaining
        depth. The others return the ``HotPathStatus``. Raises ``RequestInvalidError``
        (HOT_PATH_ACTION_INVALID; a ``ValueError``) for another ``action`` and ``InvalidArgumentError`` (TIMEOUT_INVALID, TOKEN_INVALID, TOKEN_FOREIGN)."""
        wait = server_wait(timeout_seconds)  # the call's own deadline must outlast it
        if action == "flush":
            request = hot_path_pb2.FlushRequest(
                tenant=tenant, timeout_seconds=timeout_seconds, consistency_token=consistency_token
            )
            r = self._call_waiting(self.hot_path_stub.Flush, request, wait)
            return convert.flush_from_proto(r)
        methods = {
            "enable": self.hot_path_stub.Enable,
            "disable": self.hot_path_stub.Disable,
            "status": self.hot_path_stub.Status,
        }
        if action not in methods:
            raise unknown_name("HOT_PATH_ACTION_INVALID", "action", ("enable", "disable", "status", "flush"), action)
        state = hot_path_pb2.HotPathRequest(tenant=tenant, timeout_seconds=timeout_seconds)
        return convert.hot_path_status_from_proto(self._call_waiting(methods[action], state, wait))

    def _call_waiting(self, method: Callable[..., T], request: Any, wait: float) -> T:
        # Safe to repeat (a barrier, a flag), so a refusal for a limit is waited out like a read's.
        self._sendable(request)
        return self._retrying(
            lambda left: method(request, timeout=left, metadata=self._metadata),
            retry=True,
            timeout=max(self._timeout, wait + 10.0),
            tenant=request.tenant,
        )

    def get_event(self, tenant: str, event_id: int) -> types.Event:
        """One operation of ``tenant``'s hot-path log (the ``event_id`` of an "enqueued"
        ``RetainResult``): its status and what it did. Raises ``NotFoundError``
        (EVENT_NOT_FOUND)."""
        request = events_pb2.GetEventRequest(tenant=tenant, event_id=event_id)
        return convert.event_from_proto(self.call(self.events.GetEvent, request, retry=True))

    def list_events(
        self,
        tenant: str,
        status: str | None = None,
        accepted_after: float | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> types.EventPage:
        """A page of ``tenant``'s hot-path operations in id order: only those of ``status``
        ("pending", "running", "succeeded" or "failed"; any when None) accepted at or after
        ``accepted_after`` (unix seconds); ``page_size`` and ``page_token`` as for
        ``list_memories``. Returns an ``EventPage``. Raises ``InvalidArgumentError``
        (EVENT_STATUS_INVALID, PAGE_SIZE_OUT_OF_RANGE, PAGE_TOKEN_INVALID)."""
        if status and status not in convert.EVENT_STATUS_BY_NAME:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "EVENT_STATUS_INVALID",
                f"status must be one of {', '.join(convert.EVENT_STATUS_BY_NAME)}",
                {},
            )
        request = events_pb2.ListEventsRequest(
            tenant=tenant,
            status=convert.EVENT_STATUS_BY_NAME[status] if status else events_pb2.EVENT_STATUS_UNSPECIFIED,
            page_size=page_size,
            page_token=page_token,
        )
        if accepted_after is not None:
            request.accepted_after.CopyFrom(
                convert.timestamp(accepted_after, field="accepted_after", reason="TIMESTAMP_INVALID")
            )
        response = self.call(self.events.ListEvents, request, retry=True)
        return convert.event_page_from_proto(response)

    def watch_events(
        self, tenant: str, after_event_id: int = 0, after_sequence: int = 0, timeout: float | None = None
    ) -> Generator[types.Event, None, None]:
        """Every status transition of ``tenant``'s hot-path operations (those after
        ``after_event_id``), replayed from the durable log then live, as ``Event``s. To resume a
        dropped stream without missing a transition, pass the last received ``Event.sequence`` as
        ``after_sequence``. The stream runs until ``timeout`` (None: forever; then it raises
        ``DeadlineExceededError``) or until you stop iterating (closing the generator cancels the
        call). A stream that failed, UNAVAILABLE (the server down or restarting) or refused for a
        limit (RESOURCE_EXHAUSTED, STREAMS_PER_TENANT_REACHED, with a retry delay), is opened again
        as a read is called again, within the client's retry window from that failure: after events,
        from the last one given (its ``sequence`` as ``after_sequence``), so none is missed and none
        given twice; it raises only once the window is over. Raises
        ``FailedPreconditionError`` (EVENTS_PRUNED: the event retention limit deleted transitions
        after ``after_sequence``; resume from the error's ``pruned_through_sequence`` metadata, or
        0 for everything kept)."""
        request = self._sendable(
            events_pb2.WatchEventsRequest(tenant=tenant, after_event_id=after_event_id, after_sequence=after_sequence)
        )

        def watch(after: events_pb2.Event | None) -> Callable[[float | None], Any]:
            resumed = request
            if after is not None:  # after the last event delivered: none missed, none twice
                resumed = events_pb2.WatchEventsRequest()
                resumed.CopyFrom(request)
                resumed.after_sequence = after.sequence
            return lambda left: self.events.WatchEvents(resumed, timeout=left, metadata=self._metadata)

        yield from self._reopened(
            watch(None),
            timeout=checked_timeout(timeout),
            tenant=tenant,
            cancelled_ends=True,
            made=convert.event_from_proto,
            resumed=watch,
        )

    def _reopened(
        self,
        open_call: Callable[[float | None], Any],
        *,
        timeout: float | None,
        made: Callable[[Any], T],
        tenant: str = "",
        cancelled_ends: bool = False,
        resumed: Callable[[Any], Callable[[float | None], Any]] | None = None,
    ) -> Generator[T, None, None]:
        """The messages, each ``made(message)``, of a server stream safe to open again,
        ``open_call(seconds left of timeout)`` opening it: one that failed before its first message (UNAVAILABLE, the server
        down or restarting; a refusal naming a retry delay) is opened again as a read is called
        again, within the retry window from that failure; one that failed after raises, unless
        ``resumed(last message delivered)`` opens it again from there (a watch's), as one that had
        not answered (``cancelled_ends``: CANCELLED ends it quietly, a watch's). Ending the
        iteration cancels the call."""
        budget = RetryBudget(0.0, 0, timeout)  # the stream's deadline; a window from its first failure
        failing, last = False, None
        while True:
            call = open_call(budget.left()) if last is None or resumed is None else resumed(last)(budget.left())
            received = False
            try:
                for message in call:
                    received, last = True, message
                    yield made(message)
                return
            except grpc.RpcError as exc:
                if cancelled_ends and exc.code() == grpc.StatusCode.CANCELLED:
                    return
                error = self._failed(exc, tenant)
                # A stream that ran before it failed gets a whole window (each outage its own).
                if not failing or received:
                    budget, failing = RetryBudget(self._retry_window, self._retries, budget.left()), True
                wait = None if received and resumed is None else budget.wait_after(error)
                if wait is None:
                    raise error from exc
                time.sleep(wait)
            finally:
                call.cancel()

    # -- webhooks (docs/webhooks.md) ----------------------------------------------------------

    def create_webhook(
        self,
        tenant: str,
        url: str,
        kinds: Sequence[str],
        *,
        include_text: bool = False,
        secrets: Sequence[str] = (),
    ) -> types.CreatedWebhook:
        """Subscribe ``url`` to the tenant's changes of ``kinds`` ("memory.created",
        "memory.updated", "memory.forgotten", "memory.expired", "record.changed",
        "fast_write.succeeded", "fast_write.failed", "consolidation.applied"); ``include_text``
        puts a memory's text in its payloads; ``secrets`` (``whsec_...``) sign them, one is made
        when none is given.

        Returns a ``CreatedWebhook``: the subscription, and the secret made for it (shown only
        here). Raises ``InvalidArgumentError`` (WEBHOOK_URL_INVALID, WEBHOOK_KINDS_INVALID,
        WEBHOOK_SECRET_INVALID) and ``FailedPreconditionError`` (WEBHOOK_ADDRESS_REFUSED: an
        address this server does not deliver to; WEBHOOK_LIMIT)."""
        unknown = [k for k in kinds if k not in convert.WEBHOOK_KIND_BY_NAME]
        if unknown:
            raise unknown_name("WEBHOOK_KINDS_INVALID", "a webhook kind", convert.WEBHOOK_KIND_BY_NAME, unknown[0])
        request = webhooks_pb2.CreateWebhookRequest(
            tenant=tenant,
            url=url,
            kinds=[convert.WEBHOOK_KIND_BY_NAME[k] for k in kinds],
            include_text=include_text,
            secrets=list(secrets),
        )
        response = self.call(self.webhooks.CreateWebhook, request, retry=False)
        return types.CreatedWebhook(convert.webhook_from_proto(response.webhook), tuple(response.secrets))

    def list_webhooks(self, tenant: str) -> list[types.Webhook]:
        """The tenant's webhook subscriptions, with their state (failing, paused) and pending deliveries."""
        response = self.call(self.webhooks.ListWebhooks, webhooks_pb2.ListWebhooksRequest(tenant=tenant), retry=True)
        return [convert.webhook_from_proto(w) for w in response.webhooks]

    def delete_webhook(self, tenant: str, webhook_id: int) -> bool:
        """Delete a subscription and its deliveries (pending ones are never sent). Returns False
        when there was none of that id."""
        request = webhooks_pb2.DeleteWebhookRequest(tenant=tenant, webhook_id=webhook_id)
        return bool(self.call(self.webhooks.DeleteWebhook, request, retry=True).deleted)

    def rotate_webhook_secret(
        self, tenant: str, webhook_id: int, secret: str = "", retire_secret_ids: Sequence[int] = ()
    ) -> types.CreatedWebhook:
        """Add a signing secret (``secret``, or one made) and retire the secrets of
        ``retire_secret_ids``; every active secret signs each delivery. Returns the subscription
        and the secret made (shown only here). Raises ``NotFoundError`` (WEBHOOK_NOT_FOUND),
        ``InvalidArgumentError`` (WEBHOOK_SECRET_INVALID), ``FailedPreconditionError`` (WEBHOOK_LIMIT)."""
        request = webhooks_pb2.RotateWebhookSecretRequest(
            tenant=tenant, webhook_id=webhook_id, secret=secret, retire_secret_ids=list(retire_secret_ids)
        )
        response = self.call(self.webhooks.RotateWebhookSecret, request, retry=False)
        made = (response.secret,) if response.secret else ()
        return types.CreatedWebhook(convert.webhook_from_proto(response.webhook), made)

    def resume_webhook(self, tenant: str, webhook_id: int) -> types.Webhook:
        """Deliver again after a pause: its pending deliveries are due at once. Raises
        ``NotFoundError`` (WEBHOOK_NOT_FOUND)."""
        request = webhooks_pb2.ResumeWebhookRequest(tenant=tenant, webhook_id=webhook_id)
        return convert.webhook_from_proto(self.call(self.webhooks.ResumeWebhook, request, retry=True).webhook)

    def list_webhook_deliveries(
        self, tenant: str, webhook_id: int, page_size: int = 0, page_token: str = ""
    ) -> types.WebhookDeliveryPage:
        """A subscription's delivery log, newest first: each delivery's id, kind, status,
        attempts and last error. Raises ``NotFoundError`` (WEBHOOK_NOT_FOUND)."""
        request = webhooks_pb2.ListWebhookDeliveriesRequest(
            tenant=tenant, webhook_id=webhook_id, page_size=page_size, page_token=page_token
        )
        return convert.webhook_deliveries_from_proto(
            self.call(self.webhooks.ListWebhookDeliveries, request, retry=True)
        )


def _member_id(member: str) -> str:
    """``member`` when it can be a member's id (the call is routed to it), else refused."""
    if not MEMBER_ID_PATTERN.fullmatch(member):
        raise refused(
            "MEMBER_ID_INVALID",
            f"member {member[:80]!r} is no member's id: 1-63 lowercase letters, digits and '-', starting with a "
            "letter or digit",
        )
    return member


def _changes_to_proto(changes: Sequence[types.RecordChange]) -> list[workspace_pb2.RecordChange]:
    return [
        workspace_pb2.RecordChange(
            op=_CHANGE_OPS.get(c.op, workspace_pb2.RecordChange.OP_UNSPECIFIED), key=c.key, content=c.content
        )
        for c in changes
    ]


def _generation(metadata: Sequence[tuple[str, str | bytes]] | None, key: str) -> int:
    """The decimal generation under ``key``; a reply without it is a server fault (ServerError)."""
    try:
        return generation_from(metadata, key)
    except ServiceError as error:
        raise typed(error) from None
