"""The delivery worker: sends every tenant's pending webhook deliveries, at least once.

* Which tenants: those of the member's index (store/webhook_index.py), each looked at when it
  may have work — at start, after each of its commits (``committed``, told by the pool), and when
  its earliest retry is due. No file is polled: a tenant with nothing due is not looked at until
  one of those happens.
* Fairness: ``workers`` threads take the tenant due first; a tenant is served by at most one of
  them at a time, ``BATCH`` deliveries a turn, then waits its turn behind the tenants due before
  it. So a receiver that hangs holds one worker for at most the timeout per attempt, and the
  other tenants' deliveries go on through the other workers.
* At least once: a delivery is sent, then its outcome recorded; a process killed in between sends
  it again after the restart, with the same ``webhook-id``. A failed attempt is tried again
  after a backoff doubling from ``retry_seconds`` to ``retry_cap_seconds`` (a tenth of jitter);
  a subscription whose attempts have all failed for ``pause_after_seconds`` is paused, saying
  why, and sends nothing until resumed.
* Moves: a fenced tenant (a move is taking it away) is not delivered from; the store refuses
  the worker's records then too, and a tenant no longer served here leaves the index. Its
  deliveries travel in its file and are sent by its new owner.
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from mnemosyne.engine.config import WebhookConfig
from mnemosyne.engine.webhooks.sender import Attempt, post, signature
from mnemosyne.errors import MnemosyneError
from mnemosyne.runtime.clock import Clock
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, read_file
from mnemosyne.store.webhook_index import WebhookIndex
from mnemosyne.store.webhook_rows import OutboxRow

log = logging.getLogger("mnemosyne.webhooks")

BATCH = 16  # deliveries a worker sends for one tenant before the next tenant's turn
LOG_PRUNE_BATCH = 500
# A tenant that could not be looked at (busy, moving, a damaged file) is looked at again after this.
RETRY_LOOK_SECONDS = 2.0
_NEVER = float("inf")


@dataclass(frozen=True)
class _Turn:
    """What one look at a tenant found: its due deliveries with their subscriptions' secrets."""

    rows: list[OutboxRow]
    secrets: dict[int, list[str]]
    include_text: dict[int, bool]
    urls: dict[int, str]


def body(tenant: str, row: OutboxRow, include_text: bool) -> bytes:
    """A delivery's payload, the same bytes on every attempt (its text aside, once forgotten):
    its kind, when the change committed, and the change's ids; the memory's text only for a
    subscription that asked for it."""
    data: dict[str, object] = {"tenant": tenant}
    for name in ("memory_id", "event_id", "ledger_seq", "scope"):
        value = getattr(row, name)
        if value is not None:
            data[name] = value
    data.update({k: v for k, v in json.loads(row.detail).items() if v is not None})
    if include_text and row.kind in ("memory.created", "memory.updated"):
        data["text"] = row.text  # None: the memory was forgotten before this delivery
    at = datetime.fromtimestamp(row.at, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    payload = {"type": row.kind, "timestamp": at, "data": data}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class DeliveryWorker:
    def __init__(self, *, pool: TenantPool, config: WebhookConfig, seams: Seams, clock: Clock) -> None:
        self._pool = pool
        self._config = config
        self._clock = clock
        self.index = WebhookIndex(pool.data_dir)
        self._timeout = seams.webhook_timeout or config.timeout_seconds
        self._retry = seams.webhook_backoff or config.retry_seconds
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # tenant -> when to look at it next
        self._heap: list[tuple[float, str]] = []
        self._busy: set[str] = set()
        self._woken: set[str] = set()  # committed to while a worker served it
        self._own = threading.local()  # set while a worker records an attempt (its own commit)
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def now(self) -> float:
        """Retries and pauses are on the engine's clock (a test's may jump ahead: the waits in
        ``_next`` are at most a second, so a jump is seen within one)."""
        return self._clock.now()

    # -- what tells the worker to look (store/file_watchers.py) -------------------------------------

    def committed(self, tenant: str) -> None:
        if tenant in self.index and not getattr(self._own, "recording", False):
            self._schedule(tenant, 0.0, woken=True)

    def installed(self, tenant: str) -> None:
        self.index.add(tenant)  # a file that arrived may hold subscriptions: looked at once
        self._schedule(tenant, 0.0, woken=True)

    def content_erased(self, tenant: str) -> None:
        pass  # a forget's deliveries are made by its commit (``committed``)

    def erased(self, tenant: str) -> None:
        self.index.remove(tenant, erase=True)
        with self._cond:
            self._due.pop(tenant, None)

    def subscribed(self, tenant: str) -> None:
        """Before a tenant's subscription commits (engine/webhooks/subscriptions.py)."""
        self.index.add(tenant)

    def _schedule(self, tenant: str, at: float, *, woken: bool = False) -> None:
        with self._cond:
            if woken and tenant in self._busy:
                self._woken.add(tenant)
            if at < self._due.get(tenant, _NEVER):
                self._due[tenant] = at
                heapq.heappush(self._heap, (at, tenant))
                self._cond.notify()

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.index.built:  # a data directory of an older version: once, from its files
            self.index.rebuild(t for t in self._pool.tenant_ids() if self._has_subscriptions(t))
        for tenant in self._pool.recovered:  # installs this start finished: their files may hold webhooks
            self.index.add(tenant)
        for tenant in self.index.tenants():
            self._schedule(tenant, 0.0)
        self._pool.watchers.append(self)
        for i in range(self._config.workers):
            thread = threading.Thread(target=self._run, name=f"webhooks-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _has_subscriptions(self, tenant: str) -> bool:
        try:
            with read_file(self._pool.path_for(tenant)) as txn:
                return "webhook_subscriptions" in _tables(txn) and txn.webhook_has_subscriptions()
        except (MnemosyneError, OSError):
            return True  # looked at by the worker, which knows what to do with it

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=self._timeout + 5)
        self.index.close()

    # -- the loop -----------------------------------------------------------------------------------

    def _next(self) -> str | None:
        """The tenant due first that no worker serves, once it is due (None: stopping)."""
        with self._cond:
            while not self._stopping:
                now, skipped = self.now(), []
                found = None
                while self._heap:
                    at, tenant = heapq.heappop(self._heap)
                    if self._due.get(tenant) != at:
                        continue  # superseded by an earlier time, or dropped
                    if tenant in self._busy:
                        skipped.append((at, tenant))
                        continue
                    if at > now:
                        heapq.heappush(self._heap, (at, tenant))
                        break
                    found = tenant
                    break
                for entry in skipped:
                    heapq.heappush(self._heap, entry)
                if found is not None:
                    del self._due[found]
                    self._busy.add(found)
                    self._woken.discard(found)
                    return found
                wait = min((at for at, t in self._heap if t not in self._busy), default=now + 60) - now
                self._cond.wait(timeout=max(0.01, min(wait, 1.0)))
            return None

    def _run(self) -> None:
        while (tenant := self._next()) is not None:
            try:
                next_at = self._serve(tenant)
            except MnemosyneError as exc:  # moving, busy, damaged: looked at again later
                log.info("webhooks of tenant %s wait: %s", tenant, exc)
                next_at = self.now() + RETRY_LOOK_SECONDS
            except Exception:
                log.exception("webhooks of tenant %s failed; looked at again later", tenant)
                next_at = self.now() + RETRY_LOOK_SECONDS
            with self._cond:
                self._busy.discard(tenant)
                if tenant in self._woken:
                    next_at = 0.0
            if next_at is not None:
                self._schedule(tenant, next_at)

    def _serve(self, tenant: str) -> float | None:
        """One turn: up to BATCH due deliveries sent and recorded. Returns when to look again
        (None: when it commits next)."""
        turn = self._look(tenant)
        if turn is None:
            return None
        for row in turn.rows:
            with self._pool.tenant(tenant, create=False) as store:
                if store is None or store.fenced:
                    return None  # erased, or a move is taking it away: nothing more is sent from here
            attempt = self._send(tenant, row, turn)
            self._record(tenant, row, attempt)
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return None
            with store.read() as txn:
                due = txn.webhook_next_due()
        return due

    def _look(self, tenant: str) -> _Turn | None:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None or store.fenced:  # not (yet) here, or a move is taking it away
                return None
            with store.read() as txn:
                subscribed = txn.webhook_has_subscriptions()
            if not subscribed:
                # Under the write lock, which a subscription's creation holds when it adds the
                # tenant to the index: either this sees it, or the creation adds the tenant again.
                with store.write(sync=False, counted=False) as txn:
                    if not txn.webhook_has_subscriptions():
                        self.index.remove(tenant)
                        return None
            with store.read() as txn:
                rows = txn.webhook_due(self.now(), BATCH)
                subscriptions = txn.webhook_subscriptions()
                secrets = {k: [s.secret for s in v] for k, v in txn.webhook_secrets().items()}
        return _Turn(
            rows,
            secrets,
            {s.id: bool(s.include_text) for s in subscriptions},
            {s.id: s.url for s in subscriptions},
        )

    def _send(self, tenant: str, row: OutboxRow, turn: _Turn) -> Attempt:
        url = turn.urls.get(row.subscription_id)
        if url is None:
            return Attempt(0, "the subscription was deleted")
        payload = body(tenant, row, turn.include_text.get(row.subscription_id, False))
        timestamp = int(time.time())  # the receiver checks it against its own clock: the real one
        headers = {
            "webhook-id": row.delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(
                turn.secrets.get(row.subscription_id, []), row.delivery_id, timestamp, payload
            ),
        }
        return post(url, payload, headers, timeout=self._timeout, allow_private=self._config.allow_private_addresses)

    def _record(self, tenant: str, row: OutboxRow, attempt: Attempt) -> None:
        now = self.now()
        self._own.recording = True
        try:
            with self._pool.tenant(tenant, create=False) as store:
                if store is None:
                    return
                with store.write(sync=False) as txn:  # lost to a power cut: the delivery is only sent again
                    if attempt.delivered:
                        txn.webhook_delivered(row.id, attempt.status_code, now)
                        txn.webhook_prune_delivered(now - self._config.log_retention_seconds, LOG_PRUNE_BATCH)
                        return
                    backoff = min(self._config.retry_cap_seconds, self._retry * 2 ** min(row.attempts, 30))
                    retry_at = now + backoff * (1 + random.random() / 10)
                    txn.webhook_failed(row.id, attempt.status_code or None, attempt.error, now, retry_at)
                    subscription = txn.webhook_subscription(row.subscription_id)
                    if subscription is not None and subscription.failing_since is not None:
                        if now - subscription.failing_since >= self._config.pause_after_seconds:
                            since = datetime.fromtimestamp(subscription.failing_since, UTC).isoformat(
                                timespec="seconds"
                            )
                            txn.webhook_pause(
                                row.subscription_id,
                                f"paused: every delivery failed since {since}; the last: {attempt.error}. "
                                "Fix the receiver, then resume the webhook (its deliveries are kept)",
                                now,
                            )
        finally:
            self._own.recording = False


def _tables(txn: ReadTxn) -> set[str]:
    return {row[0] for row in txn.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
