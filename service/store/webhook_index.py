"""The webhook index: the tenants of this member that have webhook subscriptions, in a small SQLite
file of the data directory (``webhooks.sqlite``), so the delivery worker finds every tenant that
may have deliveries pending without opening every tenant file (engine/webhooks/worker.py).

A tenant is added (durably: ``synchronous=FULL``) BEFORE its first subscription commits, so the
index may name a tenant with no subscription left (harmless: the worker looks once and removes
it) but never misses one whose outbox has rows. A tenant that arrives with its file (an import, a
move's activation) is added by whoever installed it. A file made before this index existed is
built once, from the tenant files that hold a subscription (``rebuild``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.store.connections import open_connection
from mnemosyne.store.transactions import translate_sqlite_error

INDEX_FILE_NAME = "webhooks.sqlite"


class WebhookIndex:
    def __init__(self, data_dir: Path) -> None:
        path = data_dir / INDEX_FILE_NAME
        self.built = path.exists()  # False: a new file, to be filled by ``rebuild``
        self._connection = open_connection(path, readonly=False, synchronous="FULL")
        self._write("CREATE TABLE IF NOT EXISTS subscribed(tenant TEXT PRIMARY KEY, since REAL NOT NULL)")
        self._lock = threading.Lock()
        self._known = {row[0] for row in self._connection.execute("SELECT tenant FROM subscribed")}

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            self._connection.execute(sql, params)
        except apsw.Error as exc:  # a full disk is DISK_FULL, as for every write of the store
            raise translate_sqlite_error(exc, INDEX_FILE_NAME) from exc

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted(self._known)

    def __contains__(self, tenant: str) -> bool:
        return tenant in self._known

    def add(self, tenant: str) -> None:
        with self._lock:
            if tenant in self._known:
                return
            self._write("INSERT OR IGNORE INTO subscribed(tenant, since) VALUES(?, ?)", (tenant, time.time()))
            self._known.add(tenant)

    def rebuild(self, tenants: Iterable[str]) -> None:
        for tenant in tenants:
            self.add(tenant)
        self.built = True

    def remove(self, tenant: str, *, erase: bool = False) -> None:
        """``erase``: the tenant was erased; its name leaves the index's WAL too."""
        with self._lock:
            if tenant in self._known:
                self._write("DELETE FROM subscribed WHERE tenant = ?", (tenant,))
                self._known.discard(tenant)
            if erase:
                try:
                    self._connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
                except apsw.Error as exc:
                    raise translate_sqlite_error(exc, INDEX_FILE_NAME) from exc

    def close(self) -> None:
        with self._lock:
            self._connection.close()
