"""Members: which server process owns which tenant (docs/scale-out.md).

A deployment is a configured list of members, each an id and the address its peers and clients
reach it at. A tenant's owner is given by rendezvous (highest-random-weight) hashing of the
tenant id over the member ids, the same in every language (client/routing.py, the Node client's
src/routing.js; test vectors in docs/scale-out.md):

    weight(tenant, member) = the first 8 bytes, as an unsigned big-endian integer, of
                             SHA-256(UTF-8(tenant) || 0x00 || UTF-8(member))
    owner(tenant)          = the member of highest weight; on a tie, the smallest member id
                             (compared as UTF-8 bytes)

The order of the list does not matter. Adding a member moves only the tenants the new member
wins (``mnemosyne rebalance`` moves them, engine/moves.py).

Each tenant file records its holder and an ownership epoch (its ``meta`` table): a member opens
a tenant only if the hash names it and the file names it at the current epoch
(``Membership.check_held``); it creates a tenant only if the hash names it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from mnemosyne.errors import FailedPrecondition, InvalidArgument, Unavailable

MEMBER_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
HOLDER_KEY = "holder"  # the tenant file's meta row naming its holder
EPOCH_KEY = "ownership_epoch"  # ... and the epoch at which it holds it (a move raises it)
NOT_OWNER = "NOT_OWNER"  # the refusal's reason; its metadata names the owner and its address
HELD_ELSEWHERE = "TENANT_HELD_ELSEWHERE"  # a file copied from another member's volume
EPOCH_NEWER = "OWNERSHIP_EPOCH_NEWER"  # a file held at an epoch newer than this member's list
# The refusals of an open whose file this member does not serve (store/pool.py ``_check_holder``).
NOT_SERVED_HERE = frozenset({NOT_OWNER, HELD_ELSEWHERE, EPOCH_NEWER})
# A move (engine/moves.py, docs/scale-out.md#moving-tenants) records its progress in the meta
# table of the tenant files it involves: on the source the last step done, the destination and
# the epoch the tenant moves at; on the destination the step (``imported``: inactive, then
# ``active``) and the source. The ownership check of an open honours them.
MOVE_STEP_KEY = "move_step"
MOVE_PEER_KEY = "move_peer"  # the source: its destination; the destination: its source
MOVE_EPOCH_KEY = "move_epoch"
MOVE_HEAD_KEY = "move_head_hash"  # the head hash of the audit chain the source exported
# A tombstone whose move completed, reclaimed (store/pool.py ``reclaim``): its file keeps only the
# keys above (what it needs to redirect), the tenant's data is gone.
MOVE_RECLAIMED_KEY = "move_reclaimed"
MOVE_KEYS = (HOLDER_KEY, EPOCH_KEY, MOVE_STEP_KEY, MOVE_PEER_KEY, MOVE_EPOCH_KEY, MOVE_HEAD_KEY, MOVE_RECLAIMED_KEY)
SOURCE_STEPS = ("fenced", "flushed", "exported", "imported", "tombstoned")
FENCED_STEPS = frozenset(SOURCE_STEPS[:4])  # writes refused, reads served
TOMBSTONED = "tombstoned"  # the source serves nothing and redirects to the destination
INACTIVE = "inactive"  # the destination, imported, serves nothing until activated
ACTIVE = "active"
TENANT_MOVING = "TENANT_MOVING"
MOVED_AT_EPOCH = "moved_at_epoch"  # a tombstone's NOT_OWNER: the epoch the tenant moved at
MOVE_RETRY_SECONDS = 0.5


def weight(tenant: str, member: str) -> int:
    digest = hashlib.sha256(tenant.encode() + b"\x00" + member.encode()).digest()
    return int.from_bytes(digest[:8], "big")


def owner_of(tenant: str, members: list[str] | tuple[str, ...]) -> str:
    """The member owning ``tenant``: highest weight, then the smallest id."""
    return min(members, key=lambda member: (-weight(tenant, member), member.encode()))


def parse_list(members: str) -> dict[str, str]:
    """``ID=HOST:PORT,...`` as a dict, checked."""
    addresses: dict[str, str] = {}
    for item in re.split(r"[,\s]+", members.strip()):
        if not item:
            continue
        member, sep, address = item.partition("=")
        if not sep or not address or not MEMBER_ID_PATTERN.fullmatch(member):
            raise InvalidArgument(
                f"member {item!r}: give ID=HOST:PORT, the id of lowercase letters, digits and '-' (at most 63)",
                reason="CONFIG_INVALID",
            )
        if member in addresses:
            raise InvalidArgument(f"member {member} is listed twice", reason="CONFIG_INVALID")
        addresses[member] = address
    return addresses


def moving(tenant: str, why: str) -> Unavailable:
    return Unavailable(
        f"tenant {tenant} is moving between members: {why}; retry shortly",
        reason=TENANT_MOVING,
        retry_after_seconds=MOVE_RETRY_SECONDS,
    )


@dataclass(frozen=True)
class Membership:
    """This member's id, every member's address, and the current ownership epoch."""

    me: str
    addresses: dict[str, str]  # member id -> host:port (gRPC)
    epoch: int = 1
    # During a rebalance (--previous-members): the member ids of the list before it, whose owners
    # hold the tenants not moved yet (``home``).
    previous: tuple[str, ...] = ()

    @classmethod
    def parse(cls, me: str, members: str, *, epoch: int = 1, previous: str = "") -> Membership:
        """``members``: ``ID=HOST:PORT,ID=HOST:PORT,...`` (spaces and newlines allowed);
        ``previous``: the list before a change of members, in the same form (addresses ignored)."""
        addresses = parse_list(members)
        if me not in addresses:
            raise InvalidArgument(
                f"--member {me!r} is not in the member list ({', '.join(addresses) or 'empty'})",
                reason="CONFIG_INVALID",
            )
        if epoch < 1:
            raise InvalidArgument("the ownership epoch starts at 1", reason="CONFIG_INVALID")
        before = sorted({item.partition("=")[0] for item in re.split(r"[,\s]+", previous.strip()) if item})
        for member in before:
            if not MEMBER_ID_PATTERN.fullmatch(member):
                raise InvalidArgument(f"previous member {member!r} is not a member id", reason="CONFIG_INVALID")
        return cls(me, addresses, epoch, tuple(before))

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.addresses))

    def owner(self, tenant: str) -> str:
        return owner_of(tenant, self.ids)

    def home(self, tenant: str) -> str:
        """Where a tenant that has no file here is (or is created): its owner by the previous
        list during a rebalance, when that member is still one, else its owner by this list."""
        if self.previous:
            before = owner_of(tenant, self.previous)
            if before in self.addresses:
                return before
        return self.owner(tenant)

    def describe(self) -> str:
        """The member list as ``--members`` takes it (clients take it too)."""
        return ",".join(f"{member}={self.addresses[member]}" for member in self.ids)

    def not_owner(self, tenant: str, owner: str, why: str, *, moved_epoch: int = 0) -> FailedPrecondition:
        """The refusal of a call for a tenant this member does not hold: a redirect to ``owner``.
        ``moved_epoch``: the refusal of a move's tombstone here (``owner`` its destination), which
        says the epoch it moved at (``moved_at_epoch``: the destination's proof that the source
        no longer serves it, engine/moves.py ``activate``)."""
        metadata = {"owner": owner, "owner_address": self.addresses.get(owner, ""), "members": self.describe()}
        if moved_epoch:
            metadata[MOVED_AT_EPOCH] = str(moved_epoch)
        return FailedPrecondition(
            f"tenant {tenant} is owned by member {owner} ({self.addresses.get(owner, '?')}), not {self.me}: {why}",
            reason=NOT_OWNER,
            metadata=metadata,
        )

    def check_home(self, tenant: str) -> None:
        """Refuse a tenant that has no file here and whose home is another member."""
        home = self.home(tenant)
        if home != self.me:
            raise self.not_owner(tenant, home, "call its owner (clients with the member list do)")

    def check_held(self, tenant: str, holder: str | None, epoch: int, *, moved: bool = False) -> bool:
        """Whether a file with this holder and epoch may be served here as it is; False: adopt it
        (a file written before members existed, or by this member at an older epoch: stamp it).
        Raises for a file another member holds, or one stamped at a newer epoch (``moved``: one
        a move brought here, whose epoch the move raised)."""
        if holder is None or (holder == self.me and epoch < self.epoch):
            return False
        if holder != self.me:
            raise FailedPrecondition(
                f"tenant {tenant}'s file names member {holder} as its holder, not {self.me}: it was copied from "
                "another member's volume; restore it there, or export and import it through the owner",
                reason=HELD_ELSEWHERE,
                metadata={"holder": holder},
            )
        if epoch > self.epoch and not moved:
            raise FailedPrecondition(
                f"tenant {tenant}'s file is held at ownership epoch {epoch}, newer than this member's {self.epoch}: "
                "the member list of this process is out of date",
                reason=EPOCH_NEWER,
                metadata={"epoch": str(epoch)},
            )
        return True
