"""A tenant moving from one member to another: the steps each member takes, each recorded in the
tenant's file (docs/scale-out.md, "Moving tenants").

On the source (the member holding the file), in order:

1. ``fenced``: writes refused (UNAVAILABLE TENANT_MOVING with a RetryInfo), reads served; the
   destination and the new epoch (the file's + 1) recorded;
2. ``flushed``: every fast write accepted before the fence is in the tenant file;
3. ``exported``: a consistent snapshot taken (its head hash recorded);
4. ``imported``: the destination installed it inactive at the new epoch and answered the same
   head hash (the destination's file records ``inactive``);
5. ``tombstoned``: the source's file is at the new epoch and redirects every call to the
   destination (NOT_OWNER naming it) — the old owner never serves the tenant again;
6. ``activated``: the destination's file records ``active`` and it serves the tenant.

Then the source's tombstone is reclaimed (``reclaim``): its file keeps only what redirects.

The record is in the tenant file itself, not in a journal beside it: it moves, is backed up and
is removed with the file, it is read by the same open that checks the holder, and a step and its
record are one SQLite transaction. Each step is idempotent; ``plan`` says where a move stands,
so running it again after any interruption (a member killed, the rebalancer killed) finishes it.
The transport (transport/cluster/moves.py) strings the steps together and makes the two calls to the
destination.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mnemosyne.engine.backup import Backups, FileChunk, TenantCopy
from mnemosyne.engine.hot_path import HotPath
from mnemosyne.engine.lost_tenants import LOST_TENANTS_WAIT_SECONDS, LostTenants, restore_if_lost
from mnemosyne.engine.targets import check_member_addresses
from mnemosyne.engine.tenant_import import TenantImport, TenantImports
from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound

# The names of members and placement the surfaces use (the forwarding hop, the move driver) are
# the store's, handed out through this module: the transport imports only the engine.
from mnemosyne.store.membership import MOVED_AT_EPOCH as MOVED_AT_EPOCH
from mnemosyne.store.membership import NOT_OWNER as NOT_OWNER
from mnemosyne.store.membership import Membership as Membership
from mnemosyne.store.membership import parse_members
from mnemosyne.store.ownership import (
    ACTIVE,
    EPOCH_KEY,
    INACTIVE,
    MOVE_EPOCH_KEY,
    MOVE_HEAD_KEY,
    MOVE_PEER_KEY,
    MOVE_STEP_KEY,
    SOURCE_STEPS,
    TOMBSTONED,
)
from mnemosyne.store.ownership import Placement as Placement
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_ids import validate_tenant
from mnemosyne.store.tenant_store import read_file

STEPS = (*SOURCE_STEPS, "activated")
# How long a step waits for the calls in flight on the tenant (a tombstone, an activation) and
# for the hot path to take what it accepted.
STEP_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class MovePlan:
    tenant: str
    destination: str
    epoch: int  # the epoch on the destination
    done: str  # the last step done ("" for none)
    head_hash: str  # as exported ("" before step 3)

    def needs(self, step: str) -> bool:
        return STEPS.index(step) > (STEPS.index(self.done) if self.done else -1)


@dataclass(frozen=True)
class MemberChangeAnswer:
    member: str  # the member that answered
    creations_waited: int  # begin: the creations of tenants under way it waited for
    previous_done: bool  # complete: this member runs the new list and its previous list is done with


class Moves:
    def __init__(
        self,
        *,
        pool: TenantPool,
        hot_path: HotPath,
        backups: Backups,
        imports: TenantImports,
        lost_tenants: LostTenants | None,
    ) -> None:
        self._pool = pool
        self._lost_tenants = lost_tenants
        self._hot_path = hot_path
        self._backups = backups
        self._imports = imports

    @property
    def membership(self) -> Membership:
        if self._pool.membership is None:
            raise FailedPrecondition(
                "this server has no members (--members): there is nowhere to move a tenant", reason="NO_MEMBERS"
            )
        return self._pool.membership

    # -- the source ---------------------------------------------------------------------------------

    def plan(self, tenant: str, destination: str) -> MovePlan:
        """Where a move of ``tenant`` to ``destination`` stands on this member (its source)."""
        validate_tenant(tenant)
        membership = self.membership
        if destination not in membership.addresses or destination == membership.me:
            raise InvalidArgument(
                f"destination {destination[:64]!r} is not another member of this member's list "
                f"({membership.describe()})",
                reason="DESTINATION_INVALID",
            )
        restore_if_lost(self._pool, tenant)
        record = self._pool.move_record(tenant)
        if record is None:
            raise NotFound(f"tenant {tenant} has no file on member {membership.me}", reason="TENANT_NOT_FOUND")
        if record.holder not in (None, membership.me):
            raise FailedPrecondition(
                f"tenant {tenant}'s file here names member {record.holder} as its holder",
                reason="TENANT_HELD_ELSEWHERE",
            )
        if record.step == INACTIVE:
            raise FailedPrecondition(
                f"tenant {tenant} was moved here and is not active yet: finish that move first",
                reason="MOVE_NOT_ACTIVE",
            )
        if record.step in (ACTIVE, ""):  # held here: a new move
            return MovePlan(tenant, destination, max(record.epoch, 1) + 1, "", "")
        if record.peer != destination:
            raise FailedPrecondition(
                f"tenant {tenant} is moving (or moved) from member {membership.me} to member {record.peer}, not "
                f"{destination}: finish that move first (rebalance with the list it was started with)",
                reason="MOVE_ELSEWHERE",
                metadata={"destination": record.peer},
            )
        return MovePlan(tenant, destination, record.move_epoch, record.step, record.head_hash)

    def fence(self, plan: MovePlan) -> None:
        """Step 1 (idempotent: a fenced tenant is fenced again with the same record)."""
        self._pool.fence(
            plan.tenant,
            **{MOVE_STEP_KEY: "fenced", MOVE_PEER_KEY: plan.destination, MOVE_EPOCH_KEY: str(plan.epoch)},
        )

    def flush(self, plan: MovePlan) -> None:
        """Step 2: what the hot path accepted before the fence is in the tenant file."""
        self._hot_path.flush(plan.tenant, STEP_WAIT_SECONDS)
        self._pool.fence(plan.tenant, **{MOVE_STEP_KEY: "flushed"})

    def export(self, plan: MovePlan) -> tuple[TenantCopy, Iterator[TenantCopy | FileChunk]]:
        """Step 3: a snapshot of the fenced tenant (its manifest and its chunks, read lazily)."""
        parts = self._backups.export(plan.tenant, move=True)
        copy = next(parts)
        assert isinstance(copy, TenantCopy)
        self._pool.fence(plan.tenant, **{MOVE_STEP_KEY: "exported", MOVE_HEAD_KEY: copy.facts.head_hash})
        return copy, parts  # the rest of the export: its chunks

    def imported(self, plan: MovePlan, head_hash: str) -> None:
        """Step 4 on the source's side: the destination answered; its head hash must be ours."""
        if head_hash != plan.head_hash:
            raise DataLoss(
                f"tenant {plan.tenant}: member {plan.destination} imported head hash {head_hash[:12]}…, not the "
                f"exported {plan.head_hash[:12]}…; the move stays fenced here — run it again",
                reason="MOVE_HEAD_MISMATCH",
            )
        self._pool.fence(plan.tenant, **{MOVE_STEP_KEY: "imported"})

    def tombstone(self, plan: MovePlan) -> None:
        """Step 5: from now on this member redirects the tenant to the destination."""
        self._pool.record_move(
            plan.tenant, timeout=STEP_WAIT_SECONDS, **{MOVE_STEP_KEY: TOMBSTONED, EPOCH_KEY: str(plan.epoch)}
        )
        self._hot_path.forget_tenant(plan.tenant)

    def reclaim(self, plan: MovePlan) -> bool:
        """After step 6 (the destination answered it active): the tombstone keeps only what it
        needs to redirect, the tenant's data goes (store/ownership.py ``reclaim_tombstone``). False when it was
        reclaimed already."""
        return self._pool.reclaim(plan.tenant, timeout=STEP_WAIT_SECONDS)

    # -- the destination ----------------------------------------------------------------------------

    def receive(self, tenant: str, copy: TenantCopy, *, source: str, epoch: int) -> TenantImport:
        """Step 4: an import of the tenant, to be installed inactive at ``epoch``. Before its
        first byte, this member records that the move is bringing the tenant here
        (store/ownership.py ``Ownership.expect``): however the import ends, it never creates the tenant
        itself, and the next run of the move installs over that record."""
        membership = self.membership
        if source not in membership.addresses or source == membership.me or epoch < 2:
            raise InvalidArgument(
                f"a move's import names source {source[:64]!r} and epoch {epoch}: the source must be another "
                "member and the epoch above 1",
                reason="MOVE_INVALID",
            )
        tenant = validate_tenant(tenant or copy.tenant)
        self._pool.expect_move(tenant, source, epoch)
        return self._imports.begin(tenant, copy, replace=False, move=(source, epoch))

    def activate(self, tenant: str, epoch: int, head_hash: str | None) -> bool:
        """Step 6: the tenant imported inactive at ``epoch`` is served here. False when it was
        active already (at that epoch). ``head_hash``: the chain's head as the source exported it,
        compared again (None: the destination finishing the move by itself, once the source
        showed its tombstone at ``epoch``; the head was compared at the import)."""
        validate_tenant(tenant)
        record = self._pool.move_record(tenant)
        step, at = (record.step, record.epoch) if record is not None else ("", 0)
        if step == ACTIVE and at == epoch:
            return False
        if step != INACTIVE or at != epoch:
            raise FailedPrecondition(
                f"tenant {tenant} is not waiting here to be activated at epoch {epoch} (its file: "
                f"{step or 'no move'}, epoch {at or '-'})",
                reason="MOVE_NOT_IMPORTED",
            )
        with read_file(self._pool.path_for(tenant)) as txn:
            _seq, head = txn.ledger_head()
        if head_hash is not None and head != head_hash:
            raise DataLoss(
                f"tenant {tenant}'s imported chain ends at {head[:12]}…, not {head_hash[:12]}…",
                reason="MOVE_HEAD_MISMATCH",
            )
        self._pool.record_move(tenant, timeout=STEP_WAIT_SECONDS, **{MOVE_STEP_KEY: ACTIVE})
        self._hot_path.resume(tenant)
        return True

    # -- a change of the member list (store/member_change.py) -----------------------------------------

    def change_members(self, to: str, *, complete: bool) -> MemberChangeAnswer:
        """Begin (``complete`` false) or complete the change to the member list ``to`` on this member."""
        members = parse_members(to)
        check_member_addresses(members, "the member list to change to")  # what every member will dial
        ids = tuple(members)
        ownership, me = self._pool.ownership, self.membership.me  # ``membership``: NO_MEMBERS without one
        assert ownership is not None  # a member has its ownership
        if complete:
            return MemberChangeAnswer(me, 0, ownership.complete_change(ids))
        if self._lost_tenants is not None:  # the listing that follows must see the tenants a lost volume held
            self._lost_tenants.wait(LOST_TENANTS_WAIT_SECONDS)
        return MemberChangeAnswer(me, ownership.begin_change(ids), False)
