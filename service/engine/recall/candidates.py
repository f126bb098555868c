"""The candidates step: the vector path's best rows and the full-text path's best hits, over one
read snapshot (filters applied before the cut, so a filtered recall still finds ``k``)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mnemosyne.engine.ann import FIGURES, MATCH_FLOOR, RowScores, present_rows
from mnemosyne.engine.index import VectorView, approximate_candidates
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import NO_HITS, NO_ROWS, NO_VECTORS, Candidates, Query, Recalling, Snapshot
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.recall.text import text_hits
from mnemosyne.engine.types import RecallMode
from mnemosyne.runtime import tracing

# The sparse product (vector_scores) when at most 1/4 of the query's dimensions are non-zero.
SPARSE_QUERY_FRACTION = 4
# A filtered recall scores only its rows when they are at most 1/GATHER_SHARE of the tenant's:
# gathered, a row costs several times its share of the product over every row
# (docs/performance.md, filtered recalls).
GATHER_SHARE = 16
# Memories per block of the sparse product: the gathered block (used dimensions x block) stays in
# cache for the product that reads it.
SPARSE_BLOCK = 16384


def sparse_dimensions(query_vector: np.ndarray, columns: np.ndarray) -> np.ndarray | None:
    """The query's non-zero dimensions when they are few enough for the sparse product over the
    dimension-major buffer ``columns`` (index.py), else None (the dense product)."""
    nonzero = np.flatnonzero(query_vector)
    if len(nonzero) <= len(query_vector) // SPARSE_QUERY_FRACTION and columns.strides[1] == columns.itemsize:
        return nonzero
    return None


def vector_scores(query_vector: np.ndarray, matrix: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Cosine of every row (rows and query are unit vectors); -inf where ``allowed`` is False.

    A query vector with few non-zero dimensions, over a dimension-major matrix (index.py), reads
    only those dimensions' rows of the buffer: gathered a block of memories at a time, each block
    multiplied by the used weights in one BLAS call (docs/decisions.md, recall speed). The loop is
    over blocks, never over memories.
    """
    columns = matrix.T
    nonzero = sparse_dimensions(query_vector, columns)
    if nonzero is not None:
        weights = query_vector[nonzero]
        scores = np.empty(len(matrix), dtype=np.float32)
        for start in range(0, len(matrix), SPARSE_BLOCK):
            stop = start + SPARSE_BLOCK
            np.dot(weights, columns[nonzero, start:stop], out=scores[start:stop])
    else:
        scores = matrix @ query_vector
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    return scores


def gathered_scores(query_vector: np.ndarray, view: VectorView, rows: np.ndarray) -> np.ndarray:
    """The cosine of ``rows`` only: a sparse query reads its dimensions of those rows from the
    dimension-major buffer, a dense one their whole row-major vectors."""
    columns = view.matrix.T
    nonzero = sparse_dimensions(query_vector, columns)
    scores: np.ndarray
    if nonzero is not None:
        scores = query_vector[nonzero] @ columns[np.ix_(nonzero, rows)]
    else:
        scores = view.rows[rows] @ query_vector
    return scores


def top_rows(scores: np.ndarray, limit: int) -> np.ndarray:
    """Row numbers of the ``limit`` best scores, best first, only rows scoring above the match
    floor.

    A row sharing no feature with the query (cosine <= 0, or within float rounding of it:
    ``MATCH_FLOOR``) is not a match, only a filler.
    """
    limit = min(limit, len(scores))
    if limit <= 0:
        return np.zeros(0, dtype=np.int64)
    # The limit-th best value, then every row reaching it (ascending, so ties keep the lower
    # row): half the cost of an argpartition, which moves an index array along.
    threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
    top = np.flatnonzero(scores >= threshold)
    top = top[np.argsort(-scores[top], kind="stable")][:limit]
    return top[scores[top] > MATCH_FLOOR]


class VectorPath(NamedTuple):
    ids: np.ndarray  # every row's memory id, ascending
    vectors: np.ndarray  # every row's vector, row-major
    scores: np.ndarray | RowScores  # every row's cosine (-inf: outside the filters)
    rows: np.ndarray  # the best rows, best first


def vector_candidates(
    query: Query,
    query_vector: np.ndarray,
    snapshot: Snapshot,
    allowed_ids: np.ndarray | None,
    ann_threshold: int,
    graph_share: float = 0.0,
) -> VectorPath:
    """The vector path: the best ``depth`` rows (of ``allowed_ids``, a filtered recall's; the
    rows outside it score -inf) by exact cosine, their candidates from one of three sources
    (counted for the operator: ``FIGURES.searched``). A filter keeping few rows: only those rows
    are scored. A large tenant: its approximate index's neighbours (engine/ann.py; a hybrid
    recall asks for ``graph_share`` of its depth, 0: all; a filtered one for as many more as the
    filter keeps fewer rows), re-scored exactly. Else, or while the graph is made, every row."""
    view = snapshot.index.sync_view(snapshot.txn, snapshot.state)
    ids, matrix, vectors = view
    allowed = None
    if allowed_ids is not None:
        rows = present_rows(ids, allowed_ids)
        allowed = np.zeros(len(ids), dtype=bool)
        allowed[rows] = True
        if len(rows) * GATHER_SHARE <= len(ids):
            FIGURES.searched("filtered_rows")
            best = rows[top_rows(gathered_scores(query_vector, view, rows), query.depth)]
            return VectorPath(ids, vectors, RowScores(vectors, query_vector, allowed), best)
    found = approximate_candidates(
        snapshot.store,
        snapshot.index,
        view,
        query_vector,
        query.depth,
        ann_threshold,
        alone=query.mode is RecallMode.VECTOR or not query.terms,
        share=graph_share,
        allowed=allowed,
    )
    if found is None:
        FIGURES.searched("every_row")
        scores = vector_scores(query_vector, matrix, allowed)
        return VectorPath(ids, vectors, scores, top_rows(scores, query.depth))
    FIGURES.searched("graph")
    return VectorPath(ids, vectors, *found)


class FindCandidates:
    """Both paths over the snapshot: the vector path unless text only, the full-text path unless
    vector only (or the query has no terms)."""

    name = RecallStep.CANDIDATES

    def __init__(self, settings: RecallSettings, *, from_postings: bool, ann_threshold: int) -> None:
        self.bm25_b = settings.bm25_b
        self.max_coordinated_terms = settings.max_coordinated_terms
        self.from_postings = from_postings  # off: the postings step switched off
        self.ann_threshold = ann_threshold  # memories from which the approximate index serves
        self.graph_share = settings.graph_share

    def __call__(self, recalling: Recalling) -> None:
        query, snapshot = recalling.query, recalling.snapshot
        allowed = None  # a filtered recall's memories, sorted ids: both legs keep only these
        if query.scopes or query.filters:
            allowed = snapshot.txn.filter_ids(query.scopes, query.filters)
        vectors: VectorPath | None = None
        if query.vector is not None:
            with tracing.span("recall.leg.vector"):
                vectors = vector_candidates(
                    query, query.vector, snapshot, allowed, self.ann_threshold, self.graph_share
                )
        hits = NO_HITS
        if query.mode is not RecallMode.VECTOR and query.terms:
            with tracing.span("recall.leg.text"):
                hits = text_hits(
                    query,
                    snapshot,
                    allowed,
                    b=self.bm25_b,
                    max_coordinated_terms=self.max_coordinated_terms,
                    from_postings=self.from_postings,
                )
        if vectors is None:  # text only
            recalling.candidates = Candidates(NO_ROWS, NO_VECTORS, None, NO_ROWS, hits)
        else:
            recalling.candidates = Candidates(vectors.ids, vectors.vectors, vectors.scores, vectors.rows, hits)
