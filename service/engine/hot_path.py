"""The hot path: asynchronous writes through a durable per-tenant operation log (the specification's §9.1–9.4, docs/seed-mapping.md).

While a tenant's hot path is enabled (a flag in its file), a Retain marked ``fast`` only appends
its items to the tenant's inbox (store/inbox.py: a file of its own, so an enqueue never waits
for a worker's commit) in one short write transaction and returns their event ids. Background
workers — a bounded pool shared by every tenant, taking tenants round-robin so a busy tenant
never starves a quiet one, and one tenant at a time per worker so its operations are applied in
acceptance order — then process each tenant's log in rounds:

0. adopt: what waits in the inbox moves into the tenant's ``oplog`` (same event ids), then
   leaves the inbox;
1. claim: one short transaction marks up to ``batch`` oldest open operations ``running``;
2. extract and embed OUTSIDE any transaction (skipping known duplicates), then PERSIST what
   extraction produced on the log rows, with the ``model_calls`` counter, in one transaction —
   so a replay after a crash reuses it and makes no second model call;
3. commit: one transaction applies every claimed operation through the synchronous writes' own
   path (``WritePath.apply``: exact dedup, memory + facts + triples + embedding + full-text row +
   audit entry) AND marks each operation succeeded or failed, with the counters. An operation is
   therefore never ``succeeded`` before its memory is visible to both recall paths.

Durability (``--hot-path-sync``): an accepted operation survives a process kill at once (WAL).
Against power loss, by default ("round") it is durable once the worker that applied it has synced
the log after its commit, or once a ``Flush`` returned: enqueues and worker commits take no fsync
inside the tenant's write lock, so an enqueue never waits for the disk (the specification's §9.2, docs/seed-mapping.md: a
successful enqueue is not a disk write; the flush is the barrier that reaches disk). "enqueue"
syncs every enqueue before it returns instead.

A failed attempt goes back to ``pending`` (behind nothing: the round still commits the others);
after ``max_failures`` failed attempts it ends ``failed`` for good, so a poison operation never
blocks the ones behind it. A crash simply leaves operations ``pending``/``running`` in the file;
the recovery index (``PendingIndex``) names the tenants that have any, so start-up resumes
exactly those without opening every tenant file, and readiness never waits for it.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.config import HOT_PATH_SYNC_CHOICES, HotPathConfig
from mnemosyne.engine.embedder import check_tenant_embedder
from mnemosyne.engine.extractor import Extraction, Extractor
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.requests import RequestKey, prior_outcomes
from mnemosyne.engine.types import (
    Barrier,
    Event,
    EventPage,
    FlushOutcome,
    HotPathState,
    RetainOutcome,
    RetainStatus,
    Transitions,
)
from mnemosyne.engine.write_path import ExtractionMissing, PreparedItem, WritePath
from mnemosyne.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from mnemosyne.runtime.background import become_background_thread, keep_up
from mnemosyne.store import ledger
from mnemosyne.store.inbox import InboxRequest, InboxTxn
from mnemosyne.store.membership import MOVED_AT_EPOCH, NOT_OWNER, NOT_SERVED_HERE
from mnemosyne.store.oplog import OpRow
from mnemosyne.store.pending_index import PendingIndex
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

log = logging.getLogger("mnemosyne.hot_path")

HOT_PATH_META = "hot_path"
# A drained tenant leaves the recovery index only after staying idle this long: a busy tenant's
# queue drains and refills constantly, and each re-add costs the enqueue that makes it an fsync.
UNINDEX_AFTER_IDLE_SECONDS = 30.0
# A round that fails in the store (not an operation's own failure) is retried after this, doubling.
ROUND_RETRY_SECONDS = 0.5
ROUND_RETRY_MAX_SECONDS = 30.0
# Event retention: a worker deletes a tenant's expired events at most this often, in
# transactions of PRUNE_BATCH events (a few milliseconds of the tenant's write lock each), at
# most PRUNE_MAX_BATCHES per pass: up to 5,000 events per 10 s per tenant.
PRUNE_INTERVAL_SECONDS = 10.0
PRUNE_BATCH = 100
PRUNE_MAX_BATCHES = 50
# Inbox operations a worker adopts into the tenant's log per round, in batches: ahead of what a
# round applies, while reading them holds the inbox lock (every enqueue's) only for microseconds.
MOVE_BATCHES = 4
_FLAG_CACHE_KEY: CacheKey[bool] = CacheKey("hot_path_enabled")
EVENT_STATUSES = ("pending", "running", "succeeded", "failed")
STREAM_CHUNK = 500  # transitions a WatchEvents stream reads at a time


class ModelError(Exception):
    """The extraction model failed on an item."""


class PoisonedExtractor(Extractor):
    """Test seam (MNEMOSYNE_TEST_POISON_MARKER): fails on every text containing the marker."""

    def __init__(self, inner: Extractor, marker: str) -> None:
        self._inner = inner
        self._marker = marker
        self.name = inner.name
        self.concurrency = inner.concurrency
        self.holds_interpreter = inner.holds_interpreter

    def extract(self, text: str) -> Extraction:
        if self._marker in text:
            raise ModelError("the extractor failed on this text (poison marker)")
        return self._inner.extract(text)


# -- events from the log's rows -------------------------------------------------------------------


def event_from_row(row: OpRow, *, status: str | None = None, sequence: int = 0) -> Event:
    """An Event from a log row; ``status`` overrides it for a replayed transition (whose result
    fields are shown only when the transition itself is terminal)."""
    shown = status or row.status
    terminal = shown in ("succeeded", "failed")
    outcome = RetainOutcome.from_json(json.loads(row.result)) if (row.result and terminal) else None
    created = (outcome.memory_id,) if outcome and outcome.status is RetainStatus.CREATED else ()
    duplicate = (outcome.memory_id,) if outcome and outcome.status is RetainStatus.DUPLICATE else ()
    finished = row.finished_at if terminal else None
    return Event(
        event_id=row.event_id,
        status=shown,
        kind=row.kind,
        accepted_at=row.accepted_at,
        finished_at=finished,
        created_memory_ids=created,
        duplicate_of_memory_ids=duplicate,
        near_duplicate_of=tuple(outcome.near_duplicate_of) if outcome else (),
        error_reason=(row.error_reason or "") if shown == "failed" else "",
        error_message=(row.error_message or "") if shown == "failed" else "",
        attempts=row.attempts,
        latency_ms=((finished - row.accepted_at) * 1000.0) if finished else 0.0,
        extracted=row.extraction is not None,
        sequence=sequence,
    )


# -- fair scheduling -----------------------------------------------------------------------------


class _Scheduler:
    """Round-robin over tenants with work; a tenant is processed by one worker at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._delayed: list[tuple[float, str]] = []  # (wall-clock time, tenant), a heap
        self.stopping = False

    def notify(self, tenant: str) -> None:
        with self._cond:
            self._notify_locked(tenant)

    def _notify_locked(self, tenant: str) -> None:
        if tenant in self._busy:
            self._again.add(tenant)
        elif tenant not in self._queued:
            self._ready.append(tenant)
            self._queued.add(tenant)
            self._cond.notify()

    def notify_at(self, tenant: str, when: float) -> None:
        """Schedule the tenant at wall-clock ``when`` (an operation's retry backoff ends)."""
        with self._cond:
            heapq.heappush(self._delayed, (when, tenant))
            self._cond.notify()

    def forget(self, tenant: str) -> None:
        """Drop the tenant's pending wake-ups (its idle check, its events' expiry, a backoff): its
        files are gone from here. A later ``notify`` schedules it again."""
        with self._cond:
            self._delayed = [(when, t) for when, t in self._delayed if t != tenant]
            heapq.heapify(self._delayed)
            self._again.discard(tenant)

    def take(self) -> str | None:
        with self._cond:
            while not self.stopping:
                now = time.time()
                while self._delayed and self._delayed[0][0] <= now:
                    self._notify_locked(heapq.heappop(self._delayed)[1])
                if self._ready:
                    break
                self._cond.wait(self._delayed[0][0] - now if self._delayed else None)
            if self.stopping:
                return None
            tenant = self._ready.popleft()
            self._queued.discard(tenant)
            self._busy.add(tenant)
            return tenant

    def done(self, tenant: str, more: bool) -> None:
        with self._cond:
            self._busy.discard(tenant)
            if more or tenant in self._again:
                self._again.discard(tenant)
                if tenant not in self._queued:
                    self._ready.append(tenant)  # to the back: the other tenants go first
                    self._queued.add(tenant)
                    self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self.stopping = True
            self._cond.notify_all()


# -- who waits for a tenant's changes ------------------------------------------------------------


class Changes:
    """The tenants whose hot path changed (an operation accepted, taken, finished), told to whoever
    waits for them: a Flush, a WatchEvents stream. Callbacks run on the thread that made the change
    and must only hand the news on (set an event, schedule a wake-up)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[Callable[[], None]]] = {}

    def subscribe(self, tenant: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on each change of ``tenant`` until the returned function is called."""
        with self._lock:
            self._waiting.setdefault(tenant, set()).add(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._waiting.get(tenant)
                if callbacks is not None:
                    callbacks.discard(callback)
                    if not callbacks:
                        del self._waiting[tenant]

        return unsubscribe

    def notify(self, tenant: str) -> None:
        with self._lock:
            callbacks = list(self._waiting.get(tenant, ()))
        for callback in callbacks:
            callback()

    def notify_all(self) -> None:
        with self._lock:
            callbacks = [c for callbacks in self._waiting.values() for c in callbacks]
        for callback in callbacks:
            callback()

    @contextlib.contextmanager
    def waiter(self, tenant: str) -> Iterator[threading.Event]:
        """A threading.Event set on each change of ``tenant`` while the block lasts."""
        changed = threading.Event()
        unsubscribe = self.subscribe(tenant, changed.set)
        try:
            yield changed
        finally:
            unsubscribe()


# -- the hot path ----------------------------------------------------------------------------------


class HotPath:
    def __init__(
        self,
        *,
        write_path: WritePath,
        pool: TenantPool,
        config: HotPathConfig,
        limits: Limits,
        observer: EngineObserver,
        hold_file: Path | None = None,
    ) -> None:
        self._write_path = write_path
        self._pool = pool
        self._limits = limits
        self._observer = observer
        self._workers = max(1, config.workers)
        self._batch = max(1, config.batch)
        self._max_failures = max(1, config.max_failures)
        self._retry_seconds = max(0.0, config.retry_seconds)
        self._hold_file = hold_file  # the test seam MNEMOSYNE_TEST_HOLD_WORKERS (runtime/seams.py)
        self.index = PendingIndex(pool.data_dir)
        self._scheduler = _Scheduler()
        self.changes = Changes()
        self._threads: list[threading.Thread] = []
        self._streams_ended = False
        # tenant -> (open operations, oldest acceptance time), refreshed in the transactions that
        # change it; read by the metrics gauges on every scrape without opening any file.
        self._depths: dict[str, tuple[int, float | None]] = {}
        self._depths_lock = threading.Lock()
        # tenant -> monotonic time its queue was last seen drained; changed only under the
        # tenant's write lock, so "still here" means "nothing was enqueued since".
        self._idle_since: dict[str, float] = {}
        self._round_failures: dict[str, int] = {}  # tenant -> store failures in a row
        if config.event_retention_seconds < 0:
            raise InvalidArgument(
                "--event-retention-seconds must be 0 (keep events forever) or more", reason="EVENT_RETENTION_INVALID"
            )
        self._retention = config.event_retention_seconds
        if config.sync not in HOT_PATH_SYNC_CHOICES:
            raise InvalidArgument(
                f"--hot-path-sync must be one of {', '.join(HOT_PATH_SYNC_CHOICES)}, not {config.sync!r}",
                reason="HOT_PATH_SYNC_INVALID",
            )
        # "enqueue": each enqueue commits to the inbox with the store's synchronous setting (an
        # fsync with FULL). "round": an enqueue does not fsync. In both, no worker transaction
        # fsyncs under a write lock: the worker syncs the tenant's log after its commits, outside
        # the lock (store.sync_log), and so do the barriers.
        self._sync_each_enqueue = config.sync == "enqueue"
        self._pruned_at: dict[str, float] = {}  # tenant -> monotonic time of its last prune pass

    # -- lifetime --------------------------------------------------------------------------------

    def start(self) -> None:
        for number in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"hot-path-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)
        # Recovery: resume exactly the tenants the index names. Only names are queued here; the
        # files are opened by the workers, so readiness never waits for recovery.
        for tenant in self.index.tenants():
            self._scheduler.notify(tenant)
        for tenant, due in self.index.expiries():  # idle tenants whose finished events expire
            self._scheduler.notify_at(tenant, due)

    def forget_tenant(self, tenant: str) -> None:
        """Drop what the hot path knows of a tenant whose files were erased or moved away (a
        move's tombstone): its entries in the recovery index, its pending wake-ups and its figures
        here (a worker that still takes it finds no file, or the tombstone: ``_round_failed``)."""
        self.index.remove(tenant)
        self.index.set_expiry(tenant, None)
        self._scheduler.forget(tenant)
        self.forget_figures(tenant)

    def forget_figures(self, tenant: str) -> None:
        """Drop the figures kept here of a tenant whose files were replaced (they are the old
        files'); its recovery-index entries stay."""
        with self._depths_lock:
            self._depths.pop(tenant, None)
        self._idle_since.pop(tenant, None)
        self._round_failures.pop(tenant, None)
        self._pruned_at.pop(tenant, None)

    def resume(self, tenant: str) -> None:
        """Take the tenant's open operations up, if it has any (a tenant just put in place)."""
        self._scheduler.notify(tenant)

    def _note_depth(self, tenant: str, store: TenantStore) -> None:
        """Count the tenant's open operations, the log's and the inbox's, in one snapshot (under
        the inbox lock, so no enqueue's own count slips between the two either)."""
        with _snapshot(store) as (txn, waiting):
            depth = _add_depths(txn.oplog_depth(), waiting.depth())
            with self._depths_lock:
                if depth[0]:
                    self._depths[tenant] = depth
                else:
                    self._depths.pop(tenant, None)

    def _note_enqueued(self, tenant: str, store: TenantStore, count: int, now: float) -> None:
        """Add to a known depth instead of counting the log again (a count over a long backlog
        would cost every enqueue a scan). Under the inbox lock, like every change of the depth."""
        with self._depths_lock:
            known = self._depths.get(tenant)
            if known is not None:
                self._depths[tenant] = (known[0] + count, known[1] if known[1] is not None else now)
                return
        self._note_depth(tenant, store)

    def _lag(self, tenant: str) -> float:
        """Seconds the tenant's oldest open operation has waited (0 when none is known)."""
        with self._depths_lock:
            known = self._depths.get(tenant)
        return time.time() - known[1] if known is not None and known[1] is not None else 0.0

    def queue_depth(self) -> tuple[int, float]:
        """(open operations over the tenants this process has seen, age in seconds of the
        oldest). A tenant recovered at start-up counts from its first worker round."""
        with self._depths_lock:
            depths = list(self._depths.values())
        oldest = min((t for _, t in depths if t is not None), default=None)
        return sum(n for n, _ in depths), (time.time() - oldest if oldest is not None else 0.0)

    @property
    def streams_ended(self) -> bool:
        return self._streams_ended

    def end_streams(self) -> None:
        """Make every WatchEvents stream return (a graceful shutdown must not wait for them)."""
        self._streams_ended = True
        self.changes.notify_all()

    def stop(self) -> None:
        self._streams_ended = True
        self._scheduler.stop()
        self.changes.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
            if thread.is_alive():  # a daemon thread: it dies with the process
                log.warning("hot-path worker %s did not stop within 10s", thread.name)
        self._unindex_idle_now()
        self.index.close()

    # -- the flag --------------------------------------------------------------------------------

    def set_enabled(self, tenant: str, enabled: bool) -> bool:
        """Set the flag; enabling creates the tenant, disabling never does. False when the tenant
        has no file (then nothing was to be disabled)."""
        with self._pool.tenant(tenant, create=enabled) as store:
            if store is None:
                return False
            # Under the inbox lock: an enqueue re-reads the flag under it before appending.
            with self._pool.locks.for_inbox(tenant), store.write() as txn:
                txn.set_meta(HOT_PATH_META, "on" if enabled else "off")
                store.cache[_FLAG_CACHE_KEY] = enabled
        return True

    def _enabled(self, store: TenantStore) -> bool:
        """The flag, cached on the open store (only ``set_enabled`` changes it, and this process
        owns the data directory); the enqueue re-reads it under the inbox lock."""
        enabled = store.cache.get(_FLAG_CACHE_KEY)
        if enabled is None:
            with store.read() as txn:
                enabled = store.cache[_FLAG_CACHE_KEY] = txn.meta(HOT_PATH_META) == "on"
        return enabled

    # -- enqueue ---------------------------------------------------------------------------------

    def enqueue(
        self,
        tenant: str,
        store: TenantStore,
        prepared: Sequence[PreparedItem],
        outcomes: list[RetainOutcome | None],
        request: RequestKey | None,
    ) -> list[RetainOutcome] | None:
        """Append prepared items to the tenant's inbox in one transaction (a worker moves them into
        the log); None when the hot path is off (the caller then writes synchronously)."""
        if not self._enabled(store):
            return None
        inbox = store.inbox(create=True)
        assert inbox is not None
        # The inbox's lock, not the tenant's: an enqueue never waits for a worker's commit.
        with inbox.lock:
            store.check_writable()  # a tenant moving between members (fenced under this lock)
            if not self._enabled(store):  # disabled since the read above (set_enabled holds this lock)
                return None
            self._idle_since.pop(tenant, None)
            self.index.add(tenant)  # durable before the operations are
            with inbox.write(sync=self._sync_each_enqueue) as txn:
                if request:
                    # The inbox, then the tenant file: while this lock is held no key can leave
                    # the inbox, so one not here either never came or was adopted before.
                    prior = prior_outcomes(txn, request)
                    if prior is None:
                        with store.read() as log_txn:
                            prior = prior_outcomes(log_txn, request)
                    if prior is not None:
                        return prior
                results = list(outcomes)
                now = time.time()
                event_id = 0
                for p in prepared:
                    event_id = txn.append("retain", p.to_payload(), request.request_id if request else None, now)
                    results[p.position] = RetainOutcome(status=RetainStatus.ENQUEUED, event_id=event_id)
                final = [r for r in results if r is not None]
                if request:
                    result_json = json.dumps([r.to_json() for r in final])
                    txn.save_request(
                        InboxRequest(
                            request_id=request.request_id,
                            method=request.method,
                            payload_hash=request.payload_hash,
                            result=result_json,
                            created_at=now,
                        ),
                        event_id,
                    )
            self._note_enqueued(tenant, store, len(prepared), now)
        self._scheduler.notify(tenant)
        self.changes.notify(tenant)
        return final

    # -- workers ---------------------------------------------------------------------------------

    def _work(self) -> None:
        become_background_thread()
        while True:
            tenant = self._scheduler.take()
            if tenant is None:
                return
            more = False
            keep_up(self._lag(tenant))
            try:
                more = self._round(tenant)
                self._round_failures.pop(tenant, None)
            except Exception as exc:
                if self._scheduler.stopping:
                    return
                self._round_failed(tenant, exc)
            finally:
                self._scheduler.done(tenant, more)

    def _round_failed(self, tenant: str, exc: Exception) -> None:
        """A round that could not open or write the tenant. The states members and moves put a
        tenant in are expected, and each is logged once, as such, without a traceback:

        * its file here is another member's now (FAILED_PRECONDITION: a move's tombstone, or a
          file this member does not hold): not taken again by this process; a tombstone's tenant
          also leaves the recovery index (its operations moved with its file);
        * it is closed a moment (UNAVAILABLE: a move's copy not active yet, a move's step, a
          replacement): taken again after a backoff, quietly (an activation takes it at once).

        Anything else (a full disk, say) is a fault: logged with its traceback at each attempt,
        the operations staying pending, the tenant taken again after a backoff doubling up to a
        limit, so a lasting fault neither spins a worker nor floods the log; the others go on."""
        failures = self._round_failures.get(tenant, 0) + 1
        self._round_failures[tenant] = failures
        if isinstance(exc, FailedPrecondition) and exc.reason in NOT_SERVED_HERE:
            if exc.reason == NOT_OWNER and exc.metadata.get(MOVED_AT_EPOCH):
                self.forget_tenant(tenant)
                log.info("tenant %s moved to member %s: its hot path is served there", tenant, exc.metadata["owner"])
            else:
                self._round_failures.pop(tenant, None)
                log.warning(
                    "tenant %s is not served by this member (%s); its fast writes wait for it", tenant, exc.reason
                )
            return
        delay = min(ROUND_RETRY_MAX_SECONDS, ROUND_RETRY_SECONDS * 2 ** (failures - 1))
        if isinstance(exc, Unavailable):
            if failures == 1:
                log.info("tenant %s: its hot path waits (%s: %s)", tenant, exc.reason, exc.message)
        else:
            log.exception(
                "hot-path round failed for tenant %s (%d in a row); retrying in %.1fs", tenant, failures, delay
            )
        self._scheduler.notify_at(tenant, time.time() + delay)

    def _hold(self, stage: str = "commit") -> None:
        """Test seam: hold here while the hold file exists (work is then provably in flight):
        before the round's commit, or before it takes the inbox when the file says "inbox"."""
        while self._hold_file is not None and self._hold_file.exists() and not self._scheduler.stopping:
            if stage == "inbox":
                try:
                    if self._hold_file.read_text().strip() != "inbox":
                        return
                except FileNotFoundError:
                    return  # removed since exists(): released
            time.sleep(0.05)

    def _round(self, tenant: str) -> bool:
        """Process up to ``batch`` open operations of one tenant; True if more may remain."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                self.index.remove(tenant)
                self.index.set_expiry(tenant, None)
                return False
            self._hold("inbox")
            self._move_inbox(store)
            # Not synced: a claim lost to a power cut only leaves the operations to be taken again.
            with store.write(sync=False, internal=True) as txn:
                ops = txn.oplog_next_open(self._batch, time.time())
                txn.oplog_claim([op.event_id for op in ops], time.time())
            self._prune_expired_events(tenant, store)
            if not ops:
                if not self._unindex_if_idle(tenant, store):
                    with store.read() as txn:
                        retry_at = txn.oplog_next_retry()
                    if retry_at is not None:  # only backed-off operations are left: come back then
                        self._scheduler.notify_at(tenant, retry_at)
                return False
            self.changes.notify(tenant)
            prepared: list[PreparedItem] = []
            by_position: dict[int, OpRow] = {}
            for position, op in enumerate(ops):
                extraction = None
                if op.extraction is not None:
                    stored = json.loads(op.extraction)
                    extraction = Extraction(
                        facts=[tuple(f) for f in stored["facts"]], triples=[tuple(t) for t in stored["triples"]]
                    )
                prepared.append(
                    PreparedItem.from_payload(position, op.payload, extraction=extraction, vector=op.embedding)
                )
                by_position[position] = op
            errors: dict[int, Exception] = {}
            force = False
            # Single flight with synchronous writers of the same content (engine/dedup.py): one
            # extraction, the later writer finds an exact duplicate.
            with self._write_path.in_flight.claim(tenant, [p.fingerprint for p in prepared]):
                for _attempt in range(3):
                    self._write_path.extract_missing(store, prepared, errors, force=force)
                    self._persist_extractions(store, prepared, by_position)
                    self._hold()
                    try:
                        finished = self._commit(tenant, store, prepared, by_position, errors)
                    except ExtractionMissing:
                        force = True  # a duplicate's original vanished or failed: extract it too
                        continue
                    break
                else:  # pragma: no cover - needs repeated forget races
                    raise RuntimeError("operations kept losing their duplicate originals")
            self.changes.notify(tenant)
            if not finished or len(ops) == self._batch:
                return True  # more is likely: skip the idle check, the next round will tell
            return not self._unindex_if_idle(tenant, store)

    def _move_inbox(self, store: TenantStore) -> None:
        """Adopt what waits in the tenant's inbox into its log, then remove it from the inbox
        (store/inbox.py: the adoption skips what a crash left adopted but not yet removed)."""
        inbox = store.inbox(create=False)
        if inbox is None:
            return
        with inbox.read() as txn:
            ops = txn.ops(limit=self._batch * MOVE_BATCHES)
            requests = txn.requests_through(ops[-1].event_id) if ops else []
        if not ops:
            return
        with store.write(sync=False, internal=True) as log_txn:
            log_txn.oplog_adopt(ops, requests)
        if self._sync_each_enqueue:
            # An enqueue acknowledged power-safe must stay so once it left the inbox. Otherwise
            # the round's sync (or a Flush) covers it together with what was applied.
            store.sync_log()
        with inbox.write(sync=False) as txn:
            txn.remove_through(ops[-1].event_id)
        inbox.checkpoint_if_grown()

    def _prune_expired_events(self, tenant: str, store: TenantStore) -> None:
        """Delete the tenant's finished events older than the retention limit, oldest first (at
        most every PRUNE_INTERVAL_SECONDS, or half the limit when that is shorter). Not synced:
        a deletion lost to a power cut is only done again."""
        if not self._retention:
            return
        now = time.monotonic()
        if now - self._pruned_at.get(tenant, float("-inf")) < min(PRUNE_INTERVAL_SECONDS, self._retention / 2):
            return
        self._pruned_at[tenant] = now
        for _ in range(PRUNE_MAX_BATCHES):
            with store.write(sync=False, internal=True) as txn:
                deleted = txn.oplog_prune(time.time() - self._retention, PRUNE_BATCH)
            if deleted < PRUNE_BATCH:
                return

    def _persist_extractions(
        self, store: TenantStore, prepared: Sequence[PreparedItem], by_position: dict[int, OpRow]
    ) -> None:
        fresh = [p for p in prepared if p.extraction is not None and p.vector is not None and not p.counted]
        if not fresh:
            return
        # Not synced: lost only to a power cut, and then the replay extracts (and counts) again.
        with store.write(sync=False, internal=True) as txn:
            for p in fresh:
                assert p.extraction is not None and p.vector is not None  # as chosen above
                extraction = ledger.canonical_json(
                    {"facts": [list(f) for f in p.extraction.facts], "triples": [list(t) for t in p.extraction.triples]}
                )
                txn.oplog_store_extraction(by_position[p.position].event_id, extraction, p.vector)
            # Counted with the stored result: a replay finds it and calls the model no more.
            txn.add_counters({"model_calls": len(fresh), "embed_calls": 1})
        self._observer.retained(created=0, duplicates=0, model_calls=len(fresh), embed_calls=1)
        for p in fresh:
            p.counted = True

    def _commit(
        self,
        tenant: str,
        store: TenantStore,
        prepared: Sequence[PreparedItem],
        by_position: dict[int, OpRow],
        errors: dict[int, Exception],
    ) -> bool:
        """Apply and finish every claimed operation in ONE transaction. Returns True when every
        operation ended (none went back to pending for another attempt)."""
        all_finished = True
        with store.write(sync=False, internal=True) as txn:
            check_tenant_embedder(txn, self._write_path.embedder, write=True)
            results: list[RetainOutcome | None] = [None] * len(prepared)
            writable = [p for p in prepared if p.position not in errors]
            created, duplicates = self._write_path.apply(txn, writable, results, per_item_errors=True)
            now = time.time()
            succeeded = failed = 0
            for p in prepared:
                op = by_position[p.position]
                outcome = results[p.position]
                if p.position in errors or outcome is None or outcome.status is RetainStatus.INVALID:
                    if p.position in errors:
                        reason, message = "EXTRACTION_FAILED", f"extraction failed: {errors[p.position]}"
                    else:
                        reason = outcome.error_reason if outcome else "NOT_APPLIED"
                        message = outcome.error_message if outcome else "the operation was not applied"
                    if op.failures + 1 >= self._max_failures:
                        txn.oplog_finish(
                            op.event_id,
                            "failed",
                            now,
                            error_reason=reason,
                            error_message=f"{message} (after {op.failures + 1} failed attempts)",
                        )
                        failed += 1
                    else:
                        backoff = self._retry_seconds * (2**op.failures)
                        txn.oplog_retry_later(op.event_id, reason, message, now, now + backoff)
                        all_finished = False
                    continue
                txn.oplog_finish(op.event_id, "succeeded", now, result_json=json.dumps(outcome.to_json()))
                succeeded += 1
            txn.add_counters({"writes": created, "duplicates": duplicates, "succeeded": succeeded, "failed": failed})
        self._note_depth(tenant, store)
        store.sync_log()  # these operations and every one adopted before them: power-safe now
        self._observer.retained(created=created, duplicates=duplicates, model_calls=0, embed_calls=0)
        return all_finished

    def _unindex_if_idle(self, tenant: str, store: TenantStore) -> bool:
        """True if the tenant has no open operation; it then leaves the recovery index once it
        stayed idle for UNINDEX_AFTER_IDLE_SECONDS (the worker comes back to check). Under the
        inbox lock, which every enqueue holds across its index add and its commit."""
        with self._pool.locks.for_inbox(tenant), _snapshot(store) as (txn, waiting):
            depth, _ = _add_depths(txn.oplog_depth(), waiting.depth())
            if depth:
                return False
            now = time.monotonic()
            idle = now - self._idle_since.setdefault(tenant, now)
            if idle >= UNINDEX_AFTER_IDLE_SECONDS:
                self.index.remove(tenant)
                del self._idle_since[tenant]
                self._pruned_at.pop(tenant, None)
            else:
                self._scheduler.notify_at(tenant, time.time() + UNINDEX_AFTER_IDLE_SECONDS - idle)
        self._schedule_expiry(tenant, store)  # outside the inbox lock: it may fsync the index
        return True

    def _schedule_expiry(self, tenant: str, store: TenantStore) -> None:
        """Come back to an idle tenant when its oldest finished event expires, so events are
        deleted on time even if the tenant gets no more fast writes (recorded in the recovery
        index's file: a restart schedules it again). Not before the prune interval has passed,
        so a round that could not delete everything yet never makes the worker spin."""
        if not self._retention:
            return
        with store.read() as txn:
            oldest = txn.oplog_oldest_finished_at()
        due = None
        if oldest is not None:
            due = max(oldest + self._retention, time.time() + min(PRUNE_INTERVAL_SECONDS, self._retention / 2))
        if self.index.set_expiry(tenant, due) and due is not None:
            self._scheduler.notify_at(tenant, due)

    def _unindex_idle_now(self) -> None:
        """At shutdown: drop every tenant seen drained with nothing enqueued since."""
        for tenant in list(self._idle_since):
            with self._pool.locks.for_inbox(tenant):
                if self._idle_since.pop(tenant, None) is not None:
                    self.index.remove(tenant)

    # -- barrier and status ----------------------------------------------------------------------

    # The barrier in steps that never wait, so a caller may wait between them on a thread
    # (``flush``, ``disable``: MemoryBrain in process) or on an event loop holding no thread (the
    # server: transport/waits.py), and give up at its own deadline.

    def flush_barrier(self, tenant: str) -> Barrier | None:
        """What a Flush of the tenant, beginning now, waits for; None when it has no file."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return None
            self._scheduler.notify(tenant)  # surely scheduled, even if a notify was lost
            return self._barrier(store)

    def disable_barrier(self, tenant: str) -> Barrier | None:
        """Stop queueing the tenant's fast writes; what its Disable then waits for (None: no file,
        nothing to disable, and none is made)."""
        if not self.set_enabled(tenant, False):
            return None
        return self.flush_barrier(tenant)

    @staticmethod
    def _barrier(store: TenantStore) -> Barrier:
        """The last accepted event id and the open operations up to it, inbox and log together."""
        with _snapshot(store) as (txn, waiting):
            in_log = txn.oplog_open_ids(waiting.log_last_id)
            in_inbox = [row.event_id for row in waiting.rows()]
        return Barrier(in_inbox[-1] if in_inbox else waiting.log_last_id, in_log + in_inbox)

    def remaining(self, tenant: str, barrier: Barrier) -> int:
        """Operations the barrier still waits for (0: all have finished). When 0, what finished is
        made durable first (a barrier returns once what it waited for is on disk)."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return 0
            with _snapshot(store) as (txn, waiting):
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
        return DeadlineExceeded(
            f"{what} gave up after {seconds:g}s with {remaining} operations still pending or running; "
            "call it again (nothing was lost) or give a longer timeout_seconds",
            reason="HOT_PATH_DEADLINE_EXCEEDED",
            metadata={"remaining_depth": str(remaining)},
        )

    def _wait(self, tenant: str, barrier: Barrier, timeout: float, what: str) -> None:
        """Block until the barrier is passed, or raise ``gave_up`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self.changes.waiter(tenant) as changed:
            while (left := self.remaining(tenant, barrier)) > 0:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    raise self.gave_up(what, timeout, left)
                changed.wait(min(1.0, wait))
                changed.clear()

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
        return self.status(tenant)

    def status(self, tenant: str) -> HotPathState:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return HotPathState(
                    enabled=False,
                    queue_depth=0,
                    oldest_pending_seconds=0.0,
                    accepted=0,
                    succeeded=0,
                    failed=0,
                    duplicates=0,
                    writes=0,
                    model_calls=0,
                )
            with _snapshot(store) as (txn, waiting):
                enabled = txn.meta(HOT_PATH_META) == "on"
                in_inbox = waiting.depth()
                depth, oldest = _add_depths(txn.oplog_depth(), in_inbox)
                counters = txn.counters()
        return HotPathState(
            enabled=enabled,
            queue_depth=depth,
            oldest_pending_seconds=max(0.0, time.time() - oldest) if oldest else 0.0,
            # An operation is counted accepted when it leaves the inbox; those still in it are.
            accepted=counters.get("accepted", 0) + in_inbox[0],
            succeeded=counters.get("succeeded", 0),
            failed=counters.get("failed", 0),
            duplicates=counters.get("duplicates", 0),
            writes=counters.get("writes", 0),
            model_calls=counters.get("model_calls", 0),
        )

    # -- events ----------------------------------------------------------------------------------

    def get_event(self, tenant: str, event_id: int) -> Event:
        with self._pool.tenant(tenant, create=False) as store:
            row = None
            if store is not None:
                with _snapshot(store) as (txn, waiting):
                    waiting_row = waiting.rows(after_id=event_id - 1, up_to_id=event_id)
                    row = txn.oplog_get(event_id) or (waiting_row[0] if waiting_row else None)
        if row is None:
            kept = (
                f"finished events are kept for {self._retention:g}s" if self._retention else "events are kept forever"
            )
            raise NotFound(
                f"event {event_id} does not exist in this tenant's operation log ({kept})", reason="EVENT_NOT_FOUND"
            )
        return event_from_row(row)

    def list_events(
        self,
        tenant: str,
        *,
        status: str | None = None,
        accepted_after: float | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> EventPage:
        if status is not None and status not in EVENT_STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(EVENT_STATUSES)}", reason="EVENT_STATUS_INVALID")
        page_size = check.validate_page_size(page_size, self._limits)
        query = f"events\x1f{status or ''}\x1f{accepted_after!r}"
        # Pages are cut by event id, which only grows: new events land on later pages and never
        # shift or repeat what an earlier page returned.
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                page_tokens.decode(None, tenant, query, page_token)  # any token is one we never issued
                return EventPage([], "")
            with _snapshot(store) as (txn, waiting):
                secret = txn.page_token_secret()
                after_id = page_tokens.decode_int(secret, tenant, query, page_token)
                rows = txn.oplog_page(
                    status=status, accepted_after=accepted_after, after_id=after_id, limit=page_size + 1
                )
                if status in (None, "pending"):  # inbox ids follow every id in the log: still in order
                    rows += [
                        r
                        for r in waiting.rows(after_id=after_id, limit=page_size + 1)
                        if accepted_after is None or r.accepted_at >= accepted_after
                    ]
        events = [event_from_row(r) for r in rows[:page_size]]
        token = (
            page_tokens.encode(secret, tenant, query, str(rows[page_size - 1].event_id))
            if len(rows) > page_size
            else ""
        )
        return EventPage(events, token)

    def transitions(self, tenant: str, *, after_event_id: int = 0, after_sequence: int = 0) -> Transitions:
        """The next status transitions (up to a chunk) after ``after_sequence`` of events after
        ``after_event_id``, from the durable log; the caller waits for ``changes`` when there were
        no more (WatchEvents: transport/waits.py)."""
        sequence = max(0, after_sequence)
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return Transitions([], sequence, more=False)
            with store.read() as txn:
                pruned = txn.oplog_pruned_through_seq()
                if sequence and sequence < pruned:
                    raise FailedPrecondition(
                        f"transitions up to sequence {pruned} were deleted by the event retention limit "
                        f"({self._retention:g}s), so a watch resuming after {sequence} would miss some; "
                        f"resume with after_sequence >= {pruned}, or 0 for everything kept",
                        reason="EVENTS_PRUNED",
                        metadata={"pruned_through_sequence": str(pruned)},
                    )
                found = txn.oplog_transitions(
                    after_seq=sequence, after_event_id=max(0, after_event_id), limit=STREAM_CHUNK
                )
                rows: dict[int, OpRow] = {}
                for t in found:
                    if t.event_id not in rows:
                        row = txn.oplog_get(t.event_id)
                        if row is not None:
                            rows[t.event_id] = row
        events = [
            event_from_row(rows[t.event_id], status=t.status, sequence=t.seq) for t in found if t.event_id in rows
        ]
        return Transitions(events, found[-1].seq if found else sequence, more=len(found) == STREAM_CHUNK)


class _Waiting:
    """The inbox's operations the log does not hold yet, as seen inside ``_snapshot``."""

    def __init__(self, txn: InboxTxn | None, log_last_id: int) -> None:
        self._txn = txn
        self.log_last_id = log_last_id

    def depth(self, up_to_id: int | None = None) -> tuple[int, float | None]:
        return self._txn.depth(after_id=self.log_last_id, up_to_id=up_to_id) if self._txn else (0, None)

    def rows(self, *, after_id: int = 0, up_to_id: int | None = None, limit: int = -1) -> list[OpRow]:
        """These operations as the pending log rows they will become."""
        if self._txn is None:
            return []
        ops = self._txn.ops(after_id=max(after_id, self.log_last_id), up_to_id=up_to_id, limit=limit)
        return [OpRow.pending(op) for op in ops]


@contextlib.contextmanager
def _snapshot(store: TenantStore) -> Iterator[tuple[ReadTxn, _Waiting]]:
    """One read of the tenant's log together with its inbox, counting every operation once.

    Under the inbox lock nothing leaves the inbox, and the log is read first: an operation
    adopted after the log's snapshot is still in the inbox, and one the log already holds
    (adopted meanwhile, or before a crash and not yet removed) has an id up to the log's last,
    so only the inbox's operations above that id are the inbox's own."""
    inbox = store.inbox(create=False)
    with inbox.lock if inbox is not None else contextlib.nullcontext(), store.read() as txn:
        last = txn.oplog_last_event_id()
        if inbox is None:
            yield txn, _Waiting(None, last)
            return
        with inbox.read() as inbox_txn:
            yield txn, _Waiting(inbox_txn, last)


def _add_depths(a: tuple[int, float | None], b: tuple[int, float | None]) -> tuple[int, float | None]:
    oldest = [t for t in (a[1], b[1]) if t is not None]
    return a[0] + b[0], min(oldest) if oldest else None
