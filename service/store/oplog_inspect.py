"""Read-only view of a tenant's operation log (``mnemosyne oplog``), for operators and drills.

Like ``inspect``, it opens the tenant file read-only without the data-directory lock and starts
no worker, so after a crash it shows exactly what the log holds: which accepted operations are
still open (pending or running; those still in the tenant's inbox are pending), which committed,
and which already have their extraction stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw

from mnemosyne.store import inbox
from mnemosyne.store.connections import open_offline
from mnemosyne.store.data_dir import INBOX_DIR_NAME, INBOX_FILE_SUFFIX
from mnemosyne.store.inspect import open_readonly, unreadable_as_damaged
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.tenant_store import ReadTxn
from mnemosyne.store.transactions import damaged

_ALL = 1 << 62


def inspect_oplog(data_dir: Path, tenant: str) -> dict[str, Any]:
    connection = open_readonly(data_dir, tenant)
    try:
        with unreadable_as_damaged(Path(connection.filename)):
            return _oplog(connection, data_dir, tenant)
    finally:
        connection.close()


def _waiting(data_dir: Path, tenant: str) -> list[OpRow]:
    """The operations still in the tenant's inbox, as pending rows."""
    path = data_dir / INBOX_DIR_NAME / f"{tenant}{INBOX_FILE_SUFFIX}"
    if path.exists() and not path.is_file():  # a FIFO would block the open
        raise damaged(str(path), "it is not a regular file")
    if not path.exists():
        return []
    with unreadable_as_damaged(path):
        inbox_connection = open_offline(path)
        try:
            return [OpRow.pending(op) for op in inbox.read_ops(inbox_connection)]
        finally:
            inbox_connection.close()


def _oplog(connection: apsw.Connection, data_dir: Path, tenant: str) -> dict[str, Any]:
    waiting = _waiting(data_dir, tenant)  # read first: an operation moving meanwhile is seen twice, never missed
    connection.execute("BEGIN")
    txn = ReadTxn(connection)
    ops = txn.oplog_page(status=None, accepted_after=None, after_id=0, limit=_ALL)
    adopted = {op.event_id for op in ops}
    ops += [op for op in waiting if op.event_id not in adopted]
    by_status: dict[str, list[int]] = {"pending": [], "running": [], "succeeded": [], "failed": []}
    for op in ops:
        by_status[op.status].append(op.event_id)
    open_ops = [
        {
            "event_id": op.event_id,
            "status": op.status,
            "attempts": op.attempts,
            "failures": op.failures,
            "extracted": op.extraction is not None,
            "accepted_at": op.accepted_at,
        }
        for op in ops
        if op.status in ("pending", "running")
    ]
    result = {
        "tenant": tenant,
        "hot_path_enabled": txn.meta("hot_path") == "on",
        "accepted": [op.event_id for op in ops],
        "committed": by_status["succeeded"],
        "failed": by_status["failed"],
        "open": open_ops,
        "open_without_extraction": sum(1 for o in open_ops if not o["extracted"]),
        "counters": txn.counters(),
    }
    connection.execute("COMMIT")
    return result
