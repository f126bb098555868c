"""The data directory: tenant ids to files, the exclusive directory lock, and a bounded LRU of
open tenant files.

Layout::

    DATA_DIR/.mnemosyne.lock        held (flock) by the one process that owns the directory
    DATA_DIR/tenants/<tenant>.sqlite (+ -wal, -shm)
    DATA_DIR/tenants/<tenant>.ann     its approximate vector index, a cache (engine/ann.py)
    DATA_DIR/inbox/<tenant>.inbox.sqlite  fast writes not yet taken by a worker (store/inbox.py)
    DATA_DIR/erasures.jsonl          one receipt per erased tenant (store/erasure_log.py)
    DATA_DIR/tenants/<tenant>.incoming  a move is bringing the tenant here (``expect_move``)
    DATA_DIR/tenants/.install-<tenant>.<random>/  an install under way (``install``)

Tenant ids are validated before they become a path. At most ``max_open`` tenant files are kept
open (fewer when the process's open-file limit cannot hold that many: ``open_tenant_budget``); the
least recently used idle one is closed when another is needed, and idle ones are closed early when
the process runs out of file descriptors. A tenant in use is never closed under its user: it is
closed when the last user releases it.

A tenant's file exists only once a write to it succeeded: the first write of a new tenant is made
in a complete file built under a temporary name (``.new-<tenant>.<random>.sqlite``), which is
renamed into place after that write committed and only then; a failed first write (a full disk, a
stale generation) leaves nothing. Reads of a tenant without a file never create one.

An import installs a tenant's files atomically (``install``): a kill at any moment leaves the old
tenant whole or the new one, never neither (a kill after its commit is finished at the next start).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import resource
import shutil
import signal
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw

from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Unavailable
from mnemosyne.store.connections import BUSY_TIMEOUT_MS, open_with_room
from mnemosyne.store.locks import LockManager
from mnemosyne.store.maintenance import Maintainer
from mnemosyne.store.membership import (
    ACTIVE,
    EPOCH_KEY,
    FENCED_STEPS,
    HOLDER_KEY,
    INACTIVE,
    MOVE_EPOCH_KEY,
    MOVE_HEAD_KEY,
    MOVE_KEYS,
    MOVE_PEER_KEY,
    MOVE_RECLAIMED_KEY,
    MOVE_STEP_KEY,
    TENANT_MOVING,
    TOMBSTONED,
    Membership,
    moving,
)
from mnemosyne.store.tenant_file import damage_of
from mnemosyne.store.tenant_store import (
    ANN_FILE_SUFFIX,
    FULLTEXT_MERGE_MAX_STEPS,
    ReadTxn,
    TenantStore,
    read_file,
)

TENANT_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
TENANT_FILE_SUFFIX = ".sqlite"
# Full-text segments past which opening a tenant asks for a maintenance pass. A tenant the passes
# keep up with has a few (FTS5's automerge levels); one loaded in 1,000-memory batches, 863 at 1M
# memories (its text query 88 ms p50; merged, 20 ms).
SEGMENTS_ON_OPEN = 32
LOCK_FILE_NAME = ".mnemosyne.lock"
SECRET_FILE_NAME = ".mnemosyne.secret"  # the key of page tokens that span tenants
INBOX_DIR_NAME = "inbox"
INBOX_FILE_SUFFIX = ".inbox.sqlite"
NEW_FILE_PREFIX = ".new-"
# Beside a reclaimed tombstone (``reclaim``): ``tenant_ids`` leaves it out (it only redirects).
RECLAIMED_SUFFIX = ".moved"
# The name the data of a tombstone being reclaimed keeps until it is overwritten and removed.
RECLAIMING_MARK = ".reclaiming."
# An install under way (``install``): a directory beside the tenant files holding the new files
# until each is renamed into place. While the staged database is in it, nothing is committed.
INSTALL_PREFIX = ".install-"
STAGED_DATABASE = "database"
STAGED_INBOX = "inbox"
STAGED_NO_INBOX = "no-inbox"  # the new tenant has no inbox: the old one's goes
# Beside the tenant files: a move is bringing the tenant here (``expect_move``), from "SOURCE EPOCH".
INCOMING_SUFFIX = ".incoming"
# File descriptors one open tenant holds in the common case: its writer's database and WAL, the
# shared-memory file, one pooled reader's database and WAL, and its hot-path inbox's three.
FILES_PER_OPEN_TENANT = 8
# Descriptors kept free for everything else: sockets, the recovery index, logs, libraries.
RESERVED_FILES = 128
# How many tenants' placements (``TenantPool.placement``) are remembered; the least recently
# asked are forgotten beyond it (and read from their file again when asked).
PLACEMENTS_REMEMBERED = 65536

log = logging.getLogger("mnemosyne.store")


def open_tenant_budget(requested: int) -> int:
    """How many tenants may stay open: ``requested``, or fewer when the open-file limit cannot
    hold that many (FILES_PER_OPEN_TENANT each, after RESERVED_FILES)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return requested
    return max(1, min(requested, (soft - RESERVED_FILES) // FILES_PER_OPEN_TENANT))


def validate_tenant(tenant: str) -> str:
    """Return the tenant id if it is safe to become a file name, else raise InvalidArgument."""
    if not isinstance(tenant, str) or not TENANT_ID_PATTERN.fullmatch(tenant):
        shown = repr(tenant[:80]) if isinstance(tenant, str) else type(tenant).__name__
        raise InvalidArgument(
            f"tenant {shown} is not a valid tenant id: use 1-63 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit",
            reason="TENANT_INVALID",
        )
    return tenant


class DataDirLock:
    """An exclusive, process-wide claim on a data directory (released by the OS if we die)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE_NAME
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(self._fd)
            self._fd = None
            raise FailedPrecondition(
                f"data directory {data_dir} is already in use by {holder}; one server (or in-process "
                "MemoryBrain) owns a data directory at a time — stop it or choose another --data-dir",
                reason="DATA_DIR_LOCKED",
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _claim_data_dir(data_dir: Path, tenants_dir: Path) -> DataDirLock:
    """Lock the data directory, creating it (and its parents) and ``tenants_dir`` in it when
    missing. A directory that cannot be used is refused with its cause (DATA_DIR_UNUSABLE), the
    first thing a server says."""

    def unusable(why: str) -> InvalidArgument:
        return InvalidArgument(f"the data directory {data_dir} {why}", reason="DATA_DIR_UNUSABLE")

    if data_dir.exists() and not data_dir.is_dir():
        raise unusable("is a file, not a directory: give a directory (it is created when missing)")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        tenants_dir.mkdir(exist_ok=True)
        return DataDirLock(data_dir)
    except OSError as exc:
        raise unusable(f"cannot be used: {exc.strerror or exc}: {exc.filename or data_dir}") from None


@dataclass(frozen=True)
class Placement:
    """Where a tenant is served as this member knows it (``TenantPool.placement``)."""

    where: str  # the member that serves it
    moved_epoch: int = 0  # a move's tombstone here: the epoch it moved at (``where`` is its destination)
    pending_from: str = ""  # a copy a move brought here, not active yet: its source ...
    pending_epoch: int = 0  # ... and the epoch it is to be activated at


class _Entry:
    __slots__ = ("store", "users")

    def __init__(self, store: TenantStore) -> None:
        self.store = store
        self.users = 0


def _remove_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _server_secret(path: Path) -> bytes:
    """The data directory's own random key, made once (atomically, readable by its owner only)."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32).hex().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return bytes.fromhex(path.read_text().strip())


def _shred(path: Path) -> None:
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


def _checkpoint_away(path: Path, busy: str) -> None:
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
        raise Unavailable(busy, reason="TENANT_BUSY") from None
    except apsw.Error:
        pass  # damaged: nothing of it can be moved
    finally:
        connection.close()


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _fsync(path: Path) -> None:
    """Sync a file, or a directory (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    ) -> None:
        if max_open < 1:
            raise InvalidArgument("max_open must be at least 1", reason="CONFIG_INVALID")
        self.data_dir = Path(data_dir)
        self.tenants_dir = self.data_dir / "tenants"
        self._dir_lock = _claim_data_dir(self.data_dir, self.tenants_dir)
        self._recover_installs()  # first: an install finished here may bring its tenant's inbox
        for leftover in self.tenants_dir.glob(f"{NEW_FILE_PREFIX}*"):  # a first write killed before its rename
            self._remove_leftover(leftover)
        self._remove_orphan_inboxes()
        self.locks = LockManager()
        self.max_open = open_tenant_budget(max_open)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.info(
            "open-tenant cache: %d tenant files (asked %d; open-file limit %s, hard %s: %d per open tenant + %d reserved)",
            self.max_open,
            max_open,
            soft,
            hard,
            FILES_PER_OPEN_TENANT,
            RESERVED_FILES,
        )
        self._synchronous = synchronous
        self._max_readers = max_readers
        self._faults = faults
        # With members (store/membership.py), a tenant is opened only by its owner, and only from
        # a file naming this member at the current epoch; None: one server holds every tenant.
        self.membership = membership
        # tenant -> where its file says it is served (``placement``), for the files read most
        # recently (at most ``placements_remembered``)
        self._placements: OrderedDict[str, Placement] = OrderedDict()
        self._placements_remembered = max(1, placements_remembered)
        self._open: OrderedDict[str, _Entry] = OrderedDict()
        self._damaged: dict[str, float] = {}  # tenant -> modification time of its file when an open found it damaged
        # tenant -> (what is done to it, the refusal's reason) while its files are removed or
        # replaced: no new user meanwhile (``_closed_for``).
        self._closed_off: dict[str, tuple[str, str]] = {}
        self._guard = threading.Lock()
        self._closed = False
        self.maintainer = Maintainer(self._maintain)
        self.secret = _server_secret(self.data_dir / SECRET_FILE_NAME)

    def _remove_orphan_inboxes(self) -> None:
        """An inbox whose tenant has no file is no tenant's (an inbox is made only once its tenant
        file exists): what a restore or an erasure killed midway left, like the inboxes' own
        temporary names (backup_dir.py). A later tenant of that name must not take it for its own."""
        inbox_dir = self.data_dir / INBOX_DIR_NAME
        if not inbox_dir.is_dir():
            return
        for path in inbox_dir.iterdir():
            name = path.name
            for suffix in ("-wal", "-shm", "-journal"):
                name = name.removesuffix(suffix)
            tenant = name.removesuffix(INBOX_FILE_SUFFIX)
            if name.startswith(NEW_FILE_PREFIX) or (
                name.endswith(INBOX_FILE_SUFFIX) and not (self.tenants_dir / f"{tenant}{TENANT_FILE_SUFFIX}").exists()
            ):
                path.unlink(missing_ok=True)

    def _recover_installs(self) -> None:
        """An install a kill interrupted (``install``): finished if it had committed (its staged
        database renamed into place, its inbox or the word that it has none still staged), else
        undone (the old tenant stands as it was; a staging directory emptied by a finished
        install is only removed)."""
        for staging in self.tenants_dir.glob(f"{INSTALL_PREFIX}*"):
            tenant = staging.name[len(INSTALL_PREFIX) :].rpartition(".")[0]
            if not staging.is_dir() or not TENANT_ID_PATTERN.fullmatch(tenant):
                continue  # not a name ``install`` makes
            committed = not (staging / STAGED_DATABASE).exists() and (
                (staging / STAGED_INBOX).exists() or (staging / STAGED_NO_INBOX).exists()
            )
            if committed:
                self._finish_install(tenant, staging)
                log.info("tenant %s: an install stopped after its commit was finished (its inbox put in place)", tenant)
            else:
                shutil.rmtree(staging)
                log.info("tenant %s: an install stopped before its commit was undone (the tenant is as it was)", tenant)

    def _remove_leftover(self, leftover: Path) -> None:
        """A file a process killed midway left under a temporary name: a first write's (removed),
        or the old data of a tombstone being reclaimed (overwritten first, unless it is still the
        tombstone itself: killed before its replacement, it is a second name of that file)."""
        if RECLAIMING_MARK in leftover.name and leftover.exists():
            tenant = leftover.name[len(NEW_FILE_PREFIX) :].partition(RECLAIMING_MARK)[0]
            path = self.tenants_dir / f"{tenant}{TENANT_FILE_SUFFIX}"
            if path.exists() and os.path.samefile(path, leftover):
                leftover.unlink()
            else:
                _shred(leftover)
            return
        _remove_files(Path(str(leftover).removesuffix("-wal").removesuffix("-shm").removesuffix("-journal")))

    def path_for(self, tenant: str) -> Path:
        return self.tenants_dir / f"{validate_tenant(tenant)}{TENANT_FILE_SUFFIX}"

    def inbox_path_for(self, tenant: str) -> Path:
        return self.data_dir / INBOX_DIR_NAME / f"{validate_tenant(tenant)}{INBOX_FILE_SUFFIX}"

    def exists(self, tenant: str) -> bool:
        return self.path_for(tenant).exists()

    def tenant_ids(self) -> list[str]:
        """Tenant ids that have a file, in lexical order (not the reclaimed tombstones of tenants
        moved away: ``reclaim``)."""
        reclaimed = {path.name[: -len(RECLAIMED_SUFFIX)] for path in self.tenants_dir.glob(f"*{RECLAIMED_SUFFIX}")}
        names = []
        for path in self.tenants_dir.glob(f"*{TENANT_FILE_SUFFIX}"):
            name = path.name[: -len(TENANT_FILE_SUFFIX)]
            if TENANT_ID_PATTERN.fullmatch(name) and name not in reclaimed:
                names.append(name)
        return sorted(names)

    @property
    def open_count(self) -> int:
        with self._guard:
            return len(self._open)

    @contextmanager
    def tenant(self, tenant: str, *, create: bool) -> Iterator[TenantStore | None]:
        """The open store of a tenant for the duration of the block.

        A tenant that has no file yields None with ``create=False``, and no file is created, so
        reads of unknown tenants never litter the directory. With ``create=True`` it yields a
        new, complete tenant file under a temporary name, which becomes the tenant's only if the
        block ends without an exception (the block is the tenant's first write).

        With members, a tenant without a file here whose home is another member (its owner by the
        hash, or by the previous list during a rebalance) is refused NOT_OWNER, naming it, and
        none is created; one a move is bringing here is refused UNAVAILABLE TENANT_MOVING
        (``expect_move``); a file is served by what it records (``_check_holder``)."""
        if self.membership is not None and tenant not in self._open and not self.path_for(tenant).exists():
            self._refuse_incoming(tenant)
            self.membership.check_home(tenant)
        entry = self._acquire(tenant)
        if entry is not None:
            try:
                yield entry.store
            finally:
                self._release(entry)
        elif not create:
            yield None
        else:
            with self._new_tenant(tenant) as store:
                yield store

    def _acquire(self, tenant: str) -> _Entry | None:
        """The tenant's open entry (opened if need be), or None when it has no file."""
        path = self.path_for(tenant)
        while True:
            with self._guard:
                if self._closed:
                    raise FailedPrecondition("the store is closed", reason="STORE_CLOSED")
                closed_off = self._closed_off.get(tenant)
                if closed_off is not None:
                    raise Unavailable(f"tenant {tenant} is being {closed_off[0]}; retry shortly", reason=closed_off[1])
                entry = self._open.get(tenant)
                if entry is not None:
                    entry.users += 1
                    self._open.move_to_end(tenant)
                    return entry
            if not path.exists():
                return None  # without waiting: a tenant being created does not exist until it is
            # Open outside the pool guard (opening a file may migrate it), one opener per tenant.
            with self.locks.for_opening(tenant):
                with self._guard:
                    if tenant in self._open:
                        continue
                if not path.exists():
                    return None
                return self._admit(tenant, self._open_store(tenant, path))

    def _admit(self, tenant: str, store: TenantStore) -> _Entry:
        """Put a store just opened into the LRU, in use by the caller. A file of more than
        ``SEGMENTS_ON_OPEN`` full-text segments (written in bulk and closed before its merges
        were done, or by an older version) gets a maintenance pass now: else it kept them until
        its next write, and a recall reads every segment."""
        entry = _Entry(store)
        entry.users = 1
        with self._guard:
            self._open[tenant] = entry
            victims = self._evict_locked(self.max_open)
        for victim in victims:
            victim.close()
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
                    self._release(entry)
                return
            if self.membership is not None:
                self._refuse_incoming(tenant)  # again under the lock ``expect_move`` takes
            temporary = path.with_name(f"{NEW_FILE_PREFIX}{tenant}.{uuid.uuid4().hex[:12]}{TENANT_FILE_SUFFIX}")
            try:
                store = self._open_store(tenant, temporary)
                if self.membership is not None:
                    self._stamp(store)
            except BaseException:
                _remove_files(temporary)
                raise
            try:
                yield store
                store.close()
                if Path(f"{temporary}-wal").exists():  # the close could not checkpoint: a full disk
                    raise ResourceExhausted(
                        "the disk holding the tenant files is full; nothing of this write was kept", reason="DISK_FULL"
                    )
                open_with_room(lambda: _fsync(temporary), self.make_room)
                os.rename(temporary, path)
                open_with_room(lambda: _fsync(self.tenants_dir), self.make_room)
            except BaseException:
                store.close()
                _remove_files(temporary)
                raise
            # Kept open, as any tenant just used (its next call need not open it).
            self._release(self._admit(tenant, self._open_store(tenant, path)))

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
                ),
                self.make_room,
            )
        except DataLoss:
            with self._guard:  # for ListTenants, until the file changes
                self._damaged[tenant] = _modified(path)
            raise
        try:
            self._check_holder(tenant, store, new=path.name.startswith(NEW_FILE_PREFIX))
        except BaseException:
            store.close()
            raise
        return store

    def _check_holder(self, tenant: str, store: TenantStore, *, new: bool) -> None:
        """The ownership check of an open: the file must name this member, and what a move
        recorded in it decides (docs/scale-out.md#moving-tenants): a source tombstone redirects
        (NOT_OWNER naming the destination), a destination not yet active serves nothing
        (UNAVAILABLE TENANT_MOVING), a fenced source serves reads only. A file naming no holder
        (written before members, or by a single server) is adopted by the member that is its
        home (the hash's owner): it is stamped with this member and the current epoch, as is a
        file this member held at an older epoch."""
        if self.membership is None or new:
            return
        with store.read() as txn:
            holder, epoch = txn.meta(HOLDER_KEY), int(txn.meta(EPOCH_KEY, "0") or 0)
            step, peer = txn.meta(MOVE_STEP_KEY), txn.meta(MOVE_PEER_KEY) or ""
        membership = self.membership
        if step == TOMBSTONED:
            raise membership.not_owner(tenant, peer, "it moved there", moved_epoch=epoch)
        if step == INACTIVE:
            raise moving(tenant, f"it is being moved here from member {peer}")
        if holder is None and membership.home(tenant) != membership.me:
            raise membership.not_owner(tenant, membership.home(tenant), "call its owner")
        if not membership.check_held(tenant, holder, epoch, moved=step is not None):
            log.info(
                "tenant %s: adopted by member %s at epoch %d (its file named %s)",
                tenant,
                membership.me,
                membership.epoch,
                holder or "no holder",
            )
            self._stamp(store)
        store.fenced = step in FENCED_STEPS

    def _stamp(self, store: TenantStore, **move: str) -> None:
        """Name this member as the file's holder at the current epoch (or at the epoch of the
        move that brings it here, with what the move records: ``move``)."""
        assert self.membership is not None
        with store.write(internal=True) as txn:
            txn.set_meta(HOLDER_KEY, self.membership.me)
            txn.set_meta(EPOCH_KEY, move.pop(EPOCH_KEY, str(self.membership.epoch)))
            for key, value in move.items():
                txn.set_meta(key, value)

    # -- moves (engine/moves.py) -------------------------------------------------------------------

    def placement(self, tenant: str) -> Placement:
        """Where ``tenant`` is served as this member knows it: where its file here says (this
        member; a tombstone's destination; a file without a holder: its home), or, without a
        file, its home (``Membership.home``). Read once per file, then remembered (the most
        recently asked ``placements_remembered``) until a move, an import or an erasure changes it."""
        membership = self.membership
        assert membership is not None
        with self._guard:
            known = self._placements.get(tenant)
            if known is not None:
                self._placements.move_to_end(tenant)
                return known
        path = self.path_for(tenant)
        if not path.exists():
            incoming = self.incoming(tenant)  # the move's source still has it (``expect_move``)
            return Placement(incoming[0] if incoming else membership.home(tenant))
        try:
            with self.glance(tenant) as txn:
                holder, step, peer = txn.meta(HOLDER_KEY), txn.meta(MOVE_STEP_KEY), txn.meta(MOVE_PEER_KEY)
                epoch = int(txn.meta(EPOCH_KEY, "0") or 0)
        except (DataLoss, apsw.Error, ValueError):
            return Placement(membership.me)  # the open here says what is wrong with it
        if step == TOMBSTONED and peer:
            placed = Placement(peer, moved_epoch=epoch)
        elif holder is None:
            placed = Placement(membership.home(tenant))
        elif step == INACTIVE and peer:
            placed = Placement(membership.me, pending_from=peer, pending_epoch=epoch)
        else:
            placed = Placement(membership.me)
        with self._guard:
            self._placements[tenant] = placed
            while len(self._placements) > self._placements_remembered:
                self._placements.popitem(last=False)
        return placed

    @property
    def placements_remembered(self) -> int:
        with self._guard:
            return len(self._placements)

    def served_here(self, tenant: str) -> bool:
        """Whether this member serves the tenant whose file it has (not a tombstone of a move
        away, nor a copy moved here not yet active): what its backups and aggregates cover."""
        if self.membership is None:
            return True
        if self.placement(tenant).where != self.membership.me:
            return False
        return self.move_record(tenant).get(MOVE_STEP_KEY) != INACTIVE

    def move_record(self, tenant: str) -> dict[str, str]:
        """What the tenant's file records of a move (and its holder and epoch); {} without a file."""
        path = self.path_for(tenant)
        if not path.exists():
            return {}
        with self.glance(tenant) as txn:
            keys = (HOLDER_KEY, EPOCH_KEY, MOVE_STEP_KEY, MOVE_PEER_KEY, MOVE_EPOCH_KEY, MOVE_HEAD_KEY)
            return {key: value for key in keys if (value := txn.meta(key)) is not None}

    def _incoming_mark(self, tenant: str) -> Path:
        return self.tenants_dir / f"{validate_tenant(tenant)}{INCOMING_SUFFIX}"

    def incoming(self, tenant: str) -> tuple[str, int] | None:
        """The move bringing ``tenant`` here whose copy is not installed yet: (its source, its
        epoch); None when there is none (``expect_move``)."""
        try:
            source, _, epoch = self._incoming_mark(tenant).read_text().partition(" ")
        except FileNotFoundError:
            return None
        return source, int(epoch or 0)

    def _refuse_incoming(self, tenant: str) -> None:
        incoming = self.incoming(tenant)
        if incoming is not None:
            raise moving(tenant, f"it is being moved here from member {incoming[0]}")

    def expect_move(self, tenant: str, source: str, epoch: int) -> None:
        """A move's import (step 4) begins on its destination, before its first byte: from now
        until the move's copy is installed here (``install`` removes the mark), this member never
        creates the tenant — a call for it is sent to the source (``placement``), or refused
        UNAVAILABLE TENANT_MOVING — whatever stops the import (its source killed, its client
        gone). Durable (a file beside the tenant files, synced). Refuses TENANT_EXISTS a tenant
        this member serves (it cannot be moved here over it), as ``install`` would."""
        path = self.path_for(tenant)
        mark = self._incoming_mark(tenant)
        with self.locks.for_opening(tenant):  # no first write of the tenant is under way meanwhile
            if path.exists():
                self._check_replaceable_by_move(tenant, path)
            temporary = mark.with_name(f"{NEW_FILE_PREFIX}{mark.name}.{uuid.uuid4().hex[:12]}")
            try:
                temporary.write_text(f"{source} {epoch}")
                _fsync(temporary)
                os.replace(temporary, mark)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            _fsync(self.tenants_dir)
        with self._guard:
            self._placements.pop(tenant, None)

    def _check_replaceable_by_move(self, tenant: str, path: Path) -> None:
        """A move may bring a tenant here over a file this member no longer serves only: a
        tombstone of an earlier move away, or an inactive copy of this same move."""
        with read_file(path) as txn:
            step = txn.meta(MOVE_STEP_KEY)
        if step not in (TOMBSTONED, INACTIVE):
            raise FailedPrecondition(
                f"tenant {tenant} is served by this member already ({step or ACTIVE}); it cannot be moved "
                "here over it: erase one of the two copies first",
                reason="TENANT_EXISTS",
            )

    def fence(self, tenant: str, **record: str) -> None:
        """A move's first step on its source: writes refused from now on (reads served), and the
        fence recorded in the file so that a restarted member keeps it."""
        with self.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"tenant {tenant} has no data on this member", reason="TENANT_NOT_FOUND")
            store.fence()
            with store.write(internal=True) as txn:
                for key, value in record.items():
                    txn.set_meta(key, value)

    def record_move(self, tenant: str, *, timeout: float, **record: str) -> None:
        """Record a step of a move in the tenant's file with it closed and unused (its open then
        honours the step: a tombstone, an activation). Empty values remove the key."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="moved", reason=TENANT_MOVING, timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no data on this member", reason="TENANT_NOT_FOUND")
            store = TenantStore(path, write_lock=threading.Lock(), synchronous=self._synchronous)
            try:
                with store.write(internal=True) as txn:
                    for key, value in record.items():
                        if value:
                            txn.set_meta(key, value)
                        else:
                            txn.delete_meta(key)
            finally:
                store.close()
            if record.get(MOVE_STEP_KEY) == TOMBSTONED:  # its data is served elsewhere now
                path.with_suffix(ANN_FILE_SUFFIX).unlink(missing_ok=True)

    def make_room(self) -> bool:
        """Close the idle half of the open tenants (the least recently used), as when the process
        runs out of file descriptors. True if any was closed."""
        with self._guard:
            victims = self._evict_locked(len(self._open) // 2)
        for victim in victims:
            victim.close()
        if victims:
            log.warning("out of file descriptors: closed %d idle tenant files", len(victims))
        return bool(victims)

    def _evict_locked(self, keep: int) -> list[TenantStore]:
        victims = []
        for name in list(self._open):
            if len(self._open) <= keep:
                break
            entry = self._open[name]
            if entry.users == 0:
                del self._open[name]
                victims.append(entry.store)
        return victims

    def _release(self, entry: _Entry) -> None:
        with self._guard:
            entry.users -= 1
            victims = self._evict_locked(self.max_open)
        for victim in victims:
            victim.close()

    @contextmanager
    def glance(self, tenant: str) -> Iterator[ReadTxn]:
        """One read transaction of a tenant that has a file: on its open store if it is open,
        otherwise on a connection of its own that does not enter (or evict from) the pool."""
        with self._guard:
            entry = self._open.get(tenant)
            if entry is not None:
                entry.users += 1
        if entry is None:
            with read_file(self.path_for(tenant), self.make_room) as txn:
                yield txn
            return
        try:
            with entry.store.read() as txn:
                yield txn
        finally:
            self._release(entry)

    def file_bytes(self, tenant: str) -> int:
        """Bytes on disk of the tenant's files: its database, WAL and shared memory, and its
        hot-path inbox's."""
        total = 0
        for base in (self.path_for(tenant), self.inbox_path_for(tenant)):
            for suffix in ("", "-wal", "-shm"):
                try:
                    total += os.stat(f"{base}{suffix}").st_size
                except FileNotFoundError:
                    pass
        return total

    def damaged(self, tenants: list[str]) -> list[str]:
        """Those of ``tenants`` whose file is not a usable tenant file: its header says so
        (store/tenant_file.py ``damage_of``), or opening it failed so and it has not changed since."""
        with self._guard:
            noted = dict(self._damaged)
        return [
            t
            for t in tenants
            if (t in noted and noted[t] == _modified(self.path_for(t))) or damage_of(self.path_for(t)) is not None
        ]

    @contextmanager
    def _closed_for(self, tenant: str, *, doing: str, reason: str, timeout: float) -> Iterator[None]:
        """For the block, the tenant is closed and no one uses it: new users are refused
        (UNAVAILABLE ``reason``), those in flight are waited for up to ``timeout`` seconds (then
        UNAVAILABLE TENANT_BUSY, and the block does not run)."""
        with self.locks.for_opening(tenant):
            with self._guard:
                self._closed_off[tenant] = (doing, reason)
            try:
                deadline = time.monotonic() + timeout
                while True:
                    with self._guard:
                        entry = self._open.get(tenant)
                        if entry is None or entry.users == 0:
                            self._open.pop(tenant, None)
                            break
                    if time.monotonic() > deadline:
                        raise Unavailable(
                            f"tenant {tenant} stayed in use for {timeout:.0f}s; it was not {doing}, retry",
                            reason="TENANT_BUSY",
                        )
                    time.sleep(0.01)
                if entry is not None:
                    entry.store.close()
                yield
            finally:
                with self._guard:
                    self._closed_off.pop(tenant, None)
                    self._damaged.pop(tenant, None)
                    self._placements.pop(tenant, None)

    def _remove_tenant_files(self, tenant: str) -> None:
        """Its inbox, then its WAL and shared memory before its database: a crash midway leaves a
        whole tenant (its WAL was checkpointed when it closed), never a WAL that a new tenant of
        that name would take for its own (an inbox without its tenant is removed at start-up)."""
        self.path_for(tenant).with_suffix(ANN_FILE_SUFFIX).unlink(missing_ok=True)  # a cache of the file
        for base in (self.inbox_path_for(tenant), self.path_for(tenant)):
            for suffix in ("-wal", "-shm", "-journal", ""):
                Path(f"{base}{suffix}").unlink(missing_ok=True)
        self._reclaimed_mark(tenant).unlink(missing_ok=True)

    def _reclaimed_mark(self, tenant: str) -> Path:
        return self.tenants_dir / f"{validate_tenant(tenant)}{RECLAIMED_SUFFIX}"

    def reclaim(self, tenant: str, *, timeout: float) -> bool:
        """After a move away completed (its destination active), keep of the tenant's file here
        only what its tombstone needs to redirect (``MOVE_KEYS``): a new file holding those keys
        replaces it, the old one's bytes (and its inbox's) are overwritten with zeros and
        removed, and a mark beside it keeps it out of ``tenant_ids``. False when it was reclaimed
        already. A kill at any point leaves the old tombstone or the new one, both redirecting
        (a leftover of the old data is overwritten at the next start: ``_remove_leftover``)."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="reclaimed", reason=TENANT_MOVING, timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no file on this member", reason="TENANT_NOT_FOUND")
            with read_file(path) as txn:
                record = {key: value for key in MOVE_KEYS if (value := txn.meta(key)) is not None}
            if record.get(MOVE_STEP_KEY) != TOMBSTONED:
                raise FailedPrecondition(
                    f"tenant {tenant} is not a tombstone here ({record.get(MOVE_STEP_KEY) or ACTIVE}): only the "
                    "file of a tenant moved away is reclaimed",
                    reason="MOVE_NOT_TOMBSTONED",
                )
            if record.get(MOVE_RECLAIMED_KEY):
                self._reclaimed_mark(tenant).touch()
                return False
            mark = f"{uuid.uuid4().hex[:12]}{TENANT_FILE_SUFFIX}"
            replacement = path.with_name(f"{NEW_FILE_PREFIX}{tenant}.{mark}")
            old = path.with_name(f"{NEW_FILE_PREFIX}{tenant}{RECLAIMING_MARK}{mark}")
            try:
                store = TenantStore(replacement, write_lock=threading.Lock(), synchronous=self._synchronous)
                try:
                    with store.write(internal=True) as txn:
                        for key, value in {**record, MOVE_RECLAIMED_KEY: "1"}.items():
                            txn.set_meta(key, value)
                finally:
                    store.close()
                _fsync(replacement)
                # The old file's WAL goes into it (and away), so the old data is one file.
                _checkpoint_away(path, f"tenant {tenant}'s tombstone is being read; it was not reclaimed, retry")
                os.link(path, old)
                self.seam("reclaim_linked")
                for suffix in ("-wal", "-shm", "-journal"):
                    _shred(Path(f"{path}{suffix}"))
                os.replace(replacement, path)
                _fsync(self.tenants_dir)
            except BaseException:
                _remove_files(replacement)
                raise
            self.seam("reclaim_replaced")
            _shred(old)
            for suffix in ("-wal", "-shm", "-journal", ""):
                _shred(Path(f"{self.inbox_path_for(tenant)}{suffix}"))
            self._reclaimed_mark(tenant).touch()
            self._fsync_directories()
        return True

    def seam(self, name: str) -> None:
        """Test seams (MNEMOSYNE_TEST_FAULTS): ``kill@NAME`` kills the process there;
        ``hold@NAME=PATH`` holds it there while the file PATH exists (logged once when it holds),
        so a test can cancel a call or kill the process exactly there."""
        if f"kill@{name}" in self._faults:
            os.kill(os.getpid(), signal.SIGKILL)
        prefix = f"hold@{name}="
        for fault in self._faults:
            if fault.startswith(prefix) and Path(fault[len(prefix) :]).exists():
                log.warning("held at %s (test seam)", name)
                while Path(fault[len(prefix) :]).exists():
                    time.sleep(0.02)

    def _fsync_directories(self) -> None:
        for directory in (self.tenants_dir, self.data_dir / INBOX_DIR_NAME):
            if directory.exists():
                _fsync(directory)

    def erase(self, tenant: str, *, before_removal: Callable[[str], None], timeout: float) -> None:
        """Remove every file of a tenant: its database (with its WAL and shared memory) and its
        hot-path inbox, once it is closed and unused (``_closed_for``: TENANT_ERASING meanwhile).
        ``before_removal(head_hash)`` runs before any file goes: the caller's receipt ("" for a
        damaged file, whose chain cannot be read). NOT_FOUND when the tenant has no file."""
        path = self.path_for(tenant)
        with self._closed_for(tenant, doing="erased", reason="TENANT_ERASING", timeout=timeout):
            if not path.exists():
                raise NotFound(f"tenant {tenant} has no data on this server", reason="TENANT_NOT_FOUND")
            try:
                with read_file(path) as txn:
                    _seq, head_hash = txn.ledger_head()
            except DataLoss:
                head_hash = ""  # a damaged file is erased all the same; its chain cannot be read
            before_removal(head_hash)
            self._remove_tenant_files(tenant)
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
    ) -> bool:
        """Put a complete tenant file (and its inbox), made and synced by the caller on this
        filesystem, in place of the tenant's: FAILED_PRECONDITION TENANT_EXISTS when it has one
        and ``replace`` is false. Returns whether a tenant was replaced.

        Atomic whatever stops it, and once begun it runs to its end (the caller's client leaving
        does not stop it): the new files are staged beside the tenant files, the database first
        (``.install-<tenant>.<random>/``), then the new tenant file takes the old one's name in one
        rename — the commit — and its inbox follows. Until the commit the old tenant is whole and
        in place; from it, the new one is, and a process killed before its inbox followed finishes
        the install at its next start (``_recover_installs``).

        ``move``: (source member, epoch) of a move's step 4: the file is installed inactive at
        that epoch; it may replace only a file this member no longer serves (a tombstone of an
        earlier move away, or an inactive copy of this same move). A tenant a move is bringing
        here (``expect_move``) is not replaced by any other import."""
        path = self.path_for(tenant)
        if self.membership is not None:  # an import through the owner: its file is this member's now
            if move is None:
                self.membership.check_home(tenant)
                record = {}
            else:
                source, epoch = move
                record = {EPOCH_KEY: str(epoch), MOVE_STEP_KEY: INACTIVE, MOVE_PEER_KEY: source}
            store = TenantStore(database, write_lock=threading.Lock(), synchronous=self._synchronous)
            try:
                self._stamp(store, **record)
            finally:
                store.close()
        with self._closed_for(tenant, doing="replaced", reason="TENANT_REPLACING", timeout=timeout):
            self.seam("install_begun")
            existed = path.exists()
            if move is not None:
                if existed:
                    self._check_replaceable_by_move(tenant, path)
                replace = True
            elif (incoming := self.incoming(tenant)) is not None:
                raise FailedPrecondition(
                    f"tenant {tenant} is being moved here from member {incoming[0]}: finish that move first "
                    "(mnemosyne rebalance), then import",
                    reason="MOVE_NOT_ACTIVE",
                )
            if existed and not replace:
                raise FailedPrecondition(
                    f"tenant {tenant} exists on this server; ask to replace it to overwrite it", reason="TENANT_EXISTS"
                )
            if existed:
                _checkpoint_away(path, f"tenant {tenant} is being read; it was not replaced, retry")
            staging = self.tenants_dir / f"{INSTALL_PREFIX}{tenant}.{uuid.uuid4().hex[:12]}"
            try:
                staging.mkdir()
                os.replace(database, staging / STAGED_DATABASE)  # first: while it is staged, nothing is committed
                if inbox is not None:
                    os.replace(inbox, staging / STAGED_INBOX)
                else:
                    (staging / STAGED_NO_INBOX).touch()
                _fsync(staging)
                _fsync(self.tenants_dir)
                self.seam("install_staged")
                # What belongs to the old file only: its approximate index (a cache), the mark of a
                # reclaimed tombstone, its WAL (emptied above) and shared memory.
                path.with_suffix(ANN_FILE_SUFFIX).unlink(missing_ok=True)
                self._reclaimed_mark(tenant).unlink(missing_ok=True)
                for suffix in ("-wal", "-shm", "-journal"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
                os.replace(staging / STAGED_DATABASE, path)  # the commit
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            _fsync(self.tenants_dir)
            self.seam("install_committed")
            self._finish_install(tenant, staging)
        return existed

    def _finish_install(self, tenant: str, staging: Path) -> None:
        """An install after its commit: the new inbox replaces the old tenant's (or the old one
        goes when the new tenant has none), the mark of a move bringing it here goes, and the
        staging directory last. Idempotent: a kill midway is finished again at the next start —
        the staged inbox is linked into place, not moved, so that until the staging directory
        goes it still says the install committed (``_recover_installs``)."""
        inbox_path = self.inbox_path_for(tenant)
        staged = staging / STAGED_INBOX
        for suffix in ("-wal", "-shm", "-journal", ""):
            Path(f"{inbox_path}{suffix}").unlink(missing_ok=True)
        if staged.exists():
            inbox_path.parent.mkdir(parents=True, exist_ok=True)
            os.link(staged, inbox_path)
        self._incoming_mark(tenant).unlink(missing_ok=True)
        self._fsync_directories()
        shutil.rmtree(staging)

    def _maintain(self, tenant: str) -> None:
        """Merge a tenant's full-text segments, then checkpoint it, if its store is still open
        (closing a store checkpoints it; opening it again requests a pass). A merge that stopped
        at its bound with work left asks for another pass, after the tenants already waiting:
        a tenant written in bulk is merged to the end without waiting for its next write."""
        with self._guard:
            entry = self._open.get(tenant)
            if entry is None:
                return
            entry.users += 1
        try:
            if entry.store.merge_fulltext() >= FULLTEXT_MERGE_MAX_STEPS:
                self.maintainer.request(tenant)
            entry.store.checkpoint()
        finally:
            self._release(entry)

    def close(self) -> None:
        """Close every tenant file and release the directory. Idempotent."""
        self.maintainer.stop()
        with self._guard:
            if self._closed:
                return
            self._closed = True
            entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            entry.store.close()
        self._dir_lock.release()
