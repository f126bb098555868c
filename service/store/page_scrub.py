"""The room a B-tree page split leaves, cleared before the page reaches a database file.

When a B-tree page splits or hands entries to a neighbour, SQLite writes the page anew from the
entries it keeps and leaves the bytes of those that moved in the page's unused room (between its
cell pointer array and its cell content area). ``secure_delete`` zeroes a deleted entry and a free
page, never that room, so a forgotten memory's thread id or metadata value could stay there as the
stale copy of an entry that moved before the forget (docs/operations.md#erasure-of-a-memory).

Two ways keep that room empty in a tenant file:

* ``ScrubbingVFS``, SQLite's default VFS in this process (``install``, at the import of
  store/connections.py): every page this process writes to a database file — a checkpoint copying
  the WAL into the file, a rollback-mode commit, a backup's destination — has its room zeroed on
  the way. The WAL itself is left as it is (its frames are checksummed); a forget empties it.
  Connections that write no page of a tenant file (read-only ones) or whose file a forget rewrites
  whole (the hot-path inbox: VACUUM) open ``BASE_VFS`` instead, without the Python layer.
* ``scrub_file``: the same for a file written by someone else — a file of an older version (once,
  as it opens), the pages Litestream's checkpoints copied (``watch``/``written_pages``: the pages
  this process wrote to a watched file's WAL, cleared at the forget), a restored replica.

Only the room is touched: the bytes SQLite reads from a page are the same before and after, so a
torn write or a reader in the middle of one sees a valid page either way."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import apsw

VFS_NAME = "mnemosyne-scrub"
# SQLite's own VFS for this operating system, which ours wraps: a read-only connection writes no
# page, and opened on it directly it reads without our Python layer (store/connections.py).
BASE_VFS = apsw.vfs_names()[0]
# A page whose first byte is one of these is a B-tree page: interior index, interior table, leaf
# index, leaf table (SQLite's file format, section 1.6).
_BTREE_KINDS = {2: 12, 5: 12, 10: 8, 13: 8}  # the kind: its header's size
_DATABASE_HEADER = 100  # page 1 holds the file's header before its B-tree header
# An overflow or freelist trunk page starts with a page number, whose first byte is 0 while the
# file has fewer than 2**24 pages: only then can a B-tree page be told from them by its first byte.
# Half of that leaves room for a checkpoint growing the file while it is written.
_MAX_PAGES = 1 << 23
# A watched file's WAL pages are remembered up to this many; past it, the whole file is scrubbed.
_MAX_WATCHED_PAGES = 65_536
# Pages are read from a file in runs of at most this many.
_PAGES_READ_AT_ONCE = 256


def scrub_page(page: bytes, first: bool) -> bytes | None:
    """``page`` with its unused room zeroed, or None when it has none to zero or is not a B-tree
    page (``first``: page 1, whose B-tree header follows the file's header)."""
    at = _DATABASE_HEADER if first else 0
    header = _BTREE_KINDS.get(page[at]) if len(page) > at else None
    if header is None:
        return None
    cells = int.from_bytes(page[at + 3 : at + 5], "big")
    content = int.from_bytes(page[at + 5 : at + 7], "big") or 65_536
    room = at + header + 2 * cells
    if not room <= content <= len(page):
        return None  # not a B-tree page after all: leave it as it is
    if cells and min(struct.unpack_from(f">{cells}H", page, at + header)) < content:
        return None  # a cell before the content area: not a B-tree page after all
    if page.count(0, room, content) == content - room:
        return None
    return page[:room] + bytes(content - room) + page[content:]


class _ScrubbingFile(apsw.VFSFile):
    """A file of the default VFS whose whole-page writes to a database file are scrubbed, and
    whose WAL frames' page numbers are told to ``_watched`` when the database is watched."""

    def __init__(self, base: str, name: apsw.URIFilename | str | None, flags: list[int]) -> None:
        super().__init__(base, name, flags)
        self._database = bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        self._readonly = bool(flags[0] & apsw.SQLITE_OPEN_READONLY)
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        wal = bool(flags[0] & apsw.SQLITE_OPEN_WAL)
        self._wal_of = os.path.realpath(filename.removesuffix("-wal")) if wal and filename else None
        self._plain: bool | None = None  # no pointer-map pages (auto_vacuum off): known at the first write

    def xLock(self, level: int) -> None:  # noqa: N802 (SQLite's name)
        try:
            super().xLock(level)
        except apsw.IOError:
            # A read-only handle cannot take a write lock (the last connection's close asks for one
            # to checkpoint): SQLite goes on without it, but APSW would raise the I/O error from
            # that close. It is a lock held elsewhere as far as SQLite is concerned.
            if not self._readonly or level != apsw.SQLITE_LOCK_EXCLUSIVE:
                raise
            raise apsw.BusyError("a read-only handle takes no write lock") from None

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802 (SQLite's name)
        if self._database and len(data) >= 512 and offset % len(data) == 0:
            data = self._scrubbed(data, offset)
        elif self._wal_of is not None and len(data) == 24:  # a frame's header: its page number first
            _watched.add(self._wal_of, int.from_bytes(data[:4], "big"))
        super().xWrite(data, offset)

    def _scrubbed(self, page: bytes, offset: int) -> bytes:
        if offset == 0:
            self._plain = _plain_header(page)
        elif self._plain is None:
            self._plain = _plain_header(super().xRead(_DATABASE_HEADER, 0))
        if not self._plain or self.xFileSize() >= _MAX_PAGES * len(page):
            return page
        return scrub_page(page, offset == 0) or page


def _plain_header(header: bytes) -> bool:
    """Whether a file with this header has only B-tree, overflow and freelist pages: no auto-vacuum
    pointer maps (whose first byte can look like a B-tree page's)."""
    return len(header) >= 56 and header[52:56] == bytes(4)


class ScrubbingVFS(apsw.VFS):
    """The operating system's VFS, with ``_ScrubbingFile`` for every file it opens."""

    def __init__(self, base: str) -> None:
        super().__init__(VFS_NAME, base, makedefault=True)
        self._base = base  # by name: the default VFS is this one now

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> apsw.VFSFile:  # noqa: N802
        return _ScrubbingFile(self._base, name, flags)


class _WatchedPages:
    """The pages this process wrote to each watched database's WAL since the last ``take``: a
    checkpoint by another process (Litestream) copies them into the file unscrubbed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: dict[str, set[int] | None] = {}  # None: too many to remember, the whole file

    def add(self, database: str, page: int) -> None:
        pages = self._pages.get(database)
        if pages is None or page in pages:  # not watched, or every page counts already
            return
        with self._lock:
            pages = self._pages.get(database)
            if pages is not None:
                pages.add(page)
                if len(pages) > _MAX_WATCHED_PAGES:
                    self._pages[database] = None

    def watch(self, database: str) -> None:
        with self._lock:
            self._pages.setdefault(database, None)  # what was written before is not known

    def unwatch(self, database: str) -> None:
        with self._lock:
            self._pages.pop(database, None)

    def take(self, database: str) -> set[int] | None:
        with self._lock:
            pages = self._pages.get(database, set())
            if database in self._pages:
                self._pages[database] = set()
            return pages


_watched = _WatchedPages()
_vfs: ScrubbingVFS | None = None


def install() -> None:
    """Make ``ScrubbingVFS`` SQLite's default in this process (once)."""
    global _vfs
    if _vfs is None:
        _vfs = ScrubbingVFS(BASE_VFS)


def watch(database: Path) -> None:
    """Remember the pages this process writes to ``database``'s WAL (``written_pages``): another
    process checkpoints it. Until the first ``written_pages``, every page counts as written."""
    _watched.watch(os.path.realpath(database))


def unwatch(database: Path) -> None:
    _watched.unwatch(os.path.realpath(database))


def written_pages(database: Path) -> set[int] | None:
    """The pages written to a watched ``database``'s WAL since the last call (None: every page of
    the file), and forget them; an empty set for a file that is not watched."""
    return _watched.take(os.path.realpath(database))


def scrub_file(path: Path, pages: set[int] | None = None, *, sync: bool = True) -> int:
    """Zero the unused room of ``pages`` (page numbers from 1; None: every page) of a database file
    whose WAL is empty, in place, and sync it (unless ``sync`` is False: a scratch copy). The
    file's owner holds its write lock; readers may read meanwhile. Returns how many pages were
    rewritten."""
    fd = os.open(path, os.O_RDWR)
    try:
        header = os.pread(fd, _DATABASE_HEADER, 0)
        if len(header) < _DATABASE_HEADER or not _plain_header(header):
            return 0
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65_536 if page_size == 1 else page_size
        if page_size < 512 or page_size & (page_size - 1):
            return 0  # not a header SQLite wrote: nothing here is touched
        count = os.fstat(fd).st_size // page_size
        if count >= _MAX_PAGES:
            return 0
        numbers = range(1, count + 1) if pages is None else sorted(n for n in pages if 1 <= n <= count)
        rewritten = 0
        for first, run in _runs(numbers):
            data = os.pread(fd, (run[-1] - first + 1) * page_size, (first - 1) * page_size)
            for number in run:
                at = (number - first) * page_size
                scrubbed = scrub_page(data[at : at + page_size], number == 1)
                if scrubbed is not None:
                    os.pwrite(fd, scrubbed, (number - 1) * page_size)
                    rewritten += 1
        if rewritten and sync:
            os.fsync(fd)
        return rewritten
    finally:
        os.close(fd)


def _runs(numbers: Sequence[int]) -> Iterator[tuple[int, list[int]]]:
    """Ascending page numbers in runs read at once: (the run's first page, its pages), each within
    ``_PAGES_READ_AT_ONCE`` pages of its first."""
    run: list[int] = []
    for number in numbers:
        if run and number - run[0] >= _PAGES_READ_AT_ONCE:
            yield run[0], run
            run = []
        run.append(number)
    if run:
        yield run[0], run
