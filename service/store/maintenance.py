"""Background store maintenance: full-text index merges and WAL checkpoints, off every writer's path.

SQLite's automatic checkpoint runs inside the COMMIT that crosses the threshold, so one write in
a few hundred pays for copying the whole WAL into the database file and syncing it: that write's
latency, and the p99 of every short write (a hot-path enqueue above all), is the checkpoint's.
Instead, the writer connection's WAL hook (called after each commit with the WAL's size) only
names the tenant here, and one thread maintains it:

1. merges the full-text index's segments (FTS5 ``'merge'``, a few dozen pages per short
   transaction, until nothing is left to merge). Every commit adds a segment; FTS5's own
   automerge keeps them in levels, but a query still reads every segment: a tenant of 3,000
   single writes answered a BM25 query in 331 us before a full merge and 76 us after. A pass
   that stops at its bound with work left asks for another, and opening a tenant of more than
   32 segments asks for one (store/pool.py SEGMENTS_ON_OPEN), so a file closed while behind (a
   bulk load: 863 segments at 1M memories, its text query 88 ms instead of 20) is merged
   without waiting for a write;
2. runs a PASSIVE checkpoint on a connection of its own. PASSIVE never takes the write lock nor
   waits for readers: writers keep committing meanwhile, and the next write transaction after a
   complete checkpoint starts the WAL again from its beginning, so the file stays about
   ``CHECKPOINT_PAGES`` pages long. A writer that commits large batches back to back can outrun
   it (the checkpoint never catches up, the WAL never restarts); past ``WAL_LIMIT_PAGES`` the
   writer checkpoints itself, under its write lock (``TenantStore.write``). No checkpoint copies
   the WAL back while a reader holds an older snapshot (a backup's copy): past
   ``WAL_PINNED_FACTOR`` times the limit, the tenant's writes are refused until it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mnemosyne.errors import ResourceExhausted
from mnemosyne.runtime.background import become_background_thread, keep_up

log = logging.getLogger("mnemosyne.store.maintenance")

# The same threshold as SQLite's default wal_autocheckpoint: one pass per ~4 MB of writes.
CHECKPOINT_PAGES = 1000
# A WAL this long means the pass above fell behind the writer: the writer checkpoints itself
# (TenantStore.write), ~128 MB of 4 KB pages; less for a tenant held to a byte quota
# (``wal_limit_pages``).
WAL_LIMIT_PAGES = 32 * CHECKPOINT_PAGES
PAGE_BYTES = 4096  # SQLite's default page size, the tenant files'
# When the WAL starts again, its file is cut back to this length (SQLite's journal_size_limit):
# without it the file kept the length of its longest run, up to the limit above, for as long as
# the tenant stayed open, on every open tenant at once.
WAL_KEPT_BYTES = CHECKPOINT_PAGES * PAGE_BYTES
# A WAL this many times its limit that a checkpoint still cannot start again is held by a reader of
# an older snapshot (a backup's or an export's copy of the tenant, store/snapshot.py; an integrity
# check): every write meanwhile grew it, at its writers' pace for as long as the read lasted, on the
# disk every tenant shares. Past it the tenant's writes are refused, with a retry delay, until the
# read ends (``TenantStore.write``).
WAL_PINNED_FACTOR = 2
WAL_FULL_RETRY_SECONDS = 1.0
WAL_LIMIT_REACHED = "WAL_LIMIT_REACHED"


def wal_limit_pages(max_tenant_bytes: int) -> int:
    """The WAL pages past which a tenant's writer checkpoints itself: ``WAL_LIMIT_PAGES``, or for
    a tenant held to a byte quota (``max_tenant_bytes`` > 0) its quota in pages, at least one
    background pass's worth: the quota bounds the tenant file, not its WAL, and a writer outrunning
    the background pass grew the WAL of a 1 MB tenant to 128 MB, room every tenant shares. A
    checkpoint copies at most the file's pages, few for such a tenant: cheap under the write lock."""
    if max_tenant_bytes <= 0:
        return WAL_LIMIT_PAGES
    return min(WAL_LIMIT_PAGES, max(CHECKPOINT_PAGES, -(-max_tenant_bytes // PAGE_BYTES)))


def wal_full(tenant: str, pages: int, limit_pages: int) -> ResourceExhausted:
    """The refusal of a write to ``tenant`` whose WAL of ``pages`` is past ``limit_pages`` and held."""
    return ResourceExhausted(
        f"tenant {tenant}'s write-ahead log holds {pages * PAGE_BYTES // 2**20} MiB, past its limit of "
        f"{limit_pages * PAGE_BYTES // 2**20} MiB, and cannot be copied back into its file while a long read holds an "
        "older snapshot of the tenant (a backup's or an export's copy of it, an integrity check): its writes are "
        "refused until that read ends; retry shortly",
        reason=WAL_LIMIT_REACHED,
        metadata={"limit_bytes": str(limit_pages * PAGE_BYTES)},
        retry_after_seconds=WAL_FULL_RETRY_SECONDS,
    )


class Maintainer:
    """One daemon thread maintaining the tenants named by ``request``, each once per request
    burst. ``maintain(tenant)`` is supplied by the pool: it maintains the tenant's store if it is
    still open."""

    def __init__(self, maintain: Callable[[str], None]) -> None:
        self._maintain = maintain
        self._cond = threading.Condition()
        self._pending: dict[str, float] = {}  # tenant -> monotonic time of its first request, in order
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.completed = 0

    def request(self, tenant: str) -> None:
        """Called from the WAL hook inside a commit: must stay cheap and never raise."""
        with self._cond:
            if self._stopping:
                return
            self._pending.setdefault(tenant, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="store-maintenance", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until every requested pass has run (tests, benchmarks)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        become_background_thread()
        while True:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._pending or self._stopping)
                if self._stopping:
                    return
                tenant = next(iter(self._pending))
                requested_at = self._pending.pop(tenant)
                self._busy = True
            keep_up(time.monotonic() - requested_at)
            try:
                self._maintain(tenant)
                self.completed += 1
            except Exception:  # a failed pass loses nothing: the next one does the work
                if self._stopping:  # a long pass whose files the shutdown closed (after stop's wait)
                    log.info("background maintenance of tenant %s ended by the shutdown", tenant)
                    return
                log.exception("background maintenance failed for tenant %s", tenant)
