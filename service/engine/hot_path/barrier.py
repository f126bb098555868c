"""The barriers: Flush (every operation accepted before it has finished, and is on disk) and
Disable (stop queueing, then the same wait).

The barrier comes in steps that never wait, so a caller may wait between them on a thread
(``flush``, ``disable``: MemoryBrain in process) or on an event loop holding no thread (the
server: transport/waits.py), and give up at its own deadline."""

from __future__ import annotations

import time

from mnemosyne.engine import limits as check
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.scheduler import Wake
from mnemosyne.engine.hot_path.snapshot import snapshot
from mnemosyne.engine.hot_path.state import TenantStates
from mnemosyne.engine.types import Barrier, FlushOutcome, HotPathState
from mnemosyne.errors import DeadlineExceeded
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore


class Barriers:
    """Flush and Disable of a tenant, as steps and as blocking calls."""

    def __init__(self, *, pool: TenantPool, states: TenantStates, wake: Wake, changes: Changes) -> None:
        self._pool = pool
        self._states = states
        self._wake = wake
        self._changes = changes

    def flush_barrier(self, tenant: str) -> Barrier | None:
        """What a Flush of the tenant, beginning now, waits for; None when it has no file."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return None
            self._wake.notify(tenant)  # surely scheduled, even if a notify was lost
            return _barrier(store)

    def disable_barrier(self, tenant: str) -> Barrier | None:
        """Stop queueing the tenant's fast writes; what its Disable then waits for (None: no file,
        nothing to disable, and none is made)."""
        if not self._states.set_enabled(tenant, False):
            return None
        return self.flush_barrier(tenant)

    def remaining(self, tenant: str, barrier: Barrier) -> int:
        """Operations the barrier still waits for (0: all have finished). When 0, what finished is
        made durable first (a barrier returns once what it waited for is on disk)."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return 0
            with snapshot(store) as (txn, waiting):
                left = txn.oplog_depth(up_to_id=barrier.up_to_id)[0] + waiting.depth(barrier.up_to_id)[0]
            if left == 0:
                store.sync_log()
            return left

    def flush_outcome(self, tenant: str, barrier: Barrier) -> FlushOutcome:
        """What the operations a finished barrier covered did."""
        statuses: dict[int, str] = {}
        with self._pool.tenant(tenant, create=False) as store:
            if store is not None:
                with store.read() as txn:
                    statuses = txn.oplog_statuses(barrier.covered)
        failed_ids = sorted(i for i, s in statuses.items() if s == "failed")
        return FlushOutcome(len(barrier.covered), len(barrier.covered) - len(failed_ids), len(failed_ids), failed_ids)

    @staticmethod
    def gave_up(what: str, seconds: float, remaining: int) -> DeadlineExceeded:
        if what == "disable":
            return _disable_gave_up(seconds, remaining)
        return DeadlineExceeded(
            f"{what} gave up after {seconds:g}s with {remaining} operations still pending or running; "
            "call it again (nothing was lost) or give a longer timeout_seconds",
            reason="HOT_PATH_DEADLINE_EXCEEDED",
            metadata={"remaining_depth": str(remaining)},
        )

    def flush(self, tenant: str, timeout: float) -> FlushOutcome:
        """Block until every operation accepted before the call has finished."""
        timeout = check.validate_wait_seconds(timeout)
        barrier = self.flush_barrier(tenant)
        if barrier is None:
            return FlushOutcome(0, 0, 0, [])
        self._wait(tenant, barrier, timeout, "flush")
        return self.flush_outcome(tenant, barrier)

    def disable(self, tenant: str, timeout: float) -> HotPathState:
        """Stop queueing new fast writes, then wait until the queue is drained."""
        timeout = check.validate_wait_seconds(timeout)
        barrier = self.disable_barrier(tenant)
        if barrier is not None:
            self._wait(tenant, barrier, timeout, "disable")
        return self._states.status(tenant)

    def _wait(self, tenant: str, barrier: Barrier, timeout: float, what: str) -> None:
        """Block until the barrier is passed, or raise ``gave_up`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._changes.waiter(tenant) as changed:
            while (left := self.remaining(tenant, barrier)) > 0:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    raise self.gave_up(what, timeout, left)
                changed.wait(min(1.0, wait))
                changed.clear()


def _disable_gave_up(seconds: float, remaining: int) -> DeadlineExceeded:
    """A Disable past its deadline is not undone (the flag was set before the wait; undoing it
    would race a second Disable): the refusal says the state it leaves."""
    return DeadlineExceeded(
        f"disable took effect but gave up waiting after {seconds:g}s: the hot path is disabled (new fast writes are "
        f"written synchronously) and {remaining} operations queued before it are still pending or running; they "
        "will be applied (nothing was lost): call Disable again to wait for them, or give a longer timeout_seconds",
        reason="HOT_PATH_DEADLINE_EXCEEDED",
        metadata={"remaining_depth": str(remaining)},
    )


def _barrier(store: TenantStore) -> Barrier:
    """The last accepted event id and the open operations up to it, inbox and log together."""
    with snapshot(store) as (txn, waiting):
        in_log = txn.oplog_open_ids(waiting.log_last_id)
        in_inbox = [row.event_id for row in waiting.rows()]
    return Barrier(in_inbox[-1] if in_inbox else waiting.log_last_id, in_log + in_inbox)
