"""The writes someone waits for — a read given a consistency token, a Flush given one, a
synchronous write of content still queued — and where each of them stands (docs/hot-path.md
"Read your own writes").

A waiter registers the positions it waits for (``Awaited.waiting``); the workers take the open
operations among them ahead of the backlog, in a round of their own (worker.py). Whether they are
done is read from the log and the inbox together (``Awaited.states``): an operation is open until
it succeeded (visible to every read: its event and its memory commit together) or failed. A
position that names no operation (a synchronous write, a forget, an operation pruned by the event
retention) is never open."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence

from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.scheduler import Wake
from mnemosyne.engine.hot_path.snapshot import snapshot
from mnemosyne.store.pool import TenantPool

# An inclusive range of acceptance positions.
Span = tuple[int, int]
# How long a synchronous write waits for queued writes of the same content (``Awaited.settle``).
SETTLE_SECONDS = 10.0


class Awaited:
    """tenant -> the spans someone waits for (counted: two waiters of one span, two entries)."""

    def __init__(self, *, pool: TenantPool, wake: Wake, changes: Changes) -> None:
        self._pool = pool
        self._wake = wake
        self._changes = changes
        self._lock = threading.Lock()
        self._spans: dict[str, collections.Counter[Span]] = {}

    @contextlib.contextmanager
    def waiting(self, tenant: str, spans: Sequence[Span]) -> Iterator[None]:
        """While the block lasts the workers take the open operations of ``spans`` first."""
        with self._lock:
            self._spans.setdefault(tenant, collections.Counter()).update(spans)
        self._wake.notify(tenant)
        self._wake.hurry(tenant)
        try:
            yield
        finally:
            with self._lock:
                counter = self._spans.get(tenant)
                if counter is not None:
                    counter.subtract(spans)
                    for span in [s for s, n in counter.items() if n <= 0]:
                        del counter[span]
                    if not counter:
                        del self._spans[tenant]

    def spans(self, tenant: str) -> list[Span]:
        """The spans someone waits for now, lowest first."""
        with self._lock:
            return sorted(self._spans.get(tenant, ()))

    def states(self, tenant: str, spans: Sequence[Span]) -> tuple[list[int], list[int]]:
        """(open event ids, failed event ids) of the operations with positions in ``spans``, in
        one snapshot of the tenant's log and inbox."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return [], []
            with snapshot(store) as (txn, waiting):
                open_ids, failed = txn.oplog_states_within(spans)
                for low, high in spans:
                    open_ids += [row.event_id for row in waiting.rows(after_id=low - 1, up_to_id=high)]
        return sorted(set(open_ids)), failed

    def open_alike(self, tenant: str, fingerprints: Sequence[str]) -> list[int]:
        """Open operations of these contents: a synchronous write of the same content waits for
        them, so the earliest accepted one survives and it is its duplicate."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return []
            with snapshot(store) as (txn, waiting):
                found = txn.oplog_open_with_fingerprints(fingerprints)
                found += waiting.ids_with_fingerprints(fingerprints)
        return sorted(found)

    def settle(self, tenant: str, fingerprints: Sequence[str]) -> None:
        """Before a synchronous write of these contents: wait for the open operations of the same
        content (taken first), so the write is their duplicate, as in acceptance order. Bounded:
        past ``SETTLE_SECONDS`` (a worker held up) the write goes on and survives them instead."""
        waited = self.open_alike(tenant, fingerprints)
        if waited:
            self.wait(tenant, [(i, i) for i in waited], SETTLE_SECONDS)

    def open_count(self, tenant: str) -> int:
        """Open operations someone waits for (HotPathStatus.awaited)."""
        spans = self.spans(tenant)
        return len(self.states(tenant, spans)[0]) if spans else 0

    def wait(self, tenant: str, spans: Sequence[Span], timeout: float) -> list[int]:
        """Block (a thread: a synchronous write) until no operation of ``spans`` is open, taking
        them first, or ``timeout`` s passed; the ids still open (empty: none)."""
        deadline = time.monotonic() + timeout
        with self.waiting(tenant, spans), self._changes.waiter(tenant) as changed:
            while (still := self.states(tenant, spans)[0]) and (left := deadline - time.monotonic()) > 0:
                changed.wait(min(1.0, left))
                changed.clear()
        return still
