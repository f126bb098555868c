"""The context steps (issue 25): a candidate's thread neighbours (memories retained with a
``thread``: the turn just before and just after) join the candidates (``context``); each
candidate gains part of its best neighbour's score (``neighbours``); and with a sentence
embedder, the cosine of each candidate's context window, its vector with its neighbours', is
added (``window``: a second stage over the candidates from vectors already in the cache, no model
call)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mnemosyne.engine.ann import RowScores
from mnemosyne.engine.recall.ranking import sorted_unique
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Candidates, Pool, Recalling
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.sorted_ids import in_sorted


def join_neighbours(
    pool: Pool,
    ids: np.ndarray,
    vectors: np.ndarray,
    scores: np.ndarray | RowScores,
    neighbours_of: Callable[[np.ndarray], np.ndarray],
    *,
    depth: int,
    text_weight: float,
) -> Pool:
    """The pool with the thread neighbours of its best ``depth`` candidates: those that were no
    candidate join, scored as candidates are (cosine along the query after feedback, no text
    hit), and ``pairs`` names each (candidate, neighbour) both ways round; a neighbour outside
    the filters lends nothing. ``neighbours_of``: memory ids -> (memory id, neighbour id) rows."""
    rows, fused, cosine, bm25, finite = pool.rows, pool.scores, pool.cosine, pool.bm25, pool.finite
    head = rows[np.argsort(-np.where(finite, fused, -np.inf), kind="stable")[:depth]]
    pairs = neighbours_of(ids[head])
    if not len(pairs):
        return pool
    pair_rows = np.minimum(np.searchsorted(ids, pairs), len(ids) - 1)
    pair_rows = pair_rows[(ids[pair_rows] == pairs).all(axis=1)]
    # ``rows`` is sorted: a binary search, not setdiff1d's sort.
    new = sorted_unique(pair_rows[:, 1])
    new = new[~in_sorted(rows, new)]
    if len(new):
        new_cosine = scores[new].astype(np.float64)
        along = new_cosine if pool.refined is None else (vectors[new] @ pool.refined).astype(np.float64)
        rows = np.concatenate([rows, new])
        bm25 = np.concatenate([bm25, np.zeros(len(new))])
        cosine = np.concatenate([cosine, new_cosine])
        finite = np.concatenate([finite, np.isfinite(new_cosine)])
        fused = np.concatenate([fused, (1.0 - text_weight) * np.maximum(along, 0.0)])
    order = np.argsort(rows)
    both = order[np.searchsorted(rows[order], np.concatenate([pair_rows, pair_rows[:, ::-1]]))]
    both = both[finite[both[:, 1]]]
    return Pool(rows, fused, cosine, bm25, finite, pool.refined, both)


def with_neighbours(fused: np.ndarray, pairs: np.ndarray, weight: float) -> np.ndarray:
    """Each candidate's score plus ``weight`` x the best score of its thread neighbours.

    ``pairs`` holds (candidate, neighbour) positions in ``fused``. In a conversation the turn
    holding an answer often shares few words with the question while the turn beside it (the
    question that prompted it, the reply to it) matches: part of the neighbour's score lifts it
    into the top k."""
    best = np.zeros(len(fused))
    np.maximum.at(best, pairs[:, 0], fused[pairs[:, 1]])
    return fused + weight * best


def window_cosine(
    query_vector: np.ndarray,
    vectors: np.ndarray,
    rows: np.ndarray,
    cosine: np.ndarray,
    pairs: np.ndarray,
    *,
    share: float,
) -> np.ndarray:
    """Each candidate's context window (its vector plus ``share`` x each thread neighbour's,
    from the vectors already in the cache: no model call) against the query, by cosine (0 when
    negative). ``rows``: the candidates' rows of ``vectors``; ``cosine``: their cosines, known
    already; ``pairs``: (candidate, neighbour) positions in ``rows``.

    A candidate without a neighbour is its own window, whose cosine is known (the vectors are
    unit vectors): only the candidates with neighbours, and those neighbours, are read again."""
    similarity: np.ndarray = np.maximum(cosine, 0.0)
    if not len(pairs):
        return similarity
    read = sorted_unique(pairs.ravel())  # the candidates with neighbours, and their neighbours
    places = np.searchsorted(read, pairs)
    own = vectors[rows[read]]
    window = own.astype(np.float64)
    np.add.at(window, places[:, 0], share * own[places[:, 1]])
    joined = sorted_unique(places[:, 0])
    window = window[joined]
    norms = np.linalg.norm(window, axis=1)
    norms[norms == 0] = 1.0
    similarity[read[joined]] = np.maximum((window @ query_vector) / norms, 0.0)
    return similarity


class JoinContext:
    """The best candidates' thread neighbours join the pool (for the neighbours and window steps)."""

    name = RecallStep.CONTEXT

    def __init__(self, settings: RecallSettings) -> None:
        self.depth = settings.context_depth
        self.text_weight = settings.text_weight

    def __call__(self, recalling: Recalling) -> None:
        found: Candidates = recalling.candidates
        if not len(recalling.pool.rows):
            return
        assert found.scores is not None  # not text only
        recalling.pool = join_neighbours(
            recalling.pool,
            found.ids,
            found.vectors,
            found.scores,
            recalling.snapshot.index.thread_neighbours,
            depth=self.depth,
            text_weight=self.text_weight,
        )


class LendNeighbours:
    """Each candidate gains part of its best thread neighbour's score."""

    name = RecallStep.NEIGHBOURS

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.neighbour_weight

    def __call__(self, recalling: Recalling) -> None:
        pool = recalling.pool
        if len(pool.pairs):
            recalling.pool = with_scores(pool, with_neighbours(pool.scores, pool.pairs, self.weight))


class ScoreWindows:
    """Each candidate's context window's cosine with the query is added to its score."""

    name = RecallStep.WINDOW

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.window_weight
        self.share = settings.window_neighbours

    def __call__(self, recalling: Recalling) -> None:
        pool, query_vector = recalling.pool, recalling.query.vector
        if not len(pool.rows) or query_vector is None:
            return
        found = recalling.candidates
        window = window_cosine(query_vector, found.vectors, pool.rows, pool.cosine, pool.pairs, share=self.share)
        recalling.pool = with_scores(pool, pool.scores + self.weight * window)


def with_scores(pool: Pool, scores: np.ndarray) -> Pool:
    """The pool with new scores (NamedTuple._replace costs a few times more)."""
    return Pool(pool.rows, scores, pool.cosine, pool.bm25, pool.finite, pool.refined, pool.pairs)
