"""Which open operations a worker's round takes (docs/hot-path.md "Read your own writes").

Writes are adjudicated by their acceptance positions (engine/conflicts.py, engine/near_duplicates.py,
exact duplicates below), so the worker may apply them in any order without changing an outcome.
It uses that for the writes someone waits for: when a read (or a Flush, or a synchronous write of
the same content) waits for operations, the next round of their tenant takes those, in a round of
their own, ahead of the backlog. Otherwise a round takes the oldest open operations.

Two rules make any order give the outcomes of acceptance order:

* the earliest accepted duplicate survives: an operation is taken together with every earlier
  open operation of the same content (fingerprint, known at acceptance), applied before it in the
  same round, so it finds their memory, as it would have in acceptance order;
* a round applies its operations in acceptance order.

A round is bounded in time as well as in count, so a waited-for write never sits behind a long
one: it takes as many operations as the tenant's recent pace fits in ``ROUND_SECONDS`` (at least
the extractor's concurrency, at most ``--hot-path-batch``).

Test seams (runtime/seams.py): ``hold_backlog_file`` (while it exists, rounds take only the
writes someone waits for: a backlog that stays put, made without load) and ``order`` ("random:SEED":
each round takes a random set of the open operations, the differential test's jumps)."""

from __future__ import annotations

import random
import threading
import time

from mnemosyne.engine.hot_path.awaited import Awaited, Span
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.tenant_store import TenantStore

# How long a round of the backlog should take, by the tenant's recent pace per operation.
ROUND_SECONDS = 0.25


class Rounds:
    """Claims each round's operations; keeps each tenant's pace (seconds per operation)."""

    def __init__(
        self,
        *,
        awaited: Awaited,
        batch: int,
        least: int,
        seams: Seams,
    ) -> None:
        self._awaited = awaited
        self._batch = max(1, batch)
        self._least = max(1, min(least, self._batch))
        self._hold_backlog_file = seams.hold_backlog_file
        self._random = _random_order(seams.worker_order)
        self._lock = threading.Lock()
        self._pace: dict[str, float] = {}  # tenant -> seconds per operation, recent rounds

    def awaited(self, tenant: str) -> list[Span]:
        return self._awaited.spans(tenant)

    def backlog_held(self) -> bool:
        return self._hold_backlog_file is not None and self._hold_backlog_file.exists()

    def claim(self, tenant: str, store: TenantStore, awaited: list[Span]) -> tuple[list[OpRow], bool]:
        """Mark this round's operations ``running`` in one short transaction; (them in acceptance
        order, whether the round took as many as it could)."""
        # Not synced: a claim lost to a power cut only leaves the operations to be taken again.
        with store.write(sync=False, internal=True) as txn:
            now = time.time()
            chosen = txn.oplog_open_within(awaited, now)[: self._batch] if awaited else []
            size = self._size(tenant)
            if not chosen and not self.backlog_held():
                if self._random is None:
                    chosen = txn.oplog_next_open(size, now)
                else:
                    ids = txn.oplog_open_sample(now)
                    chosen = txn.oplog_by_ids(sorted(self._random.sample(ids, min(size, len(ids)))))
            ops = {op.event_id: op for op in [*chosen, *txn.oplog_open_earlier_alike(chosen, now)]}
            taken = [ops[i] for i in sorted(ops)]
            txn.oplog_claim([op.event_id for op in taken], now)
        return taken, len(chosen) >= size

    def _size(self, tenant: str) -> int:
        with self._lock:
            pace = self._pace.get(tenant)
        if not pace:
            return self._batch
        return max(self._least, min(self._batch, int(ROUND_SECONDS / pace)))

    def took(self, tenant: str, operations: int, seconds: float) -> None:
        """A round of ``operations`` took ``seconds`` (extraction and commit)."""
        if operations <= 0:
            return
        pace = seconds / operations
        with self._lock:
            previous = self._pace.get(tenant, pace)
            self._pace[tenant] = 0.5 * previous + 0.5 * pace

    def forget(self, tenant: str) -> None:
        with self._lock:
            self._pace.pop(tenant, None)


def _random_order(order: str) -> random.Random | None:
    """The seam's generator ("random:SEED"), None for acceptance order."""
    if not order:
        return None
    kind, _, seed = order.partition(":")
    if kind != "random" or not seed.isdigit():
        raise ValueError(f"MNEMOSYNE_TEST_WORKER_ORDER must be random:SEED, not {order!r}")
    return random.Random(int(seed))
