"""Conversion between protobuf messages and engine values: a flat list of to_/from_ functions."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import TypeVar

from google.protobuf import timestamp_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from mnemosyne.engine import backup, types
from mnemosyne.engine.erasure import ErasureReceipt
from mnemosyne.engine.moves import MemberChangeAnswer, MovePlan
from mnemosyne.engine.tenant_import import Imported
from mnemosyne.errors import InvalidArgument
from mnemosyne.v1 import admin_pb2, memory_pb2, types_pb2, workspace_pb2

_RETAIN_STATUS = {
    types.RetainStatus.CREATED: types_pb2.RetainResult.CREATED,
    types.RetainStatus.DUPLICATE: types_pb2.RetainResult.DUPLICATE,
    types.RetainStatus.ENQUEUED: types_pb2.RetainResult.ENQUEUED,
    types.RetainStatus.INVALID: types_pb2.RetainResult.INVALID,
}
_RECALL_MODE: dict[int, types.RecallMode] = {
    memory_pb2.RECALL_MODE_UNSPECIFIED: types.RecallMode.HYBRID,
    memory_pb2.RECALL_MODE_HYBRID: types.RecallMode.HYBRID,
    memory_pb2.RECALL_MODE_VECTOR: types.RecallMode.VECTOR,
    memory_pb2.RECALL_MODE_TEXT: types.RecallMode.TEXT,
}


# google.protobuf.Timestamp's range: from 0001-01-01T00:00:00Z, to before 10000-01-01T00:00:00Z.
_FIRST_SECOND = -62_135_596_800
_END_SECOND = 253_402_300_800


def to_timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    set_time(stamp, seconds)
    return stamp


def set_time(target: timestamp_pb2.Timestamp, seconds: float) -> None:
    """A stored time (unix seconds, a float) into a Timestamp: its whole seconds exact, its fraction
    to the float's precision (``FromNanoseconds(int(seconds * 1e9))`` is off by up to 0.1 µs today
    and 16 µs near the year 9999, where a mem0 expiry at midnight then reads as the next day's),
    held to the Timestamp's range (a float near the end of 9999 rounds past it: a file written
    before expiries were held below it has such)."""
    if _FIRST_SECOND <= seconds < _END_SECOND:  # NaN is not
        whole = math.floor(seconds)
        nanos = round((seconds - whole) * 1e9)
        if nanos == 1_000_000_000:  # the fraction rounds up to the next second
            whole, nanos = whole + 1, 0
        if whole < _END_SECOND:
            target.seconds, target.nanos = whole, nanos
            return
    if seconds >= _END_SECOND:
        target.seconds, target.nanos = _END_SECOND - 1, 999_999_999
    else:
        target.seconds, target.nanos = _FIRST_SECOND, 0


def from_retain_item(item: memory_pb2.RetainRequest | memory_pb2.RetainItem) -> types.RetainItem:
    """A request's text, scope, metadata, time, thread and speaker, as sent (the engine validates
    and applies defaults)."""
    return types.RetainItem(
        text=item.text,
        scope=item.scope,
        metadata=dict(item.metadata),
        occurred_at=from_occurred_at(item),
        thread=from_thread(item),
        speaker=item.speaker or None,
        expires_at=from_expires_at(item),
    )


def from_expires_at(
    item: memory_pb2.RetainRequest | memory_pb2.RetainItem | memory_pb2.UpdateMemoryRequest,
) -> float | None:
    """``expires_at`` in unix seconds, None when unset."""
    at = from_occurred_at(item, field="expires_at", reason="EXPIRES_AT_INVALID")
    return None if at is None else at / 1e6


def from_update_metadata(request: memory_pb2.UpdateMemoryRequest) -> dict[str, str] | None:
    """The metadata an update replaces the memory's with, None to keep it. Metadata given without
    ``replace_metadata`` would be dropped (an update never merges): it is refused instead."""
    if request.replace_metadata:
        return dict(request.metadata)
    if request.metadata:
        raise InvalidArgument(
            "metadata is given without replace_metadata: set replace_metadata to replace the memory's "
            "metadata with it (an update replaces the whole metadata; it never merges)",
            reason="METADATA_WITHOUT_REPLACE",
        )
    return None


def from_occurred_at(item: Message, *, field: str = "occurred_at", reason: str = "OCCURRED_AT_INVALID") -> int | None:
    """``occurred_at`` (or another Timestamp ``field``) in unix microseconds, None when unset. A
    Timestamp whose nanos are outside 0..999,999,999 is no time at all (``reason``); the engine
    checks the range."""
    if not item.HasField(field):
        return None
    stamp = getattr(item, field)
    if not 0 <= stamp.nanos < 1_000_000_000:
        raise InvalidArgument(f"{field}.nanos is {stamp.nanos}; it must be between 0 and 999999999", reason=reason)
    return int(stamp.seconds * 1_000_000 + stamp.nanos // 1_000)


def from_thread(item: memory_pb2.RetainRequest | memory_pb2.RetainItem) -> types.ThreadRef | None:
    return types.ThreadRef(item.thread.id, item.thread.position) if item.HasField("thread") else None


def from_recall_mode(mode: int) -> types.RecallMode:
    if mode not in _RECALL_MODE:
        raise InvalidArgument(
            f"mode {mode} is not a RecallMode; use RECALL_MODE_HYBRID (1), RECALL_MODE_VECTOR (2) or "
            "RECALL_MODE_TEXT (3), or leave it unset for hybrid",
            reason="RECALL_MODE_INVALID",
        )
    return _RECALL_MODE[mode]


def to_retain_result(outcome: types.RetainOutcome) -> types_pb2.RetainResult:
    return types_pb2.RetainResult(
        status=_RETAIN_STATUS[outcome.status],
        memory_id=outcome.memory_id,
        event_id=outcome.event_id,
        error_reason=outcome.error_reason,
        error_message=outcome.error_message,
        near_duplicate_of=list(outcome.near_duplicate_of),
        supersedes=list(outcome.supersedes),
    )


# Any response message (the token and the report go on every write's and token read's).
M = TypeVar("M", bound=Message)


def with_token(response: M, token: str) -> M:
    """A write's response with its consistency token (transport/consistency.py)."""
    setattr(response, "consistency_token", token)  # noqa: B010 - every write's response has the field
    return response


def with_report(response: M, report: types_pb2.ConsistencyReport | None) -> M:
    """A read's response with what it waited for, when it was given a consistency token."""
    if report is not None:
        getattr(response, "consistency").CopyFrom(report)  # noqa: B009 - so has every read's that takes one
    return response


def to_retain_response(outcome: types.RetainOutcome) -> memory_pb2.RetainResponse:
    return memory_pb2.RetainResponse(result=to_retain_result(outcome))


def to_retain_batch_response(outcomes: Iterable[types.RetainOutcome]) -> memory_pb2.RetainBatchResponse:
    """``RetainBatchResponse(results=[to_retain_result(o) ...])``, setting only the fields that
    are not defaults (the same message; a fifth of the time for a batch of 500)."""
    response = memory_pb2.RetainBatchResponse()
    add = response.results.add
    for o in outcomes:
        result = add(status=_RETAIN_STATUS[o.status], memory_id=o.memory_id)
        if o.event_id:
            result.event_id = o.event_id
        if o.error_reason:
            result.error_reason = o.error_reason
        if o.error_message:
            result.error_message = o.error_message
        if o.near_duplicate_of:
            result.near_duplicate_of.extend(o.near_duplicate_of)
        if o.supersedes:
            result.supersedes.extend(o.supersedes)
    return response


def fill_memory(target: types_pb2.Memory, memory: types.Memory) -> None:
    """Write a memory into a message in place. Messages are filled where they live (a response's
    repeated field, ``add()``) rather than built and passed to a parent's constructor, which
    copies them: ten recall hits 72-85 -> 30-36 us."""
    target.id = memory.id
    target.scope = memory.scope
    target.text = memory.text
    if memory.metadata:
        target.metadata.update(memory.metadata)
    set_time(target.created_at, memory.created_at)
    for k, v, n in memory.facts:
        target.facts.add(kind=k, value=v, normalized=n)
    for s, p, o in memory.triples:
        target.triples.add(subject=s, predicate=p, object=o)
    if memory.forgotten:
        target.forgotten = True
        set_time(target.forgotten_at, memory.forgotten_at)
    if memory.superseded_by:
        target.superseded_by = memory.superseded_by
    if memory.superseded_at:
        set_time(target.superseded_at, memory.superseded_at)
    if memory.merged_into:
        target.merged_into = memory.merged_into
    if memory.occurred_at is not None:
        target.occurred_at.FromMicroseconds(memory.occurred_at)
    if memory.thread is not None:
        target.thread.id = memory.thread.id
        target.thread.position = memory.thread.position
    if memory.updated_at:
        set_time(target.updated_at, memory.updated_at)
    if memory.speaker:
        target.speaker = memory.speaker
    if memory.expires_at is not None:
        set_time(target.expires_at, memory.expires_at)


def add_memories(target: RepeatedCompositeFieldContainer[types_pb2.Memory], memories: Iterable[types.Memory]) -> None:
    """Append memories to a repeated ``Memory`` field."""
    for memory in memories:
        fill_memory(target.add(), memory)


def add_recall_hits(target: RepeatedCompositeFieldContainer[memory_pb2.RecallHit], hits: Iterable[types.Hit]) -> None:
    """Append hits to a repeated ``RecallHit`` field."""
    for hit in hits:
        message = target.add()
        message.score = hit.score
        message.vector_score = hit.vector_score
        message.text_score = hit.text_score
        fill_memory(message.memory, hit.memory)


def to_recall_response(recalled: types.Recalled) -> memory_pb2.RecallResponse:
    response = memory_pb2.RecallResponse(omitted_memory_ids=recalled.omitted_memory_ids)
    add_recall_hits(response.hits, recalled.hits)
    return response


def to_get_memory_response(memory: types.Memory) -> memory_pb2.GetMemoryResponse:
    response = memory_pb2.GetMemoryResponse()
    fill_memory(response.memory, memory)
    return response


def to_list_memories_response(page: types.MemoryPage) -> memory_pb2.ListMemoriesResponse:
    response = memory_pb2.ListMemoriesResponse(next_page_token=page.next_page_token)
    add_memories(response.memories, page.memories)
    return response


def to_forget_response(memory_id: int, forgotten: bool) -> memory_pb2.ForgetMemoryResponse:
    return memory_pb2.ForgetMemoryResponse(memory_id=memory_id, forgotten=forgotten)


def to_forget_memories_response(forgotten: int) -> memory_pb2.ForgetMemoriesResponse:
    return memory_pb2.ForgetMemoriesResponse(forgotten_count=forgotten)


def to_update_memory_response(outcome: types.UpdateOutcome) -> memory_pb2.UpdateMemoryResponse:
    response = memory_pb2.UpdateMemoryResponse(
        updated=outcome.updated,
        near_duplicate_of=list(outcome.near_duplicate_of),
        supersedes=list(outcome.supersedes),
    )
    fill_memory(response.memory, outcome.memory)
    return response


def to_memory_versions_response(versions: Iterable[types.MemoryVersion]) -> memory_pb2.ListMemoryVersionsResponse:
    response = memory_pb2.ListMemoryVersionsResponse()
    for v in versions:
        response.versions.add(
            version=v.version, text=v.text, metadata=v.metadata, at=to_timestamp(v.at), current=v.current
        )
    return response


def to_tenant_page(page: types.TenantPage) -> admin_pb2.ListTenantsResponse:
    return admin_pb2.ListTenantsResponse(
        tenants=page.tenants, next_page_token=page.next_page_token, damaged=page.damaged
    )


def to_ping_response() -> admin_pb2.PingResponse:
    return admin_pb2.PingResponse()


def to_whoami_response(name: str, tenants: Iterable[str], *, admin: bool) -> admin_pb2.WhoAmIResponse:
    """An admin token reaches every tenant: it lists none (``admin``)."""
    return admin_pb2.WhoAmIResponse(name=name, tenants=[] if admin else sorted(tenants), admin=admin)


def to_move_tenant_response(
    plan: MovePlan, *, source: str, head_hash: str, sent: int, steps: Sequence[str], memories: int
) -> admin_pb2.MoveTenantResponse:
    return admin_pb2.MoveTenantResponse(
        tenant=plan.tenant,
        source=source,
        destination=plan.destination,
        epoch=plan.epoch,
        head_hash=head_hash,
        bytes=sent,
        steps=steps,
        memories=memories,
    )


def to_change_members_response(answer: MemberChangeAnswer) -> admin_pb2.ChangeMembersResponse:
    return admin_pb2.ChangeMembersResponse(
        member=answer.member, creations_waited=answer.creations_waited, previous_done=answer.previous_done
    )


def to_activate_tenant_response(tenant: str, epoch: int, activated: bool) -> admin_pb2.ActivateTenantResponse:
    return admin_pb2.ActivateTenantResponse(tenant=tenant, epoch=epoch, activated=activated)


def to_backup_response(part: backup.BackupPart) -> admin_pb2.BackupResponse:
    if isinstance(part, backup.FileChunk):
        return admin_pb2.BackupResponse(chunk=admin_pb2.BackupChunk(file=part.file, data=part.data))
    if isinstance(part, backup.TenantCopy):
        return admin_pb2.BackupResponse(tenant=to_tenant_backup(part))
    if isinstance(part, backup.TenantUnchanged):
        return admin_pb2.BackupResponse(unchanged=part.tenant)
    if isinstance(part, backup.TenantSkipped):
        return admin_pb2.BackupResponse(
            skipped=admin_pb2.SkippedTenant(tenant=part.tenant, reason=part.reason, message=part.message)
        )
    return admin_pb2.BackupResponse(
        summary=admin_pb2.BackupSummary(
            copied=part.copied, unchanged=part.unchanged, skipped=part.skipped, bytes=part.bytes
        )
    )


def to_tenant_backup(copy: backup.TenantCopy) -> admin_pb2.TenantBackup:
    facts = copy.facts
    return admin_pb2.TenantBackup(
        tenant=copy.tenant,
        change_counter=facts.change_counter,
        inbox_sequence=facts.inbox_sequence,
        head_hash=facts.head_hash,
        ledger_entries=facts.ledger_entries,
        memories=facts.memories,
        last_event_id=facts.last_event_id,
        generations=facts.generations,
        files=[admin_pb2.BackupFile(name=f.name, size=f.size, sha256=f.sha256) for f in copy.files],
    )


def to_export_response(part: backup.TenantCopy | backup.FileChunk) -> admin_pb2.ExportTenantResponse:
    if isinstance(part, backup.FileChunk):
        return admin_pb2.ExportTenantResponse(chunk=admin_pb2.BackupChunk(file=part.file, data=part.data))
    return admin_pb2.ExportTenantResponse(manifest=to_tenant_backup(part))


def from_tenant_backup(m: admin_pb2.TenantBackup) -> backup.TenantCopy:
    facts = backup.SnapshotFacts(
        change_counter=m.change_counter,
        inbox_sequence=m.inbox_sequence,
        head_hash=m.head_hash,
        ledger_entries=m.ledger_entries,
        memories=m.memories,
        last_event_id=m.last_event_id,
        generations=dict(m.generations),
    )
    files = [backup.CopiedFile(name=f.name, size=f.size, sha256=f.sha256) for f in m.files]
    return backup.TenantCopy(m.tenant, facts, files)


def to_import_response(imported: Imported) -> admin_pb2.ImportTenantResponse:
    return admin_pb2.ImportTenantResponse(
        tenant=imported.tenant,
        head_hash=imported.head_hash,
        ledger_entries=imported.ledger_entries,
        memories=imported.memories,
        replaced=imported.replaced,
    )


def to_erase_tenant_response(receipt: ErasureReceipt) -> admin_pb2.EraseTenantResponse:
    return admin_pb2.EraseTenantResponse(
        receipt=admin_pb2.ErasureReceipt(
            tenant=receipt.tenant,
            erased_at=to_timestamp(receipt.erased_at),
            token_name=receipt.token_name,
            head_hash=receipt.head_hash,
        )
    )


def to_integrity(report: types.IntegrityReport) -> admin_pb2.VerifyIntegrityResponse:
    return admin_pb2.VerifyIntegrityResponse(
        valid=report.valid,
        first_broken_at=report.first_broken_at,
        checked=report.checked,
        head_hash=report.head_hash,
        problems=[
            admin_pb2.IntegrityProblem(ledger_seq=seq, memory_id=mid, kind=kind, detail=detail)
            for seq, mid, kind, detail in report.problems
        ],
    )


def to_stats(stats: types.TenantStats) -> admin_pb2.StatsResponse:
    return admin_pb2.StatsResponse(**asdict(stats))  # the same names, field for field


def to_tenant_figures(f: types.TenantFigures) -> admin_pb2.GetTenantFiguresResponse:
    # The engine's values carry the proto's names; a None gauge leaves its optional field unset.
    minutes = [admin_pb2.MinuteFigures(**{**asdict(m), "start": to_timestamp(m.start)}) for m in f.minutes]
    memories = [admin_pb2.MemoriesAt(at=to_timestamp(at), memories=n) for at, n in f.memories_at]
    now = {k: v for k, v in asdict(f).items() if k not in ("counting_since", "minutes", "memories_at")}
    since = to_timestamp(f.counting_since)
    return admin_pb2.GetTenantFiguresResponse(counting_since=since, minutes=minutes, memories=memories, **now)


def to_tenants_figures(f: types.TenantsFigures) -> admin_pb2.ListTenantFiguresResponse:
    row = admin_pb2.TenantFiguresRow
    largest, busiest, failing = ([row(**asdict(h)) for h in r] for r in (f.largest, f.busiest, f.failing))
    since = to_timestamp(f.counting_since)
    return admin_pb2.ListTenantFiguresResponse(
        tenants=f.tenants, counting_since=since, largest=largest, busiest=busiest, failing=failing
    )


def from_messages(messages: Iterable[types_pb2.ConversationMessage]) -> list[types.Message]:
    return [types.Message(role=m.role, content=m.content, name=m.name) for m in messages]


def to_reembed_response(p: types.ReembedProgress) -> admin_pb2.ReembedTenantResponse:
    return admin_pb2.ReembedTenantResponse(
        embedder=p.embedder, done=p.done, total=p.total, finished=p.finished, switched=p.switched
    )


def to_dedup_response(report: types.DedupReport) -> admin_pb2.DedupResponse:
    return admin_pb2.DedupResponse(
        groups=[
            admin_pb2.DuplicateGroup(keep_memory_id=g.keep, duplicate_memory_ids=list(g.duplicates))
            for g in report.groups
        ],
        merged=report.merged,
        threshold=report.threshold,
    )


# -- workspace records (host-owned generations) ------------------------------------------------

_CHANGE_OP = {workspace_pb2.RecordChange.PUT: "put", workspace_pb2.RecordChange.DELETE: "delete"}


def from_record_changes(changes: Iterable[workspace_pb2.RecordChange]) -> list[types.RecordChange]:
    # An unset or unknown op becomes "unspecified", which the engine rejects with CHANGE_OP_INVALID.
    return [types.RecordChange(_CHANGE_OP.get(c.op, "unspecified"), c.key, c.content) for c in changes]


def to_records(records: Iterable[tuple[str, str]]) -> list[workspace_pb2.Record]:
    return [workspace_pb2.Record(key=key, content=content) for key, content in records]


def to_update_global_response() -> workspace_pb2.UpdateGlobalResponse:
    return workspace_pb2.UpdateGlobalResponse(updated=True)  # the new generation is trailing metadata


def to_update_workspace_response(result: types.WriteResult) -> workspace_pb2.UpdateWorkspaceResponse:
    return workspace_pb2.UpdateWorkspaceResponse(applied=result.applied)


def to_get_record_response(key: str, content: str, generation: int) -> workspace_pb2.GetRecordResponse:
    return workspace_pb2.GetRecordResponse(record=workspace_pb2.Record(key=key, content=content), generation=generation)


def to_list_scopes_response(scopes: Sequence[types.ScopeSummary]) -> workspace_pb2.ListScopesResponse:
    return workspace_pb2.ListScopesResponse(
        scopes=[workspace_pb2.ScopeSummary(scope=s.scope, generation=s.generation, records=s.records) for s in scopes]
    )


def to_list_records_response(listed: types.ScopeRecords) -> workspace_pb2.ListRecordsResponse:
    return workspace_pb2.ListRecordsResponse(
        records=to_records(listed.records), generation=listed.generation, next_page_token=listed.next_page_token
    )


def to_edit_records_response(result: types.WriteResult) -> workspace_pb2.EditRecordsResponse:
    return workspace_pb2.EditRecordsResponse(generation=result.generation)


def to_consolidate_response(result: types.WriteResult) -> workspace_pb2.ConsolidateResponse:
    return workspace_pb2.ConsolidateResponse(generation=result.generation, already_applied=result.already_applied)


_OUTCOMES = {
    types.APPLIED: workspace_pb2.SessionScopeOutcome.OUTCOME_APPLIED,
    types.ALREADY_APPLIED: workspace_pb2.SessionScopeOutcome.OUTCOME_ALREADY_APPLIED,
    types.NOTHING_NEW: workspace_pb2.SessionScopeOutcome.OUTCOME_NOTHING_NEW,
    types.GAVE_UP: workspace_pb2.SessionScopeOutcome.OUTCOME_GAVE_UP,
}


def to_consolidate_session_response(outcomes: Sequence[types.ScopeOutcome]) -> workspace_pb2.ConsolidateSessionResponse:
    return workspace_pb2.ConsolidateSessionResponse(
        scopes=[
            workspace_pb2.SessionScopeOutcome(
                thread=o.thread,
                scope=o.scope,
                receipt_id=o.receipt_id,
                outcome=_OUTCOMES[o.outcome],
                generation=o.generation,
                model_calls=o.model_calls,
                conflicts=o.conflicts,
            )
            for o in outcomes
        ]
    )


def to_assemble_context(context: types.AssembledContext) -> workspace_pb2.AssembleContextResponse:
    # The generations are deliberately absent: they travel in response metadata only.
    response = workspace_pb2.AssembleContextResponse(
        global_records=to_records(context.global_records),
        workspace_records=to_records(context.workspace_records),
        omitted_records=[
            workspace_pb2.OmittedRecord(scope=o.scope, key=o.key, bytes=o.bytes) for o in context.omitted_records
        ],
        omitted_memory_ids=context.omitted_memory_ids,
    )
    add_recall_hits(response.memories, context.memories)
    return response


def to_aggregate_chunk(chunk: types.AggregateChunk) -> admin_pb2.AggregateStatsChunk:
    message = admin_pb2.AggregateStatsChunk(
        tenants=[admin_pb2.TenantStats(tenant=t, stats=to_stats(s), error_reason=e) for t, s, e in chunk.tenants],
        not_a_snapshot=True,
        files_read=chunk.files_read,
    )
    if chunk.total is not None:
        message.total.CopyFrom(to_stats(chunk.total))
        message.consistency = _not_one_snapshot(chunk.files_read)
        if chunk.unreadable:
            message.consistency += (
                f"; {chunk.unreadable} could not be read and are not in the total (their rows carry the reason)"
            )
    return message


def to_members_aggregate_rows(rows: Iterable[admin_pb2.TenantStats], files_read: int) -> admin_pb2.AggregateStatsChunk:
    """A chunk of a deployment's aggregate (transport/cluster/fanout.py): rows a member sent, the files
    read so far across the members."""
    return admin_pb2.AggregateStatsChunk(tenants=rows, not_a_snapshot=True, files_read=files_read)


def to_members_aggregate_total(
    total: types.TenantStats, files_read: int, members: int, unanswered: Sequence[str]
) -> admin_pb2.AggregateStatsChunk:
    """The last chunk of a deployment's aggregate: the total of the ``members`` that answered."""
    consistency = _not_one_snapshot(files_read, f" on {members} members")
    if unanswered:
        consistency += f"; members {', '.join(unanswered)} did not answer: their tenants are not included"
    return admin_pb2.AggregateStatsChunk(
        total=to_stats(total),
        not_a_snapshot=True,
        files_read=files_read,
        consistency=consistency,
        unanswered_members=unanswered,
    )


def _not_one_snapshot(files_read: int, where: str = "") -> str:
    return (
        f"not one snapshot: {files_read} tenant files read in {files_read} separate transactions{where} "
        "while writes continued"
    )
