"""Each tenant's open operations as this process last counted them: what the metrics gauges read
on every scrape without opening a file, how far behind a worker is (runtime/background.py), and
what each count tells the tenant's figures of the last hour (engine/figures.py)."""

from __future__ import annotations

import threading
import time

from mnemosyne.engine.figures import Figures
from mnemosyne.engine.hot_path.snapshot import Depth, open_operations, snapshot
from mnemosyne.store.tenant_store import TenantStore


class Depths:
    """tenant -> (open operations, oldest acceptance time), refreshed in the transactions that
    change it (every change is made under the tenant's inbox lock)."""

    def __init__(self, figures: Figures | None = None) -> None:
        self._depths: dict[str, Depth] = {}
        self._lock = threading.Lock()
        self._figures = figures  # each count is also a sample of the tenant's minute

    def count(self, tenant: str, store: TenantStore, *, failed: int | None = None) -> None:
        """Count the tenant's open operations, the log's and the inbox's, in one snapshot (under
        the inbox lock, so no enqueue's own count slips between the two either). ``failed``:
        after a round's commit, how many of its operations failed for good."""
        with snapshot(store) as (txn, waiting):
            depth = open_operations(txn, waiting)
            with self._lock:
                if depth[0]:
                    self._depths[tenant] = depth
                else:
                    self._depths.pop(tenant, None)
        if self._figures is not None:
            self._figures.queue(tenant, *depth)
            if failed is not None:
                self._figures.applied(tenant, failed)

    def enqueued(self, tenant: str, store: TenantStore, count: int, now: float) -> None:
        """Add to a known depth instead of counting the log again (a count over a long backlog
        would cost every enqueue a scan). Under the inbox lock, like every change of the depth."""
        with self._lock:
            known = self._depths.get(tenant)
            if known is not None:
                depth = self._depths[tenant] = (known[0] + count, known[1] if known[1] is not None else now)
            else:
                depth = None
        if depth is None:
            self.count(tenant, store)
        elif self._figures is not None:
            self._figures.queue(tenant, *depth)

    def of(self, tenant: str) -> tuple[int, float]:
        """(open operations, age in seconds of the oldest) of one tenant, as last counted."""
        with self._lock:
            known = self._depths.get(tenant)
        if known is None:
            return 0, 0.0
        return known[0], time.time() - known[1] if known[1] is not None else 0.0

    def lag(self, tenant: str) -> float:
        """Seconds the tenant's oldest open operation has waited (0 when none is known)."""
        with self._lock:
            known = self._depths.get(tenant)
        return time.time() - known[1] if known is not None and known[1] is not None else 0.0

    def total(self) -> tuple[int, float]:
        """(open operations over the tenants this process has seen, age in seconds of the
        oldest). A tenant recovered at start-up counts from its first worker round."""
        with self._lock:
            depths = list(self._depths.values())
        oldest = min((t for _, t in depths if t is not None), default=None)
        return sum(n for n, _ in depths), (time.time() - oldest if oldest is not None else 0.0)

    def forget(self, tenant: str) -> None:
        with self._lock:
            self._depths.pop(tenant, None)
        if self._figures is not None:
            self._figures.forget(tenant)
