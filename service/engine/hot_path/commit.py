"""A worker round's work on the operations it claimed: extract and embed them outside any
transaction, persist what extraction produced, then apply and finish them all in ONE transaction
through the synchronous writes' own path (engine/write_path.py) — an operation is never
``succeeded`` before its memory is visible to both recall paths. A failed attempt goes back to
``pending`` after a backoff; after ``max_failures`` attempts it ends ``failed`` for good, so a
poison operation never blocks the ones behind it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from mnemosyne.engine.config import HotPathConfig
from mnemosyne.engine.extractor import Extraction
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.depths import Depths
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.types import RetainOutcome, RetainStatus
from mnemosyne.engine.write_path import ExtractionMissing, WritePath
from mnemosyne.errors import ResourceExhausted
from mnemosyne.store import ledger
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.tenant_store import TenantStore, WriteTxn

# How an attempt at an operation ended: "failed" is for good, "retry" makes it pending again.
Ending = Literal["succeeded", "failed", "retry"]


class RoundCommit:
    """Applies a round's claimed operations; counts them (tenant counters, metrics, depth)."""

    def __init__(
        self,
        *,
        write_path: WritePath,
        observer: EngineObserver,
        depths: Depths,
        changes: Changes,
        config: HotPathConfig,
    ) -> None:
        self._write_path = write_path
        # Told the expiries a round applies, before its commit: engine/expiry.py's ``note_applied``.
        self.note_expiries: Callable[[str, TenantStore, Sequence[float | None]], None] | None = None
        self._changes = changes
        self._observer = observer
        self._depths = depths
        self._max_failures = max(1, config.max_failures)
        self._retry_seconds = max(0.0, config.retry_seconds)

    def apply(self, tenant: str, store: TenantStore, ops: Sequence[OpRow], hold: Callable[[], None]) -> bool:
        """Extract, persist, then commit the claimed operations (``hold``: the test seam, just
        before the commit). True when every operation ended (none went back to pending)."""
        vectors_by, kept = _kept_vectors(store, ops)
        prepared = [
            _prepared(position, replace(op, embedding=kept.get(op.event_id)), vectors_by)
            for position, op in enumerate(ops)
        ]
        errors: dict[int, Exception] = {}
        force = False
        if self.note_expiries is not None:  # before the commit, as a synchronous write's are
            self.note_expiries(tenant, store, [p.item.expires_at for p in prepared])
        # Single flight with synchronous writers of the same content (engine/dedup.py): one
        # extraction, the later writer finds an exact duplicate.
        with self._write_path.in_flight.claim(tenant, [p.fingerprint for p in prepared]):
            for _attempt in range(3):
                self._write_path.extract_missing(store, prepared, errors, force=force)
                self._persist_extractions(store, prepared, ops)
                hold()
                try:
                    return self._commit(tenant, store, prepared, ops, errors)
                except ExtractionMissing:
                    force = True  # a duplicate's original vanished or failed: extract it too
        raise RuntimeError("operations kept losing their duplicate originals")  # pragma: no cover

    def _persist_extractions(self, store: TenantStore, prepared: Sequence[PreparedItem], ops: Sequence[OpRow]) -> None:
        fresh = [p for p in prepared if p.extraction is not None and p.vector is not None and not p.counted]
        if not fresh:
            return
        # Not synced: lost only to a power cut, and then the replay extracts (and counts) again.
        with store.write(sync=False, internal=True) as txn:
            # A replay takes a kept vector as the tenant's embedder's (``_prepared``): one made
            # before a re-embedding's switch that committed since is not kept (the replay embeds
            # the text again), as the switch itself drops the ones kept before it.
            recorded = txn.meta("embedder")
            for p in fresh:
                assert p.extraction is not None and p.vector is not None  # as chosen above
                extraction = ledger.canonical_json(
                    {"facts": [list(f) for f in p.extraction.facts], "triples": [list(t) for t in p.extraction.triples]}
                )
                vector = p.vector if recorded is None or p.vector_by == recorded else None
                txn.oplog_store_extraction(ops[p.position].event_id, extraction, vector)
            # Counted with the stored result: a replay finds it and calls the model no more.
            txn.add_counters({"model_calls": len(fresh), "embed_calls": 1})
        self._observer.retained(created=0, duplicates=0, model_calls=len(fresh), embed_calls=1)
        for p in fresh:
            p.counted = True

    def _commit(
        self,
        tenant: str,
        store: TenantStore,
        prepared: Sequence[PreparedItem],
        ops: Sequence[OpRow],
        errors: dict[int, Exception],
    ) -> bool:
        """Apply and finish every claimed operation in ONE transaction. Returns True when every
        operation ended (none went back to pending for another attempt)."""
        with store.write(sync=False, internal=True) as txn:
            self._write_path.check_vectors(txn, store, prepared)
            # A forget may have finished some meanwhile (its fence: engine/fences.py): not applied.
            running = txn.oplog_still_running([op.event_id for op in ops])
            mine = [p for p in prepared if ops[p.position].event_id in running]
            results: list[RetainOutcome | None] = [None] * len(prepared)
            writable = [p for p in mine if p.position not in errors]
            created, duplicates = _apply_within_quota(self._write_path, txn, writable, results)
            now = time.time()
            failures: list[str] = []  # the reasons of the operations that failed for good
            endings = [
                self._finish(txn, ops[p.position], results[p.position], errors.get(p.position), now, failures)
                for p in mine
            ]
            succeeded, failed = endings.count("succeeded"), endings.count("failed")
            txn.add_counters({"writes": created, "duplicates": duplicates, "succeeded": succeeded, "failed": failed})
        # Counted before anyone waiting is woken: a Flush that returns has its failures in the
        # tenant's figures.
        self._depths.count(tenant, store, failed=failed)
        # Visible now: a read waiting for one of them goes on (a Flush waits for the sync below).
        self._changes.notify(tenant)
        store.sync_log()  # these operations and every one adopted before them: power-safe now
        self._observer.retained(created=created, duplicates=duplicates, model_calls=0, embed_calls=0)
        for reason in failures:
            self._observer.event_failed(reason)
        return "retry" not in endings

    def _finish(
        self,
        txn: WriteTxn,
        op: OpRow,
        outcome: RetainOutcome | None,
        error: Exception | None,
        now: float,
        failures: list[str],
    ) -> Ending:
        """Mark one operation: succeeded, failed for good after ``max_failures`` failed attempts,
        or pending again after a backoff doubling from ``retry_seconds``. A failure's reason goes into
        ``failures`` (told to the observer once the transaction committed)."""
        if error is None and outcome is not None and outcome.status is not RetainStatus.INVALID:
            txn.oplog_finish(op.event_id, "succeeded", now, result_json=json.dumps(outcome.to_json()))
            return "succeeded"
        if error is not None:
            reason, message = "EXTRACTION_FAILED", f"extraction failed: {error}"
        else:
            reason = outcome.error_reason if outcome else "NOT_APPLIED"
            message = outcome.error_message if outcome else "the operation was not applied"
        if op.failures + 1 >= self._max_failures:
            txn.oplog_finish(
                op.event_id,
                "failed",
                now,
                error_reason=reason,
                error_message=f"{message} (after {op.failures + 1} failed attempts)",
            )
            failures.append(reason)
            return "failed"
        txn.oplog_retry_later(op.event_id, reason, message, now, now + self._retry_seconds * (2**op.failures))
        return "retry"


def _kept_vectors(store: TenantStore, ops: Sequence[OpRow]) -> tuple[str, dict[int, bytes | None]]:
    """(the embedder the tenant file records, the vector an earlier attempt kept of each claimed
    operation), read in one snapshot. A kept vector is by the embedder recorded when it is read:
    a re-embedding's switch drops the kept ones in its transaction (store/reembed_rows.py), and
    a round keeps none made before a switch (``_persist_extractions``). Read again, not taken
    from the claim's rows: a switch may have committed since the claim read them."""
    if all(op.embedding is None for op in ops):  # the usual round: none was attempted before
        return "", {}
    with store.read() as txn:
        recorded = txn.meta("embedder") or ""
        return recorded, {op.event_id: op.embedding for op in txn.oplog_by_ids([op.event_id for op in ops])}


def _prepared(position: int, op: OpRow, vector_by: str) -> PreparedItem:
    """A claimed operation's item as it was prepared at enqueue, with its stored extraction."""
    extraction = None
    if op.extraction is not None:
        stored = json.loads(op.extraction)
        extraction = Extraction(
            facts=[tuple(f) for f in stored["facts"]], triples=[tuple(t) for t in stored["triples"]]
        )
    prepared = PreparedItem.from_payload(position, op.payload, extraction=extraction, vector=op.embedding)
    prepared.acceptance = op.event_id  # an operation's event id is its acceptance position
    prepared.vector_by = vector_by if op.embedding is not None else ""
    return prepared


def _apply_within_quota(
    write_path: WritePath, txn: WriteTxn, prepared: Sequence[PreparedItem], results: list[RetainOutcome | None]
) -> tuple[int, int]:
    """The round's write; when it would take the tenant past a quota, its operations one by one,
    in order, each in a savepoint of its own: those that fit are applied, and each that does not
    fails with the quota's reason (and, past its attempts, for good), as a synchronous write is
    refused. Each operation is a call of its own: one that does not fit never fails another
    that does. Raised, it failed the whole round, retried without end."""
    try:
        with txn.savepoint("round"):
            return write_path.apply(txn, prepared, results, per_item_errors=True)
    except ResourceExhausted:
        pass
    created = duplicates = 0
    for p in prepared:
        try:
            with txn.savepoint("operation"):
                one_created, one_duplicate = write_path.apply(txn, [p], results, per_item_errors=True)
        except ResourceExhausted as exc:
            results[p.position] = RetainOutcome(
                status=RetainStatus.INVALID, error_reason=exc.reason, error_message=exc.message
            )
            continue
        created, duplicates = created + one_created, duplicates + one_duplicate
    return created, duplicates
