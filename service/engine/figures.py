"""Each tenant's figures of the last hour, counted in memory by the member that owns the tenant:
writes, recalls and failed fast writes per minute, and the hot path's depth, its oldest pending
age and the files' size as sampled in each minute. What the console's overview charts
(docs/console.md#overview), with no Prometheus needed (the metrics have no per-tenant labels).

Kept in memory only: a restart starts every tenant's hour empty (``counting_since`` says when),
and the figures of a tenant this member stops owning stay with it until they age out. A tenant's
minutes are a fixed ring of ``MINUTES`` rows, dropped an hour after its last activity, so the
memory is bounded by the tenants active in the last hour (docs/console.md#overview: the measured
bytes per tenant). The cross-tenant view reads these counters and each file's size (a stat): it
never opens a tenant file.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable

import numpy as np

from mnemosyne.engine.types import MinuteFigures, TenantFigures, TenantHour, TenantsFigures
from mnemosyne.store.pool import TenantPool

MINUTES = 60
# Points of a tenant's memories over its life (one pass over its memories in its file).
MEMORY_POINTS = 60
# The ring's columns; a gauge not sampled in a minute is UNSET.
_MINUTE, _WRITES, _RECALLS, _FAILED, _DEPTH, _OLDEST_MS, _BYTES = range(7)
COLUMNS = 7
UNSET = -1
_EMPTY_RING = array("q", [UNSET] * (MINUTES * COLUMNS))


class Figures:
    """tenant -> its ring of the last ``MINUTES`` minutes: a flat array of ``MINUTES`` rows of
    ``COLUMNS`` int64 (an array.array: cheap to index one value, read whole by numpy without a
    copy). Thread-safe; every call is a few array writes under one lock."""

    def __init__(self, pool: TenantPool, clock: Callable[[], float] = time.time) -> None:
        self._pool = pool
        self._clock = clock
        self.since = clock()
        self._rings: dict[str, array[int]] = {}
        self._last: dict[str, int] = {}  # tenant -> the minute it was last counted in
        self._swept = 0
        self._lock = threading.Lock()

    # -- counting (called where each thing happens) --------------------------------------------

    def accepted(self, tenant: str, writes: int) -> None:
        """``writes`` memories accepted for writing (committed, or queued on the hot path)."""
        self._add(tenant, _WRITES, writes, file_bytes=self._pool.file_bytes(tenant))

    def recalled(self, tenant: str) -> None:
        self._add(tenant, _RECALLS, 1)

    def applied(self, tenant: str, failed: int) -> None:
        """A hot-path round committed; ``failed`` of its fast writes failed for good."""
        self._add(tenant, _FAILED, failed, file_bytes=self._pool.file_bytes(tenant))

    def queue(self, tenant: str, depth: int, oldest: float | None) -> None:
        """The tenant's open fast writes were counted: ``depth`` of them, the oldest accepted at
        ``oldest`` (unix seconds). The minute keeps the most of each."""
        age_ms = int(max(0.0, self._clock() - oldest) * 1000) if oldest is not None else 0
        with self._lock:
            ring, at = self._row(tenant)
            ring[at + _DEPTH] = max(ring[at + _DEPTH], depth)
            ring[at + _OLDEST_MS] = max(ring[at + _OLDEST_MS], age_ms)

    def forget(self, tenant: str) -> None:
        """The tenant was erased or left this member."""
        with self._lock:
            self._rings.pop(tenant, None)
            self._last.pop(tenant, None)

    def _add(self, tenant: str, column: int, count: int, *, file_bytes: int | None = None) -> None:
        with self._lock:
            ring, at = self._row(tenant)
            ring[at + column] += count
            if file_bytes is not None:
                ring[at + _BYTES] = file_bytes

    def _row(self, tenant: str) -> tuple[array[int], int]:
        """The tenant's ring and the offset of this minute's row in it, the row cleared when it
        last held a minute an hour ago (under the lock). Rings idle for an hour are dropped, at
        most once a minute."""
        minute = int(self._clock() // 60)
        if minute != self._swept:
            self._swept = minute
            for idle in [t for t, last in self._last.items() if last <= minute - MINUTES]:
                del self._rings[idle], self._last[idle]
        ring = self._rings.get(tenant)
        if ring is None:
            ring = self._rings[tenant] = array("q", _EMPTY_RING)
        self._last[tenant] = minute
        at = (minute % MINUTES) * COLUMNS
        if ring[at + _MINUTE] != minute:
            ring[at : at + COLUMNS] = array("q", (minute, 0, 0, 0, UNSET, UNSET, UNSET))
        return ring, at

    # -- reading ---------------------------------------------------------------------------------

    def _hour(self, tenant: str, now_minute: int) -> np.ndarray:
        """The tenant's rows of the last hour (a copy; stale rows dropped), under the lock."""
        ring = self._rings.get(tenant)
        if ring is None:
            return np.empty((0, COLUMNS), dtype=np.int64)
        rows = np.frombuffer(ring, dtype=np.int64).reshape(MINUTES, COLUMNS)
        return rows[rows[:, _MINUTE] > now_minute - MINUTES].copy()

    def minutes(self, tenant: str) -> list[MinuteFigures]:
        """The last ``MINUTES`` minutes, oldest first, each minute present (zero when idle)."""
        now_minute = int(self._clock() // 60)
        with self._lock:
            rows = {int(r[_MINUTE]): r for r in self._hour(tenant, now_minute)}
        out = []
        for minute in range(now_minute - MINUTES + 1, now_minute + 1):
            r = rows.get(minute)
            if r is None:
                out.append(MinuteFigures(start=minute * 60.0))
                continue
            out.append(
                MinuteFigures(
                    start=minute * 60.0,
                    writes=int(r[_WRITES]),
                    recalls=int(r[_RECALLS]),
                    failed_events=int(r[_FAILED]),
                    hot_path_depth=None if r[_DEPTH] == UNSET else int(r[_DEPTH]),
                    oldest_pending_seconds=None if r[_OLDEST_MS] == UNSET else int(r[_OLDEST_MS]) / 1000,
                    file_bytes=None if r[_BYTES] == UNSET else int(r[_BYTES]),
                )
            )
        return out

    def of(self, tenant: str, depth: tuple[int, float]) -> TenantFigures:
        """The tenant's figures: its hour from memory, its memories over its life from its file
        (one read, the only file this opens), its size and ``depth`` (open fast writes, oldest
        age in seconds) now."""
        memories_at: list[tuple[float, int]] = []
        with self._pool.tenant(tenant, create=False) as store:
            if store is not None:
                with store.read() as txn:
                    first, width, live = txn.memories_over_time(MEMORY_POINTS)
                memories_at = [(first + width * (i + 1), n) for i, n in enumerate(live)]
        size = self._pool.file_bytes(tenant)
        if store is not None:
            with self._lock:
                ring, at = self._row(tenant)
                ring[at + _BYTES] = size
        return TenantFigures(
            counting_since=self.since,
            minutes=self.minutes(tenant),
            memories_at=memories_at,
            file_bytes=size,
            hot_path_depth=depth[0],
            oldest_pending_seconds=depth[1],
        )

    def across(self, limit: int) -> TenantsFigures:
        """The ``limit`` largest tenants of this member (by their files' size: a stat each, no
        file opened), the busiest of the last hour (writes and recalls) and those with failed
        fast writes in it (most first)."""
        now_minute = int(self._clock() // 60)
        with self._lock:
            counted = list(self._rings)
            every = np.frombuffer(b"".join(self._rings[t].tobytes() for t in counted), dtype=np.int64)
        rings = every.reshape(len(counted), MINUTES, COLUMNS)
        recent = (rings[:, :, _MINUTE] > now_minute - MINUTES)[:, :, None]
        sums = dict(zip(counted, (rings[:, :, _WRITES : _FAILED + 1] * recent).sum(axis=1).tolist()))
        tenants = self._pool.tenant_ids()
        rows = []
        for tenant in tenants:
            writes, recalls, failed = sums.get(tenant, (0, 0, 0))
            rows.append(TenantHour(tenant, self._pool.file_bytes(tenant), writes, recalls, failed))
        return TenantsFigures(
            tenants=len(tenants),
            counting_since=self.since,
            largest=sorted(rows, key=lambda r: (-r.file_bytes, r.tenant))[:limit],
            busiest=sorted(
                (r for r in rows if r.writes + r.recalls), key=lambda r: (-(r.writes + r.recalls), r.tenant)
            )[:limit],
            failing=sorted((r for r in rows if r.failed_events), key=lambda r: (-r.failed_events, r.tenant))[:limit],
        )
