"""Read-only inspection of a tenant file, for operators and drills.

Opens the file with a read-only connection and never takes the data-directory lock, so it works
while a server owns the directory, and after a crash before any restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw

from mnemosyne.errors import NotFound
from mnemosyne.store.data_dir import TENANT_FILE_SUFFIX
from mnemosyne.store.tenant_ids import validate_tenant
from mnemosyne.store.tenant_store import ReadTxn


def open_readonly(data_dir: Path, tenant: str) -> apsw.Connection:
    path = data_dir / "tenants" / f"{validate_tenant(tenant)}{TENANT_FILE_SUFFIX}"
    if not path.exists():
        raise NotFound(f"tenant {tenant} has no file under {data_dir}", reason="TENANT_NOT_FOUND")
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)


def inspect_tenant(data_dir: Path, tenant: str) -> dict[str, Any]:
    connection = open_readonly(data_dir, tenant)
    try:
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
