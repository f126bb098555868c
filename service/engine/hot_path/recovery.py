"""The recovery index's side of the hot path (store/pending_index.py): which tenants may have open
operations, so start-up resumes exactly those without opening every tenant file, when an idle
tenant's finished events expire, so a restart still deletes them on time, and when a tenant's
next expired memory is due for erasure (engine/expiry.py), so the workers sweep it then."""

from __future__ import annotations

import time
from collections.abc import Callable

from mnemosyne.engine.hot_path.retention import Retention
from mnemosyne.engine.hot_path.scheduler import Wake
from mnemosyne.engine.hot_path.snapshot import open_operations, snapshot
from mnemosyne.runtime.clock import Clock
from mnemosyne.store.pending_index import PendingIndex
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore

# A drained tenant leaves the recovery index only after staying idle this long: a busy tenant's
# queue drains and refills constantly, and each re-add costs the enqueue that makes it an fsync.
UNINDEX_AFTER_IDLE_SECONDS = 30.0


class Recovery:
    """Keeps the recovery index: a tenant enters it before an enqueue commits and leaves it once it
    stayed drained long enough (or at a clean shutdown)."""

    def __init__(self, *, pool: TenantPool, wake: Wake, retention: Retention, clock: Clock) -> None:
        self._pool = pool
        self._wake = wake
        self._retention = retention
        self._clock = clock  # sweeps are due on the engine's clock (a test's may run ahead)
        self.index = PendingIndex(pool.data_dir)
        # tenant -> monotonic time its queue was last seen drained; changed only under the
        # tenant's inbox lock, so "still here" means "nothing was enqueued since".
        self._idle_since: dict[str, float] = {}

    def resume_all(self) -> None:
        """At start-up: queue the tenants the index names, and the idle ones whose events expire.
        Only names are queued here; the workers open the files, so readiness never waits."""
        for tenant in self.index.tenants():
            self._wake.notify(tenant)
        for tenant, due in self.index.expiries():
            self._wake.notify_at(tenant, due)
        for tenant, due in self.index.sweeps():
            self._wake.notify_at(tenant, self._clock.wall_time_of(due))

    def note_sweep(self, tenant: str, due: float) -> None:
        """An erasure of the tenant's will be due at ``due`` (engine clock): named in the index
        (durably) before the write that makes it due commits, and a worker woken then."""
        if self.index.set_sweep(tenant, due, only_sooner=True):
            self._wake.notify_at(tenant, self._clock.wall_time_of(due))

    def sweep_if_due(self, tenant: str, sweep: Callable[[], float | None]) -> None:
        """Run the tenant's ``sweep`` if an erasure of its is due now, and record when the next
        one is. (With a test's clock, which may jump, a tenant not yet due is looked at again.)"""
        due = self.index.sweep_of(tenant)
        if due is None:
            return
        if due > self._clock.now():
            if self._clock.jumps:
                self._wake.notify_at(tenant, self._clock.wall_time_of(due))
            return
        self.swept(tenant, sweep())

    def swept(self, tenant: str, due: float | None) -> None:
        """A sweep of the tenant left its next erasure due at ``due`` (None: none)."""
        self.index.set_sweep(tenant, due)
        if due is not None:
            self._wake.notify_at(tenant, self._clock.wall_time_of(due))

    def accepting(self, tenant: str) -> None:
        """An enqueue is about to commit (under the tenant's inbox lock): the index names the
        tenant first, durably, so its operations are never missed."""
        self._idle_since.pop(tenant, None)
        self.index.add(tenant)

    def drained(self, tenant: str, store: TenantStore) -> bool:
        """True if the tenant has no open operation; it then leaves the index once it stayed idle
        for UNINDEX_AFTER_IDLE_SECONDS (a worker comes back to check). Under the inbox lock,
        which every enqueue holds across its index add and its commit."""
        with self._pool.locks.for_inbox(tenant), snapshot(store) as (txn, waiting):
            if open_operations(txn, waiting)[0]:
                return False
            now = time.monotonic()
            idle = now - self._idle_since.setdefault(tenant, now)
            if idle >= UNINDEX_AFTER_IDLE_SECONDS:
                self.index.remove(tenant)
                del self._idle_since[tenant]
                self._retention.forget(tenant)
            else:
                self._wake.notify_at(tenant, time.time() + UNINDEX_AFTER_IDLE_SECONDS - idle)
        self._schedule_expiry(tenant, store)  # outside the inbox lock: it may fsync the index
        return True

    def _schedule_expiry(self, tenant: str, store: TenantStore) -> None:
        """Come back to an idle tenant when its oldest finished event expires, so events are
        deleted on time even if the tenant gets no more fast writes (kept in the index's file)."""
        if not self._retention.seconds:
            return
        due = self._retention.next_pass(store)
        if self.index.set_expiry(tenant, due) and due is not None:
            self._wake.notify_at(tenant, due)

    def remove(self, tenant: str) -> None:
        """The tenant's files are gone from here: it leaves the index, with its expiry."""
        self.index.remove(tenant)
        self.index.set_expiry(tenant, None)
        self.index.set_sweep(tenant, None)

    def forget_idle(self, tenant: str) -> None:
        self._idle_since.pop(tenant, None)

    def close(self) -> None:
        """At shutdown: drop every tenant seen drained with nothing enqueued since, then close."""
        for tenant in list(self._idle_since):
            with self._pool.locks.for_inbox(tenant):
                if self._idle_since.pop(tenant, None) is not None:
                    self.index.remove(tenant)
        self.index.close()
