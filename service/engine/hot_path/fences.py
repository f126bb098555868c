"""Deletes are ordered, and fast (docs/hot-path.md "Read your own writes"): a forget (ForgetMemory,
ForgetMemories, the mem0 deletes) or an update is accepted after every write queued before it, so
no queued write may undo it. It applies its FENCE in its own transaction, at its usual latency
whatever the backlog: every queued operation, all accepted before it, is first adopted into the
tenant's log (from the inbox, under the inbox lock), then the fence finishes in the same
transaction every one it matches as applying the writes in acceptance order would have left it:

* a queued write of the same content as a memory the forget erases (or the update replaces)
  would have been that memory's duplicate: it ends ``succeeded``, DUPLICATE of it, and a forget
  scrubs it with that memory's own operations (store/memory_erasure.py);
* a queued write a forget's filter matches (its scope and metadata: what is known of it at
  acceptance, never what extraction would find) that would have created its memory ends
  ``failed`` with reason FORGOTTEN_BEFORE_APPLIED, its payload, extraction and vector erased; so do
  the later queued writes of its content (they would have been its duplicates). One whose content
  a memory the filter keeps already holds, or whose first queued write the filter does not match,
  is left to be that memory's duplicate, as it would have been.

Durable by construction: the adoption, the forget and the fence commit together, so a crash
leaves none of them or all of them; the inbox's copy of what was adopted is removed after the
commit, or at the next erasure (``TenantStore.erase_traces``). Nothing queued after it is touched.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence

from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.types import RetainOutcome, RetainStatus
from mnemosyne.store.bookkeeping import ERASURE_META
from mnemosyne.store.memory_erasure import ERASED_PAYLOAD
from mnemosyne.store.memory_rows import metadata_of
from mnemosyne.store.oplog import QueuedRetain
from mnemosyne.store.tenant_store import TenantStore, WriteTxn

FORGOTTEN = "FORGOTTEN_BEFORE_APPLIED"


class Fence:
    """A forget's or an update's fence over the queued writes, inside its write transaction."""

    def __init__(self, txn: WriteTxn) -> None:
        self._txn = txn
        self._queued: list[QueuedRetain] | None = None
        self.finished = 0

    def queued(self) -> list[QueuedRetain]:
        """The open retain operations, every one accepted before the fence, in acceptance order."""
        if self._queued is None:
            self._queued = self._txn.oplog_open_retains()
        return self._queued

    def duplicates_of(self, held: Mapping[str, int]) -> None:
        """The queued writes of these contents ({fingerprint: memory id}) end as that memory's
        duplicates (call it before the memory is forgotten or replaced)."""
        if not held or not self.queued():
            return
        now = time.time()
        alike = [q for q in self.queued() if q.fingerprint in held]
        for q in alike:
            outcome = RetainOutcome(status=RetainStatus.DUPLICATE, memory_id=held[q.fingerprint or ""])
            self._txn.oplog_finish(q.event_id, "succeeded", now, result_json=json.dumps(outcome.to_json()))
        self._txn.add_counters({"succeeded": len(alike), "duplicates": len(alike)})
        self._done([q.event_id for q in alike])

    def matching(self, scopes: Sequence[str], wanted: Mapping[str, str]) -> None:
        """The queued writes a forget's filter forgets: each that would have created its memory,
        and the later ones of its content; erased and ``failed`` (FORGOTTEN_BEFORE_APPLIED)."""
        queued = self.queued()
        if not queued:
            return
        first: dict[str, QueuedRetain] = {}
        for q in queued:
            if q.fingerprint:
                first.setdefault(q.fingerprint, q)
        held = self._txn.find_by_fingerprints(list(first))
        doomed = {f for f, q in first.items() if f not in held and _matches(q, scopes, wanted)}
        forgotten = [
            q.event_id for q in queued if (q.fingerprint in doomed if q.fingerprint else _matches(q, scopes, wanted))
        ]
        if not forgotten:
            return
        now = time.time()
        for event_id in forgotten:
            self._txn.oplog_finish(
                event_id,
                "failed",
                now,
                error_reason=FORGOTTEN,
                error_message="a forget accepted after this write matched it before it was applied: it never became "
                "visible, and its content was erased",
            )
        self._txn.oplog_scrub(forgotten, ERASED_PAYLOAD)
        self._txn.add_counters({"failed": len(forgotten)})
        self._txn.set_meta(ERASURE_META, "1")  # the pages that held them leave the WAL (erase_traces)
        self._done(forgotten)

    def _done(self, ids: list[int]) -> None:
        self.finished += len(ids)
        done = set(ids)
        self._queued = [q for q in self.queued() if q.event_id not in done]


def _matches(q: QueuedRetain, scopes: Sequence[str], wanted: Mapping[str, str]) -> bool:
    if scopes and q.scope not in scopes:
        return False
    metadata = metadata_of(q.metadata_json)
    return all(metadata.get(key) == value for key, value in wanted.items())


class Fences:
    """Opens a fence's transaction; tells whoever waits for the tenant's writes what it finished."""

    def __init__(self, changes: Changes) -> None:
        self._changes = changes

    @contextlib.contextmanager
    def fenced(self, tenant: str, store: TenantStore) -> Iterator[tuple[WriteTxn, Fence]]:
        """ONE write transaction of the tenant (the forget's or the update's) with every queued
        operation adopted into its log first, and its fence. Under the inbox lock (taken before
        the tenant's write lock, store/inbox.py), so no write is accepted meanwhile."""
        inbox = store.inbox(create=False)
        with inbox.lock if inbox is not None else contextlib.nullcontext():
            ops, requests = [], []
            if inbox is not None:
                with store.read() as log_read:
                    moved = log_read.oplog_highest_event_id()  # rows up to it wait to leave (store/inbox.py)
                with inbox.read() as inbox_txn:
                    ops = inbox_txn.ops(after_id=moved)
                    requests = inbox_txn.requests_through(ops[-1].event_id) if ops else []
            with store.write() as txn:
                if ops:
                    txn.oplog_adopt(ops, requests)
                fence = Fence(txn)
                yield txn, fence
            if inbox is not None and ops:
                inbox.adopted(ops[-1].event_id)
        if fence.finished:
            self._changes.notify(tenant)
