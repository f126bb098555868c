"""The tenants of a data directory (store/data_dir.py): tenant ids to files, opened, created,
replaced and removed.

Tenant ids are validated (store/tenant_ids.py) before they become a path. At most ``max_open``
tenant files are kept open, the least recently used idle one closed first (store/open_stores.py).

A tenant's file exists only once a write to it succeeded: the first write of a new tenant is made
in a complete file built under a temporary name (``.new-<tenant>.<random>.sqlite``), which is
renamed into place after that write committed and only then; a failed first write (a full disk, a
stale generation) leaves nothing. Reads of a tenant without a file never create one.

An import installs a tenant's files atomically (``install``, store/install.py): a kill at any
moment leaves the old tenant whole or the new one, never neither (a kill after its commit is
finished at the next start).

With members, every open, creation, install and move step asks the tenant's ownership
(store/ownership.py): a member opens only the files it holds, and creates only the tenants whose
home it is.

With replication (store/replicas.py), every change of a tenant's files that is no transaction
runs inside ``Replicas.swapping``, and a missing tenant object storage holds is restored first.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Literal

from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Unavailable
from mnemosyne.store import install as installs
from mnemosyne.store.connections import open_with_room
from mnemosyne.store.data_dir import (
    INBOX_DIR_NAME,
    INBOX_FILE_SUFFIX,
    NEW_FILE_PREFIX,
    TENANT_FILE_SUFFIX,
    TENANTS_DIR_NAME,
    claim_data_dir,
    listed_tenants,
    remove_leftovers,
    remove_orphan_inboxes,
    remove_tenant_files,
    server_secret,
)
from mnemosyne.store.erasure_log import erasing, finish_erasures, head_of, timeline_of
from mnemosyne.store.file_faults import stop_at
from mnemosyne.store.file_watchers import FileChange, FileWatcher
from mnemosyne.store.files import bytes_on_disk, checkpoint_away, fsync, modified, remove_database
from mnemosyne.store.locks import LockManager
from mnemosyne.store.maintenance import WAL_LIMIT_PAGES, Maintainer
from mnemosyne.store.membership import TENANT_MOVING, Membership
from mnemosyne.store.open_stores import OpenStore, OpenStores
from mnemosyne.store.ownership import (
    INACTIVE,
    MOVE_STEP_KEY,
    PLACEMENTS_REMEMBERED,
    TOMBSTONED,
    Ownership,
    OwnershipRecord,
    Placement,
    check_install_over,
    check_replaceable_by_move,
    incoming_mark,
    reclaim_tombstone,
    reclaimed_mark,
    write_move_step,
)
from mnemosyne.store.replicas import (
    NO_REPLICAS,
    Replicas,
    StoreReplication,
    forget_generation,
    record_floor,
    refuse_stale,
)
from mnemosyne.store.tenant_file import damage_of
from mnemosyne.store.tenant_ids import TENANT_ID_PATTERN, validate_tenant
from mnemosyne.store.tenant_store import ANN_FILE_SUFFIX, FULLTEXT_MERGE_MAX_STEPS, ReadTxn, TenantStore, read_file
from mnemosyne.store.tenantless_requests import TenantlessRequests

# Full-text segments past which opening a tenant asks for a maintenance pass: a tenant the passes
# keep up with has a few (FTS5's automerge levels); one loaded in bulk, hundreds (docs/performance.md).
SEGMENTS_ON_OPEN = 32

# Why a tenant a restore from object storage installs is closed off; a call waits for it (``_acquire``).
RESTORING = "TENANT_RESTORING"
INSTALL_WAIT_SECONDS = 30.0  # a restore from object storage at a first open waits this long for its install
log = logging.getLogger("mnemosyne.store")


class TenantPool:
    def __init__(
        self,
        data_dir: Path | str,
        *,
        max_open: int,  # the defaults of these two are the engine's (engine/config.py)
        synchronous: str,
        max_readers: int = 4,
        faults: frozenset[str] = frozenset(),
        membership: Membership | None = None,
        placements_remembered: int = PLACEMENTS_REMEMBERED,
        replicas: Replicas = NO_REPLICAS,
        tenantless: TenantlessRequests | None = None,
        wal_limit_pages: int = WAL_LIMIT_PAGES,  # each store's (TenantStore, store/maintenance.py)
    ) -> None:
        if max_open < 1:
            raise InvalidArgument("max_open must be at least 1", reason="CONFIG_INVALID")
        self.data_dir = Path(data_dir)
        self.tenants_dir = self.data_dir / TENANTS_DIR_NAME
        self.replicas = replicas  # told of every swap of a tenant's files (store/replicas.py)
        self.tenantless = tenantless  # results kept for tenants without a file: a new file takes its own
        self._dir_lock = claim_data_dir(self.data_dir)
        # engine/webhooks/ watches files (no poll of every one); ``recovered``: installs finished unwatched,
        # those a kill interrupted after their commit (first: an install finished here may bring its inbox).
        self.watchers: list[FileWatcher] = []
        self.recovered = installs.recover(self.tenants_dir, TENANT_ID_PATTERN.fullmatch, self._finish_install)
        remove_leftovers(self.tenants_dir)
        remove_orphan_inboxes(self.data_dir)
        self.locks = LockManager()
        self._stores = OpenStores(max_open)
        self._synchronous = synchronous
        self._max_readers = max_readers
        self._faults = faults
        self._wal_limit_pages = wal_limit_pages
        # With members (store/membership.py), a tenant is opened only by its owner, and only from
        # a file naming this member at the current epoch (store/ownership.py); None: one server
        # holds every tenant.
        self.ownership = (
            None
            if membership is None
            else Ownership(membership, self.data_dir, self.move_record, self.replicas.holder, placements_remembered)
        )
        self._damaged: dict[str, float] = {}  # tenant -> modification time of its file when an open found it damaged
        self._guard = threading.Lock()  # of ``_damaged``
        self.maintainer = Maintainer(self._maintain)
        self.secret = server_secret(self.data_dir)
        valid, head_of_tenant = TENANT_ID_PATTERN.fullmatch, lambda tenant: head_of(self.path_for(tenant))
        finish_erasures(self.data_dir, self.tenants_dir, valid, head_of_tenant, self._remove_erased)  # after a receipt

    @property
    def membership(self) -> Membership | None:  # as its ownership has it (a change of the list drops its previous)
        return None if self.ownership is None else self.ownership.membership

    def path_for(self, tenant: str) -> Path:
        return self.tenants_dir / f"{validate_tenant(tenant)}{TENANT_FILE_SUFFIX}"

    def inbox_path_for(self, tenant: str) -> Path:
        return self.data_dir / INBOX_DIR_NAME / f"{validate_tenant(tenant)}{INBOX_FILE_SUFFIX}"

    def exists(self, tenant: str) -> bool:
        return self.path_for(tenant).exists()

    def tenant_ids(self) -> list[str]:
        """Tenant ids that have a file, in lexical order (not reclaimed tombstones: ``reclaim``)."""
        return listed_tenants(self.tenants_dir, TENANT_ID_PATTERN.fullmatch)

    @property
    def open_count(self) -> int:
        return len(self._stores)

    @contextmanager
    def tenant(self, tenant: str, *, create: bool) -> Iterator[TenantStore | None]:
        """The open store of a tenant for the duration of the block.

        A tenant that has no file yields None with ``create=False``, and no file is created, so
        reads of unknown tenants never litter the directory. With ``create=True`` it yields a
        new, complete tenant file under a temporary name, which becomes the tenant's only if the
        block ends without an exception (the block is the tenant's first write). With members, a
        tenant without a file whose home is another member (by the hash, or the previous list in a
        rebalance) is refused NOT_OWNER, naming it; one a move is bringing here TENANT_MOVING
        (``expect_move``); a file is served by what it records (``Ownership.check_open``)."""
        if tenant not in self._stores and not self.path_for(tenant).exists():
            lost = self.replicas.holds(tenant)  # a tenant this member lost: restored first, for reads too
            if self.ownership is not None:
                self.ownership.check_missing(tenant, lost=lost)
            if lost and not self._restore_from_replica(tenant) and self.ownership is not None:
                self.ownership.check_absent(tenant)
        entry = self._acquire(tenant)
        if entry is not None:
            try:
                yield entry.store
            finally:
                self._stores.release(entry)
        elif not create:
            yield None
        else:
            with self._new_tenant(tenant) as store:
                yield store

    def _acquire(self, tenant: str) -> OpenStore | None:
        """The tenant's open store in use by the caller (opened if need be); None: no file."""
        while True:
            try:
                entry = self._stores.use(tenant)
            except Unavailable as refused:
                if refused.reason != RESTORING:
                    raise
                with self.locks.for_opening(tenant):  # held to the restore's end, as by a call finding no file
                    continue
            if entry is not None:
                return entry
            path = self.path_for(tenant)  # only now: an open tenant's id was validated when it opened
            if not path.exists():
                return None  # without waiting: a tenant being created does not exist until it is
            # Open outside the pool guard (opening a file may migrate it), one opener per tenant.
            with self.locks.for_opening(tenant):
                if tenant in self._stores:
                    continue
                if not path.exists():
                    return None
                return self._admit(tenant, self._open_store(tenant, path))

    def _admit(self, tenant: str, store: TenantStore) -> OpenStore:
        """Put a store just opened among the open ones, in use by the caller. A file of more than
        ``SEGMENTS_ON_OPEN`` full-text segments (written in bulk and closed before its merges
        were done, or by an older version) gets a maintenance pass now: else it kept them until
        its next write, and a recall reads every segment."""
        entry = self._stores.admit(tenant, store)
        if store.fulltext_segments() > SEGMENTS_ON_OPEN:
            self.maintainer.request(tenant)
        return entry

    @contextmanager
    def _new_tenant(self, tenant: str) -> Iterator[TenantStore]:
        path = self.path_for(tenant)
        with self.locks.for_opening(tenant):  # re-entrant: the _acquire below takes it again
            entry = self._acquire(tenant)
            if entry is not None:  # another first write won the race: this one is a second write
                try:
                    yield entry.store
                finally:
                    self._stores.release(entry)
                return
            if self.ownership is not None:
                self.ownership.refuse_incoming(tenant)  # again under the lock ``expect_move`` takes
            if self._restore_from_replica(tenant):  # never a fresh tenant over one object storage holds
                with self.tenant(tenant, create=False) as restored:
                    yield restored  # type: ignore[misc]  # a store: it was just installed, under the lock
                return
            with nullcontext() if self.ownership is None else self.ownership.creating(tenant):
                temporary = path.with_name(f"{NEW_FILE_PREFIX}{tenant}.{uuid.uuid4().hex[:12]}{TENANT_FILE_SUFFIX}")
                try:
                    store = self._open_store(tenant, temporary)
                    if self.ownership is not None:
                        self.ownership.stamp(store)
                    record_floor(store, self.replicas.floor(tenant, new=True))
                    if self.tenantless is not None:
                        self.tenantless.carry_into(tenant, store)
                except BaseException:
                    remove_database(temporary)
                    raise
                try:
                    yield store
                    store.close()
                    if Path(f"{temporary}-wal").exists():  # the close could not checkpoint: a full disk
                        raise ResourceExhausted(
                            "the disk holding the tenant files is full; nothing of this write was kept",
                            reason="DISK_FULL",
                        )
                    open_with_room(lambda: fsync(temporary), self.make_room)
                    with self.replicas.swapping(tenant, fresh=True):
                        os.rename(temporary, path)
                        open_with_room(lambda: fsync(self.tenants_dir), self.make_room)
                except BaseException:
                    store.close()
                    remove_database(temporary)
                    raise
                # Kept open, as any tenant just used (its next call need not open it).
                self._stores.release(self._admit(tenant, self._open_store(tenant, path)))

    def _restore_from_replica(self, tenant: str) -> bool:
        """True when the tenant's file is here now: object storage held a replica of it (a lost volume),
        restored and installed here (store/replicas.py ``Replicas.fetch``), or by a call meanwhile."""
        staging = self.tenants_dir / f"{NEW_FILE_PREFIX}restore-{tenant}.{uuid.uuid4().hex[:12]}"
        try:
            with self.locks.for_opening(tenant):  # one restore: the others find its file
                if self.path_for(tenant).exists():
                    return True
                judge = None if self.ownership is None else self.ownership.restored_judge(tenant)
                fetched = self.replicas.fetch(tenant, staging, judge)
                if fetched is None:
                    return False
                log.info("tenant %s: no file here and a replica in object storage: restored from it", tenant)
                self.install(tenant, *fetched, replace=False, timeout=INSTALL_WAIT_SECONDS, restored=True)
                return True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _open_store(self, tenant: str, path: Path) -> TenantStore:
        """A TenantStore on ``path``; when the process is out of file descriptors, idle tenants
        are closed and the open is tried again (``open_with_room``)."""
        try:
            store = open_with_room(
                lambda: TenantStore(
                    path,
                    write_lock=self.locks.for_tenant(tenant),
                    synchronous=self._synchronous,
                    max_readers=self._max_readers,
                    faults=self._faults,
                    on_wal_growth=lambda: self.maintainer.request(tenant),
                    inbox_path=self.inbox_path_for(tenant),
                    inbox_lock=self.locks.for_inbox(tenant),
                    make_room=self.make_room,
                    wal_limit_pages=self._wal_limit_pages,
                    # A new tenant's file under its temporary name is no tenant's yet.
                    replication=StoreReplication(tenant, self.replicas) if path == self.path_for(tenant) else None,
                    told=lambda change: self._tell(change, tenant),
                ),
                self.make_room,
            )
        except DataLoss:
            with self._guard:  # for ListTenants, until the file changes
                self._damaged[tenant] = modified(path)
            raise
        if not path.name.startswith(NEW_FILE_PREFIX):
            try:
                if self.ownership is not None:
                    self.ownership.check_open(tenant, store)
                refuse_stale(tenant, store, self.replicas, self.membership)
            except BaseException:
                store.close()
                raise
        return store

    # -- ownership and moves (store/ownership.py, engine/moves.py) ------------------------------------

    def _tell(self, what: FileChange | Literal["installed", "erased"], tenant: str) -> None:
        for watcher in self.watchers:
            getattr(watcher, what)(tenant)

    def _ownership(self) -> Ownership:
        if self.ownership is None:
            raise FailedPrecondition(
                "this server has no members (--members): there is nowhere to move a tenant", reason="NO_MEMBERS"
            )
        return self.ownership

    def move_record(self, tenant: str) -> OwnershipRecord | None:
        """What the tenant's file records of its ownership and of a move; None without a file."""
        if not self.path_for(tenant).exists():
            return None
        with self.glance(tenant) as txn:
            return OwnershipRecord.read(txn)

    def placement(self, tenant: str) -> Placement:
        """Where ``tenant`` is served as this member knows it (``Ownership.placement``), read from
        its file here once and remembered until a move, an import or an erasure changes it."""
        return self._ownership().placement(tenant)

    @property
    def placements_remembered(self) -> int:
        return self._ownership().remembered

    def served_here(self, tenant: str) -> bool:
        """Whether this member serves the tenant whose file it has (not a tombstone of a move
        away, nor a copy moved here not yet active): what its backups and aggregates cover."""
        if self.ownership is None:
            return True
        if self.placement(tenant).where != self.ownership.membership.me:
            return False
        record = self.move_record(tenant)
        return record is None or record.step != INACTIVE

    def expect_move(self, tenant: str, source: str, epoch: int) -> None:
        """A move's import (step 4) begins on its destination, before its first byte: from now
        until the move's copy is installed here (``install`` removes the mark), this member never
        creates the tenant — a call for it is sent to the source (``placement``), or refused
        UNAVAILABLE TENANT_MOVING — whatever stops the import (its source killed, its client
        gone). Durable. Refuses TENANT_EXISTS a tenant this member serves (it cannot be moved here
        over it), as ``install`` would."""
        path = self.path_for(tenant)
        with self.locks.for_opening(tenant):  # no first write of the tenant is under way meanwhile
            if path.exists():
                check_replaceable_by_move(tenant, path)
            self._ownership().expect(tenant, source, epoch)

    def fence(self, tenant: str, **record: str) -> None:
        """A move's first steps on its source: writes refused from now on (reads served), and the
        step (``record``: meta keys) recorded in the file so that a restarted member keeps it."""
        with self.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"tenant {tenant} has no data on this member", reason="TENANT_NOT_FOUND")
            store.fence()
            with store.write(internal=True) as txn:
                for key, value in record.items():
                    txn.set_meta(key, value)

    def record_move(self, tenant: str, *, timeout: float, **record: str) -> None:
        """Record a step of a move (``record``: meta keys; empty values remove the key) in the
        tenant's file closed and unused (its open honours the step: a tombstone, an activation)."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="moved", reason=TENANT_MOVING, timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no data on this member", reason="TENANT_NOT_FOUND")
            replication = StoreReplication(tenant, self.replicas)  # replicated as any commit
            write_move_step(path, record, synchronous=self._synchronous, replication=replication)
            if record.get(MOVE_STEP_KEY) == TOMBSTONED:
                path.with_suffix(ANN_FILE_SUFFIX).unlink(missing_ok=True)  # its data is served elsewhere now

    def reclaim(self, tenant: str, *, timeout: float) -> bool:
        """After a move away completed, keep of the tenant's file here only what its tombstone
        needs to redirect (``reclaim_tombstone``), and mark it so that ``tenant_ids`` leaves it
        out. False when it was reclaimed already."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="reclaimed", reason=TENANT_MOVING, timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no file on this member", reason="TENANT_NOT_FOUND")
            with self.replicas.swapping(tenant, fresh=True):
                inbox = self.inbox_path_for(tenant)
                reclaimed = reclaim_tombstone(path, inbox, synchronous=self._synchronous, seam=self.seam)
                reclaimed_mark(self.tenants_dir, tenant).touch()
            if reclaimed:
                self._fsync_directories()
        return reclaimed

    def make_room(self) -> bool:
        """Close the idle half of the open tenants (``OpenStores.make_room``). True if any was closed."""
        return self._stores.make_room()

    @contextmanager
    def glance(self, tenant: str) -> Iterator[ReadTxn]:
        """One read transaction of a tenant that has a file: on its open store if it is open,
        otherwise on a connection of its own that does not enter (or evict from) the pool."""
        entry = self._stores.borrow(tenant)
        if entry is None:
            with read_file(self.path_for(tenant), self.make_room) as txn:
                yield txn
            return
        try:
            with entry.store.read() as txn:
                yield txn
        finally:
            self._stores.release(entry)

    def file_bytes(self, tenant: str) -> int:
        """Bytes on disk of the tenant's files: its database, WAL and shared memory, and its
        hot-path inbox's."""
        return bytes_on_disk(self.path_for(tenant), self.inbox_path_for(tenant))

    def damaged(self, tenants: list[str]) -> list[str]:
        """Those of ``tenants`` whose file is not a usable tenant file: its header says so
        (store/tenant_file.py ``damage_of``), or opening it failed so and it has not changed since."""
        with self._guard:
            noted = dict(self._damaged)
        return [
            t
            for t in tenants
            if (t in noted and noted[t] == modified(self.path_for(t))) or damage_of(self.path_for(t)) is not None
        ]

    @contextmanager
    def _closed_for(self, tenant: str, *, doing: str, reason: str, timeout: float) -> Iterator[None]:
        """For the block, the tenant is closed and no one uses it (``OpenStores.closed_off``), nor
        opens it; what this pool remembers of its file is forgotten."""
        with (
            self.locks.for_opening(tenant),
            self._stores.closed_off(tenant, doing=doing, reason=reason, timeout=timeout),
        ):
            try:
                yield
            finally:
                with self._guard:
                    self._damaged.pop(tenant, None)
                if self.ownership is not None:
                    self.ownership.forget(tenant)

    def seam(self, name: str) -> None:
        """A test seam of a file swap (store/file_faults.py ``stop_at``)."""
        stop_at(self._faults, name)

    def _fsync_directories(self) -> None:
        for directory in (self.tenants_dir, self.data_dir / INBOX_DIR_NAME):
            if directory.exists():
                fsync(directory)

    def erase(self, tenant: str, *, before_removal: Callable[[str, str], None], timeout: float) -> None:
        """Remove every file of a tenant: its database (with its WAL and shared memory) and its
        hot-path inbox, once it is closed and unused (``_closed_for``: TENANT_ERASING meanwhile).
        ``before_removal(head_hash, timeline)`` runs before any file goes: the caller's receipt
        ("" for a damaged file, whose chain cannot be read). NOT_FOUND when the tenant has no file."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="erased", reason="TENANT_ERASING", timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no data on this server", reason="TENANT_NOT_FOUND")
            head_hash = head_of(path) or ""  # a damaged file is erased all the same: ""
            # Its replicas go first; from the receipt on, the erasure is finished even by the next start.
            with self.replicas.swapping(tenant, fresh=False, gone=True), erasing(self.tenants_dir, tenant, head_hash):
                before_removal(head_hash, timeline_of(path))
                self.seam("erase_receipted")
                self._remove_erased(tenant)
        self._tell("erased", tenant)

    def _remove_erased(self, tenant: str) -> None:
        """Every file of a tenant whose erasure is receipted: its cache, inbox and database."""
        self.path_for(tenant).with_suffix(ANN_FILE_SUFFIX).unlink(missing_ok=True)  # a cache of the file
        if self.ownership is not None:
            self.ownership.after_erasure(tenant)
        remove_tenant_files(self.path_for(tenant), self.inbox_path_for(tenant))
        reclaimed_mark(self.tenants_dir, tenant).unlink(missing_ok=True)
        self._fsync_directories()

    def install(
        self,
        tenant: str,
        database: Path,
        inbox: Path | None,
        *,
        replace: bool,
        timeout: float,
        move: tuple[str, int] | None = None,
        restored: bool = False,  # a lost tenant's copy from object storage (restored_judge's): as it is
    ) -> bool:
        """Put a complete tenant file (and its inbox), made and synced by the caller on this
        filesystem, in place of the tenant's: FAILED_PRECONDITION TENANT_EXISTS when it has one
        and ``replace`` is false. Returns whether a tenant was replaced.

        Atomic whatever stops it, and once begun it runs to its end (the caller's client leaving
        does not stop it): the new files are staged beside the tenant files, the database first
        (``.install-<tenant>.<random>/``), then the new tenant file takes the old one's name in one
        rename — the commit — and its inbox follows. Until the commit the old tenant is whole and
        in place; from it, the new one is, and a process killed before its inbox followed finishes
        the install at its next start (``installs.recover``).

        ``move``: (source member, epoch) of a move's step 4: the file is installed inactive at
        that epoch; it may replace only a file this member no longer serves (a tombstone of an
        earlier move away, or an inactive copy of this same move). A tenant a move is bringing
        here (``expect_move``) is not replaced by any other import."""
        path = self.path_for(tenant)
        if move is None:  # the tenant's content is replaced: a timeline of its own (a move keeps it)
            installs.stamp_new_timeline(database)
        if self.ownership is not None and not restored:  # an import through the owner: this member's now
            self.ownership.adopt_import(tenant, database, move=move, synchronous=self._synchronous)
        maker = self.ownership if move is None and not restored else None  # an import making the tenant here
        doing, reason = ("restored", RESTORING) if restored else ("replaced", "TENANT_REPLACING")
        with (
            nullcontext() if maker is None else maker.creating(tenant),
            self._closed_for(tenant, doing=doing, reason=reason, timeout=timeout),
            self.replicas.swapping(tenant, fresh=True),
        ):
            self.seam("install_begun")
            existed = path.exists()
            check_install_over(self.tenants_dir, tenant, path, move=move)
            if existed and not replace and move is None:
                raise FailedPrecondition(
                    f"tenant {tenant} exists on this server; ask to replace it to overwrite it", reason="TENANT_EXISTS"
                )
            if existed:
                checkpoint_away(path, f"tenant {tenant} is being read; it was not replaced, retry")
            # The copy never continues its source's replica; its floor is asked while nothing of
            # the tenant replicates (the swap paused it), so no older file's generation passes it.
            forget_generation(database, self.replicas.floor(tenant, new=False))
            # What belongs to the old file only: its approximate index (a cache), the mark of a
            # reclaimed tombstone, its WAL (emptied above) and shared memory.
            old_only = [*installs.old_file_only(path), reclaimed_mark(self.tenants_dir, tenant)]
            staging = installs.stage_and_commit(path, database, inbox, old_only=old_only, seam=self.seam)
            self._finish_install(tenant, staging)
        return existed

    def _finish_install(self, tenant: str, staging: Path) -> None:
        """An install after its commit (store/install.py ``finish``): its inbox put in place, the
        mark of a move bringing it here gone."""
        installs.finish(
            staging,
            self.inbox_path_for(tenant),
            done=[incoming_mark(self.tenants_dir, tenant)],
            sync=self._fsync_directories,
        )
        self._tell("installed", tenant)

    def _maintain(self, tenant: str) -> None:
        """Merge a tenant's full-text segments, then checkpoint it, if its store is still open
        (closing a store checkpoints it; opening it again requests a pass). A merge that stopped
        at its bound with work left asks for another pass, after the tenants already waiting:
        a tenant written in bulk is merged to the end without waiting for its next write."""
        entry = self._stores.borrow(tenant)
        if entry is None:
            return
        try:
            if entry.store.merge_fulltext() >= FULLTEXT_MERGE_MAX_STEPS:
                self.maintainer.request(tenant)
            entry.store.checkpoint()
        finally:
            self._stores.release(entry)

    def close(self) -> None:
        """Close every tenant file and release the directory. Idempotent."""
        self.maintainer.stop()
        if self._stores.close():
            self._dir_lock.release()
