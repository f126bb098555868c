"""The fuse and rank steps: one score per candidate from both paths, then best first.

Score fusion (measured on LoCoMo, where it beat reciprocal-rank fusion): the candidates are the
best rows of each path; each gets ``w * bm25 / max(max(bm25), floor) + (1 - w) * cosine`` with
``w`` the settings' ``text_weight`` and ``floor`` its ``text_floor``. With ``feedback`` > 0 and BM25 hits, the query vector is then moved
toward the mean of the best few candidates (pseudo-relevance feedback) and the candidates are
re-scored with it: one small product over the candidates, never over all rows.
"""

from __future__ import annotations

import numpy as np

from mnemosyne.engine.ann import RowScores
from mnemosyne.engine.recall.ranking import Ranking, TextRanking, sorted_unique
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Pool, Recalling
from mnemosyne.engine.recall.steps import RecallStep


def fuse(
    query_vector: np.ndarray,
    ids: np.ndarray,
    vectors: np.ndarray,
    scores: np.ndarray | RowScores,
    vector_rows: np.ndarray,
    text_hits: TextRanking,
    *,
    text_weight: float,
    text_floor: float,
    feedback: float,
    feedback_candidates: int,
) -> Pool:
    """Score fusion of the vector candidates (row numbers) and the BM25 hits (memory ids).

    ``scores`` holds the cosine of every row; ``vectors`` every row's vector (row-major: feedback
    reads whole candidate vectors); ``ids`` is sorted ascending, so a BM25 hit's row is found by
    binary search (a hit the cache does not hold is dropped). The pool holds each candidate once.
    """
    text_ids, relevance = text_hits.ids, text_hits.relevance
    text_rows = np.minimum(np.searchsorted(ids, text_ids), max(len(ids) - 1, 0))
    found = ids[text_rows] == text_ids if len(ids) else np.zeros(len(text_ids), dtype=bool)
    text_rows, relevance = text_rows[found], relevance[found]
    top = relevance.max() if len(relevance) else 0.0
    top_relevance = max(float(top), text_floor) if top > 0 else 1.0
    # Sorted, and holding every text hit (each once): a hit's place in it is a binary search.
    rows = sorted_unique(np.concatenate([vector_rows, text_rows]))
    bm25 = np.zeros(len(rows))
    bm25[np.searchsorted(rows, text_rows)] = relevance
    text_part = text_weight * bm25 / top_relevance
    cosine = scores[rows].astype(np.float64)
    fused = text_part + (1.0 - text_weight) * np.maximum(cosine, 0.0)
    refined = None
    # Feedback only when BM25 took part: anchored by matching words, the best candidates pull the
    # query toward their wording; from the vector alone it drifts (docs/decisions.md).
    if feedback > 0 and len(text_ids) and len(rows) > feedback_candidates:
        best = rows[np.argsort(-fused, kind="stable")[:feedback_candidates]]
        moved = query_vector + feedback * (vectors[best].sum(axis=0) / feedback_candidates)  # their mean
        norm = float(np.sqrt(moved.dot(moved)))
        if norm > 0:
            refined = moved / norm
            refined_cosine = (vectors[rows] @ refined).astype(np.float64)
            fused = text_part + (1.0 - text_weight) * np.maximum(refined_cosine, 0.0)
    return Pool(rows, fused, cosine, bm25, np.isfinite(cosine), refined)


class Fuse:
    """Both paths' candidates into one pool of fused scores (every mode but text only)."""

    name = RecallStep.FUSE

    def __init__(self, settings: RecallSettings) -> None:
        self.text_weight = settings.text_weight
        self.text_floor = settings.text_floor
        self.feedback = settings.feedback
        self.feedback_candidates = settings.feedback_candidates

    def __call__(self, recalling: Recalling) -> None:
        found, query_vector = recalling.candidates, recalling.query.vector
        assert query_vector is not None and found.scores is not None  # not text only
        recalling.pool = fuse(
            query_vector,
            found.ids,
            found.vectors,
            found.scores,
            found.vector_rows,
            found.text_hits,
            text_weight=self.text_weight,
            text_floor=self.text_floor,
            feedback=self.feedback,
            feedback_candidates=self.feedback_candidates,
        )


class Rank:
    """The pool best first (ties by the lower id), cut to two paths' worth of candidates."""

    name = RecallStep.RANK

    def __call__(self, recalling: Recalling) -> None:
        recalling.ranking = recalling.pool.ranking(recalling.candidates.ids, 2 * recalling.query.depth)


def text_ranking(hits: TextRanking, limit: int) -> Ranking:
    """Text only: BM25's best ``limit`` hits, best first, ties by the lower id."""
    text_ids, relevance = hits.ids, hits.relevance
    order = np.lexsort((text_ids, -relevance))[:limit]
    return Ranking(text_ids[order], relevance[order], np.zeros(len(order)), relevance[order])


class RankText:
    """Text only: the rank step over BM25's hits alone (there is nothing to fuse)."""

    name = RecallStep.RANK

    def __call__(self, recalling: Recalling) -> None:
        recalling.ranking = text_ranking(recalling.candidates.text_hits, 2 * recalling.query.depth)
