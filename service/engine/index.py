"""The in-memory vector matrix of one tenant: a cache of the ``embeddings`` table.

It is brought up to date inside each recall's own read transaction: rows above its high-water
mark are appended; a forget (seen as a new forget epoch) drops and reloads it. It never holds
anything that is not in the file, so ranking is the same before and after a restart.

Layout: one contiguous float32 buffer, dimension-major (shape ``(dim, capacity)``: each buffer row
holds one dimension of every memory), growing by doubling so appends are amortised O(1).
``sync`` hands out the usual ``(memories, dim)`` matrix as a transposed view of it. Dimension-major
makes a query that touches few dimensions (the hashing embedder's queries have ~25 non-zero of
384) read only those rows of the buffer, and BLAS streams the dense product faster in this order
too (bench/latency.py: 100k memories, 15.8 ms row-major -> 6.1 ms dense, 1.2 ms sparse).

A second, row-major copy serves the opposite access: reading a few hundred candidates' whole
vectors (pseudo-relevance feedback). From the dimension-major buffer each candidate costs one
cache miss per dimension (85 candidates: ~155 us at 10k memories); from the copy it is one
contiguous read (~10 us for all). It is float32 like the buffer: a float16 copy would halve its
RAM, but numpy widens float16 slowly (65 us for those candidates), and a bfloat16 copy, quick to
widen, rounded enough to move a LoCoMo answer (recall@10 0.662 -> 0.661).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from mnemosyne.store.tenant_store import ReadTxn, TenantStore

_CACHE_KEY = "vectors"


def vector_index(store: TenantStore, dim: int) -> VectorIndex:
    """The tenant's vector cache, kept on its open store (made on first use)."""
    index = store.cache.get(_CACHE_KEY)
    if index is None:
        index = store.cache.setdefault(_CACHE_KEY, VectorIndex(dim))
    assert isinstance(index, VectorIndex)
    return index


class VectorView(NamedTuple):
    """One consistent state of the cache: row ``i`` of each array is memory ``ids[i]``."""

    ids: np.ndarray
    matrix: np.ndarray  # (memories, dim) float32, a transposed view of the dimension-major buffer
    rows: np.ndarray  # (memories, dim) float32, row-major: for gathering whole vectors


class VectorIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._buffer = np.zeros((dim, 0), dtype=np.float32)
        self._rows = np.zeros((0, dim), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._count = 0
        self.high_water = 0
        self.epoch = -1

    def sync(self, txn: ReadTxn) -> tuple[np.ndarray, np.ndarray]:
        """``sync_view`` for callers that need only (ids, matrix)."""
        view = self.sync_view(txn)
        return view.ids, view.matrix

    def sync_view(self, txn: ReadTxn) -> VectorView:
        """Bring the cache up to (at least) the snapshot of ``txn``; return views of it.

        The views may include rows newer than ``txn``'s snapshot (another recall synced later);
        callers resolve hits inside their own transaction, which drops rows it cannot see.
        """
        high, epoch = txn.index_state()
        with self._lock:
            if epoch != self.epoch:
                if epoch < self.epoch:
                    # Our snapshot is older than the cache's; the cache is already newer: use it.
                    return self._view()
                self._count = 0
                self.high_water = 0
                self.epoch = epoch
            if high > self.high_water:
                rows = txn.embeddings_after(self.high_water, high)
                self._append(rows)
                self.high_water = high
            return self._view()

    def _view(self) -> VectorView:
        return VectorView(self._ids[: self._count], self._buffer[:, : self._count].T, self._rows[: self._count])

    def _append(self, rows: list[tuple[int, str, bytes]]) -> None:
        if not rows:
            return
        needed = self._count + len(rows)
        if needed > self._buffer.shape[1]:
            # Small first: a tenant of a few memories keeps a few KB (its buffer is fully resident:
            # every dimension row is written), and doubling keeps appends amortised O(1).
            capacity = max(needed, 2 * self._buffer.shape[1], 16)
            buffer = np.zeros((self.dim, capacity), dtype=np.float32)
            buffer[:, : self._count] = self._buffer[:, : self._count]
            row_copy = np.zeros((capacity, self.dim), dtype=np.float32)
            row_copy[: self._count] = self._rows[: self._count]
            ids = np.zeros(capacity, dtype=np.int64)
            ids[: self._count] = self._ids[: self._count]
            # Replace, never resize in place: a concurrent reader keeps its old, still-valid view.
            self._buffer, self._rows, self._ids = buffer, row_copy, ids
        vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), self.dim)
        self._buffer[:, self._count : needed] = vectors.T
        self._rows[self._count : needed] = vectors
        self._ids[self._count : needed] = [r[0] for r in rows]
        self._count = needed

    @property
    def nbytes(self) -> int:
        return int(self._buffer.nbytes + self._rows.nbytes + self._ids.nbytes)
