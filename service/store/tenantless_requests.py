"""Results of keyed calls that found their tenant without a file (``requests_without_file.sqlite``
in the data directory).

A forget by filter or a Dedup merge of a tenant that has no file changes nothing, and makes no
file: calls that change nothing never litter the directory with tenants (tests/test_hardening.py).
Its result must still be kept with its request id, as a tenant file keeps a write's: if the reply
is lost and another client then writes the tenant's first memory, the retry must answer the first
call's result, not act on that memory. Those results live here, one row per (tenant, request id),
for as long as a tenant file keeps its own (``request_ttl_seconds``); the file is made by the first
such call and written durably (``synchronous=FULL``) before the call answers.

The file is every tenant's and no quota covers it, so it is bounded twice, in the transaction of
each new row. Each tenant keeps at most ``kept_per_tenant`` rows (``KEPT_PER_TENANT``): its new row
drops its own oldest past that, never another tenant's. And the file keeps at most ``kept_in_all``
rows (``KEPT_IN_ALL``), whatever the names: a caller allowed on many tenants (no authentication,
or a token for ``*``) could otherwise name new tenants without end, 1,000 rows each; past it, a
new row drops the oldest rows of the file. The retries that matter (a client's, seconds after a
lost reply) stay answered: a result goes only after ``kept_in_all`` newer such calls of every
tenant together (minutes of a flood at the rate one server writes this file, about 450 a
second), or ``kept_per_tenant`` of its own. These calls are not refused at the bound instead
(RESOURCE_EXHAUSTED): that would let one caller stop every tenant's forgets and merges for the 24
hours its rows are kept; a retry made that late after such a flood is at worst a new call.

When the tenant's file is made (its first write, store/pool.py), the results kept here for it are
written into it (``carry_into``): from then on its file holds them, so they go where it goes — a
move to another member, an export, a backup — and a retry there answers them too."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw

from mnemosyne.store.connections import open_connection
from mnemosyne.store.tenant_store import TenantStore
from mnemosyne.store.transactions import translate_sqlite_error

FILE_NAME = "requests_without_file.sqlite"
PRUNE_EVERY_SECONDS = 3600.0  # how often a save also drops the rows older than the TTL
KEPT_PER_TENANT = 1000  # the most rows one tenant keeps here (~300 bytes each at most)
KEPT_IN_ALL = 100_000  # the most rows of all tenants together: 23 MB measured (~230 bytes a row)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS requests(tenant TEXT NOT NULL, request_id TEXT NOT NULL, method TEXT NOT NULL, "
    "payload_hash TEXT NOT NULL, result TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY(tenant, request_id)) "
    "WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS requests_by_age ON requests(tenant, created_at)",
    "CREATE INDEX IF NOT EXISTS requests_by_time ON requests(created_at)",
)


class TenantlessRequests:
    def __init__(
        self,
        data_dir: Path,
        *,
        ttl_seconds: float,
        kept_per_tenant: int = KEPT_PER_TENANT,
        kept_in_all: int = KEPT_IN_ALL,
    ) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._ttl = ttl_seconds
        self._kept_per_tenant = kept_per_tenant
        self._kept_in_all = kept_in_all
        self._rows: int | None = None  # the file's rows, once counted
        self._lock = threading.Lock()
        self._connection: apsw.Connection | None = None
        self._pruned_at = 0.0

    def find(self, tenant: str, request_id: str) -> tuple[str, str, str] | None:
        """The (method, payload hash, result) kept for ``request_id`` of ``tenant``, or None."""
        with self._lock:
            try:
                return self._find(self._open(create=False), tenant, request_id)
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, FILE_NAME) from exc

    def first(self, tenant: str, request_id: str, method: str, payload_hash: str, result: str) -> tuple[str, str, str]:
        """What is kept for ``request_id`` of ``tenant``: the first call's, or, for the first
        call, this one's (kept durably before this returns)."""
        with self._lock:
            try:
                connection = self._open(create=True)
                assert connection is not None  # made when missing
                with connection:
                    kept = self._find(connection, tenant, request_id)
                    if kept is not None:
                        return kept
                    rows = self._keep(connection, tenant, request_id, (method, payload_hash, result))
                self._rows = rows  # committed
            except apsw.Error as exc:  # a full disk is DISK_FULL, as for every write of the store
                self._rows = None  # rolled back: counted again
                raise translate_sqlite_error(exc, FILE_NAME) from exc
        return method, payload_hash, result

    def _keep(self, connection: apsw.Connection, tenant: str, request_id: str, kept: tuple[str, str, str]) -> int:
        """Write the row, within both bounds; the rows of the file then."""
        rows = self._rows
        if rows is None:  # counted once, then followed: a count of every row is a scan of the file
            counted = connection.execute("SELECT count(*) FROM requests").fetchone()
            rows = int(counted[0]) if counted else 0
        now = time.time()
        if now - self._pruned_at >= PRUNE_EVERY_SECONDS:
            connection.execute("DELETE FROM requests WHERE created_at < ?", (now - self._ttl,))
            rows -= connection.changes()
            self._pruned_at = now
        connection.execute("DELETE FROM requests WHERE tenant = ? AND request_id = ?", (tenant, request_id))  # expired
        rows -= connection.changes()
        connection.execute(
            "INSERT INTO requests(tenant, request_id, method, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?, ?)",
            (tenant, request_id, *kept, now),
        )
        connection.execute(  # the tenant's oldest past its bound: never another tenant's
            "DELETE FROM requests WHERE tenant = ? AND request_id IN (SELECT request_id FROM requests "
            "WHERE tenant = ? AND request_id <> ? ORDER BY created_at DESC LIMIT -1 OFFSET ?)",
            (tenant, tenant, request_id, max(self._kept_per_tenant - 1, 0)),
        )
        rows += 1 - connection.changes()
        if rows > self._kept_in_all:  # the file's oldest past its bound: bounded whatever the names
            connection.execute(
                "DELETE FROM requests WHERE (tenant, request_id) IN (SELECT tenant, request_id FROM requests "
                "WHERE NOT (tenant = ? AND request_id = ?) ORDER BY created_at LIMIT ?)",
                (tenant, request_id, rows - max(self._kept_in_all, 1)),
            )
            rows -= connection.changes()
        return rows

    def carry_into(self, tenant: str, store: TenantStore) -> None:
        """Write the results kept here for ``tenant`` (within their TTL, with the time each was
        kept) into ``store``, its new file, not yet in place."""
        with self._lock:
            try:
                connection = self._open(create=False)
                rows = (
                    []
                    if connection is None
                    else connection.execute(
                        "SELECT request_id, method, payload_hash, result, created_at FROM requests "
                        "WHERE tenant = ? AND created_at >= ?",
                        (tenant, time.time() - self._ttl),
                    ).fetchall()
                )
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, FILE_NAME) from exc
        if rows:
            with store.write(internal=True) as txn:
                for request_id, method, payload_hash, result, created_at in rows:
                    kept_at = created_at if isinstance(created_at, float) else None  # a REAL column
                    txn.save_request(str(request_id), str(method), str(payload_hash), str(result), kept_at)

    def _find(self, connection: apsw.Connection | None, tenant: str, request_id: str) -> tuple[str, str, str] | None:
        if connection is None:
            return None
        row = connection.execute(
            "SELECT method, payload_hash, result FROM requests WHERE tenant = ? AND request_id = ? AND created_at >= ?",
            (tenant, request_id, time.time() - self._ttl),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), str(row[2]))

    def _open(self, *, create: bool) -> apsw.Connection | None:
        """The file's connection; None while there is no file and ``create`` is off."""
        if self._connection is None and (create or self.path.exists()):
            connection = open_connection(self.path, readonly=False, synchronous="FULL")
            try:
                for statement in _SCHEMA:
                    connection.execute(statement)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            self._rows = None
