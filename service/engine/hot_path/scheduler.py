"""Which tenant a worker takes next: round-robin over the tenants with work, one worker per tenant
at a time (so a tenant's operations apply in acceptance order and a busy tenant never starves a
quiet one), and wake-ups at a wall-clock time (a backoff's end, an idle check, an expiry)."""

from __future__ import annotations

import collections
import heapq
import threading
import time
from typing import Protocol

from mnemosyne.runtime import background

# The longest a worker waits for a wake-up before it looks again: one far off (an expiry's erasure
# in the 24th century or later) is past threading.TIMEOUT_MAX, where Condition.wait raises
# OverflowError, which ended the worker (and with it every tenant's fast writes).
MAX_WAIT_SECONDS = 3600.0


class Wake(Protocol):
    """What the parts that only announce work need of the scheduler."""

    def notify(self, tenant: str) -> None:
        """The tenant has work: take it (again) soon."""

    def notify_at(self, tenant: str, when: float) -> None:
        """Take the tenant at wall-clock ``when``."""

    def hurry(self, tenant: str) -> None:
        """A request waits for the tenant's work: the round on it now runs at the normal priority."""


class Scheduler:
    """Round-robin over tenants with work; a tenant is processed by one worker at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        # tenant -> the worker on it now (None: not a background thread, as in a test)
        self._busy: dict[str, background.BackgroundThread | None] = {}
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

    def hurry(self, tenant: str) -> None:
        """A request began waiting for the tenant's writes: a worker's round on it may have decided
        its priority before (runtime/background.py), and an idle thread's embedding starves on
        busy cores; it runs at the normal priority until it is done with the tenant."""
        with self._cond:
            worker = self._busy.get(tenant)
            if worker is not None:
                worker.set_hurried(True)

    def forget(self, tenant: str) -> None:
        """Drop the tenant's pending wake-ups (its idle check, its events' expiry, a backoff): its
        files are gone from here. A later ``notify`` schedules it again."""
        with self._cond:
            self._delayed = [(when, t) for when, t in self._delayed if t != tenant]
            heapq.heapify(self._delayed)
            self._again.discard(tenant)

    def take(self) -> str | None:
        """The next tenant to work on, waiting for one; None once stopping."""
        with self._cond:
            while not self.stopping:
                now = time.time()
                while self._delayed and self._delayed[0][0] <= now:
                    self._notify_locked(heapq.heappop(self._delayed)[1])
                if self._ready:
                    break
                self._cond.wait(min(self._delayed[0][0] - now, MAX_WAIT_SECONDS) if self._delayed else None)
            if self.stopping:
                return None
            tenant = self._ready.popleft()
            self._queued.discard(tenant)
            self._busy[tenant] = background.this_thread()
            return tenant

    def done(self, tenant: str, more: bool) -> None:
        """A worker is done with the tenant; ``more``: it has work left (to the back of the line)."""
        with self._cond:
            worker = self._busy.pop(tenant, None)
            if worker is not None:
                worker.set_hurried(False)
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
