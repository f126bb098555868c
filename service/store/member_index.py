"""A member index: a set of this member's tenant names kept in a small SQLite file of the data
directory (``synchronous=FULL``: an addition is durable before the write it announces commits), so
a worker finds the tenants it must look at without opening every tenant file. The recovery index
(store/pending_index.py) and the webhook index (store/webhook_index.py) are two; each adds the
tables of its own beside the set (``_due_times``: a time per tenant)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.store.connections import open_connection
from mnemosyne.store.tenant_ids import TENANT_ID_PATTERN
from mnemosyne.store.transactions import translate_sqlite_error

log = logging.getLogger("mnemosyne.store")


class MemberIndex:
    def __init__(self, data_dir: Path, file_name: str, table: str) -> None:
        self._file_name = file_name
        self._table = table
        self._connection = open_connection(data_dir / file_name, readonly=False, synchronous="FULL")
        self._write(f"CREATE TABLE IF NOT EXISTS {table}(tenant TEXT PRIMARY KEY, since REAL NOT NULL)")
        self._lock = threading.Lock()
        named = {row[0] for row in self._connection.execute(f"SELECT tenant FROM {table}")}
        # A name no client could give (an older whole-member restore took one from a bucket's
        # listing): no tenant file of it is ever served, so a worker would fail on it for ever.
        for tenant in sorted(named - {t for t in named if isinstance(t, str) and TENANT_ID_PATTERN.fullmatch(t)}):
            log.warning("%s names %r, which no tenant is called: removed", file_name, tenant)
            self._write(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
            named.discard(tenant)
        self._known = named

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            self._connection.execute(sql, params)
        except apsw.Error as exc:  # a full disk is DISK_FULL, as for every write of the store
            raise translate_sqlite_error(exc, self._file_name) from exc

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted(self._known)

    def __contains__(self, tenant: str) -> bool:
        return tenant in self._known

    def add(self, tenant: str) -> None:
        with self._lock:
            if tenant in self._known:
                return
            self._write(f"INSERT OR IGNORE INTO {self._table}(tenant, since) VALUES(?, ?)", (tenant, time.time()))
            self._known.add(tenant)

    def remove(self, tenant: str) -> None:
        with self._lock:
            if tenant not in self._known:
                return
            self._write(f"DELETE FROM {self._table} WHERE tenant = ?", (tenant,))
            self._known.discard(tenant)

    def _due_times(self, table: str) -> dict[str, float]:
        """The table of a time per tenant named ``table``, made if new; what it holds."""
        self._write(f"CREATE TABLE IF NOT EXISTS {table}(tenant TEXT PRIMARY KEY, due REAL NOT NULL)")
        return dict(self._connection.execute(f"SELECT tenant, due FROM {table}"))

    def _set_due(self, table: str, times: dict[str, float], tenant: str, due: float | None) -> None:
        """``tenant``'s time in ``table`` (and in ``times``, its copy in memory) is ``due`` (None:
        it has none). The caller holds the lock."""
        if due is None:
            self._write(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
            times.pop(tenant, None)
        else:
            self._write(
                f"INSERT INTO {table}(tenant, due) VALUES(?, ?) ON CONFLICT(tenant) DO UPDATE SET due = excluded.due",
                (tenant, due),
            )
            times[tenant] = due

    def close(self) -> None:
        with self._lock:
            self._connection.close()
