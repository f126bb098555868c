"""Members: the member list and which member a tenant belongs to (docs/scale-out.md) — the
server's placement module. The Python client's client/routing.py and the Node client's
src/routing.js hold the same two rules, and all three load the same test vectors
(docs/scale-out-vectors.json):

* **the member list**: ``ID=HOST:PORT`` items separated by commas and ASCII whitespace (space,
  tab, line feed, carriage return, form feed, vertical tab); an id is 1-63 of ``a-z 0-9 -``
  starting with a letter or digit, an address is one or more printable ASCII characters (what
  follows the first ``=``); an id listed twice, or an empty list, is refused. ``@FILE`` gives the
  list as the text of a file (UTF-8, a leading byte-order mark ignored). A refusal names its
  ``problem`` (the vectors' reason) in its metadata.
* **the hash**: rendezvous (highest-random-weight) hashing of the tenant id over the member ids::

    weight(tenant, member) = the first 8 bytes, as an unsigned big-endian integer, of
                             SHA-256(UTF-8(tenant) || 0x00 || UTF-8(member))
    owner(tenant)          = the member of highest weight; on a tie, the smallest member id
                             (compared as UTF-8 bytes)

The order of the list does not matter. Adding a member moves only the tenants the new member
wins (``mnemosyne rebalance`` moves them, engine/moves.py). What a tenant's file records of its
ownership, and what a member does with it, is store/ownership.py; the refusals that send a caller
to another member, or ask it to wait for a move, are here (every layer above the store reads
their reasons).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from mnemosyne.errors import FailedPrecondition, InvalidArgument, Unavailable
from mnemosyne.runtime.files import read_named_file

MEMBER_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_SEPARATORS = re.compile(r"[,\t\n\v\f\r ]+")
_ADDRESS_PATTERN = re.compile(r"[!-~]+")  # printable ASCII: a host name or address and a port
NOT_OWNER = "NOT_OWNER"  # the refusal's reason; its metadata names the owner and its address
MOVED_AT_EPOCH = "moved_at_epoch"  # a tombstone's NOT_OWNER: the epoch the tenant moved at
HELD_ELSEWHERE = "TENANT_HELD_ELSEWHERE"  # a file copied from another member's volume
EPOCH_NEWER = "OWNERSHIP_EPOCH_NEWER"  # a file held at an epoch newer than this member's list
# The refusals of an open whose file this member does not serve (store/ownership.py ``check_open``).
NOT_SERVED_HERE = frozenset({NOT_OWNER, HELD_ELSEWHERE, EPOCH_NEWER})
TENANT_MOVING = "TENANT_MOVING"
MOVE_RETRY_SECONDS = 0.5


def weight(tenant: str, member: str) -> int:
    digest = hashlib.sha256(tenant.encode() + b"\x00" + member.encode()).digest()
    return int.from_bytes(digest[:8], "big")


def owner_of(tenant: str, members: list[str] | tuple[str, ...]) -> str:
    """The member owning ``tenant``: highest weight, then the smallest id."""
    return min(members, key=lambda member: (-weight(tenant, member), member.encode()))


def moving(tenant: str, why: str) -> Unavailable:
    """The refusal of a call for a tenant a move is taking elsewhere or bringing here."""
    return Unavailable(
        f"tenant {tenant} is moving between members: {why}; retry shortly",
        reason=TENANT_MOVING,
        retry_after_seconds=MOVE_RETRY_SECONDS,
    )


def _refused(message: str, problem: str) -> InvalidArgument:
    return InvalidArgument(message, reason="CONFIG_INVALID", metadata={"problem": problem})


def member_list_text(value: str, source: str) -> str:
    """The member list ``value`` gives: itself, or for ``@FILE`` the file's text. ``source`` names
    where the value came from (a flag), for the refusal of a file that cannot be read."""
    if not value.startswith("@"):
        return value
    try:
        return read_named_file(value[1:]).decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _refused(f"cannot read {source} {value}: {cause}", "MEMBER_LIST_UNREADABLE") from None


def parse_members(text: str) -> dict[str, str]:
    """``ID=HOST:PORT,...`` as a dict id -> address, in the list's order; refused as the module
    says (the first item at fault decides the ``problem``)."""
    addresses: dict[str, str] = {}
    for whole in _SEPARATORS.split(text):
        if not whole:
            continue
        member, _, address = whole.partition("=")
        item = whole if len(whole) <= 80 else f"{whole[:80]}..."  # as a refusal shows it
        if not address:
            raise _refused(f"member {item!r}: give ID=HOST:PORT", "MEMBER_ADDRESS_MISSING")
        if not MEMBER_ID_PATTERN.fullmatch(member):
            raise _refused(
                f"member {item!r}: the id must be 1-63 lowercase letters, digits and '-', starting with a letter "
                "or digit",
                "MEMBER_ID_INVALID",
            )
        if not _ADDRESS_PATTERN.fullmatch(address):
            raise _refused(
                f"member {item!r}: the address must be printable ASCII (HOST:PORT)", "MEMBER_ADDRESS_INVALID"
            )
        if member in addresses:
            raise _refused(f"member {member} is listed twice", "MEMBER_LISTED_TWICE")
        addresses[member] = address
    if not addresses:
        raise _refused("the member list is empty: give ID=HOST:PORT,...", "MEMBER_LIST_EMPTY")
    return addresses


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
        """``members``: the member list (``parse_members``); ``previous``: the list before a
        change of members, in the same form (its addresses are not used), or blank."""
        addresses = parse_members(members)
        if me not in addresses:
            raise InvalidArgument(
                f"--member {me!r} is not in the member list ({', '.join(addresses)})", reason="CONFIG_INVALID"
            )
        if epoch < 1:
            raise InvalidArgument("the ownership epoch starts at 1", reason="CONFIG_INVALID")
        before = sorted(parse_members(previous)) if previous.strip() else []
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
