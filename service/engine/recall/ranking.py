"""A recall's rankings, best first, held as arrays (BM25's hits, the fused candidates); and the
array helpers the steps share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a hundred ints, cheaper: a sort and a mask."""
    values = np.sort(values)
    kept: np.ndarray = values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values
    return kept


class TextRanking(NamedTuple):
    """Full-text hits, best first: memory ids (int64), their BM25 relevance (float64) and their
    token counts (float64; 0 when unknown)."""

    ids: np.ndarray
    relevance: np.ndarray
    lengths: np.ndarray

    @classmethod
    def empty(cls) -> TextRanking:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))


@dataclass
class Candidate:
    memory_id: int
    score: float = 0.0
    vector_score: float = 0.0
    text_score: float = 0.0


class Ranking(Sequence[Candidate]):
    """Ranked candidates, best first, held as arrays: a Candidate object is made only for the
    slice a caller reads (usually the first k of up to a hundred)."""

    def __init__(self, memory_ids: np.ndarray, scores: np.ndarray, cosine: np.ndarray, bm25: np.ndarray) -> None:
        self._columns = (memory_ids, scores, cosine, bm25)

    @classmethod
    def empty(cls) -> Ranking:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(memory ids, scores, cosine, bm25), best first."""
        return self._columns

    @property
    def memory_ids(self) -> np.ndarray:
        return self._columns[0]

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...
    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [Candidate(*row) for row in zip(*(column[index].tolist() for column in self._columns))]
        return Candidate(*(column[index].item() for column in self._columns))


def lift(ranking: Ranking, chosen: np.ndarray, boost: float) -> Ranking:
    """The ``chosen`` candidates (a mask) gain ``boost`` x the best score; best first again (ties
    by lower id)."""
    if not chosen.any():
        return ranking
    memory_ids, scores, cosine, bm25 = ranking.columns
    lifted = scores + boost * float(scores.max()) * chosen
    return reordered(memory_ids, lifted, cosine, bm25)


def reordered(memory_ids: np.ndarray, scores: np.ndarray, cosine: np.ndarray, bm25: np.ndarray) -> Ranking:
    """The ranking of candidates whose scores changed: best first again, ties by the lower id."""
    order = np.lexsort((memory_ids, -scores))
    return Ranking(memory_ids[order], scores[order], cosine[order], bm25[order])
