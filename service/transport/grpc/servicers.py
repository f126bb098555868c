"""gRPC servicers of MemoryService and AdminService: validate the shape, convert, call the engine.
No domain logic lives here; how each method runs is its kind (transport/call.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Any

from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainOutcome, RetainStatus
from mnemosyne.errors import InvalidArgument
from mnemosyne.transport import convert, convert_history
from mnemosyne.transport.auth import ADMIN
from mnemosyne.transport.call import Call, metadata_value, reading, snapshot_read, waiting
from mnemosyne.transport.cluster.fanout import FanOut
from mnemosyne.transport.cluster.moves import MoveDriver
from mnemosyne.transport.consistency import for_read, for_write, writing
from mnemosyne.transport.grpc.hot_path import EventsServicer, HotPathServicer
from mnemosyne.transport.grpc.webhooks import WebhookServicer
from mnemosyne.transport.grpc.workspace import WorkspaceServicer
from mnemosyne.v1 import admin_pb2, admin_pb2_grpc, expiry_pb2, memory_pb2, memory_pb2_grpc, revisions_pb2

SERVER_TIME_KEY = "mnemosyne-server-time-us"
# The request metadata (an HTTP header) asking for SERVER_TIME_KEY; any value.
ASK_SERVER_TIME_KEY = "mnemosyne-ask-server-time"


def _report_server_time(call: Call, started: float) -> None:
    """Time spent in the handler (engine and response building), as trailing metadata, to a
    caller that asks for it (Recall, Retain, Ping): the benchmarks separate the server's own
    time from the gRPC and network floor with it. Only when asked, because a trailer of its own
    costs every call more than the clock read (docs/performance.md, "the server-time trailer").
    """
    if metadata_value(call.metadata, ASK_SERVER_TIME_KEY) is not None:
        elapsed_us = (time.perf_counter() - started) * 1e6
        call.set_trailing_metadata(((SERVER_TIME_KEY, f"{elapsed_us:.1f}"),))


def _queued(outcomes: list[RetainOutcome]) -> list[int]:
    """The event ids of the items a write queued (its token names them)."""
    return [o.event_id for o in outcomes if o.status is RetainStatus.ENQUEUED]


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tokens = engine.consistency

    @writing
    def Retain(self, request: memory_pb2.RetainRequest, call: Call) -> memory_pb2.RetainResponse:
        started = time.perf_counter()
        if request.messages:
            if request.text:
                raise InvalidArgument("give either text or messages, not both", reason="TEXT_AND_MESSAGES")
            # A conversation is one engine operation (engine/conversation.py).
            outcome = self._engine.retain_conversation(
                request.tenant,
                convert.from_messages(request.messages),
                scope=request.scope,
                metadata=dict(request.metadata),
                request_id=request.request_id or None,
                fast=request.fast,
                occurred_at=convert.from_occurred_at(request),
                thread=convert.from_thread(request),
                speaker=request.speaker or None,
                expires_at=convert.from_expires_at(request),
            )
        else:
            item = convert.from_retain_item(request)
            outcome = self._engine.retain(
                request.tenant, item, request_id=request.request_id or None, fast=request.fast
            )
        token = for_write(self._tokens, call, request.tenant, _queued([outcome]))
        response = convert.with_token(convert.to_retain_response(outcome), token)
        _report_server_time(call, started)
        return response

    @writing
    def RetainBatch(self, request: memory_pb2.RetainBatchRequest, call: Call) -> memory_pb2.RetainBatchResponse:
        items = [convert.from_retain_item(i) for i in request.items]
        outcomes = self._engine.retain_batch(
            request.tenant, items, request_id=request.request_id or None, fast=request.fast
        )
        token = for_write(self._tokens, call, request.tenant, _queued(outcomes))
        return convert.with_token(convert.to_retain_batch_response(outcomes), token)

    @snapshot_read
    def Recall(self, request: memory_pb2.RecallRequest, call: Call) -> memory_pb2.RecallResponse:
        started = time.perf_counter()
        report = for_read(self._tokens, call, request.tenant, request.consistency_token)
        recalled = self._engine.recall(
            request.tenant,
            request.query,
            k=request.k,
            scopes=list(request.scopes),
            metadata_equals=dict(request.metadata_equals),
            mode=convert.from_recall_mode(request.mode),
        )
        response = convert.with_report(convert.to_recall_response(recalled), report)
        _report_server_time(call, started)
        return response

    @snapshot_read
    def GetMemory(self, request: memory_pb2.GetMemoryRequest, call: Call) -> memory_pb2.GetMemoryResponse:
        report = for_read(self._tokens, call, request.tenant, request.consistency_token)
        memory = self._engine.memories.get(request.tenant, request.memory_id)
        return convert.with_report(convert.to_get_memory_response(memory), report)

    @snapshot_read
    def ListMemories(self, request: memory_pb2.ListMemoriesRequest, call: Call) -> memory_pb2.ListMemoriesResponse:
        report = for_read(self._tokens, call, request.tenant, request.consistency_token)
        page = self._engine.memories.page(
            request.tenant,
            scope=request.scope,
            page_size=request.page_size,
            page_token=request.page_token,
            include_forgotten=request.include_forgotten,
            newest_first=request.newest_first,
            thread=request.thread,
            metadata_equals=dict(request.metadata_equals),
        )
        return convert.with_report(convert.to_list_memories_response(page), report)

    @writing
    def ForgetMemory(self, request: memory_pb2.ForgetMemoryRequest, call: Call) -> memory_pb2.ForgetMemoryResponse:
        forgotten = self._engine.memories.forget(
            request.tenant, request.memory_id, request_id=request.request_id or None
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_forget_response(request.memory_id, forgotten), token)

    @writing
    def UpdateMemory(self, request: memory_pb2.UpdateMemoryRequest, call: Call) -> memory_pb2.UpdateMemoryResponse:
        outcome = self._engine.updates.update(
            request.tenant,
            request.memory_id,
            text=request.text,
            metadata=convert.from_update_metadata(request),
            request_id=request.request_id or None,
            expires_at=convert.from_expires_at(request),
            clear_expires_at=request.clear_expires_at,
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_update_memory_response(outcome), token)

    @writing
    def ForgetMemories(
        self, request: memory_pb2.ForgetMemoriesRequest, call: Call
    ) -> memory_pb2.ForgetMemoriesResponse:
        count = self._engine.updates.forget_matching(
            request.tenant,
            scope=request.scope,
            metadata_equals=dict(request.metadata_equals),
            request_id=request.request_id or None,
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert.to_forget_memories_response(count), token)

    @snapshot_read
    def ListMemoryVersions(
        self, request: memory_pb2.ListMemoryVersionsRequest, call: Call
    ) -> memory_pb2.ListMemoryVersionsResponse:
        return convert.to_memory_versions_response(self._engine.updates.versions(request.tenant, request.memory_id))

    @snapshot_read
    def ListMemoryRevisions(
        self, request: revisions_pb2.ListMemoryRevisionsRequest, call: Call
    ) -> revisions_pb2.ListMemoryRevisionsResponse:
        revisions = self._engine.updates.revisions(request.tenant, request.memory_id)
        return convert_history.to_memory_revisions_response(revisions)

    @writing
    def RevertMemory(
        self, request: revisions_pb2.RevertMemoryRequest, call: Call
    ) -> revisions_pb2.RevertMemoryResponse:
        outcome = self._engine.updates.revert(
            request.tenant, request.memory_id, request.revision, request_id=request.request_id or None
        )
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_history.to_revert_memory_response(outcome), token)

    @snapshot_read
    def GetExpiryPolicy(
        self, request: expiry_pb2.GetExpiryPolicyRequest, call: Call
    ) -> expiry_pb2.GetExpiryPolicyResponse:
        return convert_history.to_get_expiry_policy_response(self._engine.expiry.policy(request.tenant))

    @writing
    def SetExpiryPolicy(
        self, request: expiry_pb2.SetExpiryPolicyRequest, call: Call
    ) -> expiry_pb2.SetExpiryPolicyResponse:
        policy = self._engine.expiry.set_policy(request.tenant, convert_history.from_expiry_policy(request.policy))
        token = for_write(self._tokens, call, request.tenant)
        return convert.with_token(convert_history.to_set_expiry_policy_response(policy), token)


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, engine: Engine, fanout: FanOut | None = None, moves: MoveDriver | None = None) -> None:
        self._engine = engine
        self._tokens = engine.consistency
        self._fanout = fanout
        self._moves = moves or MoveDriver(engine, None)
        if fanout is not None:  # ListTenants waits for the other members (a single server's does not)
            self.ListTenants = self._list_tenants_everywhere  # type: ignore[method-assign,assignment]  # chosen once, as the edge registers it
            self.ListTenantFigures = self._tenant_figures_everywhere  # type: ignore[method-assign,assignment]  # the same

    def VerifyIntegrity(
        self, request: admin_pb2.VerifyIntegrityRequest, call: Call
    ) -> admin_pb2.VerifyIntegrityResponse:
        return convert.to_integrity(self._engine.memories.verify_integrity(request.tenant))

    def Stats(self, request: admin_pb2.StatsRequest, call: Call) -> admin_pb2.StatsResponse:
        return convert.to_stats(self._engine.tenants.stats(request.tenant))

    @reading
    def GetTenantFigures(
        self, request: admin_pb2.GetTenantFiguresRequest, call: Call
    ) -> admin_pb2.GetTenantFiguresResponse:
        return convert.to_tenant_figures(self._engine.tenant_figures(request.tenant))

    @reading
    def ListTenantFigures(
        self, request: admin_pb2.ListTenantFiguresRequest, call: Call
    ) -> admin_pb2.ListTenantFiguresResponse:
        return self._figures_here(request)

    def _figures_here(self, request: admin_pb2.ListTenantFiguresRequest) -> admin_pb2.ListTenantFiguresResponse:
        return convert.to_tenants_figures(self._engine.tenants_figures(request.limit))

    @waiting
    async def _tenant_figures_everywhere(
        self, request: admin_pb2.ListTenantFiguresRequest, call: Call
    ) -> admin_pb2.ListTenantFiguresResponse:
        assert self._fanout is not None
        mine = await call.run(self._figures_here, request)
        if not self._fanout.wanted(call):  # another member's fan-out asks for this member's part
            return mine
        return await self._fanout.tenant_figures(request, call, mine)

    @writing
    def Dedup(self, request: admin_pb2.DedupRequest, call: Call) -> admin_pb2.DedupResponse:
        report = self._engine.dedup(
            request.tenant, merge=request.merge, threshold=request.threshold, request_id=request.request_id or None
        )
        token = for_write(self._tokens, call, request.tenant) if request.merge else ""
        return convert.with_token(convert.to_dedup_response(report), token)

    def ReembedTenant(self, request: admin_pb2.ReembedTenantRequest, call: Call) -> admin_pb2.ReembedTenantResponse:
        progress = self._engine.reembedding.step(request.tenant, request.embedder, chunk_size=request.chunk_size)
        return convert.to_reembed_response(progress)

    def ListTenants(self, request: admin_pb2.ListTenantsRequest, call: Call) -> admin_pb2.ListTenantsResponse:
        return self._tenant_page(request)

    @waiting
    async def _list_tenants_everywhere(
        self, request: admin_pb2.ListTenantsRequest, call: Call
    ) -> admin_pb2.ListTenantsResponse:
        assert self._fanout is not None
        if not self._fanout.wanted(call):  # another member's fan-out asks for this member's part
            return await call.run(self._tenant_page, request)
        elsewhere, unanswered = await self._fanout.tenants_elsewhere(call)
        response = await call.run(
            partial(self._tenant_page, request, elsewhere=elsewhere, secret=self._fanout.page_secret)
        )
        response.unanswered_members.extend(unanswered)
        return response

    def _tenant_page(self, request: admin_pb2.ListTenantsRequest, **everywhere: Any) -> admin_pb2.ListTenantsResponse:
        return convert.to_tenant_page(
            self._engine.tenants.page(page_size=request.page_size, page_token=request.page_token, **everywhere)
        )

    async def AggregateStats(
        self, request: admin_pb2.AggregateStatsRequest, call: Call
    ) -> AsyncIterator[admin_pb2.AggregateStatsChunk]:
        chunks = self._aggregate_here(request, call)
        if self._fanout is not None and self._fanout.wanted(call):
            chunks = self._fanout.aggregate(request, call, chunks)
        async with aclosing(chunks):
            async for chunk in chunks:
                yield chunk

    async def _aggregate_here(
        self, request: admin_pb2.AggregateStatsRequest, call: Call
    ) -> AsyncGenerator[admin_pb2.AggregateStatsChunk, None]:
        # A chunk at a time on a worker thread (each reads up to 1,000 tenant files). A stream its
        # client left is closed at once, and its readers stop.
        chunks = self._engine.tenants.aggregate_stats(chunk_size=request.chunk_size)
        async with aclosing(call.steps(chunks)) as steps:
            async for chunk in steps:
                yield convert.to_aggregate_chunk(chunk)

    def EraseTenant(self, request: admin_pb2.EraseTenantRequest, call: Call) -> admin_pb2.EraseTenantResponse:
        return convert.to_erase_tenant_response(self._engine.erasure.erase(request.tenant, token_name=call.principal))

    async def Backup(self, request: admin_pb2.BackupRequest, call: Call) -> AsyncIterator[admin_pb2.BackupResponse]:
        # A part at a time on a worker thread (a copy step, a chunk read); a stream the client left
        # is closed at once, and its scratch copy removed.
        known = [(k.tenant, (k.change_counter, k.inbox_sequence, k.head_hash)) for k in request.known]
        parts = self._engine.backups.backup(list(request.tenants), known)
        async with aclosing(call.steps(parts)) as steps:
            async for part in steps:
                yield convert.to_backup_response(part)

    async def ExportTenant(
        self, request: admin_pb2.ExportTenantRequest, call: Call
    ) -> AsyncIterator[admin_pb2.ExportTenantResponse]:
        async with aclosing(call.steps(self._engine.backups.export(request.tenant))) as parts:
            async for part in parts:
                yield convert.to_export_response(part)

    async def ImportTenant(
        self, requests: AsyncIterator[admin_pb2.ImportTenantRequest], call: Call
    ) -> admin_pb2.ImportTenantResponse:
        # Each chunk is written on a worker thread; a stream the client left ends the import with
        # its scratch files removed, and nothing of it in place.
        first = await anext(requests)
        if not first.HasField("manifest"):
            raise InvalidArgument("the first message of an import carries its manifest", reason="MANIFEST_MISSING")
        copy = convert.from_tenant_backup(first.manifest)
        if first.move_epoch:  # a move's step 4, sent by its source (transport/cluster/moves.py)
            begin = partial(
                self._engine.moves.receive, first.tenant, copy, source=first.move_source, epoch=first.move_epoch
            )
        else:
            begin = partial(self._engine.imports.begin, first.tenant, copy, replace=first.replace)
        session = await call.run(begin)
        try:
            if first.HasField("chunk"):
                await call.run(session.write, first.chunk.file, first.chunk.data)
            async for request in requests:
                if request.HasField("manifest") or request.tenant:
                    raise InvalidArgument(
                        "only the first message of an import names its tenant and manifest", reason="STREAM_INVALID"
                    )
                await call.run(session.write, request.chunk.file, request.chunk.data)
            imported = await call.run(session.finish)
        finally:
            session.abort()
        if first.move_epoch:
            await self._moves.replicated(call)
        return convert.to_import_response(imported)

    async def MoveTenant(self, request: admin_pb2.MoveTenantRequest, call: Call) -> admin_pb2.MoveTenantResponse:
        return await self._moves.move(request, call)

    async def ActivateTenant(
        self, request: admin_pb2.ActivateTenantRequest, call: Call
    ) -> admin_pb2.ActivateTenantResponse:
        return await self._moves.activate(request, call)

    async def ChangeMembers(
        self, request: admin_pb2.ChangeMembersRequest, call: Call
    ) -> admin_pb2.ChangeMembersResponse:
        answer = await call.run(partial(self._engine.moves.change_members, request.to, complete=request.complete))
        return convert.to_change_members_response(answer)

    async def WhoAmI(self, request: admin_pb2.WhoAmIRequest, call: Call) -> admin_pb2.WhoAmIResponse:
        # Answered on the event loop: the edge authenticated the caller; nothing to look up.
        return convert.to_whoami_response(call.principal, call.reaches, admin=call.reaches == frozenset({ADMIN}))

    async def Ping(self, request: admin_pb2.PingRequest, call: Call) -> admin_pb2.PingResponse:
        # Answered on the event loop: nothing to wait for, nothing that blocks.
        _report_server_time(call, time.perf_counter())
        return convert.to_ping_response()


@dataclass(frozen=True)
class Servicers:
    """The servicer of each of our services; every surface calls these (gRPC, HTTP/JSON, mem0, MCP)."""

    memory: MemoryServicer
    workspace: WorkspaceServicer
    hot_path: HotPathServicer
    events: EventsServicer
    admin: AdminServicer
    webhooks: WebhookServicer

    def by_service(self) -> dict[str, object]:
        """Each servicer under its service's name ("MemoryService")."""
        return {
            "MemoryService": self.memory,
            "WorkspaceService": self.workspace,
            "HotPathService": self.hot_path,
            "EventsService": self.events,
            "AdminService": self.admin,
            "WebhookService": self.webhooks,
        }
