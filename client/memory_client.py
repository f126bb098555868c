"""``MemoryClient``: the Python client of a Mnemosyne server.

Methods are named after the specification's API (retain, recall, retain_batch, ...) and return plain dataclasses
from ``mnemosyne.client.types``; failures raise ``mnemosyne.client.errors`` exceptions. Calls
that fail with UNAVAILABLE are retried with backoff when repeating them is safe: reads, and
writes that carry a request id (every write gets one unless the caller passes its own).

Session consistency, by default: the client keeps the newest consistency token its writes of each
tenant returned and sends it with its next reads and writes of that tenant, so a read waits for
this client's own writes still queued (host/consistency.py; docs/hot-path.md "Read your own
writes"). ``session_consistency=False`` turns it off for the client, ``consistency_token=""`` for
one read; ``consistency_token=TOKEN`` makes a read wait for that token (from another client) alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from mnemosyne.client import convert, types
from mnemosyne.client.errors import AbortedError, InvalidArgumentError, MnemosyneClientError, from_rpc_error, typed
from mnemosyne.client.routing import ROUTE_KEY, RoutingChannel
from mnemosyne.host import protocol as host_protocol
from mnemosyne.host.consistency import (
    FLUSH_WAIT_SECONDS,
    MAX_TENANTS,
    SessionTokens,
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
    hot_path_pb2,
    hot_path_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    types_pb2,
    workspace_pb2,
    workspace_pb2_grpc,
)

T = TypeVar("T")

# The server's default max_request_bytes: a larger request is refused (REQUEST_TOO_LARGE) here,
# before it is sent, with the reason the server would give.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# The longest wait a server's RetryInfo may impose before a call is repeated.
MAX_RETRY_DELAY_SECONDS = 5.0
# Responses stay under ~3 MiB plus one item; accept more than gRPC's default 4 MiB anyway, for a
# server whose limits were raised.
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 64 * 1024 * 1024),)

_MODES = {
    "hybrid": memory_pb2.RECALL_MODE_HYBRID,
    "vector": memory_pb2.RECALL_MODE_VECTOR,
    "text": memory_pb2.RECALL_MODE_TEXT,
}
_CHANGE_OPS = {"put": workspace_pb2.RecordChange.PUT, "delete": workspace_pb2.RecordChange.DELETE}


def new_request_id() -> str:
    return uuid.uuid4().hex


class MemoryClient:
    """A connection to one Mnemosyne server.

    ``target`` is ``host:port``; ``token`` a bearer token (sent as ``authorization`` metadata);
    ``credentials`` TLS channel credentials (``grpc.ssl_channel_credentials(...)``) for a TLS
    server; ``timeout`` the per-call deadline in seconds. ``members``: on a deployment of many
    members, all of them (``ID=HOST:PORT,...`` or ``@FILE``, as the servers take ``--members``, or
    a mapping; a list that cannot be used raises ``MemberListError``, a ValueError): each call then
    goes straight to the member owning its tenant (client/routing.py), and ``target`` is not used
    (``""`` will do). ``session_consistency``: keep the newest consistency token of each tenant
    this client wrote and send it with the client's next reads and writes of that tenant (the
    default; at most ``session_tenants`` tenants, the least recently used forgotten first), so
    the client reads its own writes, fast ones included. The client may be shared by threads.
    """

    def __init__(
        self,
        target: str,
        token: str | None = None,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        options: Sequence[tuple[str, Any]] = (),
        members: str | Mapping[str, str] | None = None,
        session_consistency: bool = True,
        session_tenants: int = MAX_TENANTS,
    ) -> None:
        self.target = target
        self._session = SessionTokens(session_tenants) if session_consistency else None
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        given = {name for name, _ in options}
        options = [*(o for o in _CHANNEL_OPTIONS if o[0] not in given), *options]

        def channel_to(address: str) -> grpc.Channel:
            return (
                grpc.secure_channel(address, credentials, options=options)
                if credentials is not None
                else grpc.insecure_channel(address, options=options)
            )

        self._channel = RoutingChannel(members, channel_to) if members is not None else channel_to(target)
        self._timeout = timeout
        self._retries = retries
        self.memory = memory_pb2_grpc.MemoryServiceStub(self._channel)  # type: ignore[no-untyped-call]  # grpcio-tools generates untyped stubs
        self.admin = admin_pb2_grpc.AdminServiceStub(self._channel)  # type: ignore[no-untyped-call]  # grpcio-tools generates untyped stubs
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(self._channel)  # type: ignore[no-untyped-call]  # grpcio-tools generates untyped stubs
        self.hot_path_stub = hot_path_pb2_grpc.HotPathServiceStub(self._channel)  # type: ignore[no-untyped-call]  # grpcio-tools generates untyped stubs
        self.events = events_pb2_grpc.EventsServiceStub(self._channel)  # type: ignore[no-untyped-call]  # grpcio-tools generates untyped stubs
        self._stubs = {
            "mnemosyne.v1.MemoryService": self.memory,
            "mnemosyne.v1.AdminService": self.admin,
            "mnemosyne.v1.WorkspaceService": self.workspace,
            "mnemosyne.v1.HotPathService": self.hot_path_stub,
            "mnemosyne.v1.EventsService": self.events,
        }

    @property
    def channel(self) -> grpc.Channel:
        return self._channel

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def close(self) -> None:
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
        """Invoke a stub method with auth metadata, deadline (``timeout``, else the client's),
        retries and typed errors; with the session's consistency tokens unless ``session`` is
        False (host/consistency.py says which calls carry them)."""
        metadata = tuple(metadata)
        size = request.ByteSize()
        if size > MAX_REQUEST_BYTES:
            raise InvalidArgumentError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "REQUEST_TOO_LARGE",
                f"the request has {size} bytes; the limit is {MAX_REQUEST_BYTES} (max_request_bytes): split it, "
                "e.g. a large batch into several",
                {},
            )
        tenant = getattr(request, "tenant", "")
        tracked = self._session if session else None
        sent = tracked.outgoing(request, metadata) if tracked is not None else ()
        metadata = (*self._metadata, *metadata, *token_metadata(sent))
        try:
            for older in sent[:-1]:  # writes that overlapped: their tokens are waited for first
                self._call_waiting(self.hot_path_stub.Flush, flush_request(tenant, older), FLUSH_WAIT_SECONDS)
            result = self._retrying(
                lambda: method(request, timeout=timeout or self._timeout, metadata=metadata),
                retry=retry,
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

    def consistency_token(self, tenant: str) -> str | None:
        """The consistency token of this client's latest write of ``tenant`` (None: none kept, or
        session consistency is off): give it to another client's read (``consistency_token=``)
        to make that read wait for this client's writes."""
        return self._session.newest(tenant) if self._session is not None else None

    def _failed(self, error: grpc.RpcError, tenant: str = "") -> MnemosyneClientError:
        """The typed error of a failed call for ``tenant``, naming the address the call went to."""
        where = self._channel.address_of(tenant) if isinstance(self._channel, RoutingChannel) else self.target
        return from_rpc_error(error, where)

    def _retrying(self, attempt: Callable[[], T], *, retry: bool, tenant: str = "") -> T:
        """``attempt()`` until it succeeds; when ``retry`` (the call is safe to repeat: a read, or
        a write carrying a request id), repeated after UNAVAILABLE (backoff from 0.1 s, doubling)
        and after RESOURCE_EXHAUSTED that names a retry delay (google.rpc.RetryInfo: the server's
        admission limits), at most ``retries`` times."""
        backoff = 0.1
        for tried in range(self._retries + 1):
            try:
                return attempt()
            except grpc.RpcError as exc:
                error = self._failed(exc, tenant)
                if not retry or tried == self._retries:
                    raise error from exc
                if error.code == grpc.StatusCode.UNAVAILABLE:
                    time.sleep(backoff)
                    backoff *= 2
                elif error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.retry_after_seconds is not None:
                    time.sleep(min(MAX_RETRY_DELAY_SECONDS, error.retry_after_seconds))
                else:
                    raise error from exc
        raise AssertionError("unreachable")

    # -- the calls of the shared host flows (host/protocol.py) --------------------------------------

    def ask(self, ask: Ask, *, consistency_token: str | None = None) -> Answer:
        """One call of a host flow, with this client's token, deadline (outlasting the call's wait on
        the server), retries and typed errors; a read carries the session's consistency tokens,
        or ``consistency_token`` instead (``""``: none)."""
        service, method = ask.method.rsplit("/", 2)[1:]
        stub = getattr(self._stubs[service], method).with_call
        timeout = max(self._timeout, ask.wait_seconds + 10.0) if ask.wait_seconds else None
        metadata = ask.metadata
        if consistency_token is not None and role_of(ask.request) == "read":
            metadata = (*metadata, *token_metadata([consistency_token] if consistency_token else []))
        session = consistency_token is None or role_of(ask.request) != "read"
        response, call = self.call(stub, ask.request, retry=True, metadata=metadata, timeout=timeout, session=session)
        return Answer(response, call.initial_metadata() or (), call.trailing_metadata() or ())

    def run(self, flow: Flow[T], *, consistency_token: str | None = None) -> T:
        """A host flow's result, its calls made by ``ask`` (its reads with ``consistency_token``
        when given); what it refuses is a typed client error."""
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
    ) -> types.RetainResult:
        """Retain one text. ``occurred_at`` (unix seconds) is when it was said or happened;
        ``thread`` its place in a thread; ``speaker`` who said or wrote it (all optional,
        docs/recall-quality.md)."""
        request = memory_pb2.RetainRequest(
            tenant=tenant,
            text=text,
            scope=scope,
            metadata=dict(metadata or {}),
            request_id=request_id or new_request_id(),
            fast=fast,
        )
        convert.place(request, occurred_at, thread, speaker)
        return convert.retain_result_from_proto(self.call(self.memory.Retain, request, retry=True).result)

    def retain_batch(
        self,
        tenant: str,
        items: Sequence[types.RetainItem | str],
        request_id: str | None = None,
        *,
        fast: bool = False,
    ) -> list[types.RetainResult]:
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
        k: int = 5,
        scopes: Sequence[str] | None = None,
        filters: Mapping[str, str] | None = None,
        *,
        mode: str = "hybrid",
        consistency_token: str | None = None,
    ) -> list[types.Hit]:
        """The ``k`` memories best matching ``query``. ``consistency_token``: None waits for this
        client's own writes of the tenant (session consistency), ``""`` for none, a token for the
        writes it names (as does every read below)."""
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
        request = memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=memory_id)
        return convert.memory_from_proto(self._read(self.memory.GetMemory, request, consistency_token).memory)

    def list_memories(
        self,
        tenant: str,
        scope: str = "",
        page_size: int = 100,
        page_token: str = "",
        include_forgotten: bool = False,
        *,
        newest_first: bool = False,
        thread: str = "",
        metadata_equals: Mapping[str, str] | None = None,
        consistency_token: str | None = None,
    ) -> types.MemoryPage:
        """A page of memories in id order; with ``thread``, only that thread's, in thread order."""
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
    ) -> types.UpdateResult:
        """Replace a memory's text (empty keeps it) and metadata (None keeps it) under its id."""
        request = memory_pb2.UpdateMemoryRequest(
            tenant=tenant,
            memory_id=memory_id,
            text=text,
            metadata=dict(metadata or {}),
            replace_metadata=metadata is not None,
            request_id=request_id or new_request_id(),
        )
        return convert.update_result_from_proto(self.call(self.memory.UpdateMemory, request, retry=True))

    def forget_memories(
        self, tenant: str, metadata_equals: Mapping[str, str], scope: str = "", request_id: str | None = None
    ) -> int:
        """Forget every memory whose metadata has each pair, atomically; returns how many."""
        request = memory_pb2.ForgetMemoriesRequest(
            tenant=tenant, metadata_equals=dict(metadata_equals), scope=scope, request_id=request_id or new_request_id()
        )
        return int(self.call(self.memory.ForgetMemories, request, retry=True).forgotten_count)

    def list_memory_versions(self, tenant: str, memory_id: int) -> list[types.MemoryVersion]:
        request = memory_pb2.ListMemoryVersionsRequest(tenant=tenant, memory_id=memory_id)
        return convert.versions_from_proto(self.call(self.memory.ListMemoryVersions, request, retry=True))

    # -- admin ----------------------------------------------------------------------------------

    def verify_integrity(self, tenant: str) -> types.IntegrityReport:
        r = self.call(self.admin.VerifyIntegrity, admin_pb2.VerifyIntegrityRequest(tenant=tenant), retry=True)
        return convert.integrity_from_proto(r)

    def stats(self, tenant: str) -> types.Stats:
        r = self.call(self.admin.Stats, admin_pb2.StatsRequest(tenant=tenant), retry=True)
        return convert.stats_from_proto(r)

    def ping(self) -> None:
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
    ) -> types.RetainResult:
        """Retain a multi-turn conversation as one operation (one memory, one fingerprint): the same
        conversation submitted again is reported as a duplicate of the first. ``fast`` takes the
        hot path as for ``retain``; ``occurred_at``, ``thread`` and ``speaker`` are the whole
        conversation's (without ``speaker``, the one ``name`` its messages share, if any)."""
        proto = []
        for m in messages:
            name = ""
            if isinstance(m, types.Message):
                role, content, name = m.role, m.content, m.name
            elif isinstance(m, Mapping):
                role, content, name = m["role"], m["content"], m.get("name", "")
            else:
                role, content = m
            proto.append(types_pb2.ConversationMessage(role=role, content=content, name=name))
        request = memory_pb2.RetainRequest(
            tenant=tenant,
            messages=proto,
            scope=scope,
            metadata=dict(metadata or {}),
            request_id=request_id or new_request_id(),
            fast=fast,
        )
        convert.place(request, occurred_at, thread, speaker)
        return convert.retain_result_from_proto(self.call(self.memory.Retain, request, retry=True).result)

    def dedup(
        self, tenant: str, *, merge: bool = False, threshold: float = 0.0, request_id: str | None = None
    ) -> types.DedupResult:
        """Report near-duplicate groups; with ``merge=True`` merge each into its kept memory."""
        request = admin_pb2.DedupRequest(
            tenant=tenant, merge=merge, threshold=threshold, request_id=request_id or new_request_id()
        )
        return convert.dedup_from_proto(self.call(self.admin.Dedup, request, retry=True))

    # -- records (host-owned generations; see docs/host-protocol.md) ------------------------------
    #
    # The generation arguments and results below are for host code only. A model gets its tools
    # from ``MemoryHost``, which keeps generations out of everything the model sees.

    def assemble_context(
        self, tenant: str, workspace: str, query: str | None = None, k: int = 5, *, consistency_token: str | None = None
    ) -> types.AssembledContext:
        """Records of Global and ``workspace`` (+ recalled memories for ``query``), with the exact
        generations read in the same snapshot (from the response metadata).

        Records the server left out to keep its response small (``omitted_records``) are fetched
        one by one and must carry the same generation; if one changed meanwhile, the context is
        assembled again (up to three times), so records and generations always belong together.
        Recalled memories left out are named in ``omitted_memory_ids`` (``get_memory`` each)."""
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
        """Replace MEMORY.md if the Global generation is still ``observed_generation``; returns the
        new generation. Raises AbortedError (GENERATION_MISMATCH) otherwise."""
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
        """Apply puts and deletes as one generation if the workspace is still at
        ``observed_generation``; returns the new generation."""
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
        """All of a scope's records and their generation (browser editing), following the pages
        the server returns; a listing the records changed during is started again."""
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
        """The tenant's scopes: Global, then each workspace that has records, with generations."""
        r = self.call(self.workspace.ListScopes, workspace_pb2.ListScopesRequest(tenant=tenant), retry=True)
        return convert.scopes_from_proto(r)

    def get_record(self, tenant: str, scope: str, key: str) -> tuple[types.Record, int]:
        """One record and its scope's generation, read together (browser editing)."""
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
        """Browser edit with an explicit precondition; returns the new generation."""
        request = workspace_pb2.EditRecordsRequest(
            tenant=tenant,
            scope=scope,
            expected_generation=expected_generation,
            changes=_changes_to_proto(changes),
            request_id=request_id or new_request_id(),
        )
        return int(self.call(self.workspace.EditRecords, request, retry=True).generation)

    def consolidate(
        self, tenant: str, scope: str, changes: Sequence[types.RecordChange], expected_generation: int, receipt_id: str
    ) -> types.ConsolidateResult:
        """Apply a session consolidation exactly once per ``receipt_id`` (safe to retry)."""
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
        thread, into the records of its scopes on the server, each receipt exactly once (safe to
        retry: a receipt already applied is reported ``already_applied``)."""
        request = workspace_pb2.ConsolidateSessionRequest(tenant=tenant, thread=thread)
        return convert.session_outcomes_from_proto(self.call(self.workspace.ConsolidateSession, request, retry=True))

    # -- cross-tenant administration (admin token) ---------------------------------------------

    def whoami(self) -> types.Caller:
        """The caller as the server sees it: its token's name and the tenants it may reach."""
        return convert.caller_from_proto(self.call(self.admin.WhoAmI, admin_pb2.WhoAmIRequest(), retry=True))

    def list_tenants(self, page_size: int = 0, page_token: str = "") -> types.TenantPage:
        r = self.call(
            self.admin.ListTenants, admin_pb2.ListTenantsRequest(page_size=page_size, page_token=page_token), retry=True
        )
        return convert.tenant_page_from_proto(r)

    def erase_tenant(self, tenant: str) -> types.ErasureReceipt:
        """Remove the tenant and everything of it from the server (admin token); the receipt the
        server's erasure log keeps. Not retried: a second call after a lost reply is NOT_FOUND."""
        r = self.call(self.admin.EraseTenant, admin_pb2.EraseTenantRequest(tenant=tenant), retry=False)
        return convert.erasure_receipt_from_proto(r.receipt)

    def move_tenant(
        self, tenant: str, destination: str, *, member: str = "", timeout: float = 3600.0
    ) -> types.MoveResult:
        """Move ``tenant`` to member ``destination`` (admin token), asked of the member holding
        its file (``member``, the source: the call is routed to it; docs/scale-out.md, "Moving
        tenants"). Safe to repeat: asked again it finishes an interrupted move."""
        metadata = ((ROUTE_KEY, member),) if member else ()
        r = self._retrying(
            lambda: self.admin.MoveTenant(
                admin_pb2.MoveTenantRequest(tenant=tenant, destination=destination),
                timeout=timeout,
                metadata=(*self._metadata, *metadata),
            ),
            retry=True,
            tenant=tenant,
        )
        return types.MoveResult(
            r.tenant, r.source, r.destination, r.epoch, r.head_hash, r.bytes, list(r.steps), r.memories
        )

    def activate_tenant(self, tenant: str, epoch: int, head_hash: str, *, member: str = "") -> bool:
        """A move's last step, asked of its destination ``member`` (admin token; the source
        asks it, ``move_tenant`` needs no help): whether the tenant was activated now (False:
        it was already)."""
        metadata = ((ROUTE_KEY, member),) if member else ()
        request = admin_pb2.ActivateTenantRequest(tenant=tenant, epoch=epoch, head_hash=head_hash)
        return bool(self.call(self.admin.ActivateTenant, request, retry=True, metadata=metadata).activated)

    def backup(
        self, tenants: Sequence[str] = (), known: Mapping[str, tuple[int, int]] | None = None, timeout: float = 3600.0
    ) -> Iterator[types.BackupPart]:
        """The parts of a backup stream (admin token): per tenant its ``TenantBackup`` then its
        files' ``BackupChunk``s, ``BackupUnchanged`` for a tenant ``known`` already holds
        (tenant -> (change counter, inbox sequence)), ``SkippedTenant``, and a final
        ``BackupSummary``. ``mnemosyne backup`` writes a backup directory from it."""
        request = admin_pb2.BackupRequest(
            tenants=list(tenants),
            known=[
                admin_pb2.BackedUpTenant(tenant=t, change_counter=c, inbox_sequence=i)
                for t, (c, i) in (known or {}).items()
            ],
        )
        try:
            for response in self.admin.Backup(request, timeout=timeout, metadata=self._metadata):
                yield convert.backup_part_from_proto(response)
        except grpc.RpcError as exc:
            raise self._failed(exc) from exc

    def export_tenant(self, tenant: str, timeout: float = 3600.0) -> Iterator[types.TenantBackup | types.BackupChunk]:
        """One tenant as a consistent snapshot (its own token or an admin token): its manifest
        (``TenantBackup``), then its files' ``BackupChunk``s. ``mnemosyne export`` writes them
        as a tenant archive."""
        request = admin_pb2.ExportTenantRequest(tenant=tenant)
        try:
            for response in self.admin.ExportTenant(request, timeout=timeout, metadata=self._metadata):
                yield convert.export_part_from_proto(response)
        except grpc.RpcError as exc:
            raise self._failed(exc, tenant) from exc

    def import_tenant(
        self,
        manifest: types.TenantBackup,
        chunks: Iterable[types.BackupChunk],
        *,
        tenant: str = "",
        replace: bool = False,
        timeout: float = 3600.0,
    ) -> types.ImportResult:
        """Install an export on this server (admin token) as ``tenant`` (the manifest's when
        empty); ``replace`` lets it overwrite a tenant of that name. Not retried."""

        def requests() -> Iterator[admin_pb2.ImportTenantRequest]:
            yield admin_pb2.ImportTenantRequest(
                tenant=tenant, manifest=convert.tenant_backup_to_proto(manifest), replace=replace
            )
            for chunk in chunks:
                yield admin_pb2.ImportTenantRequest(chunk=admin_pb2.BackupChunk(file=chunk.file, data=chunk.data))

        try:
            response = self.admin.ImportTenant(requests(), timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise self._failed(exc, tenant) from exc
        return convert.import_result_from_proto(response)

    def aggregate_stats(self, chunk_size: int = 0) -> types.AggregateStats:
        """Read the whole stream of chunks (each tenant's stats from its own transaction)."""
        tenants: dict[str, types.Stats] = {}
        damaged: dict[str, str] = {}
        total = convert.stats_from_proto(admin_pb2.StatsResponse())  # until the last chunk names it
        files_read, consistency, unanswered = 0, "", []
        try:
            for chunk in self.admin.AggregateStats(
                admin_pb2.AggregateStatsRequest(chunk_size=chunk_size), timeout=self._timeout, metadata=self._metadata
            ):
                for row in chunk.tenants:
                    if row.error_reason:
                        damaged[row.tenant] = row.error_reason
                    else:
                        tenants[row.tenant] = convert.stats_from_proto(row.stats)
                if chunk.HasField("total"):
                    total = convert.stats_from_proto(chunk.total)
                    files_read, consistency = chunk.files_read, chunk.consistency
                    unanswered = list(chunk.unanswered_members)
        except grpc.RpcError as exc:
            raise self._failed(exc) from exc
        return types.AggregateStats(
            tenants=tenants,
            total=total,
            files_read=files_read,
            consistency=consistency,
            damaged=damaged,
            unanswered_members=unanswered,
        )

    # -- hot path and events --------------------------------------------------------------------

    def hot_path(
        self, tenant: str, action: str, timeout_seconds: float = 0.0, *, consistency_token: str = ""
    ) -> types.HotPathStatus | types.FlushResult:
        """``action`` is "enable", "disable", "status" or "flush" (the specification's memory_hot_path).

        "flush" blocks until every fast write accepted before it has finished (with
        ``consistency_token``: only the writes that token names) and returns a ``FlushResult``;
        "disable" stops queueing and waits for the queue to drain. Both wait at most
        ``timeout_seconds`` (server default 30) and then raise DeadlineExceededError whose
        metadata names the remaining depth. The others return the ``HotPathStatus``."""
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
            raise ValueError(f"action must be one of enable, disable, status, flush; got {action!r}")
        state = hot_path_pb2.HotPathRequest(tenant=tenant, timeout_seconds=timeout_seconds)
        return convert.hot_path_status_from_proto(self._call_waiting(methods[action], state, wait))

    def _call_waiting(self, method: Callable[..., T], request: Any, wait: float) -> T:
        # Safe to repeat (a barrier, a flag), so a refusal for a limit is waited out like a read's.
        return self._retrying(
            lambda: method(request, timeout=max(self._timeout, wait + 10.0), metadata=self._metadata),
            retry=True,
            tenant=request.tenant,
        )

    def get_event(self, tenant: str, event_id: int) -> types.Event:
        request = events_pb2.GetEventRequest(tenant=tenant, event_id=event_id)
        return convert.event_from_proto(self.call(self.events.GetEvent, request, retry=True))

    def list_events(
        self,
        tenant: str,
        status: str | None = None,
        accepted_after: float | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> types.EventPage:
        request = events_pb2.ListEventsRequest(
            tenant=tenant,
            status=convert.EVENT_STATUS_BY_NAME[status] if status else events_pb2.EVENT_STATUS_UNSPECIFIED,
            page_size=page_size,
            page_token=page_token,
        )
        if accepted_after is not None:
            request.accepted_after.FromNanoseconds(int(accepted_after * 1e9))
        response = self.call(self.events.ListEvents, request, retry=True)
        return convert.event_page_from_proto(response)

    def watch_events(
        self, tenant: str, after_event_id: int = 0, after_sequence: int = 0, timeout: float | None = None
    ) -> Iterator[types.Event]:
        """Every status transition, replayed from the durable log then live. To resume a dropped
        stream without missing a transition, pass the last received ``Event.sequence`` as
        ``after_sequence``. The stream runs until ``timeout`` (None: forever) or ``cancel()``
        on the returned iterator's underlying call. A stream refused for a limit before its first
        event (RESOURCE_EXHAUSTED with a retry delay) is opened again after that delay."""
        request = events_pb2.WatchEventsRequest(
            tenant=tenant, after_event_id=after_event_id, after_sequence=after_sequence
        )
        for tried in range(self._retries + 1):
            call = self.events.WatchEvents(request, timeout=timeout, metadata=self._metadata)
            received = False
            try:
                for message in call:
                    received = True
                    yield convert.event_from_proto(message)
                return
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED:
                    return
                error = self._failed(exc, tenant)
                if received or tried == self._retries or error.retry_after_seconds is None:
                    raise error from exc
                time.sleep(min(MAX_RETRY_DELAY_SECONDS, error.retry_after_seconds))
            finally:
                call.cancel()


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
