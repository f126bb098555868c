"""The workers: a bounded pool shared by every tenant, taking tenants round-robin (scheduler.py),
each processing one tenant's log in rounds:

0. adopt: what waits in the inbox moves into the tenant's ``oplog`` (same event ids), then
   leaves the inbox (with replication, once that move is in object storage: store/inbox.py);
1. claim: one short transaction marks open operations ``running`` (rounds.py says which: the
   writes someone waits for first, in a round of their own, else the oldest, as many as the
   tenant's recent pace fits in a round's time), with the earlier operations of the same content;
2. and 3. extract, persist and commit them in acceptance order (commit.py);

and, between rounds, the tenant's housekeeping: its expired events deleted (retention.py), its
expired memories erased once due (``sweep``: engine/expiry.py, a bounded turn whatever the
backlog, so erasure keeps its share of the workers under load), its place in the recovery index
(recovery.py). A round that fails in the store (not an operation's
own failure) leaves its operations pending and is retried after a backoff."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mnemosyne.engine.config import HotPathConfig
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.commit import RoundCommit
from mnemosyne.engine.hot_path.depths import Depths
from mnemosyne.engine.hot_path.recovery import Recovery
from mnemosyne.engine.hot_path.retention import Retention
from mnemosyne.engine.hot_path.rounds import Rounds
from mnemosyne.engine.hot_path.scheduler import Scheduler
from mnemosyne.errors import FailedPrecondition, ResourceExhausted, Unavailable
from mnemosyne.runtime import tracing
from mnemosyne.runtime.background import become_background_thread, keep_up
from mnemosyne.store.maintenance import WAL_LIMIT_REACHED
from mnemosyne.store.membership import MOVED_AT_EPOCH, NOT_OWNER, NOT_SERVED_HERE
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore

log = logging.getLogger("mnemosyne.hot_path")

# A round that fails in the store (not an operation's own failure) is retried after this, doubling.
ROUND_RETRY_SECONDS = 0.5
ROUND_RETRY_MAX_SECONDS = 30.0
# Inbox operations a worker adopts into the tenant's log per round, in batches: ahead of what a
# round applies, while reading them holds the inbox lock (every enqueue's) only for microseconds.
MOVE_BATCHES = 4
# Inbox operations adopted per batch on the way to a write a read waits for (the inbox lock is
# held for reading one batch, then for removing it).
ADOPT_BATCH = 128


class Workers:
    """The worker threads and their rounds."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        scheduler: Scheduler,
        commit: RoundCommit,
        rounds: Rounds,
        recovery: Recovery,
        retention: Retention,
        depths: Depths,
        changes: Changes,
        config: HotPathConfig,
        sync_each_enqueue: bool,
        forget_tenant: Callable[[str], None],
        hold_file: Path | None,
        sweep: Callable[[str, TenantStore], float | None] | None = None,
    ) -> None:
        self._pool = pool
        self._scheduler = scheduler
        self._commit = commit
        self._rounds = rounds
        self._recovery = recovery
        self._retention = retention
        self._depths = depths
        self._changes = changes
        self._workers = max(1, config.workers)
        self._batch = max(1, config.batch)  # what one adoption takes, MOVE_BATCHES times
        self._sync_each_enqueue = sync_each_enqueue
        self._forget_tenant = forget_tenant  # all the hot path knows of a tenant moved away
        self._hold_file = hold_file  # the test seam MNEMOSYNE_TEST_HOLD_WORKERS (runtime/seams.py)
        self._sweep = sweep  # a tenant's expired memories erased, and when its next erasure is due
        self._threads: list[threading.Thread] = []
        self._round_failures: dict[str, int] = {}  # tenant -> store failures in a row

    def start(self) -> None:
        for number in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"hot-path-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._scheduler.stop()
        for thread in self._threads:
            thread.join(timeout=10)
            if thread.is_alive():  # a daemon thread: it dies with the process
                log.warning("hot-path worker %s did not stop within 10s", thread.name)

    def forget(self, tenant: str) -> None:
        self._round_failures.pop(tenant, None)

    def _work(self) -> None:
        become_background_thread()
        while True:
            tenant = self._scheduler.take()
            if tenant is None:
                return
            more = False
            self._keep_up(tenant)
            try:
                more = self._round(tenant)
                self._round_failures.pop(tenant, None)
            except Exception as exc:
                if self._scheduler.stopping:
                    return
                self._round_failed(tenant, exc)
            finally:
                self._scheduler.done(tenant, more)

    def _keep_up(self, tenant: str) -> None:
        """A round someone waits for (a read's or a Flush's consistency token) competes as an
        equal: a request waits for it, and busy cores starve an idle thread past the request's
        deadline (runtime/background.py); any other, once the tenant fell behind."""
        keep_up(math.inf if self._rounds.awaited(tenant) else self._depths.lag(tenant))

    def _round_failed(self, tenant: str, exc: Exception) -> None:
        """A round that could not open or write the tenant. The states members and moves put a
        tenant in are expected, and each is logged once, as such, without a traceback:

        * its file here is another member's now (FAILED_PRECONDITION: a move's tombstone, or a
          file this member does not hold): not taken again by this process; a tombstone's tenant
          also leaves the recovery index (its operations moved with its file);
        * it is closed a moment (UNAVAILABLE: a move's copy not active yet, a move's step, a
          replacement): taken again after a backoff, quietly (an activation takes it at once);
        * its WAL is held by a copy of it being made (RESOURCE_EXHAUSTED WAL_LIMIT_REACHED): taken
          again after the refusal's retry delay, quietly.

        Anything else (a full disk, say) is a fault: logged with its traceback at each attempt,
        the operations staying pending, the tenant taken again after a backoff doubling up to a
        limit, so a lasting fault neither spins a worker nor floods the log; the others go on."""
        failures = self._round_failures.get(tenant, 0) + 1
        self._round_failures[tenant] = failures
        if isinstance(exc, FailedPrecondition) and exc.reason in NOT_SERVED_HERE:
            if exc.reason == NOT_OWNER and exc.metadata.get(MOVED_AT_EPOCH):
                self._forget_tenant(tenant)
                log.info("tenant %s moved to member %s: its hot path is served there", tenant, exc.metadata["owner"])
            else:
                self._round_failures.pop(tenant, None)
                log.warning(
                    "tenant %s is not served by this member (%s); its fast writes wait for it", tenant, exc.reason
                )
            return
        delay = min(ROUND_RETRY_MAX_SECONDS, ROUND_RETRY_SECONDS * 2 ** (failures - 1))
        if isinstance(exc, ResourceExhausted) and exc.reason == WAL_LIMIT_REACHED:
            # A copy of the tenant being made holds its WAL (store/maintenance.py): seconds.
            delay = exc.retry_after_seconds or delay
        if isinstance(exc, Unavailable) or (isinstance(exc, ResourceExhausted) and exc.reason == WAL_LIMIT_REACHED):
            if failures == 1:
                log.info("tenant %s: its hot path waits (%s: %s)", tenant, exc.reason, exc.message)
        else:
            log.exception(
                "hot-path round failed for tenant %s (%d in a row); retrying in %.1fs", tenant, failures, delay
            )
        self._scheduler.notify_at(tenant, time.time() + delay)

    def _hold(self, stage: str = "commit") -> None:
        """Test seam: hold here while the hold file exists (work is then provably in flight):
        before the round's commit, or at another stage when the file says its name: "inbox"
        (before it takes the inbox), "claimed" (once it claimed its operations), "swept" (a sweep's
        next erasure read, not yet recorded); logged once ("held at STAGE") when it holds."""
        held = False
        while self._hold_file is not None and self._hold_file.exists() and not self._scheduler.stopping:
            if stage != "commit":
                try:
                    if self._hold_file.read_text().strip() != stage:
                        return
                except FileNotFoundError:
                    return  # removed since exists(): released
            if not held:
                held = True
                log.warning("held at %s (test seam)", stage)
            time.sleep(0.05)

    def _swept(self, tenant: str, store: TenantStore) -> float | None:
        """The tenant's sweep; the test seam holds its answer before it is recorded ("swept")."""
        assert self._sweep is not None
        due = self._sweep(tenant, store)
        self._hold("swept")
        return due

    def _round(self, tenant: str) -> bool:
        """Process up to ``batch`` open operations of one tenant; True if more may remain. A
        trace of its own (the round serves many callers' writes)."""
        with tracing.span("hot_path.round"):
            tracing.tenant(tenant)
            return self._round_of(tenant)

    def _round_of(self, tenant: str) -> bool:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                self._recovery.remove(tenant)
                return False
            awaited = self._rounds.awaited(tenant)
            if not awaited and self._rounds.backlog_held():
                return False  # the test seam: only the writes someone waits for
            if not awaited:
                self._hold("inbox")
            self._move_inbox(store, through=max((high for _, high in awaited), default=0))
            ops, full = self._rounds.claim(tenant, store, awaited)
            self._retention.prune(tenant, store)
            if self._sweep is not None:
                self._recovery.sweep_if_due(tenant, lambda: self._swept(tenant, store))
            if not ops:
                self._come_back_for_retries(tenant, store)
                return False
            # Again once claimed: a read that began waiting for these writes after the round was
            # taken (an idle thread's decision) must not wait for an idle thread's commit.
            self._keep_up(tenant)
            self._hold("claimed")
            self._changes.notify(tenant)
            started = time.monotonic()
            finished = self._commit.apply(tenant, store, ops, self._hold)
            self._rounds.took(tenant, len(ops), time.monotonic() - started)
            self._changes.notify(tenant)
            if not finished or full or awaited:
                return True  # more is likely: skip the idle check, the next round will tell
            return not self._recovery.drained(tenant, store)

    def _come_back_for_retries(self, tenant: str, store: TenantStore) -> None:
        """Nothing to claim: when only backed-off operations are left, come back when the first
        backoff ends (a drained tenant's next visit is the recovery index's)."""
        if self._recovery.drained(tenant, store):
            return
        with store.read() as txn:
            retry_at = txn.oplog_next_retry()
        if retry_at is not None:
            self._scheduler.notify_at(tenant, retry_at)

    def _move_inbox(self, store: TenantStore, *, through: int = 0) -> None:
        """Adopt what waits in the tenant's inbox into its log, then remove it from the inbox
        (store/inbox.py ``adopted``: what the log holds already is skipped): a
        batch ahead of what a round applies, and on to ``through`` (a write someone waits for is
        taken from the log), in batches, so no enqueue waits for the inbox lock longer than one."""
        inbox = store.inbox(create=False)
        if inbox is None:
            return
        while True:
            with store.read() as log_read:
                moved = log_read.oplog_highest_event_id()  # rows up to it wait to leave (store/inbox.py)
            inbox.adopted(moved)  # those moved earlier (before a crash too) leave once replicated
            with inbox.read() as txn:
                ops = txn.ops(after_id=moved, limit=self._batch * MOVE_BATCHES if not through else ADOPT_BATCH)
                requests = txn.requests_through(ops[-1].event_id) if ops else []
            if not ops:
                return
            with store.write(sync=False, internal=True) as log_txn:
                log_txn.oplog_adopt(ops, requests)
            if self._sync_each_enqueue:
                # An enqueue acknowledged power-safe must stay so once it left the inbox. Otherwise
                # the round's sync (or a Flush) covers it together with what was applied.
                store.sync_log()
            inbox.adopted(ops[-1].event_id)
            inbox.checkpoint_if_grown()
            if ops[-1].event_id >= through:
                return
