"""Conversion of server responses to the client's types: a flat list of ``*_from_proto``
functions, the only place that reads response messages (MemoryClient, and the in-process
MemoryBrain, which converts the engine's values to these same messages first: one conversion)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from mnemosyne.client import types
from mnemosyne.client.errors import ArgumentTypeError
from mnemosyne.client.unsendable import refused
from mnemosyne.v1 import (
    admin_pb2,
    events_pb2,
    expiry_pb2,
    hot_path_pb2,
    memory_pb2,
    revisions_pb2,
    types_pb2,
    webhooks_pb2,
    workspace_pb2,
)

# google.protobuf.Timestamp's range in unix seconds: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_FIRST_SECOND = -62_135_596_800
_AFTER_LAST_SECOND = 253_402_300_800

_STATUS = {
    types_pb2.RetainResult.CREATED: "created",
    types_pb2.RetainResult.DUPLICATE: "duplicate",
    types_pb2.RetainResult.ENQUEUED: "enqueued",
    types_pb2.RetainResult.INVALID: "invalid",
}
EVENT_STATUS = {
    events_pb2.PENDING: "pending",
    events_pb2.RUNNING: "running",
    events_pb2.SUCCEEDED: "succeeded",
    events_pb2.FAILED: "failed",
}
EVENT_STATUS_BY_NAME = {v: k for k, v in EVENT_STATUS.items()}


def memory_from_proto(m: types_pb2.Memory) -> types.Memory:
    # Empty maps and lists (most memories' metadata, facts and triples) are not iterated: a
    # recall's ten hits convert in ~45 instead of ~60 us.
    return types.Memory(
        id=m.id,
        scope=m.scope,
        text=m.text,
        metadata=dict(m.metadata) if m.metadata else {},
        created_at=m.created_at.ToNanoseconds() / 1e9,
        facts=[types.Fact(f.kind, f.value, f.normalized) for f in m.facts] if m.facts else [],
        triples=[types.Triple(t.subject, t.predicate, t.object) for t in m.triples] if m.triples else [],
        forgotten=m.forgotten,
        superseded_by=m.superseded_by,
        superseded_at=m.superseded_at.ToNanoseconds() / 1e9 if m.HasField("superseded_at") else 0.0,
        merged_into=m.merged_into,
        occurred_at=m.occurred_at.ToMicroseconds() / 1e6 if m.HasField("occurred_at") else None,
        thread=types.ThreadRef(m.thread.id, m.thread.position) if m.HasField("thread") else None,
        updated_at=m.updated_at.ToNanoseconds() / 1e9 if m.HasField("updated_at") else 0.0,
        speaker=m.speaker,
        forgotten_at=m.forgotten_at.ToNanoseconds() / 1e9 if m.HasField("forgotten_at") else 0.0,
        expires_at=m.expires_at.ToNanoseconds() / 1e9 if m.HasField("expires_at") else None,
    )


def place(
    target: memory_pb2.RetainRequest | memory_pb2.RetainItem,
    occurred_at: float | None,
    thread: types.ThreadRef | None,
    speaker: str = "",
    expires_at: float | None = None,
) -> None:
    """Set a request's (or item's) ``occurred_at`` and ``expires_at`` (unix seconds), ``thread``
    and ``speaker`` when given."""
    target.speaker = speaker
    if expires_at is not None:
        target.expires_at.CopyFrom(timestamp(expires_at, field="expires_at", reason="EXPIRES_AT_INVALID"))
    if occurred_at is not None:
        within_timestamps(occurred_at, field="occurred_at", reason="OCCURRED_AT_INVALID")
        target.occurred_at.FromMicroseconds(round(occurred_at * 1e6))
    if thread is not None:
        target.thread.id = thread.id
        target.thread.position = thread.position


def retain_item_to_proto(item: types.RetainItem | str) -> memory_pb2.RetainItem:
    if isinstance(item, str):
        return memory_pb2.RetainItem(text=item)
    message = memory_pb2.RetainItem(text=item.text, scope=item.scope, metadata=dict(item.metadata))
    place(message, item.occurred_at, item.thread, item.speaker, item.expires_at)
    return message


def update_result_from_proto(r: memory_pb2.UpdateMemoryResponse) -> types.UpdateResult:
    return types.UpdateResult(
        memory=memory_from_proto(r.memory),
        updated=r.updated,
        near_duplicate_of=list(r.near_duplicate_of),
        supersedes=list(r.supersedes),
    )


def versions_from_proto(r: memory_pb2.ListMemoryVersionsResponse) -> list[types.MemoryVersion]:
    return [
        types.MemoryVersion(v.version, v.text, dict(v.metadata), v.at.ToNanoseconds() / 1e9, v.current)
        for v in r.versions
    ]


def hits_from_proto(hits: Iterable[memory_pb2.RecallHit]) -> list[types.Hit]:
    return [types.Hit(memory_from_proto(h.memory), h.score, h.vector_score, h.text_score) for h in hits]


def memory_page_from_proto(r: memory_pb2.ListMemoriesResponse) -> types.MemoryPage:
    return types.MemoryPage([memory_from_proto(m) for m in r.memories], r.next_page_token)


def retain_result_from_proto(r: types_pb2.RetainResult) -> types.RetainResult:
    return types.RetainResult(
        status=_STATUS.get(r.status, "unspecified"),
        memory_id=r.memory_id,
        event_id=r.event_id,
        error_reason=r.error_reason,
        error_message=r.error_message,
        near_duplicate_of=tuple(r.near_duplicate_of),
        supersedes=tuple(r.supersedes),
    )


def event_from_proto(e: events_pb2.Event) -> types.Event:
    return types.Event(
        event_id=e.event_id,
        status=EVENT_STATUS.get(e.status, "unspecified"),
        kind=e.kind,
        accepted_at=e.accepted_at.ToNanoseconds() / 1e9,
        finished_at=e.finished_at.ToNanoseconds() / 1e9 if e.HasField("finished_at") else None,
        created_memory_ids=tuple(e.created_memory_ids),
        duplicate_of_memory_ids=tuple(e.duplicate_of_memory_ids),
        merged_into_memory_ids=tuple(e.merged_into_memory_ids),
        near_duplicate_of=tuple(e.near_duplicate_of),
        error_reason=e.error_reason,
        error_message=e.error_message,
        attempts=e.attempts,
        latency_ms=e.latency_ms,
        sequence=e.sequence,
        extracted=e.extracted,
    )


def event_page_from_proto(r: events_pb2.ListEventsResponse) -> types.EventPage:
    return types.EventPage([event_from_proto(e) for e in r.events], r.next_page_token)


def hot_path_status_from_proto(s: hot_path_pb2.HotPathStatus) -> types.HotPathStatus:
    return types.HotPathStatus(
        enabled=s.enabled,
        queue_depth=s.queue_depth,
        oldest_pending_seconds=s.oldest_pending_seconds,
        accepted=s.accepted,
        succeeded=s.succeeded,
        failed=s.failed,
        duplicates=s.duplicates,
        writes=s.writes,
        model_calls=s.model_calls,
        awaited=s.awaited,
    )


def flush_from_proto(r: hot_path_pb2.FlushResponse) -> types.FlushResult:
    return types.FlushResult(r.flushed, r.succeeded, r.failed, list(r.failed_event_ids))


def integrity_from_proto(r: admin_pb2.VerifyIntegrityResponse) -> types.IntegrityReport:
    return types.IntegrityReport(
        valid=r.valid,
        first_broken_at=r.first_broken_at,
        checked=r.checked,
        head_hash=r.head_hash,
        problems=[types.IntegrityProblem(p.ledger_seq, p.memory_id, p.kind, p.detail) for p in r.problems],
    )


def stats_from_proto(r: admin_pb2.StatsResponse) -> types.Stats:
    return types.Stats(
        memories=r.memories,
        forgotten=r.forgotten,
        writes=r.writes,
        model_calls=r.model_calls,
        embed_calls=r.embed_calls,
        duplicates=r.duplicates,
        ledger_entries=r.ledger_entries,
        file_bytes=r.file_bytes,
        replication_lag_seconds=r.replication_lag_seconds,
        replication_lag_bytes=r.replication_lag_bytes,
    )


def tenant_figures_from_proto(r: admin_pb2.GetTenantFiguresResponse) -> types.TenantFigures:
    return types.TenantFigures(
        counting_since=r.counting_since.ToNanoseconds() / 1e9,
        minutes=[
            types.MinuteFigures(
                start=m.start.ToNanoseconds() / 1e9,
                writes=m.writes,
                recalls=m.recalls,
                failed_events=m.failed_events,
                hot_path_depth=m.hot_path_depth if m.HasField("hot_path_depth") else None,
                oldest_pending_seconds=m.oldest_pending_seconds if m.HasField("oldest_pending_seconds") else None,
                file_bytes=m.file_bytes if m.HasField("file_bytes") else None,
            )
            for m in r.minutes
        ],
        memories=[(p.at.ToNanoseconds() / 1e9, p.memories) for p in r.memories],
        file_bytes=r.file_bytes,
        hot_path_depth=r.hot_path_depth,
        oldest_pending_seconds=r.oldest_pending_seconds,
    )


def tenants_figures_from_proto(r: admin_pb2.ListTenantFiguresResponse) -> types.TenantsFigures:
    def rows(found: Iterable[admin_pb2.TenantFiguresRow]) -> list[types.TenantFiguresRow]:
        return [types.TenantFiguresRow(t.tenant, t.file_bytes, t.writes, t.recalls, t.failed_events) for t in found]

    return types.TenantsFigures(
        tenants=r.tenants,
        counting_since=r.counting_since.ToNanoseconds() / 1e9,
        largest=rows(r.largest),
        busiest=rows(r.busiest),
        failing=rows(r.failing),
        unanswered_members=list(r.unanswered_members),
    )


def dedup_from_proto(r: admin_pb2.DedupResponse) -> types.DedupResult:
    return types.DedupResult(
        [types.DuplicateGroup(g.keep_memory_id, tuple(g.duplicate_memory_ids)) for g in r.groups], r.merged, r.threshold
    )


def reembed_progress_from_proto(r: admin_pb2.ReembedTenantResponse) -> types.ReembedProgress:
    return types.ReembedProgress(r.embedder, r.done, r.total, r.finished, r.switched)


def record_from_proto(r: workspace_pb2.Record) -> types.Record:
    return types.Record(key=r.key, content=r.content)


def _enum_name(enum: EnumTypeWrapper, value: int, prefix: str) -> str:
    """``value``'s name in ``enum``, without ``prefix``, in lower case; a value this client does
    not know (one a newer server added: no breaking change) as its number, as a webhook kind's
    and as the Node client reads it (protobuf's ``Name`` raised a ValueError, as if the caller erred)."""
    try:
        return str(enum.Name(value)).removeprefix(prefix).lower()
    except ValueError:
        return str(value)


def session_outcomes_from_proto(r: workspace_pb2.ConsolidateSessionResponse) -> list[types.SessionOutcome]:
    outcome_names = workspace_pb2.SessionScopeOutcome.Outcome
    return [
        types.SessionOutcome(
            thread=o.thread,
            scope=o.scope,
            receipt_id=o.receipt_id,
            outcome=_enum_name(outcome_names, o.outcome, "OUTCOME_"),
            generation=o.generation,
            model_calls=o.model_calls,
            conflicts=o.conflicts,
        )
        for o in r.scopes
    ]


def consolidate_from_proto(r: workspace_pb2.ConsolidateResponse) -> types.ConsolidateResult:
    return types.ConsolidateResult(generation=r.generation, already_applied=r.already_applied)


def tenant_backup_from_proto(t: admin_pb2.TenantBackup) -> types.TenantBackup:
    return types.TenantBackup(
        tenant=t.tenant,
        change_counter=t.change_counter,
        inbox_sequence=t.inbox_sequence,
        head_hash=t.head_hash,
        ledger_entries=t.ledger_entries,
        memories=t.memories,
        last_event_id=t.last_event_id,
        generations=dict(t.generations),
        files=[types.BackupFile(name=f.name, size=f.size, sha256=f.sha256) for f in t.files],
    )


def tenant_backup_to_proto(t: types.TenantBackup) -> admin_pb2.TenantBackup:
    return admin_pb2.TenantBackup(
        tenant=t.tenant,
        change_counter=t.change_counter,
        inbox_sequence=t.inbox_sequence,
        head_hash=t.head_hash,
        ledger_entries=t.ledger_entries,
        memories=t.memories,
        last_event_id=t.last_event_id,
        generations=t.generations,
        files=[admin_pb2.BackupFile(name=f.name, size=f.size, sha256=f.sha256) for f in t.files],
    )


def export_part_from_proto(r: admin_pb2.ExportTenantResponse) -> types.TenantBackup | types.BackupChunk:
    if r.WhichOneof("part") == "chunk":
        return types.BackupChunk(file=r.chunk.file, data=r.chunk.data)
    return tenant_backup_from_proto(r.manifest)


def import_result_from_proto(r: admin_pb2.ImportTenantResponse) -> types.ImportResult:
    return types.ImportResult(
        tenant=r.tenant,
        head_hash=r.head_hash,
        ledger_entries=r.ledger_entries,
        memories=r.memories,
        replaced=r.replaced,
    )


def backup_part_from_proto(r: admin_pb2.BackupResponse) -> types.BackupPart:
    kind = r.WhichOneof("part")
    if kind == "chunk":
        return types.BackupChunk(file=r.chunk.file, data=r.chunk.data)
    if kind == "tenant":
        return tenant_backup_from_proto(r.tenant)
    if kind == "unchanged":
        return types.BackupUnchanged(tenant=r.unchanged)
    if kind == "skipped":
        return types.SkippedTenant(tenant=r.skipped.tenant, reason=r.skipped.reason, message=r.skipped.message)
    s = r.summary
    return types.BackupSummary(copied=s.copied, unchanged=s.unchanged, skipped=s.skipped, bytes=s.bytes)


def erasure_receipt_from_proto(r: admin_pb2.ErasureReceipt) -> types.ErasureReceipt:
    return types.ErasureReceipt(
        tenant=r.tenant,
        erased_at=r.erased_at.ToNanoseconds() / 1e9,
        token_name=r.token_name,
        head_hash=r.head_hash,
    )


def caller_from_proto(r: admin_pb2.WhoAmIResponse) -> types.Caller:
    return types.Caller(name=r.name, tenants=list(r.tenants), admin=r.admin)


def scopes_from_proto(r: workspace_pb2.ListScopesResponse) -> list[types.ScopeSummary]:
    return [types.ScopeSummary(scope=s.scope, generation=s.generation, records=s.records) for s in r.scopes]


def tenant_page_from_proto(r: admin_pb2.ListTenantsResponse) -> types.TenantPage:
    return types.TenantPage(
        tenants=list(r.tenants),
        next_page_token=r.next_page_token,
        damaged=list(r.damaged),
        unanswered_members=list(r.unanswered_members),
    )


# The webhook kinds: the enum's values <-> the payloads' type names (docs/webhooks.md).
WEBHOOK_KIND = {
    webhooks_pb2.WEBHOOK_KIND_MEMORY_CREATED: "memory.created",
    webhooks_pb2.WEBHOOK_KIND_MEMORY_UPDATED: "memory.updated",
    webhooks_pb2.WEBHOOK_KIND_MEMORY_FORGOTTEN: "memory.forgotten",
    webhooks_pb2.WEBHOOK_KIND_MEMORY_EXPIRED: "memory.expired",
    webhooks_pb2.WEBHOOK_KIND_RECORD_CHANGED: "record.changed",
    webhooks_pb2.WEBHOOK_KIND_FAST_WRITE_SUCCEEDED: "fast_write.succeeded",
    webhooks_pb2.WEBHOOK_KIND_FAST_WRITE_FAILED: "fast_write.failed",
    webhooks_pb2.WEBHOOK_KIND_CONSOLIDATION_APPLIED: "consolidation.applied",
}
WEBHOOK_KIND_BY_NAME = {v: k for k, v in WEBHOOK_KIND.items()}


def webhook_from_proto(w: webhooks_pb2.Webhook) -> types.Webhook:
    return types.Webhook(
        id=w.id,
        url=w.url,
        kinds=tuple(WEBHOOK_KIND.get(k, str(k)) for k in w.kinds),
        include_text=w.include_text,
        secrets=tuple(types.WebhookSecret(s.id, s.hint, s.created_at) for s in w.secrets),
        created_at=w.created_at,
        pending_deliveries=w.pending_deliveries,
        failing_since=w.failing_since,
        paused_at=w.paused_at,
        pause_reason=w.pause_reason,
    )


def webhook_deliveries_from_proto(r: webhooks_pb2.ListWebhookDeliveriesResponse) -> types.WebhookDeliveryPage:
    deliveries = [
        types.WebhookDelivery(
            delivery_id=d.delivery_id,
            kind=WEBHOOK_KIND.get(d.kind, str(d.kind)),
            at=d.at,
            delivered=d.delivered,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            last_attempt_at=d.last_attempt_at,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            delivered_at=d.delivered_at,
            memory_id=d.memory_id,
            event_id=d.event_id,
        )
        for d in r.deliveries
    ]
    return types.WebhookDeliveryPage(deliveries, r.next_page_token)


def memory_revisions_from_proto(response: revisions_pb2.ListMemoryRevisionsResponse) -> list[types.MemoryRevision]:
    return [
        types.MemoryRevision(
            revision=r.revision,
            kind=_enum_name(revisions_pb2.RevisionKind, r.kind, "REVISION_KIND_"),
            at=r.at.ToNanoseconds() / 1e9,
            surface=r.by.surface,
            token_name=r.by.token_name,
            changed=tuple(r.changed),
            version=r.version,
            text=r.text,
            metadata=dict(r.metadata),
            expires_at=r.expires_at.ToNanoseconds() / 1e9 if r.HasField("expires_at") else None,
            ledger_seq=r.ledger_seq,
            related_memory_id=r.related_memory_id,
            reverted_to=r.reverted_to,
        )
        for r in response.revisions
    ]


def record_revisions_from_proto(response: revisions_pb2.ListRecordRevisionsResponse) -> list[types.RecordRevision]:
    return [
        types.RecordRevision(
            r.generation,
            r.op,
            r.content,
            r.at.ToNanoseconds() / 1e9,
            r.by.surface,
            r.by.token_name,
            r.source,
            r.ledger_seq,
        )
        for r in response.revisions
    ]


def revert_result_from_proto(r: revisions_pb2.RevertMemoryResponse) -> types.UpdateResult:
    """A revert's result: ``updated`` when it wrote a revision (0: the memory had that content)."""
    return types.UpdateResult(
        memory=memory_from_proto(r.memory),
        updated=r.revision != 0,
        near_duplicate_of=list(r.near_duplicate_of),
        supersedes=list(r.supersedes),
    )


def expiry_policy_from_proto(policy: expiry_pb2.ExpiryPolicy) -> types.ExpiryPolicy:
    return types.ExpiryPolicy(policy.default_ttl_seconds, policy.update_extends, policy.grace_seconds)


def expiry_policy_to_proto(policy: types.ExpiryPolicy) -> expiry_pb2.ExpiryPolicy:
    return expiry_pb2.ExpiryPolicy(
        default_ttl_seconds=policy.default_ttl_seconds,
        update_extends=policy.update_extends,
        grace_seconds=policy.grace_seconds,
    )


def timestamp(seconds: float, *, field: str, reason: str) -> timestamp_pb2.Timestamp:
    """``seconds`` (unix) as a Timestamp; InvalidArgumentError(``reason``) as ``within_timestamps``."""
    within_timestamps(seconds, field=field, reason=reason)
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def within_timestamps(seconds: float, *, field: str, reason: str) -> None:
    """Refuse, as the server refuses the same time (``reason``), unix ``seconds`` that no
    Timestamp holds: NaN, an infinity, a time before the year 1 or after 9999."""
    if not _FIRST_SECOND <= seconds < _AFTER_LAST_SECOND:  # False for NaN too
        raise refused(
            reason,
            f"{field} is {seconds!r} unix seconds; a time is between {_FIRST_SECOND} (0001-01-01T00:00:00Z) and "
            f"{_AFTER_LAST_SECOND} (10000-01-01T00:00:00Z, excluded)",
        )


def conversation_messages(
    messages: Sequence[types.Message | Mapping[str, str] | tuple[str, str]],
) -> list[types_pb2.ConversationMessage]:
    """``retain_conversation``'s messages as the request carries them. An empty list is refused
    here (MESSAGES_EMPTY): on the wire it is no messages at all, which the server reads as a text
    left out. A role or content left out of a mapping goes empty, for the server's reason
    (MESSAGE_ROLE_INVALID, MESSAGE_EMPTY); a message of another shape, or a part that is no text,
    is REQUEST_UNDECODABLE, as on every surface (docs/http-api.md, "One mistake, one reason")."""
    if not messages:
        raise refused("MESSAGES_EMPTY", "retain_conversation: messages is empty; send at least one {role, content}")
    proto = []
    for position, m in enumerate(messages):
        if isinstance(m, types.Message):
            parts: tuple[object, ...] = (m.role, m.content, m.name)
        elif isinstance(m, Mapping):
            parts = (m.get("role", ""), m.get("content", ""), m.get("name", ""))
        elif isinstance(m, tuple | list) and len(m) == 2:
            parts = (m[0], m[1], "")
        else:
            parts = ()
        if len(parts) != 3 or not all(isinstance(part, str) for part in parts):
            shown = repr(m) if len(repr(m)) <= 40 else repr(m)[:40] + "..."
            raise ArgumentTypeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "REQUEST_UNDECODABLE",
                f"retain_conversation: messages[{position}] is {shown}; it takes a Message, a "
                "{role, content, name?} mapping of texts or a (role, content) pair of texts",
                {},
            )
        role, content, name = cast(tuple[str, str, str], parts)
        proto.append(types_pb2.ConversationMessage(role=role, content=content, name=name))
    return proto
