"""SQL of the hot path's operation log (``oplog`` and ``oplog_transitions``).

Mixed into ``ReadTxn``/``WriteTxn`` so the log's statements live in the store layer, run inside
the caller's transaction, and commit together with the memories they describe. Every status
change appends one ``oplog_transitions`` row: that table is what WatchEvents replays, so a
dropped stream can resume from a sequence number and miss nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mnemosyne.store.bookkeeping import BookkeepingReads, BookkeepingWrites
from mnemosyne.store.inbox import InboxOp

PRUNED_THROUGH_META = "oplog_pruned_through_seq"
TERMINAL_STATUSES = ("succeeded", "failed")


@dataclass(frozen=True)
class OpRow:
    event_id: int
    kind: str
    status: str
    payload: str
    request_id: str | None
    attempts: int
    failures: int
    extraction: str | None
    embedding: bytes | None
    result: str | None
    error_reason: str | None
    error_message: str | None
    accepted_at: float
    started_at: float | None
    finished_at: float | None
    retry_after: float | None  # a failed attempt's backoff: not taken again before this time
    fingerprint: str | None = None  # its content's identity while open (schema.py _V_ACCEPTANCE)

    @classmethod
    def pending(cls, op: InboxOp) -> OpRow:
        """An inbox operation as the log row it will become: pending, never attempted."""
        return cls(
            event_id=op.event_id,
            kind=op.kind,
            status="pending",
            payload=op.payload,
            request_id=op.request_id,
            attempts=0,
            failures=0,
            extraction=None,
            embedding=None,
            result=None,
            error_reason=None,
            error_message=None,
            accepted_at=op.accepted_at,
            started_at=None,
            finished_at=None,
            retry_after=None,
            fingerprint=op.fingerprint,
        )


@dataclass(frozen=True)
class QueuedRetain:
    """An open retain operation as a forget's fence reads it (``OplogReads.oplog_open_retains``)."""

    event_id: int
    fingerprint: str | None
    scope: str
    metadata_json: str


@dataclass(frozen=True)
class Transition:
    seq: int
    event_id: int
    status: str
    at: float


class OplogReads(BookkeepingReads):
    def _ops(self, sql: str, params: Sequence[Any] = ()) -> list[OpRow]:
        return self._records(OpRow, f"FROM oplog {sql}", params)

    def oplog_get(self, event_id: int) -> OpRow | None:
        rows = self._ops("WHERE event_id = ?", (event_id,))
        return rows[0] if rows else None

    def oplog_page(self, *, status: str | None, accepted_after: float | None, after_id: int, limit: int) -> list[OpRow]:
        clauses: list[str] = ["event_id > ?"]
        params: list[Any] = [after_id]
        if status:
            clauses.append("status = ?")
            params.append(status)
        if accepted_after is not None:
            clauses.append("accepted_at >= ?")
            params.append(accepted_after)
        return self._ops(f"WHERE {' AND '.join(clauses)} ORDER BY event_id LIMIT ?", (*params, limit))

    def oplog_next_open(self, limit: int, now: float) -> list[OpRow]:
        """The oldest pending (or crash-orphaned running) operations not in a retry backoff, in
        acceptance order."""
        return self._ops(
            "WHERE status IN ('pending', 'running') AND (retry_after IS NULL OR retry_after <= ?) "
            "ORDER BY event_id LIMIT ?",
            (now, limit),
        )

    def oplog_open_within(self, ranges: Sequence[tuple[int, int]], now: float) -> list[OpRow]:
        """The open operations (not in a retry backoff) with ids in any of the inclusive
        ``ranges``, in acceptance order: the writes a read waits for."""
        found: dict[int, OpRow] = {}
        for low, high in ranges:
            for row in self._ops(
                "WHERE status IN ('pending', 'running') AND event_id BETWEEN ? AND ? "
                "AND (retry_after IS NULL OR retry_after <= ?) ORDER BY event_id",
                (low, high, now),
            ):
                found[row.event_id] = row
        return [found[i] for i in sorted(found)]

    def oplog_open_earlier_alike(self, ops: Sequence[OpRow], now: float) -> list[OpRow]:
        """The open operations (not in a retry backoff) accepted before one of ``ops`` with the
        same content (fingerprint): what must be applied before them, so the earliest accepted
        duplicate survives whatever order the worker takes writes in."""
        before: dict[str, int] = {}
        for op in ops:
            if op.fingerprint:
                before[op.fingerprint] = max(before.get(op.fingerprint, 0), op.event_id)
        found: list[OpRow] = []
        for fingerprint, below in before.items():
            found += self._ops(
                "WHERE fingerprint = ? AND status IN ('pending', 'running') AND event_id < ? "
                "AND (retry_after IS NULL OR retry_after <= ?)",
                (fingerprint, below, now),
            )
        return found

    def oplog_open_with_fingerprints(self, fingerprints: Sequence[str]) -> list[int]:
        """Ids of the open operations of these contents."""
        found: list[int] = []
        for fingerprint in dict.fromkeys(fingerprints):
            found += [
                row[0]
                for row in self.connection.execute(
                    "SELECT event_id FROM oplog WHERE fingerprint = ? AND status IN ('pending', 'running')",
                    (fingerprint,),
                )
            ]
        return found

    def oplog_open_retains(self) -> list[QueuedRetain]:
        """Every open retain operation, in acceptance order, with what a forget's filter reads of
        it (known at acceptance: scope and metadata; an older payload's metadata is an object)."""
        return [
            QueuedRetain(row[0], row[1], row[2] or "", row[3] or "{}")
            for row in self.connection.execute(
                "SELECT event_id, fingerprint, json_extract(payload, '$.scope'), "
                "coalesce(json_extract(payload, '$.metadata_json'), json(json_extract(payload, '$.metadata'))) "
                "FROM oplog WHERE status IN ('pending', 'running') AND kind = 'retain' AND json_valid(payload) "
                "ORDER BY event_id"
            )
        ]

    def oplog_open_sample(self, now: float) -> list[int]:
        """The ids of every open operation not in a retry backoff (the test seam that picks the
        worker's order at random, runtime/seams.py)."""
        return [
            row[0]
            for row in self.connection.execute(
                "SELECT event_id FROM oplog WHERE status IN ('pending', 'running') "
                "AND (retry_after IS NULL OR retry_after <= ?) ORDER BY event_id",
                (now,),
            )
        ]

    def oplog_by_ids(self, ids: Sequence[int]) -> list[OpRow]:
        found: list[OpRow] = []
        for start in range(0, len(ids), 500):
            chunk = tuple(ids[start : start + 500])
            found += self._ops(f"WHERE event_id IN ({','.join('?' * len(chunk))}) ORDER BY event_id", chunk)
        return found

    def oplog_states_within(self, ranges: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """(open ids, failed ids) of the log's operations in the inclusive ``ranges``."""
        open_ids: list[int] = []
        failed: list[int] = []
        for low, high in ranges:
            for event_id, status in self.connection.execute(
                "SELECT event_id, status FROM oplog WHERE event_id BETWEEN ? AND ? "
                "AND status IN ('pending', 'running', 'failed') ORDER BY event_id",
                (low, high),
            ):
                (failed if status == "failed" else open_ids).append(event_id)
        return open_ids, failed

    def oplog_next_retry(self) -> float | None:
        """When the earliest operation in a retry backoff may be taken again."""
        retry_at: float | None = self._one(
            "SELECT min(retry_after) FROM oplog WHERE status = 'pending' AND retry_after IS NOT NULL"
        )
        return retry_at

    def oplog_depth(self, up_to_id: int | None = None) -> tuple[int, float | None]:
        """(operations pending or running [with id <= up_to_id], oldest acceptance time)."""
        sql = "SELECT count(*), min(accepted_at) FROM oplog WHERE status IN ('pending', 'running')"
        params: tuple[Any, ...] = ()
        if up_to_id is not None:
            sql += " AND event_id <= ?"
            params = (up_to_id,)
        count, oldest = self._row(sql, params)
        return int(count), oldest

    def oplog_open_ids(self, up_to_id: int) -> list[int]:
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT event_id FROM oplog WHERE status IN ('pending', 'running') AND event_id <= ? ORDER BY event_id",
                (up_to_id,),
            )
        ]

    def oplog_statuses(self, ids: Sequence[int]) -> dict[int, str]:
        result: dict[int, str] = {}
        for start in range(0, len(ids), 500):
            chunk = tuple(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            result.update(
                self.connection.execute(f"SELECT event_id, status FROM oplog WHERE event_id IN ({marks})", chunk)
            )
        return result

    def oplog_highest_event_id(self) -> int:
        """The highest event id this log ever held, pruned ones included (AUTOINCREMENT's
        sequence also follows explicitly given ids): new ids must start above it."""
        return int(self._one("SELECT seq FROM sqlite_sequence WHERE name = 'oplog'") or 0)

    def oplog_oldest_finished_at(self) -> float | None:
        """When the lowest-numbered finished operation finished: the next the retention limit
        deletes (operations finish nearly in id order; a retried one may be seconds later)."""
        finished = [
            row[0]
            for status in TERMINAL_STATUSES
            for row in self.connection.execute(
                "SELECT finished_at FROM oplog WHERE status = ? ORDER BY event_id LIMIT 1", (status,)
            )
        ]
        return min(finished) if finished else None

    def oplog_transitions(self, *, after_seq: int, after_event_id: int, limit: int) -> list[Transition]:
        return self._records(
            Transition,
            "FROM oplog_transitions WHERE seq > ? AND event_id > ? ORDER BY seq LIMIT ?",
            (after_seq, after_event_id, limit),
        )

    def oplog_last_seq(self) -> int:
        """The highest transition sequence ever given (0: none; AUTOINCREMENT never gives one
        again): no watcher can have seen a larger one."""
        return int(self._one("SELECT seq FROM sqlite_sequence WHERE name = 'oplog_transitions'") or 0)

    def oplog_pruned_through_seq(self) -> int:
        """The highest transition sequence the retention limit deleted (0: none): a watcher
        resuming below it would miss transitions."""
        return int(self._one("SELECT value FROM meta WHERE key = ?", (PRUNED_THROUGH_META,)) or 0)


class OplogWrites(OplogReads, BookkeepingWrites):
    def _transition(self, event_id: int, status: str, now: float) -> None:
        self.connection.execute(
            "INSERT INTO oplog_transitions(event_id, status, at) VALUES(?, ?, ?)", (event_id, status, now)
        )

    def oplog_adopt(self, ops: Sequence[Any], requests: Sequence[Any]) -> int:
        """Take operations (and their idempotency keys) over from the inbox, keeping their event
        ids and acceptance times, counting them accepted; one already adopted is skipped (a move
        repeated after a crash). Returns how many were new."""
        adopted = 0
        for op in ops:
            self.connection.execute(
                "INSERT OR IGNORE INTO oplog(event_id, kind, status, payload, request_id, accepted_at, fingerprint) "
                "VALUES(?, ?, 'pending', ?, ?, ?, ?)",
                (op.event_id, op.kind, op.payload, op.request_id, op.accepted_at, op.fingerprint),
            )
            if self.connection.changes():
                self._transition(op.event_id, "pending", op.accepted_at)
                adopted += 1
        for r in requests:
            self.connection.execute(
                "INSERT OR IGNORE INTO requests(request_id, method, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?)",
                (r.request_id, r.method, r.payload_hash, r.result, r.created_at),
            )
        self.add_counters({"accepted": adopted})
        return adopted

    def oplog_claim(self, ids: Sequence[int], now: float) -> None:
        for event_id in ids:
            self.connection.execute(
                "UPDATE oplog SET status = 'running', attempts = attempts + 1, started_at = ? WHERE event_id = ?",
                (now, event_id),
            )
            self._transition(event_id, "running", now)

    def oplog_store_extraction(self, event_id: int, extraction_json: str, embedding: bytes | None) -> None:
        """Keep what extraction produced for a running operation (never for one a forget
        finished meanwhile: its content is erased); ``embedding`` None: none kept (a replay
        embeds the text again)."""
        self.connection.execute(
            "UPDATE oplog SET extraction = ?, embedding = ? WHERE event_id = ? AND status = 'running'",
            (extraction_json, embedding, event_id),
        )

    def oplog_scrub(self, ids: Sequence[int], erased_payload: str) -> None:
        """Erase what these operations held of their content (a forget matched them unapplied)."""
        for start in range(0, len(ids), 500):
            chunk = tuple(ids[start : start + 500])
            self.connection.execute(
                f"UPDATE oplog SET payload = ?, extraction = NULL, embedding = NULL, fingerprint = NULL "
                f"WHERE event_id IN ({','.join('?' * len(chunk))})",
                (erased_payload, *chunk),
            )

    def oplog_still_running(self, ids: Sequence[int]) -> set[int]:
        """Of these claimed operations, those still running: a forget may have finished one."""
        return {i for i, status in self.oplog_statuses(ids).items() if status == "running"}

    def oplog_amend_near_duplicates(self, memory_id: int, event_id: int, named: Sequence[int]) -> None:
        """Name ``named`` among the near duplicates of the finished operation ``event_id`` that
        created ``memory_id``: an earlier-accepted similar memory applied after it, which the
        operation would have named had the writes been applied in acceptance order."""
        row = self.oplog_get(event_id)
        if row is None or row.status != "succeeded" or not row.result:
            return
        result = json.loads(row.result)
        if result.get("memory_id") != memory_id or result.get("status") != "created":
            return
        near = list(result.get("near_duplicate_of") or [])
        result["near_duplicate_of"] = near + [i for i in named if i not in near]
        self.connection.execute("UPDATE oplog SET result = ? WHERE event_id = ?", (json.dumps(result), event_id))

    def oplog_finish(
        self,
        event_id: int,
        status: str,
        now: float,
        *,
        result_json: str | None = None,
        error_reason: str | None = None,
        error_message: str | None = None,
    ) -> None:
        assert status in TERMINAL_STATUSES
        # The stored vector served only a replay; a finished operation's memory holds its own.
        self.connection.execute(
            "UPDATE oplog SET status = ?, result = ?, error_reason = ?, error_message = ?, finished_at = ?, "
            "embedding = NULL, fingerprint = NULL WHERE event_id = ?",
            (status, result_json, error_reason, error_message, now, event_id),
        )
        self._transition(event_id, status, now)

    def oplog_prune(self, finished_before: float, limit: int) -> int:
        """Delete up to ``limit`` finished (succeeded or failed) operations that finished before
        ``finished_before``, oldest first, with their transitions; never an open one. Returns how
        many were deleted."""
        ids = [
            row[0]
            for row in self.connection.execute(
                "SELECT event_id FROM oplog WHERE status IN ('succeeded', 'failed') AND finished_at < ? "
                "ORDER BY event_id LIMIT ?",
                (finished_before, limit),
            )
        ]
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        (highest_seq,) = self._row(f"SELECT max(seq) FROM oplog_transitions WHERE event_id IN ({marks})", ids)
        self.connection.execute(f"DELETE FROM oplog_transitions WHERE event_id IN ({marks})", ids)
        self.connection.execute(f"DELETE FROM oplog WHERE event_id IN ({marks})", ids)
        if highest_seq is not None:
            self.connection.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = max(CAST(value AS INTEGER), excluded.value)",
                (PRUNED_THROUGH_META, highest_seq),
            )
        return len(ids)

    def oplog_retry_later(
        self, event_id: int, error_reason: str, error_message: str, now: float, retry_after: float
    ) -> None:
        """A failed attempt that is not yet terminal: back to pending, failure counted, not taken
        again before ``retry_after``."""
        self.connection.execute(
            "UPDATE oplog SET status = 'pending', failures = failures + 1, error_reason = ?, error_message = ?, "
            "retry_after = ? WHERE event_id = ?",
            (error_reason, error_message, retry_after, event_id),
        )
        self._transition(event_id, "pending", now)
