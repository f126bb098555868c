"""What the hot path reads of a tenant: its operation log together with its inbox, in one snapshot
that counts every operation once (Status, the barriers, the events and the depth figures read it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from mnemosyne.store.inbox import InboxTxn
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

# (open operations, acceptance time of the oldest of them: None when there is none)
Depth = tuple[int, float | None]


class Waiting:
    """The inbox's operations the log does not hold yet, as seen inside ``snapshot``."""

    def __init__(self, txn: InboxTxn | None, log_last_id: int) -> None:
        self._txn = txn
        self.log_last_id = log_last_id

    def depth(self, up_to_id: int | None = None) -> Depth:
        return self._txn.depth(after_id=self.log_last_id, up_to_id=up_to_id) if self._txn else (0, None)

    def ids_with_fingerprints(self, fingerprints: Sequence[str]) -> list[int]:
        """Ids of these operations of these contents (by fingerprint)."""
        return self._txn.ids_with_fingerprints(fingerprints, after_id=self.log_last_id) if self._txn else []

    def rows(self, *, after_id: int = 0, up_to_id: int | None = None, limit: int = -1) -> list[OpRow]:
        """These operations as the pending log rows they will become."""
        if self._txn is None:
            return []
        ops = self._txn.ops(after_id=max(after_id, self.log_last_id), up_to_id=up_to_id, limit=limit)
        return [OpRow.pending(op) for op in ops]


@contextlib.contextmanager
def snapshot(store: TenantStore) -> Iterator[tuple[ReadTxn, Waiting]]:
    """One read of the tenant's log together with its inbox, counting every operation once.

    Under the inbox lock nothing leaves the inbox, and the log is read first: an operation
    adopted after the log's snapshot is still in the inbox, and one the log already holds
    (adopted meanwhile, before a crash and not yet removed, or waiting to leave: store/inbox.py)
    has an id up to the highest the log ever held, so only the inbox's operations above that id
    are the inbox's own."""
    inbox = store.inbox(create=False)
    with inbox.lock if inbox is not None else contextlib.nullcontext(), store.read() as txn:
        last = txn.oplog_highest_event_id()
        if inbox is None:
            yield txn, Waiting(None, last)
            return
        with inbox.read() as inbox_txn:
            yield txn, Waiting(inbox_txn, last)


def open_operations(txn: ReadTxn, waiting: Waiting) -> Depth:
    """The tenant's open operations, the log's and the inbox's together."""
    return add_depths(txn.oplog_depth(), waiting.depth())


def add_depths(a: Depth, b: Depth) -> Depth:
    oldest = [t for t in (a[1], b[1]) if t is not None]
    return a[0] + b[0], min(oldest) if oldest else None
