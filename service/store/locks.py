"""The lock manager: one writer lock per tenant file, shared by everything in this process.

SQLite allows one write transaction per file at a time; taking this lock before
``BEGIN IMMEDIATE`` makes writers of one tenant queue in order inside the process instead of
spinning in SQLite's busy handler, while writers of different tenants never wait for each other.
Every scope of a tenant lives in its one file, so the tenant lock also serialises each scope.
Locks are held weakly: a tenant nobody is writing to costs nothing here.
"""

from __future__ import annotations

import threading
import weakref

from mnemosyne.runtime import background


class TenantLock:
    """A re-entrant lock for one tenant (re-entrant so a writer can nest engine helpers)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> TenantLock:
        self._lock.acquire()
        background.lock_taken()  # a background holder runs at normal priority meanwhile
        return self

    def __exit__(self, *exc: object) -> None:
        background.lock_released()
        self._lock.release()


class LockManager:
    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, TenantLock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def for_tenant(self, tenant: str) -> TenantLock:
        return self._lock(tenant)

    def for_inbox(self, tenant: str) -> TenantLock:
        """The writer lock of the tenant's hot-path inbox file (store/inbox.py). A holder of this
        lock may take the tenant's; a holder of the tenant's must not take this one."""
        return self._lock(f"inbox/{tenant}")  # '/' never occurs in a tenant id

    def for_opening(self, tenant: str) -> TenantLock:
        """Held while the tenant's file is opened or created, so one thread does it. The same lock
        object for as long as anyone holds or waits for it (weakly kept), so a second creator of
        a new tenant always waits for the first."""
        return self._lock(f"open/{tenant}")

    def _lock(self, key: str) -> TenantLock:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = TenantLock()
                self._locks[key] = lock
            return lock
