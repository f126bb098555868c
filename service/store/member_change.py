"""A change of the member list as ``mnemosyne rebalance`` tells each member of it (docs/scale-out.md,
"Changing the member list"): the mark ``DATA_DIR/tenants/member-change.json`` and the tenant creations it
waits for.

A tenant created on a member that does not own it by the new list, after ``rebalance`` listed that
member's tenants, would be moved by no run: once the members run the new list its writes are not
served. So ``rebalance`` first *begins* the change on every member: the member records the new
list durably, from then on creates no tenant (a first write, an import) that another member owns
by it (UNAVAILABLE ``MEMBERS_CHANGING``, with a RetryInfo: the caller retries until the members
run the new list), and answers only once the creations already under way have ended, so that the
listing that follows sees every tenant it will ever hold. When every tenant was moved, ``rebalance``
*completes* the change: a member that runs the new list stops sending tenants it has no file of to
their owners by its previous list (``--previous-members``: every tenant is at its new owner now),
for good — a restart with the previous list still given keeps that. A member running another list
(one that is leaving, or is to restart with the new list) keeps refusing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mnemosyne.errors import DataLoss, FailedPrecondition, Unavailable
from mnemosyne.store.data_dir import write_durably
from mnemosyne.store.membership import owner_of

MARK_FILE_NAME = "member-change.json"
MEMBERS_CHANGING = "MEMBERS_CHANGING"
RETRY_SECONDS = 1.0
# How long a begin waits for the creations under way (each is a tenant's first write or an import).
CREATIONS_WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class ChangeMark:
    to: tuple[str, ...]  # the member ids of the new list, sorted
    complete: bool = False


def read_mark(path: Path) -> ChangeMark | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        data = None
    to, complete = (data.get("to"), data.get("complete")) if isinstance(data, dict) else (None, None)
    if not (isinstance(to, list) and all(isinstance(m, str) for m in to) and isinstance(complete, bool)):
        raise DataLoss(
            f"{path} is damaged and this member cannot start with it: remove it, start the member and run "
            "mnemosyne rebalance again at once (its first step writes the file anew; until then the member creates "
            "tenants as if no change of the member list had begun)",
            reason="MEMBER_CHANGE_DAMAGED",
        )
    return ChangeMark(tuple(sorted(to)), complete)


def _write_mark(path: Path, mark: ChangeMark) -> None:
    write_durably(path, json.dumps({"to": list(mark.to), "complete": mark.complete}))


class MemberChange:
    """This member's mark of a change of the member list, and the creations of tenants under way
    (the module's docstring). Thread-safe."""

    def __init__(self, path: Path, me: str, own: tuple[str, ...]) -> None:
        self._path = path
        self._me = me
        self._own = tuple(sorted(own))
        self._mark = read_mark(path)
        self._changed = threading.Condition()
        self._creating: set[int] = set()  # the creations under way, each by a number of its own
        self._numbered = 0

    @property
    def previous_done(self) -> bool:
        """Whether a change to this member's own list completed: its previous list is done with."""
        mark = self._mark
        return mark is not None and mark.complete and mark.to == self._own

    def _refuse(self, tenant: str) -> None:
        mark = self._mark
        if mark is None or mark.complete:
            return
        owner = owner_of(tenant, mark.to)
        if owner != self._me:
            raise Unavailable(
                f"tenant {tenant} is not created on member {self._me}: the member list is changing and it will "
                f"belong to member {owner}; retry once the members run the new list",
                reason=MEMBERS_CHANGING,
                metadata={"owner": owner},
                retry_after_seconds=RETRY_SECONDS,
            )

    @contextmanager
    def creating(self, tenant: str) -> Iterator[None]:
        """The block of a tenant's creation here (until its file is in place): refused when a change
        begun here gives the tenant to another member; a begin waits for it."""
        with self._changed:
            self._refuse(tenant)
            self._numbered += 1
            number = self._numbered
            self._creating.add(number)
        try:
            yield
        finally:
            with self._changed:
                self._creating.discard(number)
                self._changed.notify_all()

    def begin(self, to: tuple[str, ...]) -> int:
        """Record the change to ``to`` and wait for the creations under way; how many it waited for."""
        with self._changed:
            mark = ChangeMark(tuple(sorted(to)))
            if self._mark != ChangeMark(mark.to, complete=True):  # run again after it completed: it stays so
                _write_mark(self._path, mark)
                self._mark = mark
            under_way = set(self._creating)
            if not self._changed.wait_for(lambda: not under_way & self._creating, CREATIONS_WAIT_SECONDS):
                raise Unavailable(
                    f"member {self._me} still creates tenants begun before the change; retry",
                    reason=MEMBERS_CHANGING,
                    retry_after_seconds=RETRY_SECONDS,
                )
            return len(under_way)

    def complete(self, to: tuple[str, ...]) -> bool:
        """Record that every tenant was moved for the change to ``to``; whether this member's
        previous list is done with now (False: it runs another list, and keeps refusing)."""
        to = tuple(sorted(to))
        with self._changed:
            if self._mark is None or self._mark.to != to:
                raise FailedPrecondition(
                    f"member {self._me} was not told of a change to this member list (of {len(to)} members): "
                    "run mnemosyne rebalance, which begins it before it moves anything",
                    reason="MEMBER_CHANGE_NOT_BEGUN",
                )
            if to != self._own:
                return False
            if not self._mark.complete:
                mark = ChangeMark(to, complete=True)
                _write_mark(self._path, mark)
                self._mark = mark
            return True
