"""The one way a write transaction runs on any of our SQLite files (tenant file, inbox)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import apsw

from mnemosyne.errors import DataLoss, ResourceExhausted, Unavailable
from mnemosyne.store.connections import BUSY_TIMEOUT_MS
from mnemosyne.store.read_gate import ReadGate

T = TypeVar("T")
# How long emptying a WAL waits for readers of an older snapshot (short by design) to finish.
WAL_TRUNCATE_TIMEOUT_SECONDS = 10.0
# How long an erasure's truncation keeps the file's new reads waiting (store/read_gate.py): for
# the reads under way to end, then for the checkpoint to find no other reader in its way.
READERS_DRAIN_SECONDS = 1.0
GATED_CHECKPOINT_SECONDS = 0.25


def damaged(path: str, why: str) -> DataLoss:
    return DataLoss(
        f"the tenant's file {path} is damaged ({why}); its calls fail until it is restored from a backup "
        "or removed, and no other tenant is affected",
        reason="TENANT_CORRUPT",
    )


def translate_sqlite_error(exc: apsw.Error, path: str = "") -> Exception:
    """The store's own error for what SQLite reported: a full disk is DISK_FULL, a damaged file
    TENANT_CORRUPT; anything else is ours and stays as it is."""
    if isinstance(exc, apsw.FullError):
        return ResourceExhausted(
            "the disk holding the tenant file is full; nothing of this write was kept",
            reason="DISK_FULL",
        )
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return damaged(path or "of this tenant", str(exc))
    return exc


def write_transaction(
    connection: apsw.Connection, make_txn: Callable[[], T], *, synchronous: str, sync: bool, path: str = ""
) -> Iterator[T]:
    """``BEGIN IMMEDIATE``, the caller's statements, ``COMMIT`` (a generator for a
    ``contextmanager``; the caller holds the file's write lock). Any failure rolls back; a full
    disk becomes DISK_FULL.

    ``sync=False`` commits with ``synchronous=NORMAL`` whatever the file's setting: in WAL mode
    that still survives a process crash (SIGKILL); only an OS crash or power loss may roll it
    back, and the next synced commit (or an fdatasync of the WAL) makes it durable too."""
    relaxed = not sync and synchronous.upper() not in ("NORMAL", "OFF")
    if relaxed:
        connection.pragma("synchronous", "NORMAL")
    try:
        try:
            connection.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            raise translate_sqlite_error(exc, path) from exc
        try:
            yield make_txn()
        except (apsw.FullError, apsw.CorruptError, apsw.NotADBError) as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise translate_sqlite_error(exc, path) from exc
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        try:
            connection.execute("COMMIT")
        except apsw.Error as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise translate_sqlite_error(exc, path) from exc
    finally:
        if relaxed:
            connection.pragma("synchronous", synchronous)


def truncate_wal(connection: apsw.Connection, name: str, readers: ReadGate | None = None) -> None:
    """A TRUNCATE checkpoint on ``connection`` (its owner holds the file's write lock), retried
    while another checkpoint or a reader of an older snapshot is in the way, up to
    WAL_TRUNCATE_TIMEOUT_SECONDS (then UNAVAILABLE ERASURE_BUSY).

    With ``readers``, the gate of the file's pooled read transactions (store/read_gate.py), it is
    tried first with the gate closed, once the reads under way have ended: nothing else reads
    then but a copy's snapshot or a connection of its own (``read_file``), and SQLite's busy
    handler, which otherwise looks for a moment without readers between sleeps of up to 100 ms,
    need not find one among reads that overlap without a pause. A reader still in the way after
    GATED_CHECKPOINT_SECONDS: the gate opens and the checkpoint waits as it would without one."""
    deadline = time.monotonic() + WAL_TRUNCATE_TIMEOUT_SECONDS
    if readers is not None:
        with readers.closed(READERS_DRAIN_SECONDS) as drained:
            if drained and _checkpoint(connection, name, time.monotonic() + GATED_CHECKPOINT_SECONDS):
                return
    if not _checkpoint(connection, name, deadline):
        raise Unavailable(
            f"the erasure is committed but {name}'s write-ahead log could not be emptied: a reader "
            f"kept it for {WAL_TRUNCATE_TIMEOUT_SECONDS:.0f}s; send the call again (a forget, or the same "
            "request) to finish it",
            reason="ERASURE_BUSY",
            retry_after_seconds=1.0,
        )


def _checkpoint(connection: apsw.Connection, name: str, deadline: float) -> bool:
    """TRUNCATE checkpoints until one completes (True) or ``deadline`` passes (False), SQLite's
    busy handler waiting no later than it."""
    try:
        while True:
            connection.set_busy_timeout(max(1, min(BUSY_TIMEOUT_MS, int((deadline - time.monotonic()) * 1000))))
            try:
                connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
                return True
            except apsw.BusyError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.005)
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, name) from exc
    finally:
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
