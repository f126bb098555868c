"""A tenant's ownership as its file records it — the holder, the ownership epoch and the steps of
a move — and what a member does with it (docs/scale-out.md, "Ownership in the tenant file" and
"Moving tenants"). Which member a tenant belongs to by the member list is store/membership.py;
the pool (store/pool.py) asks this module at every open, creation, install and move step, and the
engine (engine/moves.py) strings a move's steps together.

Each tenant file's ``meta`` table names its holder (a member id) and the epoch it holds it at.
A move adds, on its source, the last step done (``fenced`` ... ``tombstoned``), its destination,
its epoch and the head hash it exported; on its destination, ``inactive`` then ``active`` and its
source. The open honours them, whatever list the member was started with:

* a tombstone redirects (NOT_OWNER naming the destination, with the epoch it moved at);
* a copy a move brought here serves nothing until activated (UNAVAILABLE TENANT_MOVING);
* a file naming no holder is adopted by its home (stamped), as is one this member held at an older
  epoch; one naming another holder, or a newer epoch, is refused;
* a fenced source serves reads only (the store refuses its writes: tenant_store.py ``fence``).

Beside the files: ``<tenant>.incoming`` (a move is bringing the tenant here: this member never
creates it meanwhile) and ``<tenant>.moved`` (a reclaimed tombstone, left out of listings).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import apsw

from mnemosyne.errors import DataLoss, FailedPrecondition, Unavailable
from mnemosyne.store.data_dir import (
    NEW_FILE_PREFIX,
    RECLAIMED_SUFFIX,
    RECLAIMING_MARK,
    TENANTS_DIR_NAME,
    write_durably,
)
from mnemosyne.store.files import SIDE_SUFFIXES, checkpoint_away, fsync, remove_database, shred
from mnemosyne.store.member_change import MARK_FILE_NAME, MemberChange
from mnemosyne.store.membership import EPOCH_NEWER, HELD_ELSEWHERE, Membership, moving
from mnemosyne.store.replicas import StoreReplication
from mnemosyne.store.tenant_store import ReadTxn, TenantStore, read_file

HOLDER_KEY = "holder"  # the tenant file's meta row naming its holder
EPOCH_KEY = "ownership_epoch"  # ... and the epoch at which it holds it (a move raises it)
MOVE_STEP_KEY = "move_step"
MOVE_PEER_KEY = "move_peer"  # the source: its destination; the destination: its source
MOVE_EPOCH_KEY = "move_epoch"
MOVE_HEAD_KEY = "move_head_hash"  # the head hash of the audit chain the source exported
# A tombstone whose move completed, reclaimed (``reclaim_tombstone``): its file keeps only the
# keys above (what it needs to redirect), the tenant's data is gone.
MOVE_RECLAIMED_KEY = "move_reclaimed"
MOVE_KEYS = (HOLDER_KEY, EPOCH_KEY, MOVE_STEP_KEY, MOVE_PEER_KEY, MOVE_EPOCH_KEY, MOVE_HEAD_KEY, MOVE_RECLAIMED_KEY)
SOURCE_STEPS = ("fenced", "flushed", "exported", "imported", "tombstoned")
FENCED_STEPS = frozenset(SOURCE_STEPS[:4])  # writes refused, reads served
TOMBSTONED = "tombstoned"  # the source serves nothing and redirects to the destination
INACTIVE = "inactive"  # the destination, imported, serves nothing until activated
ACTIVE = "active"
INCOMING_SUFFIX = ".incoming"  # beside the tenant files: a move is bringing it here ("SOURCE EPOCH")
OWNED_SUFFIX = ".owned"  # beside the tenant files: a tenant moved here, then erased (``after_erasure``)
# How many tenants' placements (``Ownership.placement``) are remembered; the least recently asked
# are forgotten beyond it (and read from their file again when asked).
PLACEMENTS_REMEMBERED = 65536

log = logging.getLogger("mnemosyne.store")


@dataclass(frozen=True)
class OwnershipRecord:
    """What a tenant file records of its ownership: its holder (None: written by a single server,
    or before members existed) and epoch, and a move's step ("": none), peer, epoch and head."""

    holder: str | None = None
    epoch: int = 0
    step: str = ""
    peer: str = ""
    move_epoch: int = 0
    head_hash: str = ""
    reclaimed: bool = False

    @classmethod
    def read(cls, txn: ReadTxn) -> OwnershipRecord:
        """The record in the file of ``txn``; ValueError for an epoch that is not a number."""
        return cls(
            holder=txn.meta(HOLDER_KEY),
            epoch=int(txn.meta(EPOCH_KEY) or 0),
            step=txn.meta(MOVE_STEP_KEY) or "",
            peer=txn.meta(MOVE_PEER_KEY) or "",
            move_epoch=int(txn.meta(MOVE_EPOCH_KEY) or 0),
            head_hash=txn.meta(MOVE_HEAD_KEY) or "",
            reclaimed=bool(txn.meta(MOVE_RECLAIMED_KEY)),
        )

    @property
    def fenced(self) -> bool:
        """A move's source before its tombstone: writes refused, reads served."""
        return self.step in FENCED_STEPS


@dataclass(frozen=True)
class Placement:
    """Where a tenant is served as this member knows it (``Ownership.placement``)."""

    where: str  # the member that serves it
    moved_epoch: int = 0  # a move's tombstone here: the epoch it moved at (``where`` is its destination)
    pending_from: str = ""  # a copy a move brought here, not active yet: its source ...
    pending_epoch: int = 0  # ... and the epoch it is to be activated at


def incoming_mark(tenants_dir: Path, tenant: str) -> Path:
    """The mark of a move bringing ``tenant`` here (``Ownership.expect``)."""
    return tenants_dir / f"{tenant}{INCOMING_SUFFIX}"


def incoming_move(tenants_dir: Path, tenant: str) -> tuple[str, int] | None:
    """The move bringing ``tenant`` here whose copy is not installed yet: (its source, its
    epoch); None when there is none (``Ownership.expect``)."""
    try:
        source, _, epoch = incoming_mark(tenants_dir, tenant).read_text().partition(" ")
    except FileNotFoundError:
        return None
    return source, int(epoch or 0)


def owned_mark(tenants_dir: Path, tenant: str) -> Path:
    """The mark of a tenant moved here and erased since (``Ownership.after_erasure``)."""
    return tenants_dir / f"{tenant}{OWNED_SUFFIX}"


def reclaimed_mark(tenants_dir: Path, tenant: str) -> Path:
    """The mark beside a reclaimed tombstone (``reclaim_tombstone``)."""
    return tenants_dir / f"{tenant}{RECLAIMED_SUFFIX}"


def check_replaceable_by_move(tenant: str, path: Path) -> None:
    """A move may bring a tenant here over a file this member no longer serves only: a
    tombstone of an earlier move away, or an inactive copy of this same move."""
    with read_file(path) as txn:
        step = OwnershipRecord.read(txn).step
    if step not in (TOMBSTONED, INACTIVE):
        raise FailedPrecondition(
            f"tenant {tenant} is served by this member already ({step or ACTIVE}); it cannot be moved "
            "here over it: erase one of the two copies first",
            reason="TENANT_EXISTS",
        )


def check_install_over(tenants_dir: Path, tenant: str, path: Path, *, move: tuple[str, int] | None) -> None:
    """Refuse an install (store/pool.py ``install``) of ``tenant``'s file ``path``: over a tenant
    this member serves, for a move's (``move``: its source and epoch); over a tenant a move is
    bringing here, for any other import (MOVE_NOT_ACTIVE)."""
    if move is not None:
        if path.exists():
            check_replaceable_by_move(tenant, path)
        return
    incoming = incoming_move(tenants_dir, tenant)
    if incoming is not None:
        raise FailedPrecondition(
            f"tenant {tenant} is being moved here from member {incoming[0]}: finish that move first "
            "(mnemosyne rebalance), then import",
            reason="MOVE_NOT_ACTIVE",
        )


def _without_previous(membership: Membership) -> Membership:
    """``membership`` once a change to its list completed: every tenant is at its owner by it."""
    if membership.previous:
        log.info("member %s: the previous member list is done with (a rebalance to this list completed)", membership.me)
    return replace(membership, previous=())


class Ownership:
    """This member's side of its tenants' ownership (the module's docstring): the check of an
    open, the stamp, where a tenant is served, the marks of the moves coming here, and a change of
    the member list (store/member_change.py). Made by the pool of a member of a deployment
    (store/pool.py); thread-safe."""

    def __init__(
        self,
        membership: Membership,
        data_dir: Path,
        read: Callable[[str], OwnershipRecord | None],
        replica_holder: Callable[[str], str | None] = lambda tenant: None,
        remembered: int = PLACEMENTS_REMEMBERED,
    ) -> None:
        # a change of the member list begun or completed here (store/member_change.py)
        self._change = MemberChange(data_dir / TENANTS_DIR_NAME / MARK_FILE_NAME, membership.me, membership.ids)
        self.membership = _without_previous(membership) if self._change.previous_done else membership
        self._tenants_dir = data_dir / TENANTS_DIR_NAME
        self._read = read  # a tenant's record from its file here; None without one (store/pool.py)
        # who started a tenant's newest generation in object storage (store/replicas.py ``holder``)
        self._replica_holder = replica_holder
        # tenant -> where its file says it is served, for the files read most recently
        self._placements: OrderedDict[str, Placement] = OrderedDict()
        self._remembered = max(1, remembered)
        # tenant -> the member object storage's newest copy names, for a tenant without a file
        # here (``restored_judge``): until its file here changes (``forget``)
        self._held_elsewhere: dict[str, str] = {}
        self._guard = threading.Lock()

    # -- the open ---------------------------------------------------------------------------------

    def check_absent(self, tenant: str) -> None:
        """A tenant without a file here: refused NOT_OWNER when its home is another member, and
        TENANT_MOVING while a move brings it here (no file is created meanwhile)."""
        self.refuse_incoming(tenant)
        self._check_home(tenant)

    def _check_home(self, tenant: str) -> None:
        """NOT_OWNER unless this member is the tenant's home, or it was moved here (and erased)."""
        if not owned_mark(self._tenants_dir, tenant).exists():
            self.membership.check_home(tenant)

    def after_erasure(self, tenant: str) -> None:
        """Before an erased tenant's files go: one this member serves away from its home (moved
        here) leaves its mark (``owned_mark``), so that this member creates it again at its next
        write — the tombstone at its home sends the callers here — never NOT_OWNER back there."""
        if self._serves(tenant) and self.membership.home(tenant) != self.membership.me:
            owned_mark(self._tenants_dir, tenant).write_text(self.membership.me)

    def check_open(self, tenant: str, store: TenantStore) -> None:
        """The ownership check of an open of ``tenant``'s file (``store``): it must name this
        member, and what a move recorded in it decides (the module's docstring). A file naming no
        holder is adopted by its home (stamped), as is one this member held at an older epoch; a
        fenced source's store refuses writes. A file that appeared here after a restore found
        the tenant held by another member (``restored_judge``), not through this pool (whose
        installs ``forget`` that), is a stale copy put back on the volume: refused whether or not
        object storage answers the open's own question (store/replicas.py ``refuse_stale``)."""
        with self._guard:
            elsewhere = self._held_elsewhere.get(tenant)
        if elsewhere is not None:
            raise self.membership.not_owner(
                tenant, elsewhere, "the file here is a stale copy (object storage's newest copy of it is held there)"
            )
        with store.read() as txn:
            record = OwnershipRecord.read(txn)
        if self._adopts(tenant, record):
            self.stamp(store)
        store.fenced = record.fenced

    def _adopts(self, tenant: str, record: OwnershipRecord) -> bool:
        """Whether a file with ``record`` is to be stamped here; raises when this member does not
        serve it."""
        membership = self.membership
        if record.step == TOMBSTONED:
            raise membership.not_owner(tenant, record.peer, "it moved there", moved_epoch=record.epoch)
        if record.step == INACTIVE:
            raise moving(tenant, f"it is being moved here from member {record.peer}")
        if record.holder is None and membership.home(tenant) != membership.me:
            raise membership.not_owner(tenant, membership.home(tenant), "call its owner")
        if record.holder is not None and not (record.holder == membership.me and record.epoch < membership.epoch):
            self._check_held(tenant, record)
            return False
        log.info(
            "tenant %s: adopted by member %s at epoch %d (its file named %s)",
            tenant,
            membership.me,
            membership.epoch,
            record.holder or "no holder",
        )
        return True

    def _check_held(self, tenant: str, record: OwnershipRecord) -> None:
        """Refuse a file another member holds, or one stamped at a newer epoch than this member's
        (but one a move brought here, whose epoch the move raised)."""
        me = self.membership.me
        if record.holder != me:
            raise FailedPrecondition(
                f"tenant {tenant}'s file names member {record.holder} as its holder, not {me}: it was copied from "
                "another member's volume; restore it there, or export and import it through the owner",
                reason=HELD_ELSEWHERE,
                metadata={"holder": record.holder or ""},
            )
        if record.epoch > self.membership.epoch and not record.step:
            raise FailedPrecondition(
                f"tenant {tenant}'s file is held at ownership epoch {record.epoch}, newer than this member's "
                f"{self.membership.epoch}: the member list of this process is out of date",
                reason=EPOCH_NEWER,
                metadata={"epoch": str(record.epoch)},
            )

    def stamp(self, store: TenantStore, *, move: tuple[str, int] | None = None) -> None:
        """Name this member as the file's holder at the current epoch, or, for the copy a move
        brings here (``move``: its source and epoch), at the move's epoch and inactive."""
        with store.write(internal=True) as txn:
            txn.set_meta(HOLDER_KEY, self.membership.me)
            if move is None:
                txn.set_meta(EPOCH_KEY, str(self.membership.epoch))
            else:
                source, epoch = move
                txn.set_meta(EPOCH_KEY, str(epoch))
                txn.set_meta(MOVE_STEP_KEY, INACTIVE)
                txn.set_meta(MOVE_PEER_KEY, source)

    def adopt_import(self, tenant: str, database: Path, *, move: tuple[str, int] | None, synchronous: str) -> None:
        """An import's file (``database``, not installed yet) becomes this member's: stamped, or,
        for a move's (``move``), stamped inactive at the move's epoch. An import that is no move
        is refused NOT_OWNER unless this member is the tenant's home or serves it now (a tenant
        moved here, replaced by an online restore)."""
        if move is None and not self._serves(tenant):
            self._check_home(tenant)
        store = TenantStore(database, write_lock=threading.Lock(), synchronous=synchronous)
        try:
            self.stamp(store, move=move)
        finally:
            store.close()

    def restored_judge(self, tenant: str) -> Callable[[Path], bool]:
        """What a member on an empty volume may restore of ``tenant`` from object storage
        (store/pool.py ``_restore_from_replica``): asked of each generation's restored file,
        highest first, it takes the highest generation whose record names this member (or no
        holder, at the tenant's home), fenced by the epoch. A generation held by another member
        is never restored here: NOT_OWNER naming it (remembered, so the next call is refused
        without a restore). A move's copy not activated yet (``inactive``) is passed over: its
        source still holds the tenant, at the generation below and a lower epoch."""
        me, membership = self.membership.me, self.membership
        above: list[OwnershipRecord] = []  # the inactive copies passed over

        def judge(database: Path) -> bool:
            with read_file(database) as txn:
                record = OwnershipRecord.read(txn)
            if record.step == INACTIVE and record.peer:
                above.append(record)
                return False
            holder = record.holder or membership.home(tenant)
            fenced_out = any(record.epoch >= copy.epoch for copy in above) and record.holder is not None
            if holder != me or fenced_out:
                owner = holder if holder != me else above[-1].holder or holder
                with self._guard:
                    self._held_elsewhere[tenant] = owner
                    while len(self._held_elsewhere) > self._remembered:
                        del self._held_elsewhere[next(iter(self._held_elsewhere))]
                raise membership.not_owner(tenant, owner, "object storage's newest copy of it is held there")
            return True

        return judge

    def check_missing(self, tenant: str, *, lost: bool) -> None:
        """A tenant without a file here: refused TENANT_MOVING while a move brings it here,
        NOT_OWNER when a restore found it held by another member (``restored_judge``), and, when
        object storage holds no copy of it (not ``lost``), as ``check_absent`` says: a copy it
        holds decides instead (a tenant moved here is this member's, whatever its home)."""
        self.refuse_incoming(tenant)
        with self._guard:
            owner = self._held_elsewhere.get(tenant)
        if owner is not None:
            raise self.membership.not_owner(tenant, owner, "object storage's newest copy of it is held there")
        if not lost:
            self._check_home(tenant)

    def _serves(self, tenant: str) -> bool:
        """Whether the tenant's file here names this member and serves (not a tombstone, nor a
        move's copy not active yet)."""
        try:
            record = self._read(tenant)
        except (DataLoss, apsw.Error, ValueError):
            return False
        return record is not None and record.holder == self.membership.me and record.step not in (TOMBSTONED, INACTIVE)

    # -- where a tenant is served -------------------------------------------------------------------

    def placement(self, tenant: str) -> Placement:
        """Where ``tenant`` is served as this member knows it: where its file here says (this
        member; a tombstone's destination; a file without a holder: its home), or, without a
        file, the source of a move bringing it here, else its home. Read once per file, then
        remembered (the most recently asked) until ``forget``."""
        me = self.membership.me
        with self._guard:
            known = self._placements.get(tenant)
            if known is not None:
                self._placements.move_to_end(tenant)
                return known
        try:
            record = self._read(tenant)
        except (DataLoss, apsw.Error, ValueError):
            return Placement(me)  # the open here says what is wrong with it
        if record is None:
            return self._placement_without_file(tenant)
        if record.step == TOMBSTONED and record.peer:
            placed = Placement(record.peer, moved_epoch=record.epoch)
        elif record.holder is None:
            placed = Placement(self.membership.home(tenant))
        elif record.step == INACTIVE and record.peer:
            placed = Placement(me, pending_from=record.peer, pending_epoch=record.epoch)
        else:
            placed = Placement(me)
        self._remember(tenant, placed)
        return placed

    def _remember(self, tenant: str, placed: Placement) -> None:
        with self._guard:
            self._placements[tenant] = placed
            while len(self._placements) > self._remembered:
                self._placements.popitem(last=False)

    def _placement_without_file(self, tenant: str) -> Placement:
        """A tenant with no file here: the source of a move bringing it here; else the member a
        restore found holding it (``restored_judge``); else this member when object storage's
        newest copy was started here (a tenant moved here, on a volume since lost: the open
        restores it); else its home."""
        incoming = incoming_move(self._tenants_dir, tenant)
        if incoming is not None:
            return Placement(incoming[0])
        me, home = self.membership.me, self.membership.home(tenant)
        with self._guard:
            elsewhere = self._held_elsewhere.get(tenant)
        if elsewhere is not None:
            return Placement(elsewhere)
        if home == me or owned_mark(self._tenants_dir, tenant).exists():
            return Placement(me)
        try:
            placed = Placement(me if self._replica_holder(tenant) == me else home)
        except Unavailable:
            return Placement(home)  # object storage does not answer: the home, as without replication
        self._remember(tenant, placed)  # asked of object storage once, until the file here changes
        return placed

    def forget(self, tenant: str) -> None:
        """The tenant's file changed (a move, an import, an erasure): read it again when asked."""
        with self._guard:
            self._placements.pop(tenant, None)
            self._held_elsewhere.pop(tenant, None)

    @property
    def remembered(self) -> int:
        with self._guard:
            return len(self._placements)

    # -- a change of the member list ------------------------------------------------------------------

    def creating(self, tenant: str) -> AbstractContextManager[None]:
        """The block of a tenant's creation here, up to its file in place (a first write, an
        import): refused while a change of the member list gives the tenant to another member."""
        return self._change.creating(tenant)

    def begin_change(self, to: tuple[str, ...]) -> int:
        """``MemberChange.begin``: from now on no tenant another member owns by ``to`` is created here."""
        return self._change.begin(to)

    def complete_change(self, to: tuple[str, ...]) -> bool:
        """``MemberChange.complete``; when this member runs ``to``, its previous list is done with now:
        a tenant without a file here is at its owner by ``to``."""
        if not self._change.complete(to):
            return False
        if self.membership.previous:
            self.membership = _without_previous(self.membership)
            with self._guard:
                self._placements.clear()
        return True

    # -- a move bringing a tenant here --------------------------------------------------------------

    def refuse_incoming(self, tenant: str) -> None:
        """Refuse TENANT_MOVING a tenant a move is bringing here (``expect``)."""
        incoming = incoming_move(self._tenants_dir, tenant)
        if incoming is not None:
            raise moving(tenant, f"it is being moved here from member {incoming[0]}")

    def expect(self, tenant: str, source: str, epoch: int) -> None:
        """Record, durably, that a move is bringing ``tenant`` here from ``source`` at ``epoch``
        (a file beside the tenant files, written under a temporary name first and synced); the
        install of its copy removes it (store/pool.py ``install``)."""
        write_durably(incoming_mark(self._tenants_dir, tenant), f"{source} {epoch}")
        self.forget(tenant)


def write_move_step(path: Path, record: dict[str, str], *, synchronous: str, replication: StoreReplication) -> None:
    """Write a move's step (``record``: meta keys; an empty value removes its key) into the tenant
    file ``path``, on a connection of its own: the caller has the tenant closed."""
    store = TenantStore(path, write_lock=threading.Lock(), synchronous=synchronous, replication=replication)
    try:
        with store.write(internal=True) as txn:
            for key, value in record.items():
                if value:
                    txn.set_meta(key, value)
                else:
                    txn.delete_meta(key)
    finally:
        store.close()


def reclaim_tombstone(path: Path, inbox: Path, *, synchronous: str, seam: Callable[[str], None]) -> bool:
    """After a move away completed (its destination active), keep of the tenant file ``path``
    only what its tombstone needs to redirect (``MOVE_KEYS``): a new file holding those keys
    replaces it, the old one's bytes (and its ``inbox``'s) are overwritten with zeros and removed.
    False when it was reclaimed already. A kill at any point leaves the old tombstone or the new
    one, both redirecting; the old data, left under a temporary name, is overwritten at the next
    start (store/data_dir.py ``remove_leftovers``). The caller has the tenant closed."""
    tenant = path.stem
    with read_file(path) as txn:
        record = {key: value for key in MOVE_KEYS if (value := txn.meta(key)) is not None}
    if record.get(MOVE_STEP_KEY) != TOMBSTONED:
        raise FailedPrecondition(
            f"tenant {tenant} is not a tombstone here ({record.get(MOVE_STEP_KEY) or ACTIVE}): only the "
            "file of a tenant moved away is reclaimed",
            reason="MOVE_NOT_TOMBSTONED",
        )
    if record.get(MOVE_RECLAIMED_KEY):
        return False
    mark = f"{uuid.uuid4().hex[:12]}{path.suffix}"
    scratch = f"{NEW_FILE_PREFIX}{tenant}"
    replacement, old = path.with_name(f"{scratch}.{mark}"), path.with_name(f"{scratch}{RECLAIMING_MARK}{mark}")
    try:
        store = TenantStore(replacement, write_lock=threading.Lock(), synchronous=synchronous)
        try:
            with store.write(internal=True) as txn:
                for key, value in {**record, MOVE_RECLAIMED_KEY: "1"}.items():
                    txn.set_meta(key, value)
        finally:
            store.close()
        fsync(replacement)
        # The old file's WAL goes into it (and away), so the old data is one file.
        checkpoint_away(path, f"tenant {tenant}'s tombstone is being read; it was not reclaimed, retry")
        os.link(path, old)
        seam("reclaim_linked")
        for suffix in SIDE_SUFFIXES:
            shred(Path(f"{path}{suffix}"))
        os.replace(replacement, path)
        fsync(path.parent)
    except BaseException:
        remove_database(replacement)
        raise
    seam("reclaim_replaced")
    shred(old)
    for suffix in (*SIDE_SUFFIXES, ""):
        shred(Path(f"{inbox}{suffix}"))
    return True
