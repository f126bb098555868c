"""The in-memory vector matrix of one tenant: a cache of the ``embeddings`` table.

It is brought up to date inside each recall's own read transaction: rows above its high-water
mark are appended. A forget or a Dedup merge removes rows and advances the file's forget epoch;
the engine then tells the cache which rows went (``drop_vectors``), and the cache zeroes them in
place and takes the new epoch. A recall between a forget's commit and its word to the cache
keeps the cache's rows as they are (``_told_soon``): the forgotten memory's row still scores, and
the recall's own transaction drops the memory (engine/recall/select.py), rather than load every
vector again inside that read transaction, which the forget's truncation of the WAL waits for.
Only an epoch it is not told about within TOLD_WITHIN_SECONDS (a forget it missed, a restore's
forgets again) makes it reload, all of it: at 100k memories a reload is ~350 ms that the next
write or recall would pay; a re-embedding's switch, which changes every vector, makes the next
sync reload at once (``vectors_replaced``). A zeroed row scores 0 against any query, which
no caller counts as a match (recall's ``top_rows`` keeps scores above ``ann.MATCH_FLOOR``, Dedup's
thresholds are positive), so ranking is the same as after a reload or a restart.

Zeroing happens in the arrays a concurrent reader may be using: that reader sees the row's
vector either whole or partly zeroed, which moves only the forgotten memory's own score, and the
reader's transaction drops that memory anyway if its snapshot is newer. Dropped rows are
squeezed out when the buffer is reallocated (it grows) or when they pass a quarter of it.

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

Beside the vectors, row for row, each memory's thread place (a code for its thread id, its
position) and its neighbour rows in thread order: recall's thread neighbours come from these
(``thread_neighbours``) instead of two index seeks per candidate. A conversation's next turn is
linked to its thread's last row as it is appended, a turn arriving out of order at its place
(found by stepping back from the thread's last row); a reload or a reallocation (rows move) marks
the links stale, and the next lookup relinks them all by one sort (~0.1 s at 1M threaded rows,
which every out-of-order turn used to cost the next recall). Dropped rows stay linked and are
stepped over.

And each row's speaker, as a code: the tenant's speakers (every name seen since the cache was
made, a forgotten memory's too) are the codes' names, found in a query by its words
(``named_speakers``: one dictionary look-up per query word), and a candidate's speaker is one
array read (``speakers_of``).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mnemosyne.engine.ann import (
    ANN_SLACK,
    FILTERED_BREADTH,
    VECTOR_ONLY_BREADTH,
    RowScores,
    Source,
    ann_index,
    on_vectors_changed,
)
from mnemosyne.engine.postings import TOLD_WITHIN_SECONDS  # the postings cache's grace (``_told_soon``)
from mnemosyne.engine.terms import words
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

_CACHE_KEY: CacheKey[VectorIndex] = CacheKey("vectors")
# The runs of letters and digits ``terms.words`` takes from a text, before lower-casing.
_WORD_RUN = re.compile(r"\w+", re.UNICODE)
# Dropped rows tolerated before the arrays are rebuilt without them: a fraction of the rows, so
# the rebuild (a copy of both arrays) is amortised over many forgets.
_DEAD_FRACTION = 4
# Rows stepped back over to link a turn that arrives out of order (``_link_inside``); past
# them, every link is remade by one sort of all threaded rows (~0.1 s at 1M rows).
LINK_WALK = 1024


def vector_index(store: TenantStore, dim: int) -> VectorIndex:
    """The tenant's vector cache, kept on its open store (made on first use)."""
    index = store.cache.get(_CACHE_KEY)
    if index is None:
        index = store.cache.setdefault(_CACHE_KEY, VectorIndex(dim))
    return index


def cached_vectors(store: TenantStore) -> VectorIndex | None:
    """The tenant's vector cache if a recall or write made one on this open store, else None."""
    return store.cache.get(_CACHE_KEY)


def drop_vectors(store: TenantStore, memory_ids: Sequence[int], *, from_epoch: int, to_epoch: int) -> None:
    """After a committed forget or merge that moved the forget epoch from ``from_epoch`` to
    ``to_epoch`` by removing ``memory_ids``' embeddings: remove them from the tenant's vector
    cache too, if it has one, instead of letting the new epoch reload it."""
    index = cached_vectors(store)
    if index is not None:
        index.drop(memory_ids, from_epoch=from_epoch, to_epoch=to_epoch)
    on_vectors_changed(store, (), from_epoch=from_epoch, to_epoch=to_epoch)


def replace_vector(store: TenantStore, memory_id: int, vector: bytes, *, from_epoch: int, to_epoch: int) -> None:
    """After a committed update that replaced ``memory_id``'s embedding (moving the forget epoch
    from ``from_epoch`` to ``to_epoch``): write the new vector into the cache's row in place,
    instead of letting the new epoch reload the tenant's vectors."""
    index = cached_vectors(store)
    if index is not None:
        index.replace(memory_id, np.frombuffer(vector, dtype="<f4"), from_epoch=from_epoch, to_epoch=to_epoch)
    on_vectors_changed(store, (memory_id,), from_epoch=from_epoch, to_epoch=to_epoch)


def vectors_replaced(store: TenantStore) -> None:
    """After a committed change of every vector (a re-embedding's switch to another embedder):
    the tenant's vector cache, if it has one, loads them all at its next sync, without waiting to
    be told rows (``VectorIndex._told_soon``)."""
    index = cached_vectors(store)
    if index is not None:
        index.outdated()


def approximate_candidates(
    store: TenantStore,
    index: VectorIndex,
    view: VectorView,
    query_vector: np.ndarray,
    depth: int,
    threshold: int,
    *,
    alone: bool = False,
    share: float = 0.0,
    allowed: np.ndarray | None = None,
) -> tuple[RowScores, np.ndarray] | None:
    """The vector candidates of a recall from the tenant's approximate index (engine/ann.py):
    (exact scores of rows, the best ``depth`` rows), or None below ``threshold`` memories or
    while the index is being made (the caller scans exactly). ``alone``: the vector path is the
    recall's only source of candidates (vector-only), so the graph is searched deeper; else
    ``share`` of ``depth`` neighbours are asked (0: ``depth + ANN_SLACK``). ``allowed``: a
    filtered recall's mask of rows; the graph is asked for as many more neighbours as the filter
    keeps fewer rows (up to ``FILTERED_BREADTH``), so about as many pass it, and the recall scans
    exactly when fewer than half of those it would have asked for pass."""
    if len(view.ids) < threshold:
        return None
    if alone:
        breadth = max(depth + ANN_SLACK, VECTOR_ONLY_BREADTH)
    else:
        breadth = math.ceil(depth * share) if share > 0 else depth + ANN_SLACK
    enough = 0
    if allowed is not None:
        kept = int(np.count_nonzero(allowed))
        if not kept:
            return None
        enough = max(1, min(depth, breadth) // 2)
        breadth = min(math.ceil(breadth * len(view.ids) / kept), max(breadth, FILTERED_BREADTH))
    return ann_index(store, index.dim).candidates(
        view.ids,
        view.matrix,
        view.rows,
        epoch=index.epoch,
        high_water=index.high_water,
        query_vector=query_vector,
        depth=depth,
        breadth=breadth,
        source=index.snapshot,
        allowed=allowed,
        enough=enough,
    )


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
        self._alive = np.zeros(0, dtype=bool)
        self._count = 0
        self._dead = 0  # zeroed rows still in the arrays
        self.reloads = 0  # full loads from the file (the first one included)
        self.reallocations = 0  # new arrays (growth, or dropped rows squeezed out)
        self.relinks = 0  # thread links remade by a sort of all rows
        self.high_water = 0
        self.epoch = -1
        self._behind_since: float | None = None  # when a sync first found the file's epoch ahead
        # Thread places, row for row (``thread_neighbours``): a thread's code (-1: none), the
        # position in it, and each row's neighbour rows in thread order (-1: none; they may be
        # dropped rows, skipped when read). ``_tails`` is None while the links are stale.
        self._threads = np.zeros(0, dtype=np.int64)
        self._positions = np.zeros(0, dtype=np.int64)
        self._before = np.zeros(0, dtype=np.int64)
        self._after = np.zeros(0, dtype=np.int64)
        self._thread_codes: dict[str, int] = {}
        self._tails: dict[int, int] | None = None
        # Speakers, row for row (``speakers_of``): a code (-1: none). A speaker's code is that of
        # its words (``terms.words``: lower-cased, so "caroline" and "Caroline" are one speaker);
        # ``_speaker_starts`` maps each speaker's first word to its words and code.
        self._speakers = np.zeros(0, dtype=np.int64)
        self._speaker_codes: dict[tuple[str, ...], int] = {}
        self._speaker_starts: dict[str, list[tuple[tuple[str, ...], int]]] = {}
        self._speaker_words: frozenset[str] = frozenset()  # every word of those names

    def sync(self, txn: ReadTxn) -> tuple[np.ndarray, np.ndarray]:
        """``sync_view`` for callers that need only (ids, matrix)."""
        view = self.sync_view(txn)
        return view.ids, view.matrix

    def sync_view(self, txn: ReadTxn, state: tuple[int, int] | None = None) -> VectorView:
        """Bring the cache up to (at least) the snapshot of ``txn``; return views of it.
        ``state`` is ``txn.index_state()`` when the caller has read it already.

        The views may include rows newer than ``txn``'s snapshot (another recall synced later);
        callers resolve hits inside their own transaction, which drops rows it cannot see.
        """
        high, epoch = state or txn.index_state()
        with self._lock:
            if epoch != self.epoch:
                if epoch < self.epoch:
                    # Our snapshot is older than the cache's; the cache is already newer: use it.
                    return self._view()
                if not self._told_soon():  # else its rows as they are, and the new ones appended
                    self._count = 0
                    self._dead = 0
                    self.high_water = 0
                    self.epoch, self._behind_since = epoch, None
                    self.reloads += 1
            if high > self.high_water:
                rows = txn.embeddings_after(self.high_water, high)
                self._append(rows)
                self._append_threads(txn.thread_places_after(self.high_water, high))
                self.high_water = high
            return self._view()

    def _told_soon(self) -> bool:
        """Whether the cache, behind the file's forget epoch, is to be told the change that moved
        it: a forget, a merge or an update tells it right after its commit (``drop``,
        ``replace``). A recall in between scores the rows as they are (a forgotten memory's row,
        an updated one's old vector) and its transaction resolves the memories as its snapshot has
        them. Still behind after TOLD_WITHIN_SECONDS, it was not told: it reloads."""
        if self.epoch < 0 or not self._count:
            return False  # nothing held (or ``outdated``): loading is all there is to do
        now = time.monotonic()
        if self._behind_since is None:
            self._behind_since = now
        return now - self._behind_since < TOLD_WITHIN_SECONDS

    def outdated(self) -> None:
        """Every vector changed (``vectors_replaced``): the next sync loads them all."""
        with self._lock:
            self.epoch, self._behind_since = -1, None

    def snapshot(self) -> Source:
        """The cache's current state, for a build of the approximate index (engine/ann.py): views
        of its arrays (a later append or reallocation leaves them as they are; a later drop zeroes
        rows in them, which the build skips, and moves the epoch, which makes it rebuild)."""
        with self._lock:
            view = self._view()
            return Source(view.ids, view.rows, self.high_water, self.epoch)

    def drop(self, memory_ids: Sequence[int], *, from_epoch: int, to_epoch: int) -> bool:
        """Zero the rows of ``memory_ids`` and take ``to_epoch``, if the cache is at
        ``from_epoch`` (it holds exactly what the file held before that change); otherwise leave
        it, and the next sync reloads if its epoch is behind. True when applied."""
        with self._lock:
            if self.epoch != from_epoch:
                return False
            ids = self._ids[: self._count]
            wanted = np.asarray(sorted(memory_ids), dtype=np.int64)
            rows = np.searchsorted(ids, wanted)
            present = rows < self._count
            rows = rows[present][ids[rows[present]] == wanted[present]]
            rows = rows[self._alive[rows]]
            self._buffer[:, rows] = 0.0
            self._rows[rows] = 0.0
            self._alive[rows] = False
            self._dead += len(rows)
            self.epoch, self._behind_since = to_epoch, None
            if self._dead * _DEAD_FRACTION > self._count:
                self._reallocate(self._count - self._dead)
            return True

    def replace(self, memory_id: int, vector: np.ndarray, *, from_epoch: int, to_epoch: int) -> bool:
        """Overwrite the row of ``memory_id`` with ``vector`` and take ``to_epoch``, if the cache
        is at ``from_epoch`` and holds that row (else the next sync reloads). A concurrent reader
        sees the row old, new or mixed: only that memory's own score moves, and its transaction
        resolves the memory as its snapshot has it. True when applied."""
        with self._lock:
            if self.epoch != from_epoch or vector.shape != (self.dim,):
                return False
            ids = self._ids[: self._count]
            row = int(np.searchsorted(ids, memory_id))
            if row < self._count and ids[row] == memory_id and self._alive[row]:
                self._buffer[:, row] = vector
                self._rows[row] = vector
            elif memory_id <= self.high_water:
                return False  # a row it should hold and does not: reload
            self.epoch, self._behind_since = to_epoch, None
            return True

    def _reallocate(self, needed: int) -> None:
        """New arrays of room for ``needed`` rows, holding the live rows of the old ones (the
        dropped ones squeezed out). Replaces, never resizes in place: a concurrent reader keeps
        its old, still-valid view."""
        # Small first: a tenant of a few memories keeps a few KB (its buffer is fully resident:
        # every dimension row is written), and doubling keeps appends amortised O(1).
        capacity = self._buffer.shape[1]
        if needed > capacity:
            capacity = max(needed, 2 * capacity, 16)
        keep = np.flatnonzero(self._alive[: self._count])
        live = len(keep)
        buffer = np.zeros((self.dim, capacity), dtype=np.float32)
        row_copy = np.zeros((capacity, self.dim), dtype=np.float32)
        ids = np.zeros(capacity, dtype=np.int64)
        alive = np.zeros(capacity, dtype=bool)
        if self._dead:
            buffer[:, :live] = self._buffer[:, keep]
            row_copy[:live] = self._rows[keep]
            ids[:live] = self._ids[keep]
        else:
            buffer[:, :live] = self._buffer[:, :live]
            row_copy[:live] = self._rows[:live]
            ids[:live] = self._ids[:live]
        alive[:live] = True
        self.reallocations += 1
        self._reallocate_threads(keep, capacity)
        self._buffer, self._rows, self._ids, self._alive = buffer, row_copy, ids, alive
        self._count = live
        self._dead = 0

    def _view(self) -> VectorView:
        return VectorView(self._ids[: self._count], self._buffer[:, : self._count].T, self._rows[: self._count])

    def _append(self, rows: list[tuple[int, str, bytes]]) -> None:
        if not rows:
            return
        if self._count + len(rows) > self._buffer.shape[1]:
            self._reallocate(self._count - self._dead + len(rows))
        needed = self._count + len(rows)
        vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), self.dim)
        self._buffer[:, self._count : needed] = vectors.T
        self._rows[self._count : needed] = vectors
        self._ids[self._count : needed] = [r[0] for r in rows]
        self._alive[self._count : needed] = True
        self._count = needed

    def thread_neighbours(self, memory_ids: np.ndarray) -> np.ndarray:
        """(memory id, neighbour id) rows for each of ``memory_ids`` the cache holds with a
        thread: the live rows just before and just after it in thread order (position, then id),
        as ``TenantStore.thread_neighbours`` finds them in the file, from arrays instead of two
        index seeks per memory (20 memories: ~50 -> ~13 us). ``memory_ids`` are distinct.

        The cache may be newer than the caller's snapshot, as for its vectors: a neighbour the
        snapshot cannot see yet only lends its score (the caller resolves hits in its own
        transaction), and a row dropped by a forget committed after the snapshot began is skipped.
        """
        with self._lock:
            if self._tails is None:
                self._link_threads()
            if not self._count or not self._thread_codes:
                return np.zeros((0, 2), dtype=np.int64)
            ids = self._ids[: self._count]
            wanted = memory_ids.astype(np.int64, copy=False)
            rows = np.minimum(np.searchsorted(ids, wanted), self._count - 1)
            # By id, each memory's neighbour before and then after.
            rows = np.sort(rows[(ids[rows] == wanted) & self._alive[rows] & (self._threads[rows] >= 0)])
            near = np.stack([self._before[rows], self._after[rows]], axis=1).ravel()
            while self._dead:  # past dropped rows: even places look back, odd ones ahead
                dead = np.flatnonzero(near >= 0)
                dead = dead[~self._alive[near[dead]]]
                if not len(dead):
                    break
                near[dead] = np.where(dead % 2 == 0, self._before[near[dead]], self._after[near[dead]])
            found = near >= 0
            return np.stack([np.repeat(ids[rows], 2)[found], ids[near[found]]], axis=1)

    def _reallocate_threads(self, keep: np.ndarray, capacity: int) -> None:
        """The thread arrays of ``_reallocate``: the kept rows' places; links stale (rows moved)."""
        threads = np.full(capacity, -1, dtype=np.int64)
        positions = np.zeros(capacity, dtype=np.int64)
        speakers = np.full(capacity, -1, dtype=np.int64)
        threads[: len(keep)] = self._threads[keep]
        positions[: len(keep)] = self._positions[keep]
        speakers[: len(keep)] = self._speakers[keep]
        self._threads, self._positions, self._speakers = threads, positions, speakers
        self._before = np.full(capacity, -1, dtype=np.int64)
        self._after = np.full(capacity, -1, dtype=np.int64)
        self._tails = None

    def _append_threads(self, places: list[tuple[int, str | None, int, str | None]]) -> None:
        """The thread places and speakers of the rows ``_append`` just added (the same rows, in
        order); each linked after its thread's last row when it comes after it in thread order (a
        conversation's next turn), else the links are stale."""
        start = self._count - len(places)
        if start == 0:
            self._tails = None  # a reload
        codes = self._thread_codes
        for row, (memory_id, thread, position, speaker) in enumerate(places, start):
            self._speakers[row] = self._speaker_code(speaker) if speaker else -1
            if thread is None:
                self._threads[row] = -1
                continue
            code = codes.setdefault(thread, len(codes))
            self._threads[row] = code
            self._positions[row] = position
            if self._tails is None:
                continue
            tail = self._tails.get(code)
            if tail is not None:
                if (position, memory_id) < (int(self._positions[tail]), int(self._ids[tail])):
                    if not self._link_inside(row, tail, position, memory_id):
                        self._tails = None
                    continue
                self._after[tail] = row
                self._before[row] = tail
            self._tails[code] = row

    def _link_inside(self, row: int, tail: int, position: int, memory_id: int) -> bool:
        """Link ``row``, a turn earlier in its thread than the thread's last row ``tail``, at its
        place: found by stepping back from the tail (dropped rows too: they stay linked in place).
        False past LINK_WALK steps (the caller marks the links stale: one sort relinks them all)."""
        before, after, positions, ids = self._before, self._after, self._positions, self._ids
        at = tail
        for _ in range(LINK_WALK):
            previous = int(before[at])
            if previous < 0 or (int(positions[previous]), int(ids[previous])) < (position, memory_id):
                before[row], after[row] = previous, at
                before[at] = row
                if previous >= 0:
                    after[previous] = row
                return True
            at = previous
        return False

    def _speaker_code(self, speaker: str) -> int:
        """The code of a speaker's name (a new one for a name not seen before; -1 for a name
        without letters or digits, which no query can name)."""
        spoken = tuple(words(speaker))
        if not spoken:
            return -1
        code = self._speaker_codes.get(spoken)
        if code is None:
            code = self._speaker_codes[spoken] = len(self._speaker_codes)
            self._speaker_starts.setdefault(spoken[0], []).append((spoken, code))
            self._speaker_words = self._speaker_words.union(spoken)
        return code

    def named_speakers(self, query: str) -> np.ndarray:
        """The codes of the tenant's speakers that ``query`` names: each speaker's words found in
        it in a row, whole words, case aside ("what did caroline's sister say" names "Caroline").
        Without a speaker in the tenant, nothing is looked at."""
        named = {code for _, _, code in self._named(words(query))}
        return np.array(sorted(named), dtype=np.int64)

    @property
    def synced(self) -> bool:
        """Whether the cache was ever brought up to a transaction of the tenant file."""
        return self.epoch >= 0

    @property
    def speaker_count(self) -> int:
        """How many speakers' names the cache knows: it only grows (a name stays known, a
        forgotten memory's too), so an equal count is the same names."""
        return len(self._speaker_codes)

    def speaker_words(self) -> frozenset[str]:
        """Every word of the tenant's speakers' names (``terms.words``: lower-cased)."""
        return self._speaker_words

    def without_named_speakers(self, query: str) -> str | None:
        """``query`` with the words of each speaker it names (as ``named_speakers`` finds them)
        cut out, the rest as written ("What did Caroline's sister say?" -> "What did 's sister
        say?"), or None when it names none or nothing else is left."""
        found = list(_WORD_RUN.finditer(query))
        # The runs lower-cased: ``terms.words`` of the query, unless lower-casing splits a run
        # (a rare letter, such as U+0130): then no name is cut.
        named = self._named([run.group().lower() for run in found])
        if not named:
            return None
        cut = np.zeros(len(found), dtype=bool)
        for at, length, _ in named:
            cut[at : at + length] = True
        kept, start = [], 0
        for run, drop in zip(found, cut.tolist()):
            if drop:
                kept.append(query[start : run.start()])
                start = run.end()
        kept.append(query[start:])
        rest = " ".join("".join(kept).split())
        return rest if _WORD_RUN.search(rest) else None

    def _named(self, said: Sequence[str]) -> list[tuple[int, int, int]]:
        """(place, number of words, code) of each run of ``said`` (a query's words) that is the
        whole name of one of the tenant's speakers."""
        if not self._speaker_starts:
            return []
        named = []
        with self._lock:
            for at, word in enumerate(said):
                for spoken, code in self._speaker_starts.get(word, ()):
                    if tuple(said[at : at + len(spoken)]) == spoken:
                        named.append((at, len(spoken), code))
        return named

    def threads_of(self, memory_ids: np.ndarray) -> np.ndarray:
        """Each memory's thread code (-1: none, or not in the cache)."""
        return self._codes_of(memory_ids, "_threads")

    def speakers_of(self, memory_ids: np.ndarray) -> np.ndarray:
        """Each memory's speaker code (-1: none, or not in the cache)."""
        return self._codes_of(memory_ids, "_speakers")

    def _codes_of(self, memory_ids: np.ndarray, column: str) -> np.ndarray:
        """Each memory's code in the per-row array ``column`` (-1: not in the cache)."""
        with self._lock:
            ids = self._ids[: self._count]
            if not len(ids):
                return np.full(len(memory_ids), -1, dtype=np.int64)
            rows = np.minimum(np.searchsorted(ids, memory_ids), self._count - 1)
            found: np.ndarray = np.where(ids[rows] == memory_ids, getattr(self, column)[rows], -1)
            return found

    def _link_threads(self) -> None:
        """Each live threaded row's neighbour rows in thread order, all at once (a sort)."""
        self.relinks += 1
        n = self._count
        live = np.flatnonzero(self._alive[:n] & (self._threads[:n] >= 0))
        order = live[np.lexsort((self._ids[live], self._positions[live], self._threads[live]))]
        same = self._threads[order[1:]] == self._threads[order[:-1]]
        self._before[:] = -1
        self._after[:] = -1
        self._after[order[:-1][same]] = order[1:][same]
        self._before[order[1:][same]] = order[:-1][same]
        ends = order[np.append(~same, True)] if len(order) else order
        self._tails = dict(zip(self._threads[ends].tolist(), ends.tolist()))

    @property
    def nbytes(self) -> int:
        return int(
            self._buffer.nbytes
            + self._rows.nbytes
            + self._ids.nbytes
            + self._alive.nbytes
            + 5 * self._threads.nbytes  # thread codes, positions, the two links, speaker codes
        )
