"""How long finished events are kept (``--event-retention-seconds``), and their deletion."""

from __future__ import annotations

import time

from mnemosyne.errors import InvalidArgument
from mnemosyne.store.tenant_store import TenantStore

# A worker deletes a tenant's expired events at most this often, in transactions of PRUNE_BATCH
# events (a few milliseconds of the tenant's write lock each), at most PRUNE_MAX_BATCHES per
# pass: up to 5,000 events per 10 s per tenant.
PRUNE_INTERVAL_SECONDS = 10.0
PRUNE_BATCH = 100
PRUNE_MAX_BATCHES = 50


class Retention:
    """The retention limit (0: events are kept forever) and each tenant's last deletion pass."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise InvalidArgument(
                "--event-retention-seconds must be 0 (keep events forever) or more", reason="EVENT_RETENTION_INVALID"
            )
        self.seconds = seconds
        self._pruned_at: dict[str, float] = {}  # tenant -> monotonic time of its last pass

    def _interval(self) -> float:
        """Passes over one tenant are at least this far apart (half the limit when that is shorter)."""
        return min(PRUNE_INTERVAL_SECONDS, self.seconds / 2)

    def prune(self, tenant: str, store: TenantStore) -> None:
        """Delete the tenant's finished events older than the limit, oldest first, unless its last
        pass was less than an interval ago. Not synced: a deletion lost to a power cut is only
        done again."""
        if not self.seconds:
            return
        now = time.monotonic()
        if now - self._pruned_at.get(tenant, float("-inf")) < self._interval():
            return
        self._pruned_at[tenant] = now
        for _ in range(PRUNE_MAX_BATCHES):
            with store.write(sync=False, internal=True) as txn:
                deleted = txn.oplog_prune(time.time() - self.seconds, PRUNE_BATCH)
            if deleted < PRUNE_BATCH:
                return

    def next_pass(self, store: TenantStore) -> float | None:
        """When an idle tenant's oldest finished event expires (wall clock; None: it has none).
        Not before an interval from now, so a pass that could not delete everything yet never
        makes a worker spin."""
        with store.read() as txn:
            oldest = txn.oplog_oldest_finished_at()
        if oldest is None:
            return None
        return max(oldest + self.seconds, time.time() + self._interval())

    def forget(self, tenant: str) -> None:
        self._pruned_at.pop(tenant, None)
