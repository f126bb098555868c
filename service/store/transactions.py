"""The one way a write transaction runs on any of our SQLite files (tenant file, inbox)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import apsw

from mnemosyne.errors import DataLoss, ResourceExhausted

T = TypeVar("T")


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
