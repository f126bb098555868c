"""Read-only inspection of a tenant file, for operators and drills.

Opens the file with a read-only connection and never takes the data-directory lock, so it works
while a server owns the directory, and after a crash before any restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.errors import NotFound
from mnemosyne.store.connections import open_offline
from mnemosyne.store.data_dir import TENANT_FILE_SUFFIX
from mnemosyne.store.tenant_file import damage_of
from mnemosyne.store.tenant_ids import validate_tenant
from mnemosyne.store.tenant_store import ReadTxn
from mnemosyne.store.transactions import damaged


def open_readonly(data_dir: Path, tenant: str) -> apsw.Connection:
    """The tenant's file, read-only; TENANT_NOT_FOUND without one, TENANT_CORRUPT for one that is
    no tenant file (checked before SQLite opens it: a FIFO would block the open)."""
    path = data_dir / "tenants" / f"{validate_tenant(tenant)}{TENANT_FILE_SUFFIX}"
    if not path.exists():
        raise NotFound(f"tenant {tenant} has no file under {data_dir}", reason="TENANT_NOT_FOUND")
    problem = "it is not a regular file" if not path.is_file() else damage_of(path)
    if problem is not None:
        raise damaged(str(path), problem)
    with unreadable_as_damaged(path):
        return open_offline(path)


@contextmanager
def unreadable_as_damaged(path: Path) -> Iterator[None]:
    """SQLite's errors while a file is read offline, as TENANT_CORRUPT naming it (a truncated
    file passes the header check and fails as its pages are read)."""
    try:
        yield
    except apsw.Error as exc:
        raise damaged(str(path), str(exc)) from exc


def inspect_tenant(data_dir: Path, tenant: str) -> dict[str, Any]:
    connection = open_readonly(data_dir, tenant)
    try:
        with unreadable_as_damaged(Path(connection.filename)):
            connection.execute("BEGIN")
            txn = ReadTxn(connection)
            live, forgotten, entries = txn.counts()
            verdict = txn.audit()
            result: dict[str, Any] = {
                "tenant": tenant,
                "memories": live,
                "forgotten": forgotten,
                "ledger_entries": entries,
                "counters": txn.counters(),
                "integrity": {
                    "valid": verdict.valid,
                    "first_broken_at": verdict.first_broken_at,
                    "head_hash": verdict.head_hash,
                },
            }
            connection.execute("COMMIT")
            return result
    finally:
        connection.close()
