"""The recovery index's side of the hot path (store/pending_index.py): which tenants may have open
operations, so start-up resumes exactly those without opening every tenant file, when an idle
tenant's finished events expire, so a restart still deletes them on time, and when a tenant's
next expired memory is due for erasure (engine/expiry.py), so the workers sweep it then."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
        # The sweeps' side of the writes that name an erasure before they commit: per tenant, the
        # erasures of writes named and not yet committed, and for each sweep under way those named
        # since it began (and before it, not yet committed); changed under ``_sweep_names``.
        self._sweep_names = threading.Lock()
        self._naming: dict[str, list[float]] = {}
        self._sweeping: dict[str, list[list[float]]] = {}

    def resume_all(self) -> None:
        """At start-up: queue the tenants the index names, and the idle ones whose events expire.
        Only names are queued here; the workers open the files, so readiness never waits."""
        for tenant in self.index.tenants():
            self._wake.notify(tenant)
        for tenant, due in self.index.expiries():
            self._wake.notify_at(tenant, due)
        for tenant, due in self.index.sweeps():
            self._wake.notify_at(tenant, self._clock.wall_time_of(due))

    @contextmanager
    def naming_sweep(self, tenant: str, due: float) -> Iterator[None]:
        """An erasure of the tenant's will be due at ``due`` (engine clock) once the write held
        inside commits: named in the index (durably) before it, and a worker woken then. A sweep
        of the tenant that overlaps the write (it read the file before the commit) keeps it named."""
        with self._sweep_names:
            self._naming.setdefault(tenant, []).append(due)
            for named_meanwhile in self._sweeping.get(tenant, ()):
                named_meanwhile.append(due)
            if self.index.set_sweep(tenant, due, only_sooner=True):
                self._wake.notify_at(tenant, self._clock.wall_time_of(due))
        try:
            yield
        finally:
            with self._sweep_names:
                naming = self._naming[tenant]
                naming.remove(due)
                if not naming:
                    del self._naming[tenant]

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
        # What the sweep reads of the file misses the writes that commit after its read: those
        # named before it began and not yet committed, and those named while it runs.
        with self._sweep_names:
            named_meanwhile = list(self._naming.get(tenant, ()))
            self._sweeping.setdefault(tenant, []).append(named_meanwhile)
        try:
            found = sweep()
        except BaseException:
            with self._sweep_names:
                self._stop_sweeping(tenant, named_meanwhile)
            raise
        with self._sweep_names:  # recorded before a write named after this can name it
            self._stop_sweeping(tenant, named_meanwhile)
            due = min((d for d in (found, *named_meanwhile) if d is not None), default=None)
            self.index.set_sweep(tenant, due)
        if due is not None:
            self._wake.notify_at(tenant, self._clock.wall_time_of(due))

    def _stop_sweeping(self, tenant: str, named_meanwhile: list[float]) -> None:
        sweeps = [s for s in self._sweeping[tenant] if s is not named_meanwhile]  # lists compare by value
        if sweeps:
            self._sweeping[tenant] = sweeps
        else:
            del self._sweeping[tenant]

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
