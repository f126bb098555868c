"""A tenant's inbox: fast writes accepted but not yet taken by a hot-path worker, in a small
SQLite file of their own (``DATA_DIR/inbox/<tenant>.inbox.sqlite``).

Why a second file: SQLite has one writer per file. With the operation log in the tenant file,
an enqueue waited for whatever the tenant's worker was committing — a round of memories with
their full-text rows, 1-5 ms — and the enqueue p99 was that commit's. The inbox has its own
writer lock (``LockManager.for_inbox``), so an enqueue waits only for other enqueues and for the
worker's two short visits: reading what it takes (a bounded number of rows) and removing it.

The worker moves inbox rows into the tenant's ``oplog`` (same event ids) in one tenant
transaction, and only then removes them here (``adopted``); the move inserts with ``OR IGNORE``,
and every reader of the inbox takes only the rows above the highest event id the log ever held
(``oplog_highest_event_id``), so a row still here after its move — a crash between the two, or
the rule below — is never taken twice.

**The rule with replication** (the inbox and the tenant file replicate independently,
docs/replication.md#the-inbox-and-the-tenant-file): a row leaves the inbox only once the tenant
file's commit that adopted it is in object storage (``replicated_since``; at once without
replication). So whatever moment a volume is lost at, each fast write whose enqueue reached the
inbox's replica is in the inbox's replica or in the tenant file's, and a restore applies it once:
a row both hold is skipped by the rule above.

Event ids stay unique and increasing across both files: an operation's event id is its
acceptance position (store/acceptance.py), taken under the inbox lock, so ids are appended in
increasing order; the inbox's AUTOINCREMENT sequence is also raised at open to the highest
position the tenant file has ever seen (``floor``), in case the inbox lost its tail to a power cut
after the tenant file durably adopted it.

Every access runs under the inbox lock on the one connection (a second thread's statement
must never land inside another's open transaction). Lock order: the inbox lock may be held when
taking the tenant's write lock (a synchronous write with a request id holds it until its commit
has ended), never the reverse. Nor is it waited for in a read transaction of the tenant file: an
erasure empties the tenant's WAL under the write lock and waits for such readers, while a writer
holding the inbox lock waits for that write lock (take the inbox lock first, as
``hot_path/snapshot.py`` does).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from mnemosyne.store.page_scrub import BASE_VFS
from mnemosyne.store.queries import Queries
from mnemosyne.store.transactions import translate_sqlite_error, truncate_wal, write_transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ops(
  event_id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  request_id TEXT,
  accepted_at REAL NOT NULL,
  fingerprint TEXT
);
-- Idempotency keys of fast writes still here; they move with their last operation.
CREATE TABLE IF NOT EXISTS requests(
  request_id TEXT PRIMARY KEY,
  method TEXT NOT NULL,
  payload_hash TEXT NOT NULL,
  result TEXT NOT NULL,
  created_at REAL NOT NULL,
  through_event_id INTEGER NOT NULL
) WITHOUT ROWID;
"""
# An inbox of an older version lacks the fingerprint column (a queued write's content identity,
# for a forget and for a synchronous write of the same content): added, and filled in, at open.
_FINGERPRINTS = """
CREATE INDEX IF NOT EXISTS ops_fingerprint ON ops(fingerprint, event_id);
"""
# WAL pages after which the worker checkpoints the inbox (off every enqueue's commit).
CHECKPOINT_PAGES = 1000
# Past this many the worker checkpoints it under the inbox lock (``checkpoint_if_grown``): under
# steady fast writes its checkpoint beside them never found a moment without an enqueue's commit,
# so the WAL never started again and grew by every enqueue (119 MB after 20 s of one writer).
WAL_LIMIT_PAGES = 2 * CHECKPOINT_PAGES
# When the WAL starts again its file is cut back to this length (SQLite's journal_size_limit): a
# burst of fast writes left it at ~50 MB for as long as the tenant stayed open.
WAL_KEPT_BYTES = CHECKPOINT_PAGES * 4096


@dataclass(frozen=True)
class InboxOp:
    event_id: int
    kind: str
    payload: str
    request_id: str | None
    accepted_at: float
    fingerprint: str | None = None


@dataclass(frozen=True)
class InboxRequest:
    request_id: str
    method: str
    payload_hash: str
    result: str
    created_at: float


class InboxTxn(Queries):
    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection

    def append(
        self, event_id: int, kind: str, payload: str, fingerprint: str | None, request_id: str | None, now: float
    ) -> None:
        """One operation at ``event_id``, its acceptance position (above every id here)."""
        self.connection.execute(
            "INSERT INTO ops(event_id, kind, payload, request_id, accepted_at, fingerprint) VALUES(?, ?, ?, ?, ?, ?)",
            (event_id, kind, payload, request_id, now, fingerprint),
        )

    def ids_with_fingerprints(self, fingerprints: Sequence[str], *, after_id: int) -> list[int]:
        """Ids above ``after_id`` of the operations here of these contents, in order."""
        found: list[int] = []
        for fingerprint in dict.fromkeys(fingerprints):
            found += [
                row[0]
                for row in self.connection.execute(
                    "SELECT event_id FROM ops WHERE fingerprint = ? AND event_id > ?", (fingerprint, after_id)
                )
            ]
        return sorted(found)

    def last_id(self) -> int:
        """The highest id waiting here (0: none)."""
        return int(self._one("SELECT max(event_id) FROM ops") or 0)

    def save_request(self, request: InboxRequest, through_event_id: int) -> None:
        self.connection.execute(
            "INSERT INTO requests(request_id, method, payload_hash, result, created_at, through_event_id) "
            "VALUES(?, ?, ?, ?, ?, ?)",
            (
                request.request_id,
                request.method,
                request.payload_hash,
                request.result,
                request.created_at,
                through_event_id,
            ),
        )

    def ops(self, *, after_id: int = 0, up_to_id: int | None = None, limit: int = -1) -> list[InboxOp]:
        return self._records(
            InboxOp,
            "FROM ops WHERE event_id > ? AND event_id <= ? ORDER BY event_id LIMIT ?",
            (after_id, up_to_id if up_to_id is not None else 1 << 62, limit),
        )

    def sequence(self) -> int:
        """The event-id sequence: the highest id ever given here (or the floor it was raised to)."""
        return int(self._one("SELECT seq FROM sqlite_sequence WHERE name = 'ops'") or 0)

    def requests_through(self, event_id: int) -> list[InboxRequest]:
        return self._records(InboxRequest, "FROM requests WHERE through_event_id <= ?", (event_id,))

    def depth(self, *, after_id: int = 0, up_to_id: int | None = None) -> tuple[int, float | None]:
        """(operations waiting here with after_id < id [<= up_to_id], oldest acceptance time)."""
        count, oldest = self._row(
            "SELECT count(*), min(accepted_at) FROM ops WHERE event_id > ? AND event_id <= ?",
            (after_id, up_to_id if up_to_id is not None else 1 << 62),
        )
        return int(count), oldest

    def remove_through(self, event_id: int) -> None:
        self.connection.execute("DELETE FROM ops WHERE event_id <= ?", (event_id,))
        self.connection.execute("DELETE FROM requests WHERE through_event_id <= ?", (event_id,))


class Inbox:
    """One tenant's open inbox file. Owned by its ``TenantStore``, closed with it."""

    def __init__(
        self,
        path: Path,
        *,
        lock: Any,
        synchronous: str,
        floor: int,
        configure: Callable[[apsw.Connection], None],
        on_commit: Callable[[], None] = lambda: None,
        replicated_since: Callable[[], float] = lambda: math.inf,
        may_checkpoint: Callable[[], bool] = lambda: True,
    ) -> None:
        """``on_commit``: called after each commit, inside it (store/replicas.py ``written``);
        ``replicated_since``: the time before which the tenant's commits are all in object
        storage (store/replicas.py), which rows wait for to leave (``adopted``);
        ``may_checkpoint``: False while the replication checkpoints the file (store/replicas.py
        ``replicating``)."""
        self.path = path
        self._on_commit = on_commit
        self._replicated_since = replicated_since
        self._may_checkpoint = may_checkpoint
        self._adoptions: list[tuple[int, float]] = []  # (moved through event id, when its commit ended)
        self.lock = lock
        self._synchronous = synchronous
        self._current_synchronous = synchronous
        self._wal_pages = 0
        self._wal_pages_checkpointed = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with self.lock:
            # Its erasure rewrites it whole (``erase_traces``: VACUUM), which leaves in its pages no
            # byte but of live rows: it needs no layer over SQLite's own VFS (store/page_scrub.py).
            self._connection = apsw.Connection(str(path), vfs=BASE_VFS)
            try:
                configure(self._connection)
                self._connection.pragma("journal_mode", "wal")
                self._connection.pragma("synchronous", synchronous)
                self._connection.pragma("journal_size_limit", WAL_KEPT_BYTES)
                # Checkpoints run in the worker (``checkpoint_if_grown``), never inside an enqueue.
                self._connection.set_wal_hook(self._wal_hook)
                self._connection.execute("BEGIN IMMEDIATE")
                self._connection.execute(_SCHEMA)
                _add_fingerprints(self._connection)
                self._connection.execute(
                    "INSERT INTO sqlite_sequence(name, seq) SELECT 'ops', 0 "
                    "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'ops')"
                )
                self._connection.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'ops'", (floor,))
                self._connection.execute("COMMIT")
            except BaseException as exc:  # closing rolls the bootstrap back; a full disk is DISK_FULL
                self._connection.close()
                if new:  # a file this failed creation made is not left behind
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{path}{suffix}").unlink(missing_ok=True)
                if isinstance(exc, apsw.Error):
                    raise translate_sqlite_error(exc, path.name) from exc
                raise

    def _wal_hook(self, _connection: apsw.Connection, _dbname: str, pages: int) -> int:
        self._on_commit()
        if pages < self._wal_pages_checkpointed:
            self._wal_pages_checkpointed = 0  # a checkpoint completed and the WAL started again
        self._wal_pages = pages
        return apsw.SQLITE_OK

    @contextmanager
    def write(self, *, sync: bool) -> Iterator[InboxTxn]:
        """One ``BEGIN IMMEDIATE`` transaction under the inbox lock (store/transactions.py);
        ``sync=False`` commits with ``synchronous=NORMAL``. The setting is changed only when it
        differs from the last write's: enqueues all ask the same, and each pragma is one more
        release and re-acquisition of the GIL on an enqueue's path."""
        with self.lock:
            connection = self._connection
            wanted = self._synchronous if sync else "NORMAL"
            if wanted != self._current_synchronous:
                connection.pragma("synchronous", wanted)
                self._current_synchronous = wanted
            yield from write_transaction(connection, lambda: InboxTxn(connection), synchronous=wanted, sync=True)

    @contextmanager
    def read(self) -> Iterator[InboxTxn]:
        with self.lock:
            self._connection.execute("BEGIN")
            try:
                yield InboxTxn(self._connection)
            finally:
                if self._connection.in_transaction:
                    self._connection.execute("COMMIT")

    def checkpoint_if_grown(self) -> None:
        """A PASSIVE checkpoint on a connection of its own once the WAL grew by CHECKPOINT_PAGES
        since the last one: the inbox holds a few rows, so it copies a few pages, and enqueues go
        on meanwhile. (A checkpoint that a reader kept from finishing leaves the WAL long; it is
        not retried on every round, each one's syncs would slow the enqueues' own.) The WAL starts
        again only when a checkpoint copied every frame before the next enqueue's commit: past
        WAL_LIMIT_PAGES, the checkpoint runs under the inbox lock, where none commits meanwhile."""
        if self._wal_pages < self._wal_pages_checkpointed + CHECKPOINT_PAGES or not self._may_checkpoint():
            return
        if self._wal_pages >= WAL_LIMIT_PAGES:
            with self.lock:  # the inbox's own connection: no enqueue appends until it is done
                self._wal_pages_checkpointed = self._wal_pages
                try:
                    self._connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                except apsw.BusyError:
                    pass  # another checkpoint is running: the next round's comes here again
            return
        connection = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE, vfs=BASE_VFS)
        try:
            connection.pragma("synchronous", self._synchronous)
            self._wal_pages_checkpointed = self._wal_pages
            connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.BusyError:
            pass  # another checkpoint is running: it does the work
        finally:
            connection.close()

    def copy_to(self, destination: Path) -> int:
        """The whole inbox into a new file at ``destination`` (SQLite's online backup, in one
        step: the inbox holds a few rows); the caller holds the inbox lock. Returns the inbox's
        event-id sequence, which every enqueue advances."""
        with self.lock:
            target = apsw.Connection(str(destination), vfs=BASE_VFS)
            try:
                with target.backup("main", self._connection, "main") as backup:
                    backup.step(-1)
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, destination.name) from exc
            finally:
                target.close()
            return self.sequence()

    def sequence(self) -> int:
        with self.read() as txn:
            return txn.sequence()

    def erase_traces(self, adopted_through: int = 0) -> None:
        """Remove the operations the log adopted already (ids up to ``adopted_through``: a crash
        may have left them here after their adoption, with their payloads), then rewrite the inbox
        without free space and empty its WAL: an operation that left it for the log (or a request
        id that moved with it) leaves no page image behind. The inbox holds a few rows, so this
        copies a few pages; enqueues wait for it."""
        with self.lock:
            try:
                if adopted_through:
                    with self.write(sync=False) as txn:
                        txn.remove_through(adopted_through)
                self._connection.execute("VACUUM")
            except apsw.Error as exc:
                raise translate_sqlite_error(exc, self.path.name) from exc
            truncate_wal(self._connection, self.path.name)

    def adopted(self, through: int) -> None:
        """The tenant file committed its adoption of the rows up to ``through``: they leave once
        that commit is in object storage (the module's docstring), now or at a later call. Told
        again of rows moved already (a crash left them here), it counts them moved now."""
        with self.lock:
            if not self._adoptions or through > self._adoptions[-1][0]:
                self._adoptions.append((through, time.time()))
        self.release_adopted()

    def release_adopted(self) -> None:
        """Remove the rows whose adoption is in object storage by now."""
        since = self._replicated_since()
        with self.lock:
            done = [through for through, at in self._adoptions if at < since]
            if not done:
                return
            self._adoptions = [(through, at) for through, at in self._adoptions if at >= since]
            with self.read() as txn:
                if not txn.ops(up_to_id=max(done), limit=1):
                    return  # nothing of them is here: no write (each would be replicated)
            with self.write(sync=False) as txn:
                txn.remove_through(max(done))

    def close(self) -> None:
        with self.lock:
            self._connection.close()


def _add_fingerprints(connection: apsw.Connection) -> None:
    """Give an inbox of an older version its fingerprint column (filled from the payloads), and
    every inbox its index; inside the open's transaction."""
    columns = {row[1] for row in connection.execute("PRAGMA table_info(ops)")}
    if "fingerprint" not in columns:
        connection.execute("ALTER TABLE ops ADD COLUMN fingerprint TEXT")
        connection.execute(
            "UPDATE ops SET fingerprint = json_extract(payload, '$.fingerprint') WHERE json_valid(payload)"
        )
    connection.execute(_FINGERPRINTS)


def stored_sequence(path: Path) -> int:
    """The highest event id an inbox file ever gave (0: no file): read without opening it for
    writing, as a tenant file opens (the tenant's acceptance positions resume above it)."""
    connection = open_readonly(path)
    if connection is None:
        return 0
    try:
        row = connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'ops'").fetchone()
        return int(row[0]) if row else 0
    except apsw.Error:
        return 0  # a file whose open never finished: the tenant file's floor holds
    finally:
        connection.close()


def open_readonly(path: Path) -> apsw.Connection | None:
    """The inbox file read-only, or None when the tenant never had one (offline inspection)."""
    if not path.exists():
        return None
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY, vfs=BASE_VFS)


def read_ops(connection: apsw.Connection) -> Sequence[InboxOp]:
    connection.execute("BEGIN")
    try:
        return InboxTxn(connection).ops()
    finally:
        connection.execute("COMMIT")
