"""One tenant's SQLite file: connections, migrations and every SQL statement on it.

Concurrency contract:

* Writes: one writer connection per file, used under the tenant's write lock (from the
  ``LockManager``), every write one ``BEGIN IMMEDIATE`` transaction. Every check that decides a
  write (fingerprint, request id, generation) must run inside that transaction; slow work
  (extraction, embedding) must happen before it.
* Reads: a small pool of reader connections, each read one deferred transaction, so a read sees
  one snapshot and never waits for the writer (WAL).
* The store knows nothing of the engine's policies. ``cache`` is a slot where the engine keeps
  derived state (the vector matrix); it lives and dies with this open store.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.errors import FailedPrecondition, Unavailable
from mnemosyne.store import connections, ledger
from mnemosyne.store.connections import BUSY_TIMEOUT_MS, open_connection, open_with_room
from mnemosyne.store.fts_stats import TextHits, fts5_average_length, fts5_row_lengths, fts5_segments
from mnemosyne.store.inbox import Inbox
from mnemosyne.store.maintenance import CHECKPOINT_PAGES, WAL_LIMIT_PAGES
from mnemosyne.store.membership import moving
from mnemosyne.store.oplog import OplogReads, OplogWrites
from mnemosyne.store.schema import (
    APPLICATION_ID,
    FORGET_BLANKS,
    FORGET_KEEPS,
    MIGRATIONS,
    REQUIRED_TABLES,
    SCHEMA_VERSION,
    tables_at,
)
from mnemosyne.store.tenant_cache import TenantCache
from mnemosyne.store.transactions import damaged, translate_sqlite_error, truncate_wal, write_transaction

# Pages of full-text index merged per background transaction (store/maintenance.py).
FULLTEXT_MERGE_PAGES = 32
FULLTEXT_MERGE_MAX_STEPS = 256  # per pass; the next pass goes on
# Parameters per ``IN (...)`` list: far below SQLite's limit on bound variables.
_IN_CHUNK = 500
# The counter every write transaction on a tenant file increments (``WriteTxn.count_change``).
CHANGE_COUNTER = "changes"
# What an operation-log row keeps of a fast write whose memory was forgotten.
ERASED_PAYLOAD = '{"erased":true}'
# Set in a forget's transaction, cleared once the WAL no longer holds what it erased: a crash in
# between is finished at the next open (``TenantStore.erase_traces``).
ERASURE_META = "erasure_pending"
# The tenant's approximate nearest-neighbour index beside its file (engine/ann.py): a cache,
# never copied by a backup or an export, removed with the tenant.
ANN_FILE_SUFFIX = ".ann"


class InjectedFault(Exception):
    """Raised by a store test seam inside a write transaction (never in production)."""


class NotStored(Exception):
    """What a savepoint's block could not store (a statement failed, not the disk): the block was
    rolled back; the transaction may go on with other work (``WriteTxn.alive``)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


@dataclass(frozen=True)
class NewMemory:
    """Everything one retain writes, prepared before the transaction starts."""

    scope: str
    body: str
    metadata_json: str
    fingerprint: str
    facts: Sequence[tuple[str, str, str]]  # (kind, value, normalized)
    triples: Sequence[tuple[str, str, str]]  # (subject, predicate, object)
    embedding: bytes
    fts_text: str
    created_at: float
    occurred_at: int | None = None  # unix microseconds
    thread_id: str | None = None
    thread_position: int | None = None
    index_words: str = ""  # indexed with the text (``indexed_text``), e.g. resolved relative dates
    speaker: str | None = None

    def digest(self, key: bytes | None) -> ledger.MemoryDigest:
        """What the ledger records of this content, keyed with the memory's ``key``."""
        return ledger.MemoryDigest.of(
            scope=self.scope,
            body=self.body,
            metadata_json=self.metadata_json,
            facts=self.facts,
            triples=self.triples,
            embedding=self.embedding,
            fingerprint=self.fingerprint,
            key=key,
        )


def indexed_text(body: str, index_words: str | None) -> str:
    """What a memory's full-text row indexes: its body, and its index words on a line of their own."""
    return f"{body}\n{index_words}" if index_words else body


def forgotten_columns(connection: apsw.Connection) -> list[tuple[str, str | None]]:
    """(column, value) of what a forgotten memory's row holds no more: every column of the file's
    ``memories`` but ``FORGET_KEEPS``, NULL or its ``FORGET_BLANKS`` value when it may not be NULL.
    Read from the file, so a column added later is cleared without being named."""
    cleared: list[tuple[str, str | None]] = []
    for _cid, name, _type, not_null, _default, _pk in connection.execute("PRAGMA table_info(memories)"):
        if name in FORGET_KEEPS:
            continue
        if not_null and name not in FORGET_BLANKS:  # pragma: no cover - a schema change without its blank
            raise AssertionError(f"memories.{name} is NOT NULL: give a forget its blank in schema.FORGET_BLANKS")
        cleared.append((name, FORGET_BLANKS.get(name)))
    return cleared


@dataclass
class MemoryRow:
    id: int
    scope: str
    body: str
    metadata: dict[str, str]
    created_at: float
    forgotten: bool
    facts: list[tuple[str, str, str]] = field(default_factory=list)
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    merged_into: int = 0  # set when Dedup merged this memory into another (then never recalled)
    superseded_by: int = 0  # set when a newer memory replaced all of this one's facts
    superseded_at: float = 0.0
    occurred_at: int | None = None  # unix microseconds
    thread_id: str | None = None
    thread_position: int | None = None
    updated_at: float = 0.0  # when UpdateMemory wrote the current version (0: never updated)
    speaker: str | None = None
    forgotten_at: float = 0.0  # when it was forgotten (0: it is not)


@dataclass(frozen=True)
class MemoryVersion:
    """One earlier version of an updated memory (table ``memory_versions``)."""

    version: int  # 1 is the memory as retained
    body: str
    metadata: dict[str, str]
    at: float  # when this version became current


def _check_and_migrate(connection: apsw.Connection, path: Path) -> None:
    """Refuse a file that is not a Mnemosyne tenant file (another program's database, a wrong
    schema) with TENANT_CORRUPT, refuse one newer than this code, and bring an older one (or an
    empty new one) to the current schema in one transaction."""
    application_id = connection.pragma("application_id")
    version = connection.pragma("user_version")
    if version > SCHEMA_VERSION and application_id == APPLICATION_ID:
        raise FailedPrecondition(
            f"{path.name} has schema version {version}, newer than this server's {SCHEMA_VERSION}; "
            "upgrade the server instead of opening the file with an older one",
            reason="SCHEMA_TOO_NEW",
        )
    if application_id != APPLICATION_ID and (version or _tables(connection)):
        raise damaged(path.name, f"it is another program's SQLite database (application id {application_id:#x})")
    missing_before = tables_at(min(version, SCHEMA_VERSION)) - _tables(connection)
    if version and missing_before:  # a damaged file is reported as it is, never migrated
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing_before))}")
    if version != SCHEMA_VERSION:
        # One transaction: the schema change and its version bump land together or not at all.
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = connection.pragma("user_version")  # re-read under the write lock
            for step in range(version, SCHEMA_VERSION):
                connection.execute(MIGRATIONS[step])
            connection.pragma("user_version", SCHEMA_VERSION)
            connection.pragma("application_id", APPLICATION_ID)
            # A migrated file is a changed file, for an incremental backup as for any write.
            connection.execute(
                "INSERT INTO counters(name, value) VALUES(?, 1) ON CONFLICT(name) DO UPDATE SET value = value + 1",
                (CHANGE_COUNTER,),
            )
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    missing = REQUIRED_TABLES - _tables(connection)
    if missing:
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing))}")


def _tables(connection: apsw.Connection) -> set[str]:
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


_SQLITE_MAGIC = b"SQLite format 3\x00"


def damage_of(path: Path) -> str | None:
    """Why the file at ``path`` is not a usable tenant file, or None. Cheap: it reads the file's
    header, and opens the file only when the header is in doubt (a header still in the WAL)."""
    try:
        with open(path, "rb") as file:
            head = file.read(100)
    except FileNotFoundError:
        return None
    if not head:
        return None  # an empty file becomes a tenant file on its first write
    if len(head) < 100 or head[:16] != _SQLITE_MAGIC:
        return "it is not an SQLite database"
    if int.from_bytes(head[68:72], "big") == APPLICATION_ID:
        return None
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            application_id = connection.pragma("application_id")
            version = connection.pragma("user_version")
            tables = _tables(connection)
        finally:
            connection.close()
    except apsw.CantOpenError:
        if not path.exists():
            return None  # gone meanwhile, as if it had not been there
        raise  # not the file's fault: the process is out of descriptors
    except apsw.Error as exc:
        return str(exc)
    if application_id != APPLICATION_ID and (version or tables):
        return f"it is another program's SQLite database (application id {application_id:#x})"
    return None


@contextmanager
def read_file(path: Path, make_room: Callable[[], bool] | None = None) -> Iterator[ReadTxn]:
    """One read transaction on a tenant file through a connection of its own, closed after it:
    for a glance at a tenant that is not open (an aggregate over every tenant), without taking a
    place in the pool of open files. Refuses a file that is not a tenant file (TENANT_CORRUPT).
    ``make_room``: as for a ``TenantStore``, when the process is out of file descriptors."""
    try:
        if make_room is None:
            connection = _open_for_reading(path)
        else:
            connection = open_with_room(lambda: _open_for_reading(path), make_room)
        try:
            connection.execute("BEGIN")
            yield ReadTxn(connection)
        finally:
            connection.close()
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise translate_sqlite_error(exc, path.name) from exc
    except apsw.BusyError:
        raise Unavailable(
            f"{path.name} stayed locked by a writer for {BUSY_TIMEOUT_MS // 1000} s; retry", reason="TENANT_BUSY"
        ) from None


def _open_for_reading(path: Path) -> apsw.Connection:
    """A read-only connection to a tenant file whose schema was checked (``read_file``)."""
    problem = damage_of(path)
    if problem is not None:
        raise damaged(path.name, problem)
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.CantOpenError:
        if not path.exists():
            raise FileNotFoundError(path) from None
        raise
    try:
        # A writer of the same file (a move's step, a checkpoint) may hold it for a moment: wait
        # as every other connection of ours does, not fail the reader with "database is locked".
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        missing = REQUIRED_TABLES - _tables(connection)  # the first read: the WAL opens here
    except BaseException:
        connection.close()
        raise
    if missing:
        connection.close()
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing))}")
    return connection


def _apply_size_seam(connection: apsw.Connection, faults: frozenset[str]) -> None:
    """Test seam ``max_page_count=N``: SQLite itself refuses to grow the file past N pages and
    raises its real disk-full error (SQLITE_FULL), as on a full filesystem."""
    for fault in faults:
        name, _, value = fault.partition("=")
        if name == "max_page_count":
            connection.pragma("max_page_count", int(value))


class TenantStore:
    """An open tenant file. Create through ``TenantPool``, which owns its lifetime."""

    def __init__(
        self,
        path: Path,
        *,
        write_lock: AbstractContextManager[Any],
        synchronous: str = "FULL",
        max_readers: int = 4,
        faults: frozenset[str] = frozenset(),
        on_wal_growth: Callable[[], None] | None = None,
        inbox_path: Path | None = None,
        inbox_lock: Any = None,
        make_room: Callable[[], bool] | None = None,
        wal_limit_pages: int = WAL_LIMIT_PAGES,
    ) -> None:
        """``inbox_path``/``inbox_lock`` place the tenant's hot-path inbox (store/inbox.py).
        ``on_wal_growth``, when given, replaces SQLite's checkpoint-inside-COMMIT: it is
        called after a commit each time the WAL has grown by ``CHECKPOINT_PAGES`` more pages, and
        the caller runs ``merge_fulltext()`` and ``checkpoint()`` from another thread
        (store/maintenance.py). ``make_room`` is called when a connection cannot be opened (the
        process is out of file descriptors): it closes idle tenants and says whether any was.
        Past ``wal_limit_pages`` pages of WAL (the background checkpoint fell behind), the writer
        checkpoints itself (``write``)."""
        self.path = path
        self._make_room = make_room or (lambda: False)
        self._synchronous = synchronous
        self._write_lock = write_lock
        self._max_readers = max_readers
        self._faults = faults
        # Before any connection of ours touches it (opening one sets WAL mode and may optimize):
        # another program's database must stay as it is.
        problem = damage_of(path)
        if problem is not None:
            raise damaged(path.name, problem)
        try:
            self._writer = open_connection(path, readonly=False, synchronous=synchronous)
        except apsw.Error as exc:  # the open itself reads the header (WAL mode): not a database
            raise translate_sqlite_error(exc, path.name) from exc
        try:
            # The size seam first: a new file's schema must fit as well (a full disk at creation).
            _apply_size_seam(self._writer, faults)
            _check_and_migrate(self._writer, path)
        except apsw.Error as exc:
            self._writer.close()
            raise translate_sqlite_error(exc, path.name) from exc
        except BaseException:
            self._writer.close()
            raise
        self._on_wal_growth = on_wal_growth
        self._wal_pages_announced = 0
        self._wal_pages = 0
        self._wal_limit_pages = wal_limit_pages
        if on_wal_growth is not None:
            self._writer.set_wal_hook(self._wal_hook)  # also turns SQLite's own autocheckpoint off
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self.cache = TenantCache()  # the engine's values for this open tenant (store/tenant_cache.py)
        # Called when the store closes, before its files may go (the engine's caches on disk:
        # engine/ann.py stops writing its index file).
        self.on_close: list[Callable[[], None]] = []
        self._inbox_path = inbox_path or path.with_name(f"{path.stem}.inbox{path.suffix}")
        self._inbox_lock = inbox_lock if inbox_lock is not None else threading.RLock()
        self.fenced = False  # a move's step 1 (``fence``)
        self._inbox: Inbox | None = None
        self._inbox_opening = threading.Lock()
        try:
            if self.erasure_pending():  # a forget committed, then the process died before its WAL was emptied
                self.erase_traces()
        except BaseException:
            self.close()  # nothing left open: the pool may close idle tenants and open this one again
            raise

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for connection in readers:
            connection.close()
        if self._inbox is not None:
            self._inbox.close()
        with self._write_lock:
            self._writer.close()
        for hook in self.on_close:
            hook()
        self.cache.clear()

    def inbox(self, *, create: bool) -> Inbox | None:
        """The tenant's hot-path inbox, opened on first use; None when it has none and
        ``create`` is false (a tenant that never queued a fast write has no inbox file)."""
        if self._inbox is not None or (not create and not self._inbox_path.exists()):
            return self._inbox
        with self._inbox_opening:
            if self._inbox is None:
                with self.read() as txn:
                    floor = txn.oplog_highest_event_id()

                def configure(connection: apsw.Connection) -> None:
                    connections.configure(connection)
                    _apply_size_seam(connection, self._faults)

                self._inbox = open_with_room(
                    lambda: Inbox(
                        self._inbox_path,
                        lock=self._inbox_lock,
                        synchronous=self._synchronous,
                        floor=floor,
                        configure=configure,
                    ),
                    self._make_room,
                )
        return self._inbox

    @property
    def ann_path(self) -> Path:
        """Where the engine keeps the tenant's approximate index (engine/ann.py)."""
        return self.path.with_suffix(ANN_FILE_SUFFIX)

    @property
    def inbox_lock(self) -> Any:
        """The lock of the tenant's inbox: held, no fast write is accepted and none leaves the inbox."""
        return self._inbox_lock

    @contextmanager
    def snapshot(self) -> Iterator[ReadTxn]:
        """A read transaction on a connection of its own (not a pooled reader), held for as long
        as the block runs: what an online backup copies from (store/snapshot.py), page by page,
        while writers go on."""
        connection = open_connection(self.path, readonly=True, synchronous=self._synchronous)
        try:
            connection.execute("BEGIN")
            yield ReadTxn(connection)
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            raise translate_sqlite_error(exc, self.path.name) from exc
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")
            connection.close()

    def _wal_hook(self, _connection: apsw.Connection, _dbname: str, pages: int) -> int:
        # Runs inside COMMIT under the write lock: only announce, at most once per threshold.
        self._wal_pages = pages
        if pages < self._wal_pages_announced:
            self._wal_pages_announced = 0  # a checkpoint completed and the WAL started again
        if pages >= self._wal_pages_announced + CHECKPOINT_PAGES and self._on_wal_growth is not None:
            self._wal_pages_announced = pages
            self._on_wal_growth()
        return apsw.SQLITE_OK

    def fulltext_segments(self) -> int:
        """The full-text index's segments, from its structure record (one primary-key read)."""
        with self.read() as txn:
            row = txn.connection.execute("SELECT block FROM memories_fts_data WHERE id = 10").fetchone()
        return fts5_segments(row[0] if row else None)

    def merge_fulltext(self) -> int:
        """Merge the full-text index's segments in short transactions of about
        ``FULLTEXT_MERGE_PAGES`` pages each, until FTS5 finds nothing left to merge. Each holds
        the write lock for a few milliseconds at most; none changes content, so none is synced
        (a merge lost to a power cut is only done again). Returns the steps that did work."""
        steps = 0
        while steps < FULLTEXT_MERGE_MAX_STEPS:  # bounded: writers may keep adding segments
            with self.write(sync=False, counted=False, internal=True) as txn:  # maintenance, no content
                before = txn.connection.total_changes()
                # Negative: merge any segments, not only a level holding ``automerge`` of them.
                txn.connection.execute(
                    "INSERT INTO memories_fts(memories_fts, rank) VALUES('merge', ?)", (-FULLTEXT_MERGE_PAGES,)
                )
                worked = txn.connection.total_changes() - before >= 2  # FTS5's documented signal
            if not worked:
                break
            steps += 1
        return steps

    def erasure_pending(self) -> bool:
        with self.read() as txn:
            return txn.erasure_pending()

    def erase_traces(self) -> None:
        """Finish an erasure (``WriteTxn.forget_memory``, or a record change that removed content,
        ``WriteTxn.apply_record_changes``): rewrite the hot-path inbox without its
        free space, then empty the tenant file's WAL, whose earlier frames still hold the pages as
        they were before the forget (a TRUNCATE checkpoint: every frame copied into the file,
        whose deleted bytes are zeros, then the WAL cut to nothing), after deleting ANALYZE's
        samples of index keys. Clears ``ERASURE_META``.
        Waits for readers of an older snapshot (short by design) up to
        WAL_TRUNCATE_TIMEOUT_SECONDS (transactions.py), then fails with UNAVAILABLE; the next forget or open
        finishes the work. The approximate vector index file (a cache, ``ann_path``) goes too: it
        may hold the forgotten vectors, and the engine rebuilds it without them."""
        self.ann_path.unlink(missing_ok=True)
        inbox = self.inbox(create=False)
        if inbox is not None:
            inbox.erase_traces()
        with self._write_lock:
            # ANALYZE's samples of index keys (sqlite_stat4) may hold what was erased (a thread id,
            # a triple's subject), and an ANALYZE limited to part of a large table leaves them as
            # they were: they go (a write only when ANALYZE sampled since), and the planner keeps
            # sqlite_stat1's counts. Before the truncation, so their pages leave the WAL too.
            try:
                if self._writer.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat4'").fetchone():
                    if self._writer.execute("SELECT 1 FROM sqlite_stat4 LIMIT 1").fetchone():
                        with self._writer:
                            self._writer.execute("DELETE FROM sqlite_stat4")
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, self.path.name) from exc
            truncate_wal(self._writer, self.path.name)
            try:
                with self._writer:  # one transaction, counted as every write is
                    self._writer.execute("DELETE FROM meta WHERE key = ?", (ERASURE_META,))
                    WriteTxn(self._writer, self._faults).count_change()
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, self.path.name) from exc

    def checkpoint(self) -> tuple[int, int]:
        """A PASSIVE checkpoint on a short-lived connection of its own, so writes on the writer
        connection go on meanwhile. Returns (frames in the WAL, frames checkpointed)."""
        # A bare connection: the usual open hooks run statements (PRAGMA optimize) that would
        # wait for the write lock, and PASSIVE needs none of them (WAL mode is in the file).
        connection = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            connection.pragma("synchronous", self._synchronous)
            return connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            return 0, 0  # another connection is checkpointing (a closing writer): it does the work
        finally:
            connection.close()

    # -- transactions ---------------------------------------------------------------------------

    def fence(self, fenced: bool = True) -> None:
        """Refuse (or accept again) every write but the service's own (``write(internal=True)``:
        the hot path's workers, the ownership stamps, a move's steps): a tenant moving between
        members (engine/moves.py). Taken under the inbox's lock and the write lock, so a write in
        progress finishes first and one that begins later sees it."""
        with self._inbox_lock, self._write_lock:
            self.fenced = fenced

    def check_writable(self) -> None:
        if self.fenced:
            raise moving(self.path.stem, "its writes are refused until it is active on its new member")

    @contextmanager
    def write(self, *, sync: bool = True, counted: bool = True, internal: bool = False) -> Iterator[WriteTxn]:
        """One ``BEGIN IMMEDIATE`` transaction under the tenant's write lock; commits on success.

        ``sync=False`` commits with ``synchronous=NORMAL`` whatever the store's setting: in WAL
        mode that still survives a process crash (SIGKILL), and only an OS crash or power loss
        may roll back such a transaction — for bookkeeping a replay redoes anyway (a hot-path
        claim), never for an acknowledged write. The next synced commit makes it durable too.

        Every write transaction increments the change counter, except one that changes no content
        (``counted=False``: a full-text merge only rearranges the index's segments). A fenced
        store refuses it (UNAVAILABLE TENANT_MOVING) unless it is ``internal``."""
        with self._write_lock:
            if not internal:
                self.check_writable()
            yield from write_transaction(
                self._writer,
                self._begin_write if counted else lambda: WriteTxn(self._writer, self._faults),
                synchronous=self._synchronous,
                sync=sync,
                path=self.path.name,
            )
            if self._wal_pages >= self._wal_limit_pages:
                self._catch_up_checkpoint()

    def _catch_up_checkpoint(self) -> None:
        """A PASSIVE checkpoint on the writer connection, under the write lock, when the WAL
        passed ``wal_limit_pages``: the background one (store/maintenance.py) starts the WAL again
        only if it copies every frame before the next commit, and a writer committing large
        batches back to back outran it (1M memories by batches of 1,000: a 22 GB WAL at 500k,
        then a full disk). Holding the write lock, nothing is appended meanwhile, so it finishes
        (unless a reader keeps an older snapshot) and the next write starts the WAL again: the
        file stays near the limit. A checkpoint already running elsewhere does the work."""
        try:
            self._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            return
        except apsw.Error as exc:
            raise translate_sqlite_error(exc, self.path.name) from exc
        self._wal_pages = 0

    def _begin_write(self) -> WriteTxn:
        txn = WriteTxn(self._writer, self._faults)
        txn.count_change()
        return txn

    def sync_log(self) -> None:
        """Make every transaction committed so far durable against power loss: one fdatasync of
        the WAL file, taken WITHOUT the write lock (writers go on meanwhile). SQLite appends to
        the WAL in commit order and a recovery keeps only its checksummed prefix, so one sync
        covers every earlier ``sync=False`` commit too. A no-op when the store's setting does
        not promise power-loss durability anyway (``synchronous=NORMAL``/``OFF``)."""
        if self._synchronous.upper() in ("NORMAL", "OFF"):
            return
        try:
            fd = open_with_room(lambda: os.open(f"{self.path}-wal", os.O_RDONLY), self._make_room)
        except FileNotFoundError:
            return  # no WAL: everything is in the database file, synced by its checkpoint
        try:
            getattr(os, "fdatasync", os.fsync)(fd)  # macOS has no fdatasync
        finally:
            os.close(fd)

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        """One read transaction on a pooled reader connection: a single consistent snapshot."""
        connection = self._take_reader()
        try:
            connection.execute("BEGIN")
            yield ReadTxn(connection)
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            raise translate_sqlite_error(exc, self.path.name) from exc
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")
            self._return_reader(connection)

    def _take_reader(self) -> apsw.Connection:
        with self._readers_lock:
            if self._readers:
                return self._readers.pop()
        return open_with_room(
            lambda: open_connection(self.path, readonly=True, synchronous=self._synchronous), self._make_room
        )

    def _return_reader(self, connection: apsw.Connection) -> None:
        with self._readers_lock:
            if not self._closed and len(self._readers) < self._max_readers:
                self._readers.append(connection)
                return
        connection.close()


# One metadata pair of a filter: json_each with bound parameters, so keys from clients never
# become JSON path syntax.
_METADATA_PAIR = "EXISTS (SELECT 1 FROM json_each({alias}.metadata) j WHERE j.key = ? AND j.value = ?)"


def _listing_filters(
    params: list[Any], scope: str | None, include_forgotten: bool, metadata_equals: dict[str, str] | None
) -> str:
    """The ``AND`` clauses of a listing of memories ``m`` (their values appended to ``params``)."""
    sql = ""
    if scope:
        sql += " AND m.scope = ?"
        params.append(scope)
    if not include_forgotten:
        sql += " AND m.forgotten_at IS NULL"
    for key, value in sorted((metadata_equals or {}).items()):
        sql += f" AND {_METADATA_PAIR.format(alias='m')}"
        params.extend((key, value))
    return sql


def _metadata(text: str) -> dict[str, str]:
    return json.loads(text) if text and text != "{}" else {}  # most memories have none


class ReadTxn(OplogReads):
    """Queries valid inside one transaction (read or write)."""

    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection

    # -- meta and counters ----------------------------------------------------------------------

    def meta(self, key: str, default: str | None = None) -> str | None:
        value = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return default if value is None else value

    def erasure_pending(self) -> bool:
        """A forget or a record change committed an erasure whose traces are not yet gone from the
        WAL (``TenantStore.erase_traces`` finishes it)."""
        return self.meta(ERASURE_META) is not None

    def page_token_secret(self) -> bytes:
        """The tenant's own key for its page tokens (written when the file was made or migrated)."""
        return bytes.fromhex(self.meta("page_token_secret") or "")

    def counters(self) -> dict[str, int]:
        return dict(self.connection.execute("SELECT name, value FROM counters"))

    def change_counter(self) -> int:
        return int(self._one("SELECT value FROM counters WHERE name = ?", (CHANGE_COUNTER,)) or 0)

    def counts(self) -> tuple[int, int, int]:
        """(live memories, forgotten memories, ledger entries)."""
        live, forgotten = self._row(
            # Merged memories are retired: neither live nor forgotten.
            "SELECT count(*) FILTER (WHERE forgotten_at IS NULL AND merged_into IS NULL), "
            "count(*) FILTER (WHERE forgotten_at IS NOT NULL) FROM memories"
        )
        return int(live), int(forgotten), int(self._one("SELECT count(*) FROM ledger"))

    def live_memory_count(self) -> int:
        return int(self._one("SELECT count(*) FROM memories WHERE forgotten_at IS NULL"))

    def used_bytes(self) -> int:
        """Bytes of database pages in use as this transaction sees them (free pages excluded)."""
        page_size = int(self._one("PRAGMA page_size"))
        return (int(self._one("PRAGMA page_count")) - int(self._one("PRAGMA freelist_count"))) * page_size

    # -- idempotency and dedup ------------------------------------------------------------------

    def find_by_fingerprints(self, fingerprints: Sequence[str]) -> dict[str, int]:
        """{fingerprint: memory id} of the stored memories holding these contents; for a merged
        memory, the one it was merged into."""
        found: dict[str, int] = {}
        unique = list(dict.fromkeys(fingerprints))
        for start in range(0, len(unique), _IN_CHUNK):
            chunk = unique[start : start + _IN_CHUNK]
            found.update(
                self.connection.execute(
                    "SELECT fingerprint, coalesce(merged_into, id) FROM memories "
                    f"WHERE fingerprint IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        return found

    # -- memories -------------------------------------------------------------------------------

    def live_ids(self, ids: Sequence[int]) -> set[int]:
        """Of these memory ids, those neither forgotten nor merged into another."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        return {
            row[0]
            for row in self.connection.execute(
                f"SELECT id FROM memories WHERE id IN ({marks}) AND forgotten_at IS NULL AND COALESCE(merged_into, 0) = 0",
                tuple(ids),
            )
        }

    def memories_by_ids(self, ids: Sequence[int], *, with_details: bool = True) -> dict[int, MemoryRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = {
            r[0]: MemoryRow(
                id=r[0],
                scope=r[1],
                body=r[2],
                metadata=_metadata(r[3]),
                created_at=r[4],
                forgotten=r[5] is not None,
                forgotten_at=r[5] or 0.0,
                merged_into=r[6] or 0,
                superseded_by=r[7] or 0,
                superseded_at=r[8] or 0.0,
                occurred_at=r[9],
                thread_id=r[10],
                thread_position=r[11],
                updated_at=r[12] or 0.0,
                speaker=r[13],
            )
            for r in self.connection.execute(
                "SELECT id, scope, body, metadata, created_at, forgotten_at, merged_into, superseded_by, superseded_at, "
                f"occurred_at, thread_id, thread_position, updated_at, speaker FROM memories WHERE id IN ({marks})",
                tuple(ids),
            )
        }
        if with_details:
            self.fill_details(list(rows.values()))
        return rows

    def fill_details(self, rows: Sequence[MemoryRow]) -> None:
        """Read the facts and triples of rows that ``memories_by_ids`` gave without them."""
        if not rows:
            return
        by_id = {r.id: r for r in rows}
        marks = ",".join("?" * len(by_id))
        for memory_id, kind, value, normalized in self.connection.execute(
            f"SELECT memory_id, kind, value, normalized FROM facts WHERE memory_id IN ({marks}) ORDER BY memory_id, ord",
            tuple(by_id),
        ):
            by_id[memory_id].facts.append((kind, value, normalized))
        for memory_id, subject, predicate, obj in self.connection.execute(
            f"SELECT memory_id, subject, predicate, object FROM triples WHERE memory_id IN ({marks}) ORDER BY memory_id, ord",
            tuple(by_id),
        ):
            by_id[memory_id].triples.append((subject, predicate, obj))

    def memory_versions(self, memory_id: int) -> list[MemoryVersion]:
        """The earlier versions of a memory, oldest first (none for one never updated)."""
        return [
            MemoryVersion(version, body, _metadata(metadata), at)
            for version, body, metadata, at in self.connection.execute(
                "SELECT version, body, metadata, at FROM memory_versions WHERE memory_id = ? ORDER BY version",
                (memory_id,),
            )
        ]

    def list_memory_ids(
        self,
        *,
        scope: str | None,
        after_id: int,
        limit: int,
        include_forgotten: bool,
        newest_first: bool = False,
        metadata_equals: dict[str, str] | None = None,
        offset: int = 0,
    ) -> list[int]:
        """Ids past ``after_id`` in the listing's order (ascending, or descending with
        ``newest_first``, where 0 means from the newest), with every pair of ``metadata_equals``."""
        if newest_first:
            sql = "SELECT id FROM memories m WHERE id < ?"
            params: list[Any] = [after_id or 2**63 - 1]
        else:
            sql = "SELECT id FROM memories m WHERE id > ?"
            params = [after_id]
        sql += _listing_filters(params, scope, include_forgotten, metadata_equals)
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'} LIMIT ? OFFSET ?"
        params.extend((limit, offset))
        return [r[0] for r in self.connection.execute(sql, params)]

    def list_thread_ids(
        self,
        thread_id: str,
        *,
        scope: str | None,
        after: tuple[int, int] | None,
        limit: int,
        include_forgotten: bool,
        newest_first: bool = False,
        metadata_equals: dict[str, str] | None = None,
    ) -> list[int]:
        """Ids of a thread's memories in thread order (position, then id; both descending with
        ``newest_first``), past the (position, id) ``after``: an index range (memories_thread);
        with every pair of ``metadata_equals``."""
        sql = "SELECT id FROM memories m WHERE thread_id = ?"
        params: list[Any] = [thread_id]
        if after is not None:
            sql += f" AND (thread_position, id) {'<' if newest_first else '>'} (?, ?)"
            params.extend(after)
        sql += _listing_filters(params, scope, include_forgotten, metadata_equals)
        order = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY thread_position {order}, id {order} LIMIT ?"
        params.append(limit)
        return [r[0] for r in self.connection.execute(sql, params)]

    def count_filtered(self, metadata_equals: dict[str, str]) -> int:
        """How many live memories have every metadata pair."""
        sql, params = self._filter_sql("m", (), metadata_equals)
        return int(self._one(f"SELECT count(*) FROM memories m WHERE {sql}", params) or 0)

    def dates(self, ids: Sequence[int]) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
        """Of ``ids``, in one statement: (memory id, normalized date) of their ``date`` facts, and
        (memory id, occurred_at in unix microseconds) of those that have one."""
        if not ids:
            return [], []
        marks = ",".join("?" * len(ids))
        facts: list[tuple[int, str]] = []
        occurred: list[tuple[int, int]] = []
        for memory_id, normalized, occurred_at in self.connection.execute(
            f"SELECT memory_id, normalized, NULL FROM facts WHERE memory_id IN ({marks}) AND kind = 'date' "
            f"UNION ALL SELECT id, NULL, occurred_at FROM memories WHERE id IN ({marks}) AND occurred_at IS NOT NULL",
            (*ids, *ids),
        ):
            if occurred_at is None:
                facts.append((memory_id, normalized))
            else:
                occurred.append((memory_id, occurred_at))
        return facts, occurred

    def thread_neighbours(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """(memory id, neighbour id) for each of ``ids`` that has a thread: the live memories just
        before and just after it in thread order (position, then id). Two index seeks per memory
        (memories_thread), whatever the thread's length."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        live = "n.thread_id = c.thread_id AND n.forgotten_at IS NULL AND n.merged_into IS NULL"
        rows = self.connection.execute(
            "SELECT c.id, "
            f"(SELECT n.id FROM memories n WHERE {live} AND (n.thread_position, n.id) < (c.thread_position, c.id) "
            "ORDER BY n.thread_position DESC, n.id DESC LIMIT 1), "
            f"(SELECT n.id FROM memories n WHERE {live} AND (n.thread_position, n.id) > (c.thread_position, c.id) "
            "ORDER BY n.thread_position, n.id LIMIT 1) "
            f"FROM memories c WHERE c.id IN ({marks}) AND c.thread_id IS NOT NULL",
            tuple(ids),
        )
        return [(memory_id, n) for memory_id, before, after in rows for n in (before, after) if n is not None]

    def threads_to_consolidate(self, *, idle_before: float, limit: int) -> list[str]:
        """Ids of threads whose newest memory was committed before ``idle_before`` and is newer
        than their last completed consolidation (``consolidated_threads``), by id. The newest
        memory of each thread comes from the thread index alone; only those newer than their mark
        are looked up."""
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT t.thread_id FROM (SELECT thread_id, max(id) AS newest FROM memories "
                "WHERE thread_id IS NOT NULL GROUP BY thread_id) t "
                "LEFT JOIN consolidated_threads c ON c.thread_id = t.thread_id "
                "JOIN memories m ON m.id = t.newest "
                "WHERE t.newest > coalesce(c.newest_id, 0) AND m.created_at < ? ORDER BY t.thread_id LIMIT ?",
                (idle_before, limit),
            )
        ]

    def thread_newest_id(self, thread_id: str) -> int:
        """The id of the thread's newest memory, forgotten or not (0 for none)."""
        return int(self._one("SELECT coalesce(max(id), 0) FROM memories WHERE thread_id = ?", (thread_id,)))

    def journaled_proposal(self, receipt_id: str) -> tuple[str, str, int] | None:
        """(section, consolidator, model calls) journaled for a receipt not yet applied."""
        row = self.connection.execute(
            "SELECT section, consolidator, model_calls FROM consolidation_journal WHERE receipt_id = ?", (receipt_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], int(row[2]))

    def filtered_ids(self, scopes: Sequence[str], metadata_equals: dict[str, str]) -> list[int]:
        """Ids of live memories in any of ``scopes`` (all when empty) with every metadata pair."""
        sql, params = self._filter_sql("m", scopes, metadata_equals)
        return [r[0] for r in self.connection.execute(f"SELECT m.id FROM memories m WHERE {sql}", params)]

    @staticmethod
    def _filter_sql(alias: str, scopes: Sequence[str], metadata_equals: dict[str, str]) -> tuple[str, list[Any]]:
        clauses = [f"{alias}.forgotten_at IS NULL"]
        params: list[Any] = []
        if scopes:
            clauses.append(f"{alias}.scope IN ({','.join('?' * len(scopes))})")
            params.extend(scopes)
        for key, value in sorted(metadata_equals.items()):
            clauses.append(_METADATA_PAIR.format(alias=alias))
            params.extend((key, value))
        return " AND ".join(clauses), params

    def fts_search(self, match: str, *, limit: int, scopes: Sequence[str], metadata_equals: dict[str, str]) -> TextHits:
        """The best ``limit`` rows by FTS5's bm25 for an already-safe FTS5 expression, with each
        row's length and the index's mean length (FTS5's own token counts, read in the same
        statement from its ``docsize`` table and averages record), so recall can re-weigh length."""
        if scopes or metadata_equals:
            where, params = self._filter_sql("m", scopes, metadata_equals)
            best = (
                "SELECT f.rowid AS id, bm25(memories_fts) AS r FROM memories_fts f JOIN memories m ON m.id = f.rowid "
                f"WHERE memories_fts MATCH ? AND {where} ORDER BY r LIMIT ?"
            )
            args: list[Any] = [match, *params, limit]
        else:
            best = "SELECT rowid AS id, bm25(memories_fts) AS r FROM memories_fts WHERE memories_fts MATCH ? ORDER BY r LIMIT ?"
            args = [match, limit]
        # Lengths are looked up for the ``limit`` best rows only (primary-key lookups); the
        # averages record (rowid 1 of %_data) by an uncorrelated subquery, once per statement.
        rows = self.connection.execute(
            "SELECT h.id, -h.r, d.sz, (SELECT block FROM memories_fts_data WHERE id = 1) "
            f"FROM ({best}) h LEFT JOIN memories_fts_docsize d ON d.id = h.id ORDER BY h.r",
            args,
        ).fetchall()
        if not rows:
            return TextHits([], [], [], 0.0)
        ids, relevance, sizes, averages = zip(*rows)
        return TextHits(list(ids), list(relevance), fts5_row_lengths(list(sizes)), fts5_average_length(averages[0]))

    def index_state(self) -> tuple[int, int]:
        """(highest memory id, forget epoch): what the vector cache compares itself with."""
        high = self._one("SELECT seq FROM sqlite_sequence WHERE name = 'memories'") or 0
        epoch = int(self.meta("forget_epoch", "0") or 0)
        return high, epoch

    def embeddings_after(self, after_id: int, up_to_id: int) -> list[tuple[int, str, bytes]]:
        """(id, scope, vector) of live memories with after_id < id <= up_to_id, in id order."""
        return list(
            self.connection.execute(
                "SELECT e.memory_id, m.scope, e.vector FROM embeddings e JOIN memories m ON m.id = e.memory_id "
                "WHERE e.memory_id > ? AND e.memory_id <= ? AND m.forgotten_at IS NULL ORDER BY e.memory_id",
                (after_id, up_to_id),
            )
        )

    def fulltext_rows_after(self, after_id: int, up_to_id: int, *, limit: int) -> list[tuple[int, str]]:
        """(id, indexed text) of the first ``limit`` rows of the full-text index with
        after_id < id <= up_to_id (the live, unmerged memories), in id order."""
        return [
            (memory_id, indexed_text(body, index_words))
            for memory_id, body, index_words in self.connection.execute(
                "SELECT id, body, index_words FROM memories WHERE id > ? AND id <= ? AND forgotten_at IS NULL "
                "AND merged_into IS NULL ORDER BY id LIMIT ?",
                (after_id, up_to_id, limit),
            )
        ]

    def thread_places_after(self, after_id: int, up_to_id: int) -> list[tuple[int, str | None, int, str | None]]:
        """(id, thread id, thread position, speaker) of the rows ``embeddings_after`` returns, alike."""
        return list(
            self.connection.execute(
                "SELECT m.id, m.thread_id, coalesce(m.thread_position, 0), m.speaker FROM embeddings e "
                "JOIN memories m ON m.id = e.memory_id "
                "WHERE e.memory_id > ? AND e.memory_id <= ? AND m.forgotten_at IS NULL ORDER BY e.memory_id",
                (after_id, up_to_id),
            )
        )

    # -- integrity ------------------------------------------------------------------------------

    def audit(self) -> ledger.Verdict:
        """The audit chain recomputed and every memory, record and generation checked against it."""
        return ledger.verify(
            self.ledger_rows(),
            self.stored_memories(),
            records=self.stored_records(),
            generations=self.scope_generations(),
        )

    def ledger_rows(self) -> Iterator[ledger.LedgerRow]:
        for seq, entry, digest in self.connection.execute("SELECT seq, entry, hash FROM ledger ORDER BY seq"):
            yield ledger.LedgerRow(seq, entry, digest)

    def ledger_head(self) -> tuple[int, str]:
        row = self.connection.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, ledger.GENESIS_HASH) if row is None else (row[0], row[1])

    def stored_memories(self) -> Iterator[ledger.StoredMemory]:
        """Every memory row with digests recomputed from what is actually stored."""
        facts: dict[int, list[tuple[str, str, str]]] = {}
        for memory_id, kind, value, normalized in self.connection.execute(
            "SELECT memory_id, kind, value, normalized FROM facts ORDER BY memory_id, ord"
        ):
            facts.setdefault(memory_id, []).append((kind, value, normalized))
        triples: dict[int, list[tuple[str, str, str]]] = {}
        for memory_id, subject, predicate, obj in self.connection.execute(
            "SELECT memory_id, subject, predicate, object FROM triples ORDER BY memory_id, ord"
        ):
            triples.setdefault(memory_id, []).append((subject, predicate, obj))
        embeddings = dict(self.connection.execute("SELECT memory_id, vector FROM embeddings"))
        keys: dict[int, bytes] = dict(self.connection.execute("SELECT memory_id, key FROM memory_keys"))
        versioned = {r[0] for r in self.connection.execute("SELECT DISTINCT memory_id FROM memory_versions")}
        cleared = forgotten_columns(self.connection)  # what a forgotten memory's row must hold no more
        is_cleared = " AND ".join(f"{name} IS ?" for name, _ in cleared)
        for (
            memory_id,
            scope,
            body,
            metadata_json,
            fingerprint,
            forgotten_at,
            merged_into,
            superseded_by,
            row_cleared,
        ) in self.connection.execute(
            "SELECT id, scope, body, metadata, fingerprint, forgotten_at, merged_into, superseded_by, "
            f"{is_cleared} FROM memories ORDER BY id",
            [value for _, value in cleared],
        ):
            my_facts, my_triples = facts.get(memory_id, []), triples.get(memory_id, [])
            vector = embeddings.get(memory_id)
            key = keys.get(memory_id)
            forgotten = forgotten_at is not None
            yield ledger.StoredMemory(
                memory_id=memory_id,
                forgotten=forgotten,
                digest=ledger.MemoryDigest.of(
                    scope=scope,
                    body=body,
                    metadata_json=metadata_json,
                    facts=my_facts,
                    triples=my_triples,
                    embedding=vector if vector is not None else b"",
                    fingerprint=fingerprint or "",
                    key=key,
                ),
                leftovers=forgotten
                and bool(
                    not row_cleared
                    or my_facts
                    or my_triples
                    or vector is not None
                    or key is not None
                    or memory_id in versioned
                ),
                merged_into=merged_into or 0,
                superseded_by=superseded_by or 0,
                keyed=key is not None,
                embedding_absent=vector is None,
            )

    # -- records and generations (host-owned generations, the agent-memory design) -----------------

    def scope_generation(self, scope: str) -> int | None:
        """The scope's generation, or None for a scope whose records were never written."""
        generation = self._one("SELECT generation FROM scopes WHERE scope = ?", (scope,))
        return None if generation is None else int(generation)

    def scope_records(self, scope: str, *, after_key: str | None = None, limit: int = -1) -> list[tuple[str, str]]:
        """(key, content) of a scope's records by key: every one, or ``limit`` after ``after_key``."""
        return list(
            self.connection.execute(
                "SELECT key, content FROM records WHERE scope = ? AND (? IS NULL OR key > ?) ORDER BY key LIMIT ?",
                (scope, after_key, after_key, limit),
            )
        )

    def record_keys(self, scope: str) -> list[str]:
        return [r[0] for r in self.connection.execute("SELECT key FROM records WHERE scope = ? ORDER BY key", (scope,))]

    def record(self, scope: str, key: str) -> str | None:
        content: str | None = self._one("SELECT content FROM records WHERE scope = ? AND key = ?", (scope, key))
        return content

    def find_receipt(self, receipt_id: str) -> tuple[str, str, str] | None:
        """(scope, payload_hash, result_json) of an applied consolidation receipt, if any."""
        row = self.connection.execute(
            "SELECT scope, payload_hash, result FROM receipts WHERE receipt_id = ?", (receipt_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def stored_records(self) -> Iterator[ledger.StoredRecord]:
        """Every record with the hash of what is actually stored, for verification."""
        for scope, key, content, seq in self.connection.execute(
            "SELECT scope, key, content, ledger_seq FROM records ORDER BY scope, key"
        ):
            yield ledger.StoredRecord(scope, key, ledger.sha256_hex(content), seq)

    def scope_generations(self) -> dict[str, int]:
        return dict(self.connection.execute("SELECT scope, generation FROM scopes"))

    def scope_record_counts(self) -> dict[str, int]:
        """How many records each scope that has any holds."""
        return dict(self.connection.execute("SELECT scope, COUNT(*) FROM records GROUP BY scope"))


class WriteTxn(ReadTxn, OplogWrites):
    """Mutations; valid only inside ``TenantStore.write()``."""

    def __init__(self, connection: apsw.Connection, faults: frozenset[str]) -> None:
        super().__init__(connection)
        self._faults = faults

    def _fault_point(self, name: str, body: str) -> None:
        """Test seam: a fault spec is a step name, or "step:marker" to fail only bodies
        containing the marker; "kill@step" (with or without a marker) kills the process there."""
        for spec in self._faults:
            step, _, marker = spec.partition(":")
            if step == f"kill@{name}" and marker in body:
                os.kill(os.getpid(), signal.SIGKILL)  # a crash mid-transaction ("kill@step")
            if step == name and marker in body:
                raise InjectedFault(f"injected fault at {name}")

    def count_change(self) -> None:
        """One more write transaction on the file (``CHANGE_COUNTER``): what an incremental
        backup compares, since a new ledger head alone misses operation-log, counter and flag
        changes, and SQLite's own data_version is per connection."""
        self.connection.execute(
            "INSERT INTO counters(name, value) VALUES(?, 1) ON CONFLICT(name) DO UPDATE SET value = value + 1",
            (CHANGE_COUNTER,),
        )

    def set_meta(self, key: str, value: str) -> None:
        self.connection.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def delete_meta(self, key: str) -> None:
        self.connection.execute("DELETE FROM meta WHERE key = ?", (key,))

    def add_counters(self, deltas: dict[str, int]) -> None:
        self.connection.executemany(
            "INSERT INTO counters(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            [(name, delta) for name, delta in deltas.items() if delta],
        )

    def save_request(self, request_id: str, method: str, payload_hash: str, result_json: str) -> None:
        self.connection.execute(
            "INSERT INTO requests(request_id, method, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?)",
            (request_id, method, payload_hash, result_json, time.time()),
        )

    def prune_requests(self, older_than: float) -> int:
        self.connection.execute("DELETE FROM requests WHERE created_at < ?", (older_than,))
        return self.connection.changes()

    def append_ledger(self, entry: dict[str, Any]) -> int:
        """Append one chained entry; returns its sequence number."""
        head_seq, head_hash = self.ledger_head()
        seq = head_seq + 1
        entry_json = ledger.canonical_json({**entry, "seq": seq})
        self.connection.execute(
            "INSERT INTO ledger(seq, at, entry, hash) VALUES(?, ?, ?, ?)",
            (seq, time.time(), entry_json, ledger.chain_hash(head_hash, entry_json)),
        )
        return seq

    def insert_memories(self, memories: Sequence[NewMemory]) -> list[int]:
        """Body, facts, triples, embedding, full-text row and ledger entry of each memory, in
        order, with one statement per table (not per memory): the same ids (the AUTOINCREMENT ones
        SQLite would give), rows and ledger entries (one ``retain`` entry per memory, chained in
        order) as inserting them one by one. All or nothing with the enclosing transaction; the
        caller isolates a failure with a savepoint (a failure leaves a partial insert behind).
        Raises ``apsw.ConstraintError`` on a duplicate fingerprint."""
        if not memories:
            return []
        c = self.connection
        # The ids SQLite would assign one by one: past the largest ever used (AUTOINCREMENT).
        first_id = 1 + self._one(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0), "
            "coalesce((SELECT max(id) FROM memories), 0))"
        )
        ids = list(range(first_id, first_id + len(memories)))
        head_seq, head_hash = self.ledger_head()
        # Each memory row names its ledger entry, whose sequence number is known before either
        # exists (entries are appended in this order), so no UPDATE afterwards.
        c.executemany(
            "INSERT INTO memories(id, scope, body, metadata, fingerprint, created_at, ledger_seq, occurred_at, "
            "thread_id, thread_position, index_words, speaker) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    memory_id,
                    m.scope,
                    m.body,
                    m.metadata_json,
                    m.fingerprint,
                    m.created_at,
                    head_seq + 1 + i,
                    m.occurred_at,
                    m.thread_id,
                    m.thread_position,
                    m.index_words or None,
                    m.speaker,
                )
                for i, (memory_id, m) in enumerate(zip(ids, memories))
            ],
        )
        self._fault_points("after_body", memories)
        c.executemany(
            "INSERT INTO facts(memory_id, ord, kind, value, normalized) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *fact) for memory_id, m in zip(ids, memories) for i, fact in enumerate(m.facts)],
        )
        self._fault_points("after_facts", memories)
        c.executemany(
            "INSERT INTO triples(memory_id, ord, subject, predicate, object) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *triple) for memory_id, m in zip(ids, memories) for i, triple in enumerate(m.triples)],
        )
        self._fault_points("after_triples", memories)
        c.executemany(
            "INSERT INTO embeddings(memory_id, vector) VALUES(?, ?)", [(i, m.embedding) for i, m in zip(ids, memories)]
        )
        self._fault_points("after_embedding", memories)
        c.executemany(
            "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)",
            [(i, indexed_text(m.fts_text, m.index_words)) for i, m in zip(ids, memories)],
        )
        self._fault_points("after_fts", memories)
        keys = [os.urandom(ledger.MEMORY_KEY_BYTES) for _ in ids]
        c.executemany("INSERT INTO memory_keys(memory_id, key) VALUES(?, ?)", list(zip(ids, keys)))
        now = time.time()
        rows = []
        for i, (memory_id, m) in enumerate(zip(ids, memories)):
            digest = m.digest(keys[i])
            seq = head_seq + 1 + i
            entry_json = ledger.canonical_json(
                {
                    "op": "retain",
                    "memory_id": memory_id,
                    **digest.as_entry_fields(),
                    ledger.KEYED_FIELD: ledger.KEYED_VALUE,
                    "seq": seq,
                }
            )
            head_hash = ledger.chain_hash(head_hash, entry_json)
            rows.append((seq, now, entry_json, head_hash))
        c.executemany("INSERT INTO ledger(seq, at, entry, hash) VALUES(?, ?, ?, ?)", rows)
        self._fault_points("after_ledger", memories)
        return ids

    def _fault_points(self, name: str, memories: Sequence[NewMemory]) -> None:
        if self._faults:  # test seams only; nothing to check in production
            for m in memories:
                self._fault_point(name, m.body)

    def update_memory(self, memory_id: int, new: NewMemory) -> None:
        """Replace a live, unmerged memory's content under its id: the current body and metadata
        become its next ``memory_versions`` row, then body, metadata, fingerprint, facts, triples,
        embedding and full-text row are replaced and one ``update`` ledger entry (the new content's
        digests, keyed with the memory's own key) is appended. The facts it had that newer
        memories superseded went with the old content (its ``supersessions`` rows and mark); what
        its old content superseded in others stays recorded. The forget epoch advances (the
        vector cache takes the new vector in place, engine/index.py ``replace_vector``, or
        reloads). All or nothing with the enclosing transaction. Raises
        ``apsw.ConstraintError`` when another memory holds the new fingerprint."""
        c = self.connection
        row = c.execute(
            "SELECT body, metadata, coalesce(updated_at, created_at), index_words FROM memories WHERE id = ?",
            (memory_id,),
        ).fetchone()
        assert row is not None
        version = 1 + int(self._one("SELECT count(*) FROM memory_versions WHERE memory_id = ?", (memory_id,)) or 0)
        c.execute(
            "INSERT INTO memory_versions(memory_id, version, body, metadata, at) VALUES(?, ?, ?, ?, ?)",
            (memory_id, version, row[0], row[1], row[2]),
        )
        self._delete_fulltext([(memory_id, indexed_text(row[0], row[3]))])
        c.execute(
            "UPDATE memories SET body = ?, metadata = ?, fingerprint = ?, updated_at = ?, index_words = ?, "
            "superseded_by = NULL, superseded_at = NULL WHERE id = ?",
            (new.body, new.metadata_json, new.fingerprint, new.created_at, new.index_words or None, memory_id),
        )
        self._fault_points("update_after_body", [new])
        c.execute("DELETE FROM facts WHERE memory_id = ?", (memory_id,))
        c.execute("DELETE FROM triples WHERE memory_id = ?", (memory_id,))
        c.execute("DELETE FROM supersessions WHERE memory_id = ?", (memory_id,))
        c.executemany(
            "INSERT INTO facts(memory_id, ord, kind, value, normalized) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *fact) for i, fact in enumerate(new.facts)],
        )
        c.executemany(
            "INSERT INTO triples(memory_id, ord, subject, predicate, object) VALUES(?, ?, ?, ?, ?)",
            [(memory_id, i, *triple) for i, triple in enumerate(new.triples)],
        )
        c.execute("UPDATE embeddings SET vector = ? WHERE memory_id = ?", (new.embedding, memory_id))
        c.execute(
            "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)",
            (memory_id, indexed_text(new.fts_text, new.index_words)),
        )
        self._fault_points("update_after_fts", [new])
        key = self._one("SELECT key FROM memory_keys WHERE memory_id = ?", (memory_id,))
        digest = new.digest(key)
        fields: dict[str, Any] = {"op": "update", "memory_id": memory_id, **digest.as_entry_fields()}
        if key is not None:
            fields[ledger.KEYED_FIELD] = ledger.KEYED_VALUE
        self.append_ledger(fields)
        self._fault_points("update_after_ledger", [new])
        epoch = int(self.meta("forget_epoch", "0") or 0)
        self.set_meta("forget_epoch", str(epoch + 1))

    def forget_memory(self, memory_id: int) -> bool:
        """Erase everything the memory holds, keep its row and id. False if already forgotten.

        The row keeps only the columns of ``schema.FORGET_KEEPS`` (id, scope, times, the ids of
        merges and supersessions); every other column is cleared (``forgotten_columns``). Gone too:
        its facts, triples, embedding, earlier versions, full-text entries, its key (so its ledger
        hashes confirm nothing), the operation-log rows that wrote it or were found duplicates of it
        (their payload, extraction and vector), the supersession rows naming its triples, and its
        thread's consolidation proposals and, once no memory names the thread, its mark
        (schema.ERASURE says the same of every table). Deleted bytes are overwritten
        (``secure_delete``, connections.py) and the full-text index removes the memory's entries
        from its segments (``_delete_fulltext``); the WAL still holds the pages as they were until
        ``TenantStore.erase_traces``, which the caller runs (``ERASURE_META``)."""
        c = self.connection
        row = c.execute(
            "SELECT forgotten_at, merged_into, body, index_words, thread_id FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if row is None or row[0] is not None:
            return False
        if row[1] is None:  # a merged memory's full-text row went at its merge
            self._delete_fulltext([(memory_id, indexed_text(row[2], row[3]))])
        for table in ("facts", "triples", "embeddings", "memory_keys", "memory_versions", "supersessions"):
            c.execute(f"DELETE FROM {table} WHERE memory_id = ?", (memory_id,))
        assignments, blanks = self._forget_assignments
        c.execute(
            f"UPDATE memories SET {assignments}, forgotten_at = ? WHERE id = ?", (*blanks, time.time(), memory_id)
        )
        c.execute(  # the WHERE of the index oplog_result_memory (schema.py), or it is a scan of the log
            "UPDATE oplog SET payload = ?, extraction = NULL, embedding = NULL "
            "WHERE result IS NOT NULL AND json_valid(result) AND json_extract(result, '$.memory_id') = ?",
            (ERASED_PAYLOAD, memory_id),
        )
        c.execute("UPDATE supersessions SET new_object = '' WHERE superseded_by = ?", (memory_id,))
        thread_id = row[4]
        if thread_id is not None:
            # A consolidation proposed from its thread may quote it: the thread's proposals go (a
            # later consolidation proposes again from the memories left), and its mark once the
            # thread id is in no memory.
            c.execute("DELETE FROM consolidation_journal WHERE thread_id = ?", (thread_id,))
            c.execute(
                "DELETE FROM consolidated_threads WHERE thread_id = ? "
                "AND NOT EXISTS (SELECT 1 FROM memories WHERE thread_id = ?)",
                (thread_id, thread_id),
            )
        self.append_ledger({"op": "forget", "memory_id": memory_id})
        epoch = int(self.meta("forget_epoch", "0") or 0)
        self.set_meta("forget_epoch", str(epoch + 1))
        self.set_meta(ERASURE_META, "1")
        return True

    @cached_property
    def _forget_assignments(self) -> tuple[str, list[str | None]]:
        """The SET clause clearing a forgotten memory's row (``forgotten_columns``), and its values:
        read once per transaction (a ForgetMemories forgets thousands in one)."""
        cleared = forgotten_columns(self.connection)
        return ", ".join(f"{name} = ?" for name, _ in cleared), [value for _, value in cleared]

    def _delete_fulltext(self, rows: Sequence[tuple[int, str]]) -> None:
        """Remove (memory id, body) rows from the full-text index. The index is contentless with
        FTS5's 'secure-delete' on (schema.py, version 7): told the text it indexed, it rewrites
        the leaf pages holding that row's entries without them, and drops a term no other row
        holds, so the memory's terms leave the file now, at a cost in proportion to the memory,
        not to the index. The text must be the indexed one (``indexed_text``: the body and its index words):
        any other would corrupt the index's counts."""
        self.connection.executemany(
            "INSERT INTO memories_fts(memories_fts, rowid, body) VALUES('delete', ?, ?)", list(rows)
        )

    @property
    def alive(self) -> bool:
        """False once SQLite has rolled the whole transaction back by itself (after SQLITE_FULL,
        SQLITE_IOERR...): nothing more may be written through this transaction."""
        return self.connection.in_transaction

    @contextmanager
    def savepoint(self, name: str = "item") -> Iterator[None]:
        """A nested unit inside the transaction: rolled back alone if its block raises. A
        statement that failed is ``NotStored``; a full disk is DISK_FULL (the whole write fails:
        nothing later fits either); any other exception passes unchanged."""
        self.connection.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException as exc:
            # SQLite rolls back the whole transaction by itself on some errors (SQLITE_FULL,
            # SQLITE_IOERR...): then there is no savepoint left to roll back to.
            if self.connection.in_transaction:
                self.connection.execute(f"ROLLBACK TO {name}")
                self.connection.execute(f"RELEASE {name}")
            if isinstance(exc, (apsw.FullError, apsw.CorruptError, apsw.NotADBError)):
                raise translate_sqlite_error(exc) from exc
            if isinstance(exc, (apsw.Error, InjectedFault)):
                raise NotStored(type(exc).__name__) from exc
            raise
        self.connection.execute(f"RELEASE {name}")

    # -- consolidation (dedup merges) and conflict adjudication ----------------------------------

    def merged_into_ids(self, memory_id: int) -> list[int]:
        """Memories Dedup merged into ``memory_id`` and not yet forgotten."""
        return [
            r[0]
            for r in self.connection.execute(
                "SELECT id FROM memories WHERE merged_into = ? AND forgotten_at IS NULL ORDER BY id", (memory_id,)
            )
        ]

    def merge_memories(self, keep_id: int, merged_ids: Sequence[int], *, at: float) -> None:
        """Retire ``merged_ids`` into ``keep_id``: keep their rows, bodies, facts and fingerprints
        (so their text is still known as a duplicate of the kept one), drop their embeddings and
        full-text rows (so no recall path finds them), append ONE ledger entry for the whole merge.
        The caller checked that every id is live and unmerged inside this transaction."""
        c = self.connection
        ids = list(merged_ids)
        marks = ",".join("?" * len(ids))
        self._delete_fulltext(
            [
                (int(i), indexed_text(str(b), w))
                for i, b, w in c.execute(f"SELECT id, body, index_words FROM memories WHERE id IN ({marks})", ids)
            ]
        )
        c.execute(f"DELETE FROM embeddings WHERE memory_id IN ({marks})", ids)
        c.execute(f"UPDATE memories SET merged_into = ?, merged_at = ? WHERE id IN ({marks})", [keep_id, at, *ids])
        # Memories merged earlier into one of these now point at the kept one, so a duplicate of
        # their text is reported against a live memory.
        c.execute(f"UPDATE memories SET merged_into = ? WHERE merged_into IN ({marks})", [keep_id, *ids])
        self.append_ledger({"op": "merge", "memory_id": keep_id, "merged": ids})
        # The vector cache reloads on a new epoch, dropping the merged rows.
        epoch = int(self.meta("forget_epoch", "0") or 0)
        self.set_meta("forget_epoch", str(epoch + 1))

    def conflicting_triples(
        self, *, scope: str, memory_id: int, subject: str, predicate: str, obj: str
    ) -> list[tuple[int, str]]:
        """(memory id, object) of current triples of OTHER live memories in ``scope`` with the same
        subject and predicate but another object, not yet superseded."""
        return list(
            self.connection.execute(
                "SELECT t.memory_id, t.object FROM triples t JOIN memories m ON m.id = t.memory_id "
                "WHERE t.subject = ? AND t.predicate = ? AND t.object <> ? AND t.memory_id <> ? "
                "AND m.scope = ? AND m.forgotten_at IS NULL AND m.merged_into IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.memory_id = t.memory_id "
                "AND s.subject = t.subject AND s.predicate = t.predicate) ORDER BY t.memory_id",
                (subject, predicate, obj, memory_id, scope),
            )
        )

    def record_supersession(
        self, *, memory_id: int, subject: str, predicate: str, obj: str, by: int, new_obj: str, at: float
    ) -> None:
        self.connection.execute(
            "INSERT OR IGNORE INTO supersessions(memory_id, subject, predicate, object, superseded_by, new_object, at) "
            "VALUES(?, ?, ?, ?, ?, ?, ?)",
            (memory_id, subject, predicate, obj, by, new_obj, at),
        )

    def superseded_pairs(self, memory_id: int) -> set[tuple[str, str]]:
        return {
            (r[0], r[1])
            for r in self.connection.execute(
                "SELECT subject, predicate FROM supersessions WHERE memory_id = ?", (memory_id,)
            )
        }

    def mark_superseded(self, memory_id: int, *, by: int, at: float) -> None:
        """Mark a whole memory superseded (kept, never erased) with its own ledger entry."""
        self.connection.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ?", (by, at, memory_id)
        )
        self.append_ledger({"op": "supersede", "memory_id": memory_id, "by": by})

    def apply_record_changes(
        self, scope: str, changes: Sequence[tuple[str, str, str]], generation: int, entry: dict[str, Any]
    ) -> bool:
        """Apply (op, key, content) changes ("put" or "delete") to a scope, set its generation and
        append ONE ledger entry naming every change by content hash (never text). The caller
        decided the generation under this same transaction. A delete erases the record like a
        forgotten memory: overwritten in the file (``secure_delete``) and, once the caller has run
        ``TenantStore.erase_traces``, gone from the WAL with every earlier version of it
        (``ERASURE_META``); returns whether a change deleted one (the caller must erase). A put
        over other content does not empty the WAL: that would cost every agent's memory update a
        TRUNCATE checkpoint and fail it while a backup reads (docs/operations.md#erasure)."""
        c = self.connection
        removed = False
        ledger_changes = []
        for op, key, content in changes:
            before = self.record(scope, key)
            removed = removed or (op == "delete" and before is not None)
            if op == "put":
                ledger_changes.append({"op": "put", "key": key, "content": ledger.sha256_hex(content)})
            else:
                ledger_changes.append({"op": "delete", "key": key})
        seq = self.append_ledger(
            {**entry, "op": "records", "scope": scope, "generation": generation, "changes": ledger_changes}
        )
        for op, key, content in changes:
            if op == "put":
                c.execute(
                    "INSERT INTO records(scope, key, content, ledger_seq) VALUES(?, ?, ?, ?) "
                    "ON CONFLICT(scope, key) DO UPDATE SET content = excluded.content, ledger_seq = excluded.ledger_seq",
                    (scope, key, content, seq),
                )
            else:
                c.execute("DELETE FROM records WHERE scope = ? AND key = ?", (scope, key))
        self._fault_point("after_records", "\n".join(content for op, _key, content in changes if op == "put"))
        c.execute(
            "INSERT INTO scopes(scope, generation) VALUES(?, ?) "
            "ON CONFLICT(scope) DO UPDATE SET generation = excluded.generation",
            (scope, generation),
        )
        if removed:
            self.set_meta(ERASURE_META, "1")
        return removed

    def save_receipt(self, receipt_id: str, scope: str, payload_hash: str, result_json: str) -> None:
        self.connection.execute(
            "INSERT INTO receipts(receipt_id, scope, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?)",
            (receipt_id, scope, payload_hash, result_json, time.time()),
        )

    def journal_proposal(
        self, receipt_id: str, *, thread_id: str, scope: str, section: str, consolidator: str, model_calls: int
    ) -> None:
        """Keep a consolidation's proposed section until its receipt is applied (schema.py)."""
        self.connection.execute(
            "INSERT INTO consolidation_journal(receipt_id, thread_id, scope, section, consolidator, model_calls, "
            "created_at) VALUES(?, ?, ?, ?, ?, ?, ?)",
            (receipt_id, thread_id, scope, section, consolidator, model_calls, time.time()),
        )

    def drop_proposal(self, receipt_id: str) -> None:
        self.connection.execute("DELETE FROM consolidation_journal WHERE receipt_id = ?", (receipt_id,))

    def mark_thread_consolidated(self, thread_id: str, newest_id: int) -> None:
        """The thread is consolidated through memory ``newest_id`` (never moves back)."""
        self.connection.execute(
            "INSERT INTO consolidated_threads(thread_id, newest_id) VALUES(?, ?) "
            "ON CONFLICT(thread_id) DO UPDATE SET newest_id = max(newest_id, excluded.newest_id)",
            (thread_id, newest_id),
        )
