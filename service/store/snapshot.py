"""A consistent copy of one tenant — its file and its hot-path inbox — made while it serves.

The tenant file is copied with SQLite's online backup API, a few hundred pages per step, from a
connection holding one read transaction from the first step to the last: the copy is that one
snapshot, writers never wait for it (WAL), and a write committed meanwhile neither restarts the
copy nor appears in it. The inbox is copied, and the snapshot's read transaction begun, under the
inbox lock, so the two agree: no fast write is accepted and none moves from the inbox into the
log while both are taken. (A move the snapshot already holds may still be in the inbox copy too:
moving it again at start-up changes nothing, store/inbox.py.)

What the copy holds is described by ``SnapshotFacts``, read in the same snapshot: the manifest of
a backup or an export (engine/backup.py) is made of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from mnemosyne.errors import DataLoss, MnemosyneError
from mnemosyne.store.connections import open_copy
from mnemosyne.store.inbox import read_ops
from mnemosyne.store.page_scrub import BASE_VFS, scrub_file
from mnemosyne.store.schema import SCHEMA_VERSION
from mnemosyne.store.tenant_file import unmade_objects
from mnemosyne.store.tenant_store import TenantStore, read_file
from mnemosyne.store.transactions import translate_sqlite_error

PAGES_PER_STEP = 256  # 1 MiB of 4 KiB pages: a step takes a few milliseconds


@dataclass(frozen=True)
class SnapshotFacts:
    change_counter: int  # write transactions the tenant file has seen (WriteTxn.count_change)
    inbox_sequence: int  # the inbox's event-id sequence (every enqueue advances it); 0 without one
    head_hash: str  # the audit chain's head
    ledger_entries: int
    memories: int  # live memories
    last_event_id: int  # the highest hot-path event id, in the log or the inbox
    generations: dict[str, int] = field(default_factory=dict)


def change_marks(store: TenantStore) -> tuple[int, int, str]:
    """(change counter, inbox sequence, audit chain's head hash): what an incremental backup
    compares, read cheaply."""
    with store.read() as txn:
        counter = txn.change_counter()
        _seq, head_hash = txn.ledger_head()
    inbox = store.inbox(create=False)
    return counter, inbox.sequence() if inbox is not None else 0, head_hash


def file_facts(database: Path, inbox: Path | None) -> SnapshotFacts:
    """The facts of a tenant file (and its inbox) no store has open: a copy brought back from
    elsewhere (a replica restored, service/replication/restore.py), to be imported."""
    inbox_sequence = 0
    connection = open_copy(inbox) if inbox is not None and inbox.exists() else None
    if connection is not None:
        try:
            if connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone():
                row = connection.execute("SELECT seq FROM sqlite_sequence WHERE name = 'ops'").fetchone()
                inbox_sequence = int(row[0]) if row else 0
        finally:
            connection.close()
    with read_file(database, copy=True) as txn:
        live, _forgotten, entries = txn.counts()
        _seq, head_hash = txn.ledger_head()
        return SnapshotFacts(
            change_counter=txn.change_counter(),
            inbox_sequence=inbox_sequence,
            head_hash=head_hash,
            ledger_entries=entries,
            memories=live,
            last_event_id=max(txn.oplog_highest_event_id(), inbox_sequence),
            generations=txn.scope_generations(),
        )


def copy_tenant(
    store: TenantStore,
    database: Path,
    inbox_copy: Path,
    *,
    pages_per_step: int = PAGES_PER_STEP,
    on_step: Callable[[int, int], None] = lambda _remaining, _total: None,
) -> tuple[SnapshotFacts, bool]:
    """Copy the tenant into ``database`` and, if it has an inbox, its inbox into ``inbox_copy``.
    Returns the facts of the copy and whether an inbox was copied. ``on_step(remaining,
    total)`` is called after each step (pages)."""
    with store.snapshot() as txn:
        with store.inbox_lock:
            txn.connection.execute("SELECT 1 FROM meta LIMIT 1").fetchall()  # the snapshot starts here
            inbox = store.inbox(create=False)
            inbox_sequence = inbox.copy_to(inbox_copy) if inbox is not None else 0
        live, _forgotten, entries = txn.counts()
        _seq, head_hash = txn.ledger_head()
        facts = SnapshotFacts(
            change_counter=txn.change_counter(),
            inbox_sequence=inbox_sequence,
            head_hash=head_hash,
            ledger_entries=entries,
            memories=live,
            last_event_id=max(txn.oplog_highest_event_id(), inbox_sequence),
            generations=txn.scope_generations(),
        )
        # Written without the scrubbing layer (store/page_scrub.py), which would take the
        # interpreter lock for every page: beside busy threads each page waited its turn and a
        # copy took seconds, the erasure's truncation of the WAL waiting for its snapshot. The
        # copy is scrubbed whole once written, before its snapshot ends: a WAL frame's unused room
        # (a WAL is not scrubbed) never outlives in the copy an erasure that waited for it.
        target = apsw.Connection(str(database), vfs=BASE_VFS)
        try:
            # A scratch copy (emptied at start-up) needs no journal and no sync to survive a crash.
            target.pragma("journal_mode", "off")
            target.pragma("synchronous", "off")
            with target.backup("main", txn.connection, "main") as backup:
                while not backup.done:
                    backup.step(pages_per_step)
                    on_step(backup.remaining, backup.page_count)
                    store.seam("copy_step")  # a test holds a copy midway: its snapshot held
        except apsw.Error as exc:
            raise translate_sqlite_error(exc, database.name) from exc
        finally:
            target.close()
        scrub_file(database, sync=False)
    return facts, inbox is not None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_copy(
    path: Path,
    inbox: Path | None,
    *,
    tenant: str,
    manifest: SnapshotFacts,
    error: type[MnemosyneError] = DataLoss,
) -> None:
    """Refuse (``error``) a tenant's copy, its file at ``path`` and its hot-path inbox (if any),
    that is damaged (CHAIN_INVALID: ``check_chain``, ``check_inbox``) or holds other figures than
    its manifest says (MANIFEST_MISMATCH): a manifest is outside data, each of its figures a
    claim about the file that a server would otherwise take on trust (a generation of a scope a
    host compares its writes with, the event id the next fast write follows)."""
    check_chain(path, tenant=tenant, manifest=manifest, error=error)
    if inbox is not None:
        check_inbox(inbox, tenant=tenant, error=error)
    held = file_facts(path, inbox)
    for name in ("change_counter", "inbox_sequence", "last_event_id"):
        if getattr(held, name) != getattr(manifest, name):
            raise error(
                f"the copy of {tenant} holds {name} {getattr(held, name)}; its manifest says {getattr(manifest, name)}",
                reason="MANIFEST_MISMATCH",
            )
    for scope in sorted(held.generations.keys() | manifest.generations.keys()):
        if held.generations.get(scope) != manifest.generations.get(scope):
            raise error(
                f"the copy of {tenant} holds generation {held.generations.get(scope, 'none')} of scope "
                f"{scope[:80]!r}; its manifest's generations say {manifest.generations.get(scope, 'none')}",
                reason="MANIFEST_MISMATCH",
            )


def check_chain(path: Path, *, tenant: str, manifest: SnapshotFacts, error: type[MnemosyneError] = DataLoss) -> None:
    """Refuse (``error``, reason CHAIN_INVALID or MANIFEST_MISMATCH) a tenant file copy whose audit
    chain does not verify, or ends elsewhere or holds another number of live memories than its
    manifest says."""
    head_hash, entries, memories = manifest.head_hash, manifest.ledger_entries, manifest.memories
    try:
        with read_file(path, copy=True) as txn:
            unmade = unmade_objects(txn.connection)
            verdict = txn.audit()
            live, _forgotten, _entries = txn.counts()
    except DataLoss as exc:
        raise error(
            f"the copy of {tenant} is not a usable tenant file: {exc.message}", reason="CHAIN_INVALID"
        ) from None
    if unmade:  # installed, another's trigger would run in every write, an index of ours missing slow it
        shown = ", ".join(unmade[:5]) + (f" and {len(unmade) - 5} more" if len(unmade) > 5 else "")
        raise error(
            f"the copy of {tenant} is not a tenant file as this server makes it: its schema has {shown}",
            reason="CHAIN_INVALID",
        )
    if not verdict.valid:
        raise error(
            f"the audit chain of {tenant} in the copy is broken at entry {verdict.first_broken_at}: "
            f"{verdict.problems[0].detail}",
            reason="CHAIN_INVALID",
        )
    if verdict.head_hash != head_hash or verdict.checked != entries:
        raise error(
            f"the audit chain of {tenant} ends at {verdict.head_hash[:12]}… after {verdict.checked} entries; its "
            f"manifest says {head_hash[:12]}… after {entries}",
            reason="MANIFEST_MISMATCH",
        )
    if live != memories:
        raise error(
            f"the copy of {tenant} holds {live} live memories; its manifest says {memories}",
            reason="MANIFEST_MISMATCH",
        )


def check_schema(path: Path, *, tenant: str, error: type[MnemosyneError] = DataLoss) -> None:
    """Refuse (``error``, SCHEMA_TOO_NEW) a tenant file copy made by a newer server."""
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        version = int(connection.pragma("user_version"))
    except apsw.Error as exc:
        raise error(f"the copy of {tenant} is not an SQLite database ({exc})", reason="CHAIN_INVALID") from None
    finally:
        connection.close()
    if version > SCHEMA_VERSION:
        raise error(
            f"the copy of {tenant} has schema version {version}, newer than this server's {SCHEMA_VERSION}; "
            "upgrade this server first",
            reason="SCHEMA_TOO_NEW",
        )


def check_inbox(path: Path, *, tenant: str, error: type[MnemosyneError] = DataLoss) -> None:
    """Refuse (``error``, CHAIN_INVALID) a hot-path inbox copy that the tenant could not open: not
    an SQLite database, damaged, or whose operations cannot be read. Installed, it would fail
    every call of the tenant that touches its hot path (TENANT_CORRUPT)."""
    try:
        connection = open_copy(path)
    except apsw.Error as exc:
        raise error(f"the inbox of the copy of {tenant} cannot be opened ({exc})", reason="CHAIN_INVALID") from None
    try:
        verdict = [str(row[0]) for row in connection.execute("PRAGMA quick_check")]
        tables = {str(row[0]) for row in connection.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if tables:  # an inbox that never held a table is opened as a new one
            read_ops(connection)
    except apsw.Error as exc:
        raise error(
            f"the inbox of the copy of {tenant} is not a usable inbox ({exc})", reason="CHAIN_INVALID"
        ) from None
    finally:
        connection.close()
    if verdict != ["ok"]:
        raise error(f"the inbox of the copy of {tenant} is damaged: {verdict[0][:200]}", reason="CHAIN_INVALID")
