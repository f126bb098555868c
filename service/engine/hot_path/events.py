"""The events of fast writes: GetEvent, ListEvents, and the status transitions WatchEvents streams
(transport/waits.py waits between them), read from the tenant's log and its inbox."""

from __future__ import annotations

import json

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.hot_path.snapshot import snapshot
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.types import Event, EventPage, RetainOutcome, RetainStatus, Transitions
from mnemosyne.errors import FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.pool import TenantPool

EVENT_STATUSES = ("pending", "running", "succeeded", "failed")
STREAM_CHUNK = 500  # transitions a WatchEvents stream reads at a time


def event_from_row(row: OpRow, *, status: str | None = None, sequence: int = 0) -> Event:
    """An Event from a log row; ``status`` overrides it for a replayed transition (whose result
    fields are shown only when the transition itself is terminal)."""
    shown = status or row.status
    terminal = shown in ("succeeded", "failed")
    outcome = RetainOutcome.from_json(json.loads(row.result)) if (row.result and terminal) else None
    created = (outcome.memory_id,) if outcome and outcome.status is RetainStatus.CREATED else ()
    duplicate = (outcome.memory_id,) if outcome and outcome.status is RetainStatus.DUPLICATE else ()
    finished = row.finished_at if terminal else None
    return Event(
        event_id=row.event_id,
        status=shown,
        kind=row.kind,
        accepted_at=row.accepted_at,
        finished_at=finished,
        created_memory_ids=created,
        duplicate_of_memory_ids=duplicate,
        near_duplicate_of=tuple(outcome.near_duplicate_of) if outcome else (),
        error_reason=(row.error_reason or "") if shown == "failed" else "",
        error_message=(row.error_message or "") if shown == "failed" else "",
        attempts=row.attempts,
        latency_ms=((finished - row.accepted_at) * 1000.0) if finished else 0.0,
        extracted=row.extraction is not None,
        sequence=sequence,
    )


class Events:
    """A tenant's events, kept ``retention_seconds`` after they finished (0: forever)."""

    def __init__(self, *, pool: TenantPool, limits: Limits, retention_seconds: float) -> None:
        self._pool = pool
        self._limits = limits
        self._retention = retention_seconds

    def get_event(self, tenant: str, event_id: int) -> Event:
        with self._pool.tenant(tenant, create=False) as store:
            row = None
            if store is not None:
                with snapshot(store) as (txn, waiting):
                    waiting_row = waiting.rows(after_id=event_id - 1, up_to_id=event_id)
                    row = txn.oplog_get(event_id) or (waiting_row[0] if waiting_row else None)
        if row is None:
            kept = (
                f"finished events are kept for {self._retention:g}s" if self._retention else "events are kept forever"
            )
            raise NotFound(
                f"event {event_id} does not exist in this tenant's operation log ({kept})", reason="EVENT_NOT_FOUND"
            )
        return event_from_row(row)

    def list_events(
        self,
        tenant: str,
        *,
        status: str | None = None,
        accepted_after: float | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> EventPage:
        if status is not None and status not in EVENT_STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(EVENT_STATUSES)}", reason="EVENT_STATUS_INVALID")
        page_size = check.validate_page_size(page_size, self._limits)
        query = f"events\x1f{status or ''}\x1f{accepted_after!r}"
        # Pages are cut by event id, which only grows: new events land on later pages and never
        # shift or repeat what an earlier page returned.
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                page_tokens.decode(None, tenant, query, page_token)  # any token is one we never issued
                return EventPage([], "")
            with snapshot(store) as (txn, waiting):
                secret = txn.page_token_secret()
                after_id = page_tokens.decode_int(secret, tenant, query, page_token)
                rows = txn.oplog_page(
                    status=status, accepted_after=accepted_after, after_id=after_id, limit=page_size + 1
                )
                if status in (None, "pending"):  # inbox ids follow every id in the log: still in order
                    rows += [
                        r
                        for r in waiting.rows(after_id=after_id, limit=page_size + 1)
                        if accepted_after is None or r.accepted_at >= accepted_after
                    ]
        events = [event_from_row(r) for r in rows[:page_size]]
        token = (
            page_tokens.encode(secret, tenant, query, str(rows[page_size - 1].event_id))
            if len(rows) > page_size
            else ""
        )
        return EventPage(events, token)

    def transitions(self, tenant: str, *, after_event_id: int = 0, after_sequence: int = 0) -> Transitions:
        """The next status transitions (up to a chunk) after ``after_sequence`` of events after
        ``after_event_id``, from the durable log; the caller waits for ``changes`` when there were
        no more (WatchEvents: transport/waits.py)."""
        for field, value in (("after_event_id", after_event_id), ("after_sequence", after_sequence)):
            if value < 0:
                given = field.removeprefix("after_")
                raise InvalidArgument(
                    f"{field} is {value}; it must be 0 (from the start of what is kept) or "
                    f"{'an' if given[0] in 'aeiou' else 'a'} {given} this tenant's events gave",
                    reason="RESUME_POINT_INVALID",
                )
        sequence = after_sequence
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                _refuse_ahead(sequence, 0)
                _refuse_ahead(after_event_id, 0, "after_event_id")
                return Transitions([], sequence, more=False)
            # Every event id the tenant gave is an acceptance position it took (store/acceptance.py).
            _refuse_ahead(after_event_id, store.acceptances.highest(), "after_event_id")
            with store.read() as txn:
                _refuse_ahead(sequence, txn.oplog_last_seq())
                pruned = txn.oplog_pruned_through_seq()
                if sequence and sequence < pruned:
                    raise FailedPrecondition(
                        f"transitions up to sequence {pruned} were deleted by the event retention limit "
                        f"({self._retention:g}s), so a watch resuming after {sequence} would miss some; "
                        f"resume with after_sequence >= {pruned}, or 0 for everything kept",
                        reason="EVENTS_PRUNED",
                        metadata={"pruned_through_sequence": str(pruned)},
                    )
                found = txn.oplog_transitions(after_seq=sequence, after_event_id=after_event_id, limit=STREAM_CHUNK)
                rows: dict[int, OpRow] = {}
                for t in found:
                    if t.event_id not in rows:
                        row = txn.oplog_get(t.event_id)
                        if row is not None:
                            rows[t.event_id] = row
        events = [
            event_from_row(rows[t.event_id], status=t.status, sequence=t.seq) for t in found if t.event_id in rows
        ]
        return Transitions(events, found[-1].seq if found else sequence, more=len(found) == STREAM_CHUNK)


# A resumption point of each kind: what it counts, who gave it, the refusal's reason and metadata key.
_POINTS = {
    "after_sequence": ("transition", "watch", "SEQUENCE_AHEAD", "last_sequence"),
    "after_event_id": ("event id", "writes", "EVENT_AHEAD", "last_event_id"),
}


def _refuse_ahead(point: int, last: int, field: str = "after_sequence") -> None:
    """Refuse a resumption point past the tenant's last (forged, another tenant's or server's,
    from before a restore or an erasure): the watch would wait, skipping everything up to it."""
    if point > last:
        counted, giver, reason, key = _POINTS[field]
        raise FailedPrecondition(
            f"{field} {point} is past the last {counted} of this tenant ({last}): it was not given by this "
            f"tenant's {giver}; resume with {field} <= {last}, or 0 for everything kept",
            reason=reason,
            metadata={key: str(last)},
        )
