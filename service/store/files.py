"""What the data directory does to a tenant's files as files (store/pool.py, store/ownership.py,
store/install.py): sync them, overwrite them with zeros, move a closed database's WAL into it,
remove a database with its WAL and shared memory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import apsw

from mnemosyne.errors import Unavailable
from mnemosyne.store.connections import BUSY_TIMEOUT_MS

# What SQLite keeps beside a database file (its WAL, its shared memory, a rollback journal).
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def fsync(path: Path) -> None:
    """Sync a file, or a directory (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_database(path: Path) -> None:
    """Remove a database file and what SQLite keeps beside it (nothing when there is none)."""
    for suffix in ("", *SIDE_SUFFIXES):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def shred(path: Path) -> None:
    """Overwrite a file with zeros, sync it, and remove it (nothing when there is none)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        size, block = os.fstat(fd).st_size, bytes(1 << 20)
        for offset in range(0, size, len(block)):
            os.pwrite(fd, block[: min(len(block), size - offset)], offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)


def checkpoint_away(path: Path, busy: str) -> None:
    """Move a closed tenant file's WAL into it and empty the WAL: what its WAL held is in the
    file, so removing the WAL loses nothing. UNAVAILABLE TENANT_BUSY (``busy``) while a reader
    holds it past the busy timeout; a damaged file is left as it is (it has nothing to move)."""
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error:
        return
    try:
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)  # a glance at the file (a placement) ends soon
        connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.BusyError:
        raise Unavailable(busy, reason="TENANT_BUSY", retry_after_seconds=1.0) from None
    except apsw.Error:
        pass  # damaged: nothing of it can be moved
    finally:
        connection.close()


def bytes_on_disk(*databases: Path) -> int:
    """Bytes of SQLite ``databases`` on disk, with their WAL and shared memory (0 for a missing one)."""
    total = 0
    for base in databases:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(f"{base}{suffix}").st_size
    return total


def modified(path: Path) -> float:
    """The file's modification time; 0 when it has none."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
