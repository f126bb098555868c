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
and writes the true time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.store.connections import open_connection
from mnemosyne.store.transactions import translate_sqlite_error

INDEX_FILE_NAME = "hot_path_pending.sqlite"


class PendingIndex:
    def __init__(self, data_dir: Path) -> None:
        self._connection = open_connection(data_dir / INDEX_FILE_NAME, readonly=False, synchronous="FULL")
        self._write("CREATE TABLE IF NOT EXISTS pending(tenant TEXT PRIMARY KEY, since REAL NOT NULL)")
        self._write("CREATE TABLE IF NOT EXISTS expiring(tenant TEXT PRIMARY KEY, due REAL NOT NULL)")
        self._write("CREATE TABLE IF NOT EXISTS sweeps(tenant TEXT PRIMARY KEY, due REAL NOT NULL)")
        self._lock = threading.Lock()
        self._sweeps: dict[str, float] = dict(self._connection.execute("SELECT tenant, due FROM sweeps"))
        self._known = {row[0] for row in self._connection.execute("SELECT tenant FROM pending")}
        self._due: dict[str, float] = dict(self._connection.execute("SELECT tenant, due FROM expiring"))

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            self._connection.execute(sql, params)
        except apsw.Error as exc:  # a full disk is DISK_FULL, as for every write of the store
            raise translate_sqlite_error(exc, INDEX_FILE_NAME) from exc

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted(self._known)

    def add(self, tenant: str) -> None:
        with self._lock:
            if tenant in self._known:
                return
            self._write("INSERT OR IGNORE INTO pending(tenant, since) VALUES(?, ?)", (tenant, time.time()))
            self._known.add(tenant)

    def remove(self, tenant: str) -> None:
        with self._lock:
            if tenant not in self._known:
                return
            self._write("DELETE FROM pending WHERE tenant = ?", (tenant,))
            self._known.discard(tenant)

    def expiries(self) -> list[tuple[str, float]]:
        with self._lock:
            return sorted(self._due.items())

    def set_expiry(self, tenant: str, due: float | None) -> bool:
        """Record when the tenant's oldest finished event expires (None: it has none). Returns
        True if that changed."""
        with self._lock:
            if self._due.get(tenant) == due:
                return False
            if due is None:
                self._write("DELETE FROM expiring WHERE tenant = ?", (tenant,))
                del self._due[tenant]
            else:
                self._write(
                    "INSERT INTO expiring(tenant, due) VALUES(?, ?) ON CONFLICT(tenant) DO UPDATE SET due = excluded.due",
                    (tenant, due),
                )
                self._due[tenant] = due
            return True

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
            if due is None:
                self._write("DELETE FROM sweeps WHERE tenant = ?", (tenant,))
                del self._sweeps[tenant]
            else:
                self._write(
                    "INSERT INTO sweeps(tenant, due) VALUES(?, ?) ON CONFLICT(tenant) DO UPDATE SET due = excluded.due",
                    (tenant, due),
                )
                self._sweeps[tenant] = due
            return True

    def close(self) -> None:
        with self._lock:
            self._connection.close()
