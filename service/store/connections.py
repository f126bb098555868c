"""How every SQLite connection of the store is opened: APSW's recommended settings (WAL, foreign
keys, ...), a busy timeout, and the durability setting — for tenant files, inboxes and the
recovery index alike."""

from __future__ import annotations

from pathlib import Path

import apsw
import apsw.bestpractice

BUSY_TIMEOUT_MS = 10_000
_CONNECTION_HOOKS = [hook for hook in apsw.bestpractice.recommended if hook.__name__.startswith("connection_")]


def configure(connection: apsw.Connection) -> None:
    """The settings every connection of ours gets, whatever file it opens. ``secure_delete``
    overwrites deleted content with zeros (free space in a page and whole free pages alike), so
    nothing deleted from any of our files (a forgotten memory, a pruned operation, a moved inbox
    row) stays readable in it: a forget can only erase what is still there to find."""
    for hook in _CONNECTION_HOOKS:
        hook(connection)
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)
    connection.pragma("secure_delete", True)


def open_connection(path: Path, *, readonly: bool, synchronous: str) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    connection = apsw.Connection(str(path), flags=flags)
    configure(connection)
    if not readonly:
        connection.pragma("synchronous", synchronous)
    return connection
