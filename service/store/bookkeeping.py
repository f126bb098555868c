"""What every transaction on a tenant file reads and writes beside the content it is about: the
``meta`` settings and marks, the counters, the ledger's head and its appends, the stored results of
requests with an id; and how a write transaction isolates one item (a savepoint) and where a test
fails or kills it (the fault points of ``Seams.store_faults``, runtime/seams.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import apsw

from mnemosyne.store import ledger
from mnemosyne.store.acceptance import ACCEPTANCE_META
from mnemosyne.store.queries import Queries
from mnemosyne.store.transactions import translate_sqlite_error

# The counter every write transaction on a tenant file increments (``WriteTxn.count_change``).
CHANGE_COUNTER = "changes"
# Set in a forget's transaction, cleared once the WAL no longer holds what it erased: a crash in
# between is finished at the next open (``TenantStore.erase_traces``).
ERASURE_META = "erasure_pending"
# Set once every page of the file has had the room a split leaves cleared (store/page_scrub.py):
# a file of an older version gets it at its first open.
PAGES_SCRUBBED_META = "pages_scrubbed"
# The ``meta`` key a change that removed or replaced memories advances, so the engine's caches
# (engine/index.py, engine/postings.py) see it (``RecallReads.index_state``).
FORGET_EPOCH_META = "forget_epoch"
# The tenant's timeline (``BookkeepingReads.timeline``).
TIMELINE_META = "timeline"


class InjectedFault(Exception):
    """Raised by a store test seam inside a write transaction (never in production)."""


class NotStored(Exception):
    """What a savepoint's block could not store (a statement failed, not the disk): the block was
    rolled back; the transaction may go on with other work (``WriteTxn.alive``)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class BookkeepingReads(Queries):
    """The tenant file's settings, counters and sizes, and the ledger's head."""

    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection

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

    def timeline(self) -> str:
        """The tenant's timeline (schema.py ``_V_ACCEPTANCE``): replaced by every install that
        replaces its content, so a consistency token of an earlier one is told apart."""
        return self.meta(TIMELINE_META) or ""

    def acceptance_floor(self) -> int:
        """The highest acceptance position this file holds: a synchronous write's (``meta``), or
        an operation's event id (the log's sequence, pruned operations included)."""
        return int(
            self._one(
                "SELECT max(coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0), "
                "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0))",
                (ACCEPTANCE_META,),
            )
        )

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

    def memories_over_time(self, buckets: int) -> tuple[float, float, list[int]]:
        """(first creation time, bucket width in seconds, live memories at the end of each of
        ``buckets`` equal periods from the first memory's creation to now): created by then and
        not forgotten by then. Merged near duplicates are left out (their merge has no time).
        One pass over the memories, like ``counts``; (0, 0, []) for a tenant without memories."""
        first = self._one("SELECT min(created_at) FROM memories WHERE merged_into IS NULL")
        if first is None:
            return 0.0, 0.0, []
        width = max(time.time() - float(first), 1.0) / buckets
        last = buckets - 1
        added = [0] * buckets
        for column, sign in (("created_at", 1), ("forgotten_at", -1)):
            rows = self.connection.execute(
                f"SELECT min(max(CAST(({column} - ?) / ? AS INTEGER), 0), ?), count(*) FROM memories "  # noqa: S608 - a column name of this module
                f"WHERE {column} IS NOT NULL AND merged_into IS NULL GROUP BY 1",
                (first, width, last),
            )
            for bucket, count in rows:
                added[int(bucket)] += sign * int(count)
        live, running = [], 0
        for change in added:
            running += change
            live.append(running)
        return float(first), width, live

    def forgotten_memories(self) -> list[tuple[int, float]]:
        """(id, created_at) of every forgotten memory (a forget keeps both: schema.FORGET_KEEPS)."""
        rows = self.connection.execute("SELECT id, created_at FROM memories WHERE forgotten_at IS NOT NULL")
        return [(int(memory_id), float(created_at)) for memory_id, created_at in rows]

    def live_memory_count(self) -> int:
        return int(self._one("SELECT count(*) FROM memories WHERE forgotten_at IS NULL"))

    def used_bytes(self) -> int:
        """Bytes of database pages in use as this transaction sees them (free pages excluded)."""
        page_size = int(self._one("PRAGMA page_size"))
        return (int(self._one("PRAGMA page_count")) - int(self._one("PRAGMA freelist_count"))) * page_size

    def ledger_head(self) -> tuple[int, str]:
        row = self.connection.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, ledger.GENESIS_HASH) if row is None else (row[0], row[1])


class BookkeepingWrites(BookkeepingReads):
    """The bookkeeping a write transaction does; valid only inside ``TenantStore.write()``."""

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

    def note_acceptance(self, position: int) -> None:
        """A synchronous write took ``position``: stored with the write, so the tenant's sequence
        resumes above it after a restart (store/acceptance.py)."""
        self.connection.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = max(CAST(value AS INTEGER), excluded.value)",
            (ACCEPTANCE_META, position),
        )

    def new_timeline(self) -> None:
        """Replace the tenant's timeline: its content was replaced (an import, a restore)."""
        self.set_meta(TIMELINE_META, os.urandom(8).hex())

    def delete_meta(self, key: str) -> None:
        self.connection.execute("DELETE FROM meta WHERE key = ?", (key,))

    def add_counters(self, deltas: dict[str, int]) -> None:
        self.connection.executemany(
            "INSERT INTO counters(name, value) VALUES(?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            [(name, delta) for name, delta in deltas.items() if delta],
        )

    def save_request(
        self, request_id: str, method: str, payload_hash: str, result_json: str, created_at: float | None = None
    ) -> None:
        self.connection.execute(
            "INSERT INTO requests(request_id, method, payload_hash, result, created_at) VALUES(?, ?, ?, ?, ?)",
            (request_id, method, payload_hash, result_json, time.time() if created_at is None else created_at),
        )
        self._fault_point("after_request", request_id)

    def keep_latest_requests(self, kept: int) -> None:
        """Drop the request ids past the ``kept`` latest (the oldest first)."""
        self.connection.execute(
            "DELETE FROM requests WHERE request_id IN "
            "(SELECT request_id FROM requests ORDER BY created_at DESC LIMIT -1 OFFSET ?)",
            (kept,),
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

    def advance_forget_epoch(self) -> None:
        """Memories went or changed: the engine's caches of the file take the change or reload."""
        epoch = int(self.meta(FORGET_EPOCH_META, "0") or 0)
        self.set_meta(FORGET_EPOCH_META, str(epoch + 1))

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
