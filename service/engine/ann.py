"""The approximate nearest-neighbour index of a large tenant: a usearch HNSW graph, a cache.

Below ``threshold`` memories (``--ann-threshold``) a recall scans every vector exactly
(engine/recall/candidates.py ``vector_scores``). Above it, the vector candidates come from this index: the graph
gives the nearest memories a recall asks for (``depth + ANN_SLACK``; fewer for a hybrid recall
whose embedder's settings say so, more for a vector-only one), the rows the graph does not hold
yet (memories added since it was built: ids above its high-water mark, and memories whose vector
an update replaced since) are scanned exactly, and every candidate is re-scored exactly from the vector
cache (engine/index.py). So the graph only proposes: a score is always the exact cosine, a
forgotten memory (zeroed or gone in the cache, and dropped by the recall's own transaction) never
returns, and a memory committed before the recall began is in the graph or in the scanned rest.

Building: in the background, on first need. The first recall that finds a tenant above the
threshold without a usable graph starts one build thread (at most one per process at a time:
``_BUILDS``) and scans exactly, as every recall does until the graph is published. The build adds
the rows in id order on one thread (usearch's single-threaded add is deterministic: the same rows
give the same graph, byte for byte, whether added at once or in steps), so the same query gives
the same hits before and after a restart and after a rebuild. Once more than
``CATCH_UP_ROWS`` rows wait outside the graph, a copy of it takes them in the background and
replaces it (a published graph is never changed: searches need no lock).

On disk: ``tenants/<tenant>.ann`` (``TenantStore.ann_path``), a header (the high-water mark
and forget epoch of the tenant file it reflects, its dimension, a CRC of the graph) then the graph
as usearch serialises it. It is loaded on first need and rejected -- deleted and rebuilt from the
tenant file -- when it is corrupt (CRC, usearch's own checks), of another dimension, of another
epoch (a forget, merge or update it does not reflect), or ahead of the file. A loaded graph
behind the file is caught up like a live one. The tenant file stays the truth: the index file is
left out of backups and exports (they copy the database), removed with the tenant (EraseTenant,
an import over it) and by a move's tombstone.

Forget, merge, update (``on_vectors_changed``): the index file is deleted at once, so a
forgotten memory's vector does not stay on disk in it; the graph in memory keeps serving (its
candidates are re-scored from the cache, where the forgotten row is zeroed, and the updated rows
are scanned exactly), and a rebuild in the background makes a graph without them, then writes
it. A filtered recall (scopes, metadata) scans exactly.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from usearch.index import Index

from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import TenantStore

log = logging.getLogger("mnemosyne.ann")

# Measured with the hashing embedder, hybrid recall in process (1,000 queries; docs/performance.md
# #large-tenants): with the graph searched as deep as a hybrid recall needs, it matches the exact
# scan at 25k memories (1.53 against 1.55 ms p50) and beats it from there (50k: 1.71 against 2.35;
# 100k: 1.70 against 2.71), the fused top 10 0.996-0.998 of the exact one's. A dense model's scan
# costs ~5x more per row (every dimension is read): the graph pays sooner still.
# The least cosine that is a match. Below it is a filler: no feature shared, or only float32
# rounding of shared features that cancel (a hashed feature met with opposite signs), which lands
# just above or below 0 by the summation order of the machine's BLAS: a memory would be a hit on
# one machine and not on another.
MATCH_FLOOR = 1e-6
DEFAULT_THRESHOLD = 50_000
# The graph: usearch's int8 scalars (a quarter of float32's memory; candidates are re-scored
# exactly anyway), 16 links per node, 64 candidates kept while adding (128 took 1.7x as long to
# build, 39 against 23 s at 100k, for the same fused top 10: 0.9963 against 0.9962 of the exact
# one's; a vector-only top 10 0.72 against 0.68), at least EXPANSION_SEARCH while searching (more
# when a search asks for more: usearch keeps max(ef, count)). 32: a hashing tenant's hybrid recall
# asks for 32 neighbours (recall/settings.py ``graph_share``); every other search asks for more.
DTYPE = "i8"
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 32
# How many neighbours a vector-only recall asks of the graph: alone it is the only source of
# candidates, so it searches deeper (with the hashing embedder at 100k memories its top 10 is
# 0.68 of the exact one's at 256, 0.49 at 66), while a hybrid recall's full-text leg finds the
# memories whose words the query holds, and 66 serve it (the fused top 10 0.996 against 0.9985;
# 32 with the hashing embedder at 1M: the same fused top 10, recall/settings.py ``graph_share``).
VECTOR_ONLY_BREADTH = 256
# The most neighbours a filtered recall asks of the graph (it asks as many more as its filter
# keeps fewer rows: engine/index.py ``approximate_candidates``).
FILTERED_BREADTH = 1024
# Neighbours asked of the graph beyond the recall's depth: room for forgotten rows (zeroed in
# the cache until the rebuild) without losing live candidates.
ANN_SLACK = 16
# Rows outside the graph (scanned exactly) before a background copy of it takes them in.
CATCH_UP_ROWS = 4096
# Rows added to the graph since the file was written before it is written again.
RESAVE_FRACTION = 4
# Rows per usearch add call of a build: between two, a closed tenant stops the build.
BUILD_CHUNK = 4096

_CACHE_KEY: CacheKey[AnnIndex] = CacheKey("ann")
_MAGIC = b"MNEMOSYNE-ANN\n"
_HEADER_BYTES = 512
_BUILDS = threading.Semaphore(1)
# The indexes that started a build thread, for ``wait_for_builds``.
_BUILDING: weakref.WeakSet[AnnIndex] = weakref.WeakSet()


class AnnFigures:
    """What this process's approximate indexes did, for the operator's metrics (read on every
    scrape: cheap, no file opened): graphs made by kind (``build`` from every row, ``catch_up`` of a
    copy taking in new rows, ``load`` of an index file), the seconds they took, and the rows the
    graphs of the open tenants hold now; and recalls' vector legs by where their candidates came
    from (``SOURCES``: the graph, every row scored, only the rows a filter keeps)."""

    KINDS = ("build", "catch_up", "load")
    SOURCES = ("graph", "every_row", "filtered_rows")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.KINDS, 0)
        self._seconds = dict.fromkeys(self.KINDS, 0.0)
        self._sources = dict.fromkeys(self.SOURCES, 0)
        self._indexes: weakref.WeakSet[AnnIndex] = weakref.WeakSet()

    def searched(self, source: str) -> None:
        with self._lock:
            self._sources[source] += 1

    def sources(self) -> dict[str, int]:
        """source -> recalls' vector legs whose candidates came from it."""
        with self._lock:
            return dict(self._sources)

    def made(self, kind: str, seconds: float) -> None:
        with self._lock:
            self._counts[kind] += 1
            self._seconds[kind] += seconds

    def counts(self) -> dict[str, tuple[int, float]]:
        """kind -> (graphs made, seconds spent making them)."""
        with self._lock:
            return {kind: (self._counts[kind], self._seconds[kind]) for kind in self.KINDS}

    def track(self, index: AnnIndex) -> None:
        with self._lock:
            self._indexes.add(index)

    def rows(self) -> int:
        """Rows in the published graphs of the tenants open now."""
        with self._lock:
            indexes = list(self._indexes)
        return sum(len(graph.index) for i in indexes if not i.closed and (graph := i.graph) is not None)


FIGURES = AnnFigures()


class RowScores:
    """The exact cosine of the rows asked for (``scores[rows]``), from the cache's row-major
    vectors: a recall with the graph scores its candidates only, never every row. A filtered
    recall's rows outside ``allowed`` (a mask of every row) score -inf, as in the full product."""

    def __init__(self, vectors: np.ndarray, query_vector: np.ndarray, allowed: np.ndarray | None = None) -> None:
        self._vectors = vectors
        self._query = query_vector
        self._allowed = allowed

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        scores: np.ndarray = self._vectors[rows] @ self._query
        if self._allowed is not None:
            scores = np.where(self._allowed[rows], scores, np.float32(-np.inf))
        return scores

    def __len__(self) -> int:
        return len(self._vectors)


@dataclass(frozen=True)
class Graph:
    """One published graph: every live row with id <= ``high_water`` at forget epoch
    ``epoch``, except ``changed`` (ids whose vectors were replaced since: scanned exactly)."""

    index: Index
    high_water: int
    epoch: int
    changed: frozenset[int] = frozenset()
    rebuild: bool = False  # a forget, merge or update since it was built: a new one is due
    saved_rows: int = 0  # rows in the index file written last (0: none written for this graph)


@dataclass(frozen=True)
class Source:
    """What a build reads: a consistent state of the vector cache."""

    ids: np.ndarray
    rows: np.ndarray  # row-major float32 vectors of ``ids``
    high_water: int
    epoch: int


class AnnIndex:
    """The tenant's graph, its index file, and its background builds."""

    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim
        self.graph: Graph | None = None
        self._file_lock = threading.Lock()  # a write of the file against its deletion
        self._state_lock = threading.Lock()
        self._closed = False
        self._told_epoch = -1  # the newest epoch a change named: no file of an older one is written
        self._worker: threading.Thread | None = None
        self._latest: Callable[[], Source] | None = None
        self._loaded_file = False

    # -- recall ---------------------------------------------------------------------------------

    def candidates(
        self,
        ids: np.ndarray,
        matrix: np.ndarray,
        vectors: np.ndarray,
        *,
        epoch: int,
        high_water: int,
        query_vector: np.ndarray,
        depth: int,
        breadth: int,
        source: Callable[[], Source],
        allowed: np.ndarray | None = None,
        enough: int = 0,
    ) -> tuple[RowScores, np.ndarray] | None:
        """(exact scores, the best ``depth`` candidate rows scoring above 0, best first, ties by
        lower row), or None when the recall must scan exactly: no graph of the cache's epoch is
        published yet (then one is being made), or, for a filtered recall (``allowed``: a mask of
        the rows it may return), fewer than ``enough`` candidates pass the filter. The graph is
        asked for ``breadth`` neighbours."""
        graph = self.graph
        if graph is None or graph.epoch != epoch or graph.rebuild or high_water - graph.high_water > CATCH_UP_ROWS:
            self._start(source)
            if graph is None or graph.epoch != epoch:
                return None
        scores = RowScores(vectors, query_vector, allowed)
        found = graph.index.search(query_vector, breadth).keys.astype(np.int64)
        rows = present_rows(ids, found)
        # The rows the graph lacks: ids above its high-water mark, a contiguous tail (ids ascend).
        tail = int(np.searchsorted(ids, graph.high_water, side="right"))
        extra = [rows]
        if tail < len(ids):
            if allowed is None:
                extra.append(tail + _top_tail(matrix[tail:], query_vector, depth))
            else:
                tail_rows = tail + np.flatnonzero(allowed[tail:])
                extra.append(tail_rows[_top_tail(matrix[tail_rows], query_vector, depth)])
        if graph.changed:
            extra.append(present_rows(ids, np.fromiter(graph.changed, dtype=np.int64)))
        candidates = np.unique(np.concatenate(extra)) if len(extra) > 1 else np.sort(rows)
        if allowed is not None:
            candidates = candidates[allowed[candidates]]
            if len(candidates) < enough:
                return None
        exact = scores[candidates]
        order = np.argsort(-exact, kind="stable")[:depth]
        best = candidates[order]
        return scores, best[exact[order] > MATCH_FLOOR]

    # -- changes ---------------------------------------------------------------------------------

    def vectors_changed(self, replaced: Sequence[int], *, from_epoch: int, to_epoch: int) -> None:
        """A forget, merge or update moved the epoch: the file goes now; the graph serves on (the
        replaced ids scanned exactly) until the rebuild that follows replaces it."""
        with self._file_lock:
            self.path.unlink(missing_ok=True)
            self._told_epoch = max(self._told_epoch, to_epoch)
        with self._state_lock:
            graph = self.graph
            if graph is not None and graph.epoch == from_epoch:
                changed = graph.changed | set(replaced)
                self.graph = replace(graph, epoch=to_epoch, changed=changed, rebuild=True, saved_rows=0)
            latest = self._latest
        if latest is not None:
            self._start(latest)

    def delete_file(self) -> None:
        with self._file_lock:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """The tenant closed (evicted, erased, moved): no file is written after this returns,
        and a running build stops at its next chunk."""
        with self._file_lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    # -- building --------------------------------------------------------------------------------

    def _start(self, source: Callable[[], Source]) -> None:
        with self._state_lock:
            self._latest = source
            if self._closed or (self._worker is not None and self._worker.is_alive()):
                return
            self._worker = threading.Thread(target=self._work, name=f"ann-{self.path.stem}", daemon=True)
            _BUILDING.add(self)
            self._worker.start()

    def _work(self) -> None:
        with _BUILDS:
            try:
                while not self._closed and self._step():
                    pass
            except Exception:
                log.exception("approximate index of %s: build failed; recalls scan exactly", self.path.stem)

    def _step(self) -> bool:
        """One build, load or catch-up toward the latest source; True when another may be due."""
        get = self._latest
        if get is None:
            return False
        want = get()
        graph = self.graph
        if graph is None and not self._loaded_file:
            self._loaded_file = True
            started = time.monotonic()
            graph = self._load(want)
            if graph is not None:
                FIGURES.made("load", time.monotonic() - started)
                log.info("approximate index of %s: loaded, %d rows", self.path.stem, len(graph.index))
                self._publish(graph)
                return True
        if graph is not None and want.epoch < graph.epoch:
            return False  # the cache is behind the graph: the next recall's sync starts this again
        started = time.monotonic()
        if graph is None or graph.epoch != want.epoch or graph.rebuild:
            kind, made, built = "build", "built", self._build(None, want)
        elif want.high_water - graph.high_water > CATCH_UP_ROWS:
            kind, made, built = "catch_up", "caught up", self._build(graph, want)
        else:
            return False
        if built is None:
            return False
        seconds = time.monotonic() - started
        FIGURES.made(kind, seconds)
        log.info("approximate index of %s: %s, %d rows in %.1f s", self.path.stem, made, len(built.index), seconds)
        self._publish(built)
        if built.saved_rows == 0 or len(built.index) > built.saved_rows * (1 + 1 / RESAVE_FRACTION):
            self._save(built)
        return True

    def _publish(self, graph: Graph) -> None:
        with self._state_lock:
            current = self.graph
            # A change that came while building: the graph is of an older epoch, serve it only
            # if nothing newer is published (the next step rebuilds).
            if current is None or current.epoch <= graph.epoch:
                self.graph = graph

    def _build(self, base: Graph | None, source: Source) -> Graph | None:
        """A graph of ``source``: ``base``'s copy plus the rows above its high-water mark, or a
        new one of every row. Live rows only (a zeroed row is a forgotten one), in id order, one
        thread. None when the tenant closed meanwhile."""
        start = 0 if base is None else int(np.searchsorted(source.ids, base.high_water, side="right"))
        if base is None:
            index = Index(
                ndim=self.dim,
                metric="ip",
                dtype=DTYPE,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
        else:
            index = base.index.copy()
        for at in range(start, len(source.ids), BUILD_CHUNK):
            if self._closed:
                return None
            rows = source.rows[at : at + BUILD_CHUNK]
            live = np.flatnonzero(rows.any(axis=1))
            if len(live):
                index.add(source.ids[at : at + BUILD_CHUNK][live].astype(np.uint64), rows[live], threads=1)
        saved = 0 if base is None else base.saved_rows
        return Graph(index, source.high_water, source.epoch, saved_rows=saved)

    # -- the file --------------------------------------------------------------------------------

    def _save(self, graph: Graph) -> None:
        payload = graph.index.save()
        assert payload is not None
        header = json.dumps(
            {
                "dim": self.dim,
                "high_water": graph.high_water,
                "epoch": graph.epoch,
                "rows": len(graph.index),
                "crc32": zlib.crc32(payload),
                "bytes": len(payload),
            }
        ).encode()
        temporary = self.path.with_name(f".new-{self.path.stem}.{secrets.token_hex(4)}.ann")
        try:
            with open(temporary, "wb") as out:
                out.write(_MAGIC + header.ljust(_HEADER_BYTES - len(_MAGIC)))
                out.write(payload)
                out.flush()
                os.fsync(out.fileno())
            with self._file_lock:
                # Not after a close (the tenant may be erased next), nor for a graph that a
                # change made stale since (its file was deleted for a reason).
                current = self.graph
                if self._closed or current is None or current.epoch != graph.epoch or current.rebuild:
                    return
                if graph.epoch < self._told_epoch:
                    return
                os.replace(temporary, self.path)
                with self._state_lock:
                    if self.graph is not None and self.graph.index is graph.index:
                        self.graph = replace(self.graph, saved_rows=len(graph.index))
        finally:
            temporary.unlink(missing_ok=True)

    def _load(self, want: Source) -> Graph | None:
        """The graph in the index file, if it reflects the tenant file's state (its epoch, not
        ahead of it); else the file is deleted (None: build)."""
        state = read_index_file(self.path, self.dim)
        if state is None:
            if self.path.exists():
                log.warning("approximate index of %s: unreadable; rebuilding it", self.path.stem)
                self.delete_file()
            return None
        header, index = state
        if header["epoch"] != want.epoch or header["high_water"] > want.high_water:
            log.info("approximate index of %s: stale (epoch %s); rebuilding it", self.path.stem, header["epoch"])
            self.delete_file()
            return None
        return Graph(index, int(header["high_water"]), int(header["epoch"]), saved_rows=len(index))


def read_index_file(path: Path, dim: int) -> tuple[dict[str, int], Index] | None:
    """(header, graph) of an index file, or None if it is missing or not a whole one of ``dim``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.startswith(_MAGIC) or len(data) < _HEADER_BYTES:
        return None
    try:
        header = json.loads(data[len(_MAGIC) : _HEADER_BYTES])
        payload = memoryview(data)[_HEADER_BYTES:]
        if header["dim"] != dim or header["bytes"] != len(payload) or header["crc32"] != zlib.crc32(payload):
            return None
        index = Index.restore(payload)
    except (ValueError, KeyError, TypeError, RuntimeError):
        return None
    if index is None or index.ndim != dim or len(index) != header["rows"]:
        return None
    # Not kept in the file: a restored graph would search with usearch's 64.
    index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]  # usearch defines a setter; mypy misreads it
    return header, index


def wait_for_builds(timeout: float) -> bool:
    """Wait until the build threads of closed indexes have stopped (each at its next chunk);
    False if one still runs after ``timeout`` seconds. The engine calls it once its tenants are
    closed: a daemon thread that the interpreter's exit finds inside usearch's C++ aborts the
    process ("terminate called without an active exception", exit status 134)."""
    deadline = time.monotonic() + timeout
    workers = [index._worker for index in list(_BUILDING) if index.closed and index._worker is not None]
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    return not any(worker.is_alive() for worker in workers)


def ann_index(store: TenantStore, dim: int) -> AnnIndex:
    """The tenant's approximate index, kept on its open store (made on first use; it stops
    writing its file when the store closes)."""
    index = store.cache.get(_CACHE_KEY)
    if index is None:
        made = AnnIndex(store.ann_path, dim)
        index = store.cache.setdefault(_CACHE_KEY, made)
        if index is made:
            store.on_close.append(made.close)
            FIGURES.track(made)
    return index


def on_vectors_changed(store: TenantStore, replaced: Sequence[int], *, from_epoch: int, to_epoch: int) -> None:
    """After a committed forget, merge or update: the tenant's index file is deleted (whether or
    not a graph is in memory) and the graph in memory told (``AnnIndex.vectors_changed``)."""
    index = store.cache.get(_CACHE_KEY)
    if isinstance(index, AnnIndex):
        index.vectors_changed(replaced, from_epoch=from_epoch, to_epoch=to_epoch)
    else:
        store.ann_path.unlink(missing_ok=True)


def present_rows(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Rows of those ``wanted`` ids that ``ids`` (ascending) holds."""
    if not len(ids) or not len(wanted):
        return np.zeros(0, dtype=np.int64)
    rows = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    present: np.ndarray = rows[ids[rows] == wanted]
    return present


def _top_tail(matrix: np.ndarray, query_vector: np.ndarray, depth: int) -> np.ndarray:
    """Rows of the best ``depth`` of a few rows by exact cosine (sparse query: only its
    dimensions of the dimension-major buffer are read)."""
    nonzero = np.flatnonzero(query_vector)
    scores = query_vector[nonzero] @ matrix.T[nonzero]
    if len(scores) <= depth:
        return np.arange(len(scores))
    return np.argpartition(-scores, depth)[:depth]
