"""The recovery index: the tenants that may have open hot-path operations, in a small SQLite file
of the data directory (``hot_path_pending.sqlite``), so a restart resumes exactly those without
opening every tenant file.

A tenant is added (durably: ``synchronous=FULL``) BEFORE its first enqueue commits and removed
only after a commit left it with no open operation, under the tenant's inbox lock, so the index
can name a tenant with nothing to do (harmless: start-up looks and removes it) but never miss one.

The same file keeps, per idle tenant with finished events, when the oldest of them expires
(``expiring``), so a restart still deletes them on time; and per tenant with memories that
expire, when its next erasure is due (``sweeps``, engine/expiry.py), written before the write
that makes it due commits (an entry due earlier than the file says is harmless: the sweep looks
and writes the true time, keeping what writes still committing named: engine/hot_path/recovery.py).
"""

from __future__ import annotations

from pathlib import Path

from mnemosyne.store.member_index import MemberIndex

INDEX_FILE_NAME = "hot_path_pending.sqlite"


class PendingIndex(MemberIndex):
    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, INDEX_FILE_NAME, "pending")
        self._due = self._due_times("expiring")
        self._sweeps = self._due_times("sweeps")

    def expiries(self) -> list[tuple[str, float]]:
        with self._lock:
            return sorted(self._due.items())

    def set_expiry(self, tenant: str, due: float | None) -> bool:
        """Record when the tenant's oldest finished event expires (None: it has none). Returns
        True if that changed."""
        with self._lock:
            if self._due.get(tenant) == due:
                return False
            self._set_due("expiring", self._due, tenant, due)
            return True

    def add_placed(self, tenant: str) -> None:
        """A tenant file an offline restore places: its open operations, if any, resume at
        start-up, and its sweep runs then, which finds its next erasure (none of its writes named
        it here). A spare name is harmless: a sweep with nothing to erase clears it."""
        self.add(tenant)
        self.set_sweep(tenant, 0.0, only_sooner=True)

    def sweeps(self) -> list[tuple[str, float]]:
        with self._lock:
            return sorted(self._sweeps.items())

    def sweep_of(self, tenant: str) -> float | None:
        with self._lock:
            return self._sweeps.get(tenant)

    def set_sweep(self, tenant: str, due: float | None, *, only_sooner: bool = False) -> bool:
        """Record when the tenant's next memory erasure is due (None: none is); with
        ``only_sooner``, only if that is sooner than the one recorded. True if that changed."""
        with self._lock:
            known = self._sweeps.get(tenant)
            if known == due or (only_sooner and known is not None and (due is None or due >= known)):
                return False
            self._set_due("sweeps", self._sweeps, tenant, due)
            return True
