"""How every SQLite connection of the store is opened: APSW's recommended settings (WAL, foreign
keys, ...), a busy timeout, and the durability setting — for tenant files, inboxes and the
recovery index alike."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw
import apsw.bestpractice

from mnemosyne.errors import Unavailable
from mnemosyne.store import page_scrub

BUSY_TIMEOUT_MS = 10_000
# The pages a tenant's reader connection may keep (SQLite's default: 2 MiB). A large tenant's recall
# touches ~100 pages, many of them again on the next (the B-trees' upper pages, the busy rows):
# kept here, they cost neither a system call nor, once the OS has dropped them, a disk read. All
# connections together stay under the process's budget (``limit_page_caches``).
READER_PAGE_CACHE_KIB = 64 * 1024
# APSW's recommended settings but its busy timeout of 100 ms, ours set first (``configure``).
_CONNECTION_HOOKS = [
    hook
    for hook in apsw.bestpractice.recommended
    if hook.__name__.startswith("connection_") and hook is not apsw.bestpractice.connection_busy_timeout
]
T = TypeVar("T")

# Every database file this process writes: its pages without what a split left (store/page_scrub.py).
page_scrub.install()


def configure(connection: apsw.Connection) -> None:
    """The settings every connection of ours gets, whatever file it opens. ``secure_delete``
    overwrites deleted content with zeros (free space in a page and whole free pages alike), so
    nothing deleted from any of our files (a forgotten memory, a pruned operation, a moved inbox
    row) stays readable in it: a forget can only erase what is still there to find. Our busy
    timeout comes first (APSW's 100 ms not at all): the hooks' statements (``journal_mode=wal``)
    wait as long as every other, for a connection of another that holds the file a moment (a
    glance at a tenant opening, store/pool.py), not fail the open with "database is locked"."""
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)
    for hook in _CONNECTION_HOOKS:
        hook(connection)
    connection.pragma("secure_delete", True)


def limit_page_caches(mib: int) -> None:
    """Keep the memory SQLite holds in this process (every connection's page cache, schema and
    statements) near ``mib`` MiB, 0 for no bound: SQLite's soft heap limit, past which a
    connection's page cache reuses its own least recently used pages instead of growing.
    Process-wide, as SQLite's heap is."""
    apsw.soft_heap_limit(mib << 20)


def sqlite_memory() -> int:
    """Bytes SQLite holds in this process now (what ``limit_page_caches`` bounds)."""
    return int(apsw.memory_used())


def open_connection(
    path: Path, *, readonly: bool, synchronous: str, page_cache_kib: int | None = None
) -> apsw.Connection:
    """A connection with our settings; ``page_cache_kib``: its page cache's bound, if not SQLite's
    default."""
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    # A read-only connection writes no page: it reads through SQLite's own VFS, not our layer over it.
    connection = apsw.Connection(str(path), flags=flags, vfs=page_scrub.BASE_VFS if readonly else None)
    try:
        configure(connection)
        if page_cache_kib is not None:
            connection.pragma("cache_size", -page_cache_kib)
        if not readonly:
            connection.pragma("synchronous", synchronous)
        # A read opens the WAL and shared memory now rather than at the connection's first
        # transaction, so only an open runs out of descriptors (``open_with_room``), never a read.
        connection.pragma("schema_version")
    except BaseException:
        connection.close()
        raise
    return connection


def open_offline(path: Path) -> apsw.Connection:
    """A read-only connection to a file no store of this process holds (an operator's look at
    it): through its -wal when it has one (a server has it open, or crashed); as it is when it was
    closed cleanly, making no -wal or -shm beside it (they would be owned by whoever looks, and a
    server running as another user could then not write them)."""
    flags = apsw.SQLITE_OPEN_READONLY
    if Path(f"{path}-wal").exists():
        return apsw.Connection(str(path), flags=flags, vfs=page_scrub.BASE_VFS)
    uri = f"{path.resolve().as_uri()}?immutable=1"
    return apsw.Connection(uri, flags=flags | apsw.SQLITE_OPEN_URI, vfs=page_scrub.BASE_VFS)


def open_copy(path: Path) -> apsw.Connection:
    """A read-only connection to a copy being checked (a backup's, an import's, a replica's): its
    file exactly as it is, the bytes its SHA-256 was taken of, never a -wal found beside it, and
    nothing made beside it (a backup on a read-only mount can be read)."""
    uri = f"{path.resolve().as_uri()}?immutable=1"
    return apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI, vfs=page_scrub.BASE_VFS)


def open_with_room(open_files: Callable[[], T], make_room: Callable[[], bool]) -> T:
    """``open_files()`` (a store, a connection, a descriptor), tried again each time
    ``make_room()`` closed idle tenant files, while the process has no descriptor left for it
    (SQLite says CANTOPEN, the OS EMFILE or ENFILE). No idle tenant left to close:
    UNAVAILABLE FILE_LIMIT, which a client retries. ``open_files`` must leave nothing open when
    it fails."""
    while True:
        try:
            return open_files()
        except (apsw.CantOpenError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
        if not make_room():
            raise Unavailable(
                "the server cannot open another file right now (its open-file limit is reached and every "
                "open tenant is in use); retry shortly",
                reason="FILE_LIMIT",
                retry_after_seconds=1.0,
            )
