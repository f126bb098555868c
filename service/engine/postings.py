"""The in-memory postings of one tenant's full-text index: a cache of ``memories_fts``, to score
BM25 in numpy instead of inside FTS5.

FTS5's ``bm25()`` scores every row a query's words match before ``ORDER BY ... LIMIT`` keeps the
best (for each row a ``docsize`` read and the terms' positions decoded): at 1M memories the
bench's 2-4 word queries match ~26,000 rows and the statement takes ~20 ms. The same arithmetic
over arrays (each query term's rows and counts, each row's token count) takes a tenth of that
(docs/performance.md#large-tenants). ``search`` computes FTS5's own formula in FTS5's own order
of operations (fts5_aux.c ``fts5Bm25Function``: k1 = 1.2, b = 0.75, IDF clamped to 1e-6, each
phrase's contribution added in query order; ties by the lower memory id), over the tokens of FTS5's
own tokenizer (store/fts_tokens.py): the same hits and scores as ``ReadTxn.fts_search``, which
tests/test_postings.py checks against FTS5 itself through writes, forgets, merges and updates.

A query whose most common term holds most of its postings (a large tenant: at 1M memories one of
the bench's words matches tens of thousands of rows) scores only the rows of its other terms,
that term looked up among them, when a row holding that term alone cannot reach the best: its
score is at most the term's at its largest count and the shortest length, and the search checks
that bound against the best it found (MaxScore's idea; ``_search_pruned``), else scores every row.
The answer is the same either way (search p50 at 1M 1.95 -> 1.01 ms).

A term that is a phrase of several tokens (an identifier such as RF-12345) needs positions, which
the postings do not keep: engine/phrase_postings.py finds its rows from its tokens' and their
texts when few rows hold every token, else ``search`` gives None. A filtered recall (scopes,
metadata) is scored over the whole index, as FTS5's ``bm25()`` is whatever the statement's WHERE
(its IDF and mean length are the index's), and only the allowed memories kept (not pruned: the
bound is checked against the best of every row). It answers only what it can answer exactly, and
the caller asks FTS5 for the rest: a phrase in many rows, and a snapshot other than the cache's
own (``sync`` gives None: a transaction older than the cache, which another recall brought
further, or one the cache cannot reach yet).

Kept in step like the vector cache (engine/index.py), inside each recall's read transaction: the
rows above its high-water mark are tokenized and appended; a forget or a Dedup merge (``drop_texts``)
marks its rows dead, an update (``replace_text``) marks the old row dead and appends the new text
under the same memory id, each taking the file's new forget epoch; an epoch it was not told about
makes it load everything again (after a grace for the word of a change committed a moment ago,
FTS5 answering meanwhile: ``_told_soon``). Dead rows stay in the postings, masked, until they pass a quarter
of the rows. More than INLINE_ROWS missing rows (a large tenant's first recall, a bulk import) are
loaded by a thread of their own, in a read transaction of its own, while FTS5 answers the recalls
(~10 s of one core at 1M memories); the forgets and updates told meanwhile are applied to the
loaded state before it is taken.

Layout: postings in blocks, each sorted by (term, row) as one int64 key ``term << 32 | row`` with
the term's count in that row beside it: a term's postings in a block are one binary search. New
rows make a new small block; a block is merged into the one before it when it reaches a quarter of
its size, so there are O(log n) blocks and each posting is copied O(log n) times. A state handed to
a search is never changed afterwards: appends write past its end, and a drop copies the mask.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from itertools import chain
from typing import NamedTuple

import numpy as np

from mnemosyne.engine.phrase_postings import PHRASE_TOKENS, Phrase, Texts, phrase_posting
from mnemosyne.engine.sorted_ids import in_sorted
from mnemosyne.runtime.background import become_background_thread, keep_up
from mnemosyne.runtime.interpreter import release_free_memory
from mnemosyne.store.fts_stats import TextHits
from mnemosyne.store.fts_tokens import fts5_tokens
from mnemosyne.store.memory_rows import NewMemory, indexed_text
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

log = logging.getLogger(__name__)
_CACHE_KEY: CacheKey[PostingsCache] = CacheKey("postings")
# FTS5's bm25() constants (fts5_aux.c).
FTS5_K1 = 1.2
FTS5_B = 0.75
FTS5_MIN_IDF = 1e-6
# A query's most common term is looked up only in the rows of its other terms when it holds at
# least this many postings and more than they do together, and a row holding it alone cannot
# reach the best (``_search_pruned``); the margin covers the rounding of the bound's arithmetic.
PRUNE_FROM = 2048
PRUNE_MARGIN = 1e-9
# Rows read into one block while loading, and texts tokenized at once within it.
LOAD_CHUNK = 50_000
TOKENIZE_BATCH = 2_000
# Missing rows a recall's sync appends itself (~0.2 s); past them a background load brings the
# tenant in (~10-15 s at 1M rows) while FTS5 answers.
INLINE_ROWS = 20_000
# How long a cache behind the file's forget epoch waits to be told the change (``_told_soon``).
TOLD_WITHIN_SECONDS = 2.0
_LOADS = threading.Semaphore(1)
# A block is merged into the one before it from this fraction of its size.
_MERGE_FRACTION = 4
# Dead rows tolerated before the postings are rewritten without them.
_DEAD_FRACTION = 4
_ROW_BITS = 32


def postings_cache(store: TenantStore) -> PostingsCache:
    """The tenant's postings cache, kept on its open store (made on first use)."""
    cache = store.cache.get(_CACHE_KEY)
    if cache is None:
        cache = store.cache.setdefault(_CACHE_KEY, PostingsCache(store.read, name=store.path.stem))
    return cache


def drop_texts(store: TenantStore, memory_ids: Sequence[int], *, from_epoch: int, to_epoch: int) -> None:
    """After a committed forget or merge that moved the forget epoch from ``from_epoch`` to
    ``to_epoch`` by removing ``memory_ids``' full-text rows: mark them dead in the tenant's
    postings cache too, if it has one, instead of letting the new epoch reload it."""
    cache = store.cache.get(_CACHE_KEY)
    if isinstance(cache, PostingsCache):
        cache.drop(memory_ids, from_epoch=from_epoch, to_epoch=to_epoch)


def replace_text(store: TenantStore, memory_id: int, new: NewMemory, *, from_epoch: int, to_epoch: int) -> None:
    """After a committed update that replaced ``memory_id``'s content with ``new`` (moving the
    forget epoch from ``from_epoch`` to ``to_epoch``): the cache takes the new full-text row in
    place of the old instead of reloading."""
    cache = store.cache.get(_CACHE_KEY)
    if isinstance(cache, PostingsCache):
        text = indexed_text(new.fts_text, new.index_words)
        cache.replace(memory_id, text, from_epoch=from_epoch, to_epoch=to_epoch)


class _Vocabulary(dict[str, int]):
    """Term numbers by token; a token seen for the first time gets the next number."""

    def __missing__(self, token: str) -> int:
        number = self[token] = len(self)
        return number


class Block(NamedTuple):
    """Postings sorted by key ``term << 32 | row``, with the term's count in the row."""

    keys: np.ndarray  # int64
    counts: np.ndarray  # uint16 (a count past 65,535 is kept as 65,535: no memory is that long)


class PostingsView(NamedTuple):
    """One consistent state of the cache: row ``i`` is memory ``ids[i]`` of ``lengths[i]`` tokens;
    ``terms`` numbers the blocks' terms (it only grows: a number never changes meaning)."""

    terms: dict[str, int]
    blocks: tuple[Block, ...]
    ids: np.ndarray  # int64
    lengths: np.ndarray  # float64
    alive: np.ndarray  # bool
    rows: int  # live rows (FTS5's row count)
    tokens: int  # tokens of the live rows (FTS5's total size)


class TextSearch(NamedTuple):
    """``search``'s answer: the best rows holding any query term, and those holding
    every one (each best first, as FTS5's OR and AND queries would give them)."""

    any_terms: TextHits
    all_terms: TextHits


class PostingsCache:
    def __init__(self, read: Callable[[], AbstractContextManager[ReadTxn]], *, name: str) -> None:
        self._read = read  # a read transaction of the tenant, for a background load
        self.name = name  # the tenant's, for the log
        self._lock = threading.Lock()
        self._loading: threading.Thread | None = None
        self._changed_while_loading: list[Callable[[PostingsCache], bool]] = []
        self._terms = _Vocabulary()  # token -> term number (only ever grows)
        self._blocks: tuple[Block, ...] = ()
        self._ids = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.float64)
        self._alive = np.zeros(0, dtype=bool)
        self._count = 0
        self._live = 0
        self._tokens = 0
        self.high_water = 0
        self.epoch = -1
        self._behind_since: float | None = None  # when a sync first found the file's epoch ahead
        self.reloads = 0  # epochs it was not told about, the first one included: each empties it
        self.loads = 0  # background loads of every row (a large tenant's first one included)

    # -- keeping in step ----------------------------------------------------------------------

    def sync(self, txn: ReadTxn, state: tuple[int, int] | None = None) -> PostingsView | None:
        """Bring the cache up to ``txn``'s snapshot and return that state, or None when it cannot
        answer for that snapshot: the cache is ahead of it (another recall synced a later one), or
        more than INLINE_ROWS rows are missing, which a background load brings in (``_load``)
        while FTS5 answers. ``state`` is ``txn.index_state()`` when the caller has read it."""
        high, epoch = state or txn.index_state()
        with self._lock:
            if epoch != self.epoch:
                if epoch < self.epoch or self._told_soon():
                    return None
                self._clear()
                self.epoch = epoch
                self.reloads += 1
            if high < self.high_water or self._loading is not None:
                return None
            if high - self.high_water > INLINE_ROWS:
                self._loading = threading.Thread(target=self._load, name="postings-load", daemon=True)
                self._loading.start()
                return None
            self._catch_up(lambda after, limit: txn.fulltext_rows_after(after, high, limit=limit), high)
            return self._view()

    def _told_soon(self) -> bool:
        """Whether the cache, behind the file's forget epoch, is to be told the change that moved
        it: a forget or an update tells it right after its commit (``drop``, ``replace``), so a
        recall in between lets FTS5 answer rather than load every row again inside its read
        transaction, which an erasure's truncation of the WAL waits for. Still behind after
        TOLD_WITHIN_SECONDS, it was not told (or a change was applied out of turn): it reloads."""
        if self.epoch < 0 or not self._count:
            return False  # nothing held: loading is all there is to do
        now = time.monotonic()
        if self._behind_since is None:
            self._behind_since = now
        return now - self._behind_since < TOLD_WITHIN_SECONDS

    def _catch_up(self, rows_after: Callable[[int, int], list[tuple[int, str]]], high: int) -> None:
        """Append the full-text rows above the high-water mark up to ``high``, LOAD_CHUNK at a
        time (``rows_after(after_id, limit)``)."""
        kept = len(self._blocks)
        while high > self.high_water:
            rows = rows_after(self.high_water, LOAD_CHUNK)
            self._append([r[0] for r in rows], [r[1] for r in rows], merge=False)
            self.high_water = rows[-1][0] if len(rows) == LOAD_CHUNK else high
        if len(self._blocks) > kept + 1:  # the chunks in one block: one merge of all of them
            self._blocks = (*self._blocks[:kept], _merged(self._blocks[kept:]))
        self._compact()

    def _load(self) -> None:
        """Load every row into a new cache (one load at a time in the process), apply to it the
        forgets and updates told meanwhile, and take its state. Each chunk is read in a short
        transaction of its own: one long reader would hold a forget's emptying of the write-ahead
        log (``TenantStore.erase_traces`` waits for readers) for the whole load. A chunk read after a forget lacks the row, one
        read before holds it until the forget's change is applied; a chunk read after an update
        holds the new text, which the update's change writes again."""

        try:
            with _LOADS:
                # Idle priority while it is quick (FTS5 serves meanwhile), an equal of the request
                # threads once it has run URGENT_AFTER_SECONDS (a busy machine must not starve it).
                become_background_thread()
                fresh = PostingsCache(self._read, name=self.name)
                started = time.monotonic()
                with self._read() as txn:
                    high, fresh.epoch = txn.index_state()

                def rows_after(after: int, limit: int) -> list[tuple[int, str]]:
                    keep_up(time.monotonic() - started)
                    with self._read() as txn:
                        return txn.fulltext_rows_after(after, high, limit=limit)

                fresh._catch_up(rows_after, high)
                release_free_memory()
                log.info(
                    "full-text postings of %s: %d rows loaded in %.1f s",
                    self.name,
                    fresh._live,
                    time.monotonic() - started,
                )
        except Exception:  # the tenant closed meanwhile, or its file went: the next recall retries
            log.info("full-text postings of %s: load stopped; FTS5 answers", self.name, exc_info=True)
            fresh = None
        with self._lock:
            self._loading = None
            changes, self._changed_while_loading = self._changed_while_loading, []
            if fresh is None:
                return
            # The forgets and updates told meanwhile, in order (each applies only at its epoch:
            # one the load's snapshot already holds is skipped); then the state is taken if it
            # reached this cache's epoch and holds at least its rows.
            for change in changes:
                change(fresh)
            if fresh.epoch == self.epoch and fresh.high_water >= self.high_water:
                self._adopt(fresh)

    def _adopt(self, other: PostingsCache) -> None:
        self._terms, self._blocks = other._terms, other._blocks
        self._ids, self._lengths, self._alive = other._ids, other._lengths, other._alive
        self._count, self._live, self._tokens = other._count, other._live, other._tokens
        self.high_water = other.high_water
        self.loads += 1

    def drop(self, memory_ids: Sequence[int], *, from_epoch: int, to_epoch: int) -> bool:
        """Mark the rows of ``memory_ids`` dead and take ``to_epoch``, if the cache is at
        ``from_epoch``; otherwise leave it (the next sync reloads if its epoch is behind)."""
        with self._lock:
            if self._loading is not None:  # the load's state takes it too (``_load``)
                self._changed_while_loading.append(
                    lambda fresh: fresh.drop(memory_ids, from_epoch=from_epoch, to_epoch=to_epoch)
                )
            if self.epoch != from_epoch:
                return False
            self._kill(np.asarray(memory_ids, dtype=np.int64))
            self.epoch, self._behind_since = to_epoch, None
            return True

    def replace(self, memory_id: int, text: str, *, from_epoch: int, to_epoch: int) -> bool:
        """Mark ``memory_id``'s row dead and append ``text`` under its id, taking ``to_epoch``, if
        the cache is at ``from_epoch`` and holds that row (else the next sync reloads)."""
        with self._lock:
            if self._loading is not None:
                self._changed_while_loading.append(
                    lambda fresh: fresh.replace(memory_id, text, from_epoch=from_epoch, to_epoch=to_epoch)
                )
            if self.epoch != from_epoch:
                return False
            if memory_id <= self.high_water:
                if not self._kill(np.array([memory_id], dtype=np.int64)):
                    return False  # a row it should hold and does not: reload
                self._append([memory_id], [text])
            self.epoch, self._behind_since = to_epoch, None
            return True

    def _clear(self) -> None:
        self._behind_since = None
        self._blocks = ()
        self._count = self._live = self._tokens = 0
        self.high_water = 0

    def _view(self) -> PostingsView:
        n = self._count
        return PostingsView(
            self._terms, self._blocks, self._ids[:n], self._lengths[:n], self._alive[:n], self._live, self._tokens
        )

    def _kill(self, memory_ids: np.ndarray) -> int:
        """Mark the live rows of ``memory_ids`` dead (in a new mask: a search holding the old one
        keeps its state); returns how many."""
        n = self._count
        rows = np.flatnonzero(np.isin(self._ids[:n], memory_ids) & self._alive[:n])
        if not len(rows):
            return 0
        alive = self._alive.copy()
        alive[rows] = False
        self._alive = alive
        self._live -= len(rows)
        self._tokens -= int(self._lengths[rows].sum())
        if (n - self._live) * _DEAD_FRACTION > n:
            self._squeeze()
        return len(rows)

    def _append(self, memory_ids: list[int], texts: list[str], *, merge: bool = True) -> None:
        if not memory_ids:
            return
        first, needed = self._count, self._count + len(memory_ids)
        if needed > len(self._ids):
            self._reallocate(max(needed, 2 * len(self._ids), 16))
        # Tokenized TOKENIZE_BATCH texts at a time, each batch's tokens turned into term numbers
        # at once: a million token strings alive together would leave the allocator's arenas
        # pinned by the few that live on as the vocabulary's keys (+130 MB RSS at 100k rows).
        lengths_of, terms_of = [], []
        for at in range(0, len(texts), TOKENIZE_BATCH):
            found = [fts5_tokens(text) for text in texts[at : at + TOKENIZE_BATCH]]
            lengths_of.append(np.fromiter(map(len, found), dtype=np.int64, count=len(found)))
            flat = list(chain.from_iterable(found))
            terms_of.append(np.fromiter(map(self._terms.__getitem__, flat), dtype=np.int64, count=len(flat)))
        lengths, terms = np.concatenate(lengths_of), np.concatenate(terms_of)
        rows = np.repeat(np.arange(first, needed, dtype=np.int64), lengths)
        unique, counts = np.unique((terms << _ROW_BITS) | rows, return_counts=True)
        self._ids[first:needed] = memory_ids
        self._lengths[first:needed] = lengths
        self._alive[first:needed] = True
        self._count = needed
        self._live += len(memory_ids)
        self._tokens += int(lengths.sum())
        self._blocks = (*self._blocks, Block(unique, np.minimum(counts, 65535).astype(np.uint16)))
        if merge:
            self._compact()

    def _compact(self) -> None:
        """Merge the last block into the one before it while it holds a quarter of its size."""
        blocks = list(self._blocks)
        while len(blocks) > 1 and len(blocks[-1].keys) * _MERGE_FRACTION >= len(blocks[-2].keys):
            blocks[-2:] = [_merged(blocks[-2:])]
        self._blocks = tuple(blocks)

    def _reallocate(self, capacity: int) -> None:
        """New arrays (a search holding the old ones keeps them as they were)."""
        n = self._count
        ids = np.zeros(capacity, dtype=np.int64)
        lengths = np.zeros(capacity, dtype=np.float64)
        alive = np.zeros(capacity, dtype=bool)
        ids[:n], lengths[:n], alive[:n] = self._ids[:n], self._lengths[:n], self._alive[:n]
        self._ids, self._lengths, self._alive = ids, lengths, alive

    def _squeeze(self) -> None:
        """Rewrite the postings without the dead rows (rows keep their order, so keys stay sorted)."""
        n = self._count
        keep = self._alive[:n]
        renumber = np.cumsum(keep) - 1
        blocks = []
        for block in self._blocks:
            rows = block.keys & ((1 << _ROW_BITS) - 1)
            live = keep[rows]
            keys = ((block.keys[live] >> _ROW_BITS) << _ROW_BITS) | renumber[rows[live]]
            blocks.append(Block(keys, block.counts[live]))
        live_rows = int(keep.sum())
        ids, lengths = self._ids[:n][keep], self._lengths[:n][keep]
        self._ids = np.zeros(max(live_rows, 16), dtype=np.int64)
        self._lengths = np.zeros(len(self._ids), dtype=np.float64)
        self._alive = np.zeros(len(self._ids), dtype=bool)
        self._ids[:live_rows], self._lengths[:live_rows], self._alive[:live_rows] = ids, lengths, True
        self._count = live_rows
        self._blocks = tuple(b for b in blocks if len(b.keys))


def search(
    view: PostingsView, phrases: Sequence[Phrase], *, limit: int, texts: Texts, allowed: np.ndarray | None = None
) -> TextSearch | None:
    """FTS5's ``bm25()`` of the rows of ``view`` matching any of ``phrases`` (in the query's
    order, a phrase repeated as often as the query repeats it), the best ``limit`` of those
    matching any and of those matching all, of the memories ``allowed`` (sorted ids; None: all);
    None when a phrase of several tokens is in too many rows to be matched here (FTS5 answers)."""
    found, budget = [], PHRASE_TOKENS
    for phrase in phrases:
        tokens = [_postings(view, view.terms.get(token, -1)) for token in phrase]
        if len(tokens) == 1:
            found.append(tokens[0])
            continue
        in_rows = phrase_posting(phrase, tokens, view.ids, view.lengths, texts, budget)
        if in_rows is None:
            return None
        found.append(in_rows[0])
        budget -= in_rows[1]
    average = view.tokens / view.rows if view.rows else 0.0  # no live row: nothing matches
    idfs = [_idf(view, len(rows)) for rows, _ in found]
    common = _prunable(phrases, found) if allowed is None else None
    if common is not None:
        pruned = _search_pruned(view, phrases, found, idfs, average, common, limit)
        if pruned is not None:
            return pruned
    matched, place, present = _union(found)
    scores = _scores(view, found, idfs, average, place, len(matched))
    every = present == len(found)
    if allowed is not None:
        ids = view.ids[matched]
        keep = in_sorted(allowed, ids)
        matched, scores, every = matched[keep], scores[keep], every[keep]
    return TextSearch(_best(view, matched, scores, limit), _best(view, matched[every], scores[every], limit))


def _idf(view: PostingsView, df: int) -> float:
    idf = math.log((view.rows - df + 0.5) / (df + 0.5))
    return idf if idf > 0.0 else FTS5_MIN_IDF


def _scores(
    view: PostingsView,
    found: list[tuple[np.ndarray, np.ndarray]],
    idfs: list[float],
    average: float,
    place: np.ndarray,
    matched: int,
) -> np.ndarray:
    """Each matched row's BM25: fts5Bm25Function's expression, in its order of operations, summed
    over the terms in the query's order as FTS5 sums them (the same doubles). ``place``: each
    posting's row among the matched, the terms' postings one after the other."""
    scores = np.zeros(matched, dtype=np.float64)
    start = 0
    for (rows, counts), idf in zip(found, idfs):
        frequency = counts.astype(np.float64)
        length = view.lengths[rows]
        at = place[start : start + len(rows)]
        start += len(rows)
        scores[at] += idf * (
            (frequency * (FTS5_K1 + 1.0)) / (frequency + FTS5_K1 * (1 - FTS5_B + FTS5_B * length / average))
        )
    return scores


def _prunable(phrases: Sequence[Phrase], found: list[tuple[np.ndarray, np.ndarray]]) -> Phrase | None:
    """The query's most common term, when it holds at least PRUNE_FROM postings and more than all
    the other terms together (then it is most of the work), and there are other terms."""
    sizes = {term: len(rows) for term, (rows, _) in zip(phrases, found)}
    if len(sizes) < 2:
        return None
    common = max(sizes, key=sizes.__getitem__)
    rest = sum(size for term, size in sizes.items() if term != common)
    return common if sizes[common] >= PRUNE_FROM and sizes[common] > rest else None


def _search_pruned(
    view: PostingsView,
    phrases: Sequence[Phrase],
    found: list[tuple[np.ndarray, np.ndarray]],
    idfs: list[float],
    average: float,
    common: Phrase,
    limit: int,
) -> TextSearch | None:
    """``search``'s answer from the rows holding one of the other terms only (MaxScore's idea):
    each is scored exactly, the common term looked up in its postings; a row holding the common
    term alone scores at most its bound, so when that bound is below the ``limit``-th best score
    found, no such row can be among the best (nor among those holding every term: none holds
    only one of several terms). None when it could: the caller scores every row."""
    position = phrases.index(common)
    common_rows, common_counts = found[position]
    others = [posting for term, posting in zip(phrases, found) if term != common]
    matched, others_place, present = _union(others)
    if len(matched) < limit:
        return None
    at = np.minimum(np.searchsorted(common_rows, matched), len(common_rows) - 1)
    held = common_rows[at] == matched
    at = at[held]
    # Only rows holding another term are scored: the union of every term's postings is the other
    # terms' union, and a common term's posting takes its row's place in it.
    narrowed, places, start = [], [], 0
    for term, posting in zip(phrases, found):
        if term == common:
            narrowed.append((common_rows[at], common_counts[at]))
            places.append(np.flatnonzero(held))
        else:
            narrowed.append(posting)
            places.append(others_place[start : start + len(posting[0])])
            start += len(posting[0])
    present = present + phrases.count(common) * held
    scores = _scores(view, narrowed, idfs, average, np.concatenate(places), len(matched))
    threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
    # A row holding the common term alone: its term score at the term's largest count and the
    # shortest length there can be (0 tokens) bounds it, once per time the query repeats the term.
    frequency = float(common_counts.max())
    bound = idfs[position] * (frequency * (FTS5_K1 + 1.0)) / (frequency + FTS5_K1 * (1 - FTS5_B))
    if phrases.count(common) * bound * (1.0 + PRUNE_MARGIN) >= threshold:
        return None
    every = present == len(found)
    return TextSearch(_best(view, matched, scores, limit), _best(view, matched[every], scores[every], limit))


def _union(found: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of any term (ascending, once each), each posting's place among them (the
    postings of the terms one after the other), and how many postings each row has. One stable
    sort of the terms' sorted runs (a merge) instead of a binary search per posting, whose
    scattered reads were a third of a 1M-memory tenant's text leg."""
    if len(found) <= 1:
        rows = found[0][0] if found else np.zeros(0, dtype=np.int64)
        return rows, np.arange(len(rows)), np.ones(len(rows), dtype=np.int64)
    postings = np.concatenate([rows for rows, _ in found])
    order = postings.argsort(kind="stable")
    ordered = postings[order]
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    rank = first.cumsum()
    rank -= 1
    place = np.empty(len(postings), dtype=np.int64)
    place[order] = rank
    return ordered[first], place, np.bincount(rank)


def _postings(view: PostingsView, term: int) -> tuple[np.ndarray, np.ndarray]:
    """The live rows holding ``term`` and its count in each (rows ascending)."""
    if term < 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
    low, high = term << _ROW_BITS, (term + 1) << _ROW_BITS
    rows, counts = [], []
    for block in view.blocks:
        start, end = np.searchsorted(block.keys, [low, high])
        if end > start:
            rows.append(block.keys[start:end] & ((1 << _ROW_BITS) - 1))
            counts.append(block.counts[start:end])
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
    all_rows = np.concatenate(rows) if len(rows) > 1 else rows[0]
    all_counts = np.concatenate(counts) if len(counts) > 1 else counts[0]
    if view.rows == len(view.alive):  # no dead row in the view: nothing to mask
        return all_rows, all_counts
    live = view.alive[all_rows]
    return all_rows[live], all_counts[live]


def _best(view: PostingsView, rows: np.ndarray, scores: np.ndarray, limit: int) -> TextHits:
    """The best ``limit`` of ``rows`` by score, ties by the lower memory id (as FTS5 orders them)."""
    if len(rows) > limit:
        threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
        keep = scores >= threshold
        rows, scores = rows[keep], scores[keep]
    ids = view.ids[rows]
    order = np.lexsort((ids, -scores))[:limit]
    return _hits(view, rows[order], scores[order])


def _hits(view: PostingsView, rows: np.ndarray, scores: np.ndarray) -> TextHits:
    average = view.tokens / view.rows if len(rows) else 0.0  # as fts_search: no rows, no mean
    return TextHits(view.ids[rows].tolist(), scores.tolist(), view.lengths[rows].astype(np.int64).tolist(), average)


def _merged(blocks: Sequence[Block]) -> Block:
    """One block of several; each is sorted, so a stable sort of their runs is a merge."""
    keys = np.concatenate([b.keys for b in blocks])
    order = np.argsort(keys, kind="stable")
    return Block(keys[order], np.concatenate([b.counts for b in blocks])[order])
