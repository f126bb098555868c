"""One tenant's SQLite file: its connections, and the transactions that run every SQL statement on it.

Concurrency contract:

* Writes: one writer connection per file, used under the tenant's write lock (from the
  ``LockManager``), every write one ``BEGIN IMMEDIATE`` transaction. Every check that decides a
  write (fingerprint, request id, generation) must run inside that transaction; slow work
  (extraction, embedding) must happen before it.
* Reads: a small pool of reader connections, each read one deferred transaction, so a read sees
  one snapshot and never waits for the writer (WAL).
* The store knows nothing of the engine's policies. ``cache`` is a slot where the engine keeps
  derived state (the vector matrix); it lives and dies with this open store.

A transaction's statements are in modules by job, which ``ReadTxn`` and ``WriteTxn`` put
together: bookkeeping.py (meta, counters, the ledger's head and appends, savepoints),
memory_reads.py, recall_reads.py, record_reads.py, audit_reads.py, oplog.py (the hot path's
log), memory_writes.py, memory_erasure.py (a forget), record_writes.py, webhook_rows.py, reembed_rows.py (a
re-embedding's next vectors). The file's checks and
migration are in tenant_file.py, the values its memories are written from and read into in
memory_rows.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.errors import ResourceExhausted, Unavailable
from mnemosyne.store import connections, page_scrub
from mnemosyne.store.acceptance import Acceptances
from mnemosyne.store.audit_reads import AuditReads
from mnemosyne.store.bookkeeping import ERASURE_META, PAGES_SCRUBBED_META, BookkeepingWrites
from mnemosyne.store.connections import BUSY_TIMEOUT_MS, READER_PAGE_CACHE_KIB, open_connection, open_with_room
from mnemosyne.store.file_faults import limit_pages, stop_at
from mnemosyne.store.file_watchers import FileChange
from mnemosyne.store.fts_stats import fts5_segments
from mnemosyne.store.inbox import Inbox, stored_sequence
from mnemosyne.store.maintenance import (
    CHECKPOINT_PAGES,
    WAL_KEPT_BYTES,
    WAL_LIMIT_PAGES,
    WAL_LIMIT_REACHED,
    WAL_PINNED_FACTOR,
    wal_full,
)
from mnemosyne.store.membership import moving
from mnemosyne.store.memory_erasure import MemoryErasure
from mnemosyne.store.memory_reads import MemoryReads
from mnemosyne.store.oplog import OplogReads, OplogWrites
from mnemosyne.store.read_gate import ReadGate
from mnemosyne.store.recall_reads import RecallReads
from mnemosyne.store.record_writes import RecordWrites
from mnemosyne.store.reembed_rows import ReembedReads, ReembedWrites
from mnemosyne.store.replicas import StoreReplication
from mnemosyne.store.revisions import RevisionReads
from mnemosyne.store.schema import REQUIRED_TABLES
from mnemosyne.store.tenant_cache import TenantCache
from mnemosyne.store.tenant_file import check_and_migrate, damage_of, table_names
from mnemosyne.store.transactions import damaged, translate_sqlite_error, truncate_wal, write_transaction
from mnemosyne.store.webhook_rows import WebhookReads, WebhookWrites

# Pages of full-text index merged per background transaction (store/maintenance.py).
FULLTEXT_MERGE_PAGES = 32
FULLTEXT_MERGE_MAX_STEPS = 256  # per pass; the next pass goes on
# The tenant's approximate nearest-neighbour index beside its file (engine/ann.py): a cache,
# never copied by a backup or an export, removed with the tenant.
ANN_FILE_SUFFIX = ".ann"


class ReadTxn(MemoryReads, RecallReads, AuditReads, OplogReads, WebhookReads, RevisionReads, ReembedReads):
    """Queries valid inside one transaction (read or write)."""


class WriteTxn(ReadTxn, MemoryErasure, RecordWrites, OplogWrites, WebhookWrites, ReembedWrites):
    """Mutations; valid only inside ``TenantStore.write()``."""


@contextmanager
def read_file(path: Path, make_room: Callable[[], bool] | None = None, *, copy: bool = False) -> Iterator[ReadTxn]:
    """One read transaction on a tenant file through a connection of its own, closed after it:
    for a glance at a tenant that is not open (an aggregate over every tenant), without taking a
    place in the pool of open files. Refuses a file that is not a tenant file (TENANT_CORRUPT).
    ``make_room``: as for a ``TenantStore``, when the process is out of file descriptors.
    ``copy``: the file is a copy being checked, read as it is (``connections.open_copy``)."""
    try:
        if make_room is None:
            connection = _open_for_reading(path, copy)
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
            f"{path.name} stayed locked by a writer for {BUSY_TIMEOUT_MS // 1000} s; retry",
            reason="TENANT_BUSY",
            retry_after_seconds=1.0,
        ) from None


def _open_for_reading(path: Path, copy: bool = False) -> apsw.Connection:
    """A read-only connection to a tenant file whose schema was checked (``read_file``)."""
    problem = damage_of(path)
    if problem is not None:
        raise damaged(path.name, problem)
    try:
        if copy:
            connection = connections.open_copy(path)
        else:
            connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.CantOpenError:
        if not path.exists():
            raise FileNotFoundError(path) from None
        raise
    try:
        # A writer of the same file (a move's step, a checkpoint) may hold it for a moment: wait
        # as every other connection of ours does, not fail the reader with "database is locked".
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        missing = REQUIRED_TABLES - table_names(connection)  # the first read: the WAL opens here
    except BaseException:
        connection.close()
        raise
    if missing:
        connection.close()
        raise damaged(path.name, f"its schema lacks the tables {', '.join(sorted(missing))}")
    return connection


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
        replication: StoreReplication | None = None,
        told: Callable[[FileChange], None] | None = None,
    ) -> None:
        """``inbox_path``/``inbox_lock`` place the tenant's hot-path inbox (store/inbox.py).
        ``on_wal_growth``, when given, replaces SQLite's checkpoint-inside-COMMIT: it is
        called after a commit each time the WAL has grown by ``CHECKPOINT_PAGES`` more pages, and
        the caller runs ``merge_fulltext()`` and ``checkpoint()`` from another thread
        (store/maintenance.py). ``make_room`` is called when a connection cannot be opened (the
        process is out of file descriptors): it closes idle tenants and says whether any was.
        Past ``wal_limit_pages`` pages of WAL (the background checkpoint fell behind), the writer
        checkpoints itself (``write``). ``replication``: the tenant's hooks of store/replicas.py
        (the pool's), told of each commit of the file and its inbox. ``told`` is told of each write
        transaction committed, under the write lock, and of each erasure finished
        (``erase_traces``): it must only take note (the pool's file watchers: store/file_watchers.py)."""
        self.path = path
        self._replication = replication or StoreReplication()
        self._make_room = make_room or (lambda: False)
        self._synchronous = synchronous
        self._write_lock = write_lock
        self._max_readers = max_readers
        self._faults = faults
        self._writer = self._open_writer()
        self._on_wal_growth = on_wal_growth
        self._told = told or (lambda _change: None)
        self._wal_pages_announced = 0
        self._wal_pages = 0
        self._wal_limit_pages = wal_limit_pages
        if on_wal_growth is not None or replication is not None:
            self._writer.set_wal_hook(self._wal_hook)  # also turns SQLite's own autocheckpoint off
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._read_gate = ReadGate()  # closed by an erasure's truncation of the WAL (store/read_gate.py)
        self._closed = False
        self._snapshots_held = 0  # copies' read transactions open now (``snapshot``)
        self.cache = TenantCache()  # the engine's values for this open tenant (store/tenant_cache.py)
        # Called when the store closes, before its files may go (the engine's caches on disk:
        # engine/ann.py stops writing its index file).
        self.on_close: list[Callable[[], None]] = []
        self._inbox_path = inbox_path or path.with_name(f"{path.stem}.inbox{path.suffix}")
        self._inbox_lock = inbox_lock if inbox_lock is not None else threading.RLock()
        self.fenced = False  # a move's step 1 (``fence``)
        self._inbox: Inbox | None = None
        try:
            self._resume()
        except BaseException:
            self.close()  # nothing left open: the pool may close idle tenants and open this one again
            raise

    def _resume(self) -> None:
        """Take up where the files stand: acceptance positions resume above every one they hold
        (store/acceptance.py), and a forget's erasure a kill interrupted is finished."""
        with self.read() as txn:
            floor = txn.acceptance_floor()
        self.acceptances = Acceptances(max(floor, stored_sequence(self._inbox_path)))
        if self.erasure_pending():  # a forget committed, then the process died before its WAL was emptied
            self.erase_traces()

    def _open_writer(self) -> apsw.Connection:
        """The writer connection, on a file checked and brought to the current schema."""
        path = self.path
        # Before any connection of ours touches it (opening one sets WAL mode and may optimize):
        # another program's database must stay as it is.
        problem = damage_of(path)
        if problem is not None:
            raise damaged(path.name, problem)
        try:
            writer = open_connection(path, readonly=False, synchronous=self._synchronous)
        except apsw.Error as exc:  # the open itself reads the header (WAL mode): not a database
            raise translate_sqlite_error(exc, path.name) from exc
        try:
            # The size seam first: a new file's schema must fit as well (a full disk at creation).
            limit_pages(writer, self._faults)
            writer.pragma("journal_size_limit", WAL_KEPT_BYTES)  # the WAL's file shrinks when it starts again
            check_and_migrate(writer, path)
            self._scrub_once(writer)
            if self._replication.checkpointed_elsewhere():  # Litestream copies its pages as they are
                page_scrub.watch(path)
        except apsw.Error as exc:
            writer.close()
            raise translate_sqlite_error(exc, path.name) from exc
        except BaseException:
            writer.close()
            raise
        return writer

    def _scrub_once(self, writer: apsw.Connection) -> None:
        """A file written before store/page_scrub.py (or by another program) may hold what its
        splits left in its pages' unused room: cleared once, every page, as it first opens."""
        bookkeeping = BookkeepingWrites(writer, self._faults)
        if bookkeeping.meta(PAGES_SCRUBBED_META) is not None:
            return
        truncate_wal(writer, self.path.name)  # every page in the file, where the pass reaches it
        self._scrub_file(writer, None)
        with writer:
            bookkeeping.set_meta(PAGES_SCRUBBED_META, "1")
            bookkeeping.count_change()

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
        page_scrub.unwatch(self.path)
        for hook in self.on_close:
            hook()
        self.cache.clear()

    def inbox(self, *, create: bool) -> Inbox | None:
        """The tenant's hot-path inbox, opened on first use; None when it has none and
        ``create`` is false (a tenant that never queued a fast write has no inbox file)."""
        if self._inbox is not None or (not create and not self._inbox_path.exists()):
            return self._inbox
        # Opened under the inbox lock, which the opening takes anyway (store/inbox.py): a second
        # lock for the opening, taken before it, deadlocked against a write holding the inbox lock
        # that asked for the inbox (engine/requests.py ``keyed_write``).
        with self._inbox_lock:
            if self._inbox is None:
                floor = self.acceptances.highest()

                def configure(connection: apsw.Connection) -> None:
                    connections.configure(connection)
                    limit_pages(connection, self._faults)

                self._inbox = open_with_room(
                    lambda: Inbox(
                        self._inbox_path,
                        lock=self._inbox_lock,
                        synchronous=self._synchronous,
                        floor=floor,
                        configure=configure,
                        on_commit=self._replication.written,
                        replicated_since=self._replication.replicated_since,
                        may_checkpoint=self._replication.checkpoints_are_ours,
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

    def seam(self, name: str) -> None:
        """A test seam of the tenant's files (store/file_faults.py ``stop_at``)."""
        stop_at(self._faults, name)

    @contextmanager
    def snapshot(self) -> Iterator[ReadTxn]:
        """A read transaction on a connection of its own (not a pooled reader), held for as long
        as the block runs: what an online backup copies from (store/snapshot.py), page by page,
        while writers go on."""
        self._read_gate.wait_open()
        connection = open_connection(self.path, readonly=True, synchronous=self._synchronous)
        with self._readers_lock:
            self._snapshots_held += 1
        try:
            with self._read_transaction(connection) as txn:
                yield txn
        finally:
            connection.close()
            with self._readers_lock:
                self._snapshots_held -= 1

    def _wal_hook(self, _connection: apsw.Connection, _dbname: str, pages: int) -> int:
        # Runs inside COMMIT under the write lock: only announce, at most once per threshold.
        self._replication.written()
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
            try:
                with self.write(sync=False, counted=False, internal=True) as txn:  # maintenance, no content
                    before = txn.connection.total_changes()
                    # Negative: merge any segments, not only a level holding ``automerge`` of them.
                    txn.connection.execute(
                        "INSERT INTO memories_fts(memories_fts, rank) VALUES('merge', ?)", (-FULLTEXT_MERGE_PAGES,)
                    )
                    worked = txn.connection.total_changes() - before >= 2  # FTS5's documented signal
            except ResourceExhausted as exc:
                if exc.reason != WAL_LIMIT_REACHED:
                    raise
                break  # the WAL is held (``_check_wal_room``): the next pass merges
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
        may hold the forgotten vectors, and the engine rebuilds it without them. First, the pool's
        file watchers are told (``told``): the tenant's copies being sent are revoked
        (engine/backup.py)."""
        with self._read_gate.copies_held_back():  # none begins until the WAL is emptied (store/read_gate.py)
            self._told("content_erased")
            self.ann_path.unlink(missing_ok=True)
            self._replication.forgotten(self._forgotten_memories)  # kept where a restore re-applies them
            # Litestream holds a read transaction on a file it replicates, which the truncations below
            # wait for: the files leave replication meanwhile (store/replicas.py).
            with self._replication.paused():
                inbox = self.inbox(create=False)
                if inbox is not None:
                    with self.read() as txn:
                        adopted = txn.oplog_highest_event_id()  # still in the inbox too (store/inbox.py)
                    inbox.erase_traces(adopted_through=adopted)
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
                    truncate_wal(self._writer, self.path.name, self._read_gate)
                    # The pages Litestream's checkpoints copied into the file as they were (watched).
                    self._scrub_file(self._writer, page_scrub.written_pages(self.path))
                    try:
                        with self._writer:  # one transaction, counted as every write is
                            self._writer.execute("DELETE FROM meta WHERE key = ?", (ERASURE_META,))
                            self._replication.erased(self._writer)
                            WriteTxn(self._writer, self._faults).count_change()
                    except apsw.Error as exc:
                        raise translate_sqlite_error(exc, self.path.name) from exc
                    stop_at(self._faults, "erasure_finished")

    def _scrub_file(self, writer: apsw.Connection, pages: set[int] | None) -> None:
        """Clear the rooms of ``pages`` (None: every page) in the file, whose WAL the caller
        emptied, and drop the writer's page cache: its copies of pages as a split left them (or as
        they were before this pass) would come back with its next write of them."""
        if pages is None or pages:
            page_scrub.scrub_file(self.path, pages)
        writer.release_memory()

    def _forgotten_memories(self) -> list[tuple[int, float]]:
        with self.read() as txn:
            return txn.forgotten_memories()

    def checkpoint(self) -> tuple[int, int]:
        """A PASSIVE checkpoint on a short-lived connection of its own, so writes on the writer
        connection go on meanwhile. Returns (frames in the WAL, frames checkpointed); (0, 0)
        without one while the replication checkpoints the file (store/replicas.py
        ``replicating``)."""
        if not self._replication.checkpoints_are_ours():
            return 0, 0
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
        """Refuse a client's write: a fenced tenant (UNAVAILABLE TENANT_MOVING), or one the
        replication cannot take now (store/replicas.py ``admit_write``)."""
        if self.fenced:
            raise moving(self.path.stem, "its writes are refused until it is active on its new member")
        self._replication.admit_write()

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
            self._check_wal_room()
            yield from write_transaction(
                self._writer,
                self._begin_write if counted else lambda: WriteTxn(self._writer, self._faults),
                synchronous=self._synchronous,
                sync=sync,
                path=self.path.name,
            )
            self._told("committed")
            if self._wal_pages >= self._wal_limit_pages:
                self._catch_up_checkpoint()

    def _check_wal_room(self) -> None:
        """Refuse the write (RESOURCE_EXHAUSTED WAL_LIMIT_REACHED) while the WAL is past
        ``WAL_PINNED_FACTOR`` times its limit and a checkpoint still cannot copy it back: a reader
        holds an older snapshot (a backup's or an export's copy, store/snapshot.py), and every
        write meanwhile would grow it. While the replication checkpoints the file, its own
        checkpoints bound the WAL, except while a copy's snapshot (``snapshot``) is held."""
        bound = WAL_PINNED_FACTOR * self._wal_limit_pages
        if self._wal_pages < bound:
            return
        if self._replication.checkpoints_are_ours():
            self._catch_up_checkpoint()
            if self._wal_pages < bound:
                return
        elif not self._snapshots_held:
            return
        raise wal_full(self.path.stem, self._wal_pages, bound)

    def _catch_up_checkpoint(self) -> None:
        """A PASSIVE checkpoint on the writer connection, under the write lock, when the WAL
        passed ``wal_limit_pages``: the background one (store/maintenance.py) starts the WAL again
        only if it copies every frame before the next commit, and a writer committing large
        batches back to back outran it (1M memories by batches of 1,000: a 22 GB WAL at 500k,
        then a full disk). Holding the write lock, nothing is appended meanwhile, so it finishes
        (unless a reader keeps an older snapshot) and the next write starts the WAL again: the
        file stays near the limit. A checkpoint already running elsewhere does the work; none
        while the replication checkpoints the file (store/replicas.py ``replicating``)."""
        if not self._replication.checkpoints_are_ours():
            return
        try:
            frames, copied = self._writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            self._wal_pages = 0  # another checkpoint is running (the background one): it does the work
            return
        except apsw.Error as exc:
            raise translate_sqlite_error(exc, self.path.name) from exc
        self._wal_pages = 0 if copied >= frames else frames  # all copied: the next write starts it again

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
        with self._read_gate.reading():
            connection = self._take_reader()
            try:
                with self._read_transaction(connection) as txn:
                    yield txn
            finally:
                self._return_reader(connection)

    @contextmanager
    def _read_transaction(self, connection: apsw.Connection) -> Iterator[ReadTxn]:
        try:
            connection.execute("BEGIN")
            yield ReadTxn(connection)
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            raise translate_sqlite_error(exc, self.path.name) from exc
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")

    def _take_reader(self) -> apsw.Connection:
        with self._readers_lock:
            if self._readers:
                return self._readers.pop()
        return open_with_room(
            lambda: open_connection(
                self.path, readonly=True, synchronous=self._synchronous, page_cache_kib=READER_PAGE_CACHE_KIB
            ),
            self._make_room,
        )

    def _return_reader(self, connection: apsw.Connection) -> None:
        with self._readers_lock:
            if not self._closed and len(self._readers) < self._max_readers:
                self._readers.append(connection)
                return
        connection.close()
