"""What recall's steps read and write: the question (``Query``), the read snapshot they all see
(``Snapshot``), and one recall's working state (``Recalling``), which each step updates in turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from mnemosyne.engine.ann import RowScores
from mnemosyne.engine.answer_kinds import AnswerKind
from mnemosyne.engine.index import VectorIndex
from mnemosyne.engine.recall.ranking import Candidate, Ranking, TextRanking
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.types import RecallMode
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.tenant_store import ReadTxn, TenantStore


class Query(NamedTuple):
    """What a recall asks, validated."""

    text: str
    terms: list[str]  # its full-text terms (text.query_terms)
    k: int
    depth: int  # each path's candidates
    scopes: list[str]
    filters: dict[str, str]
    mode: RecallMode
    vector: np.ndarray | None  # its vector (None: text only, no vector path)
    # A list or count question (question_form.asks_for_many); read only when the lists step runs.
    asks_for_many: bool = False
    # The kind of answer it asks for (answer_kinds.asked_kind); read only when the answers step runs.
    asks_for: AnswerKind | None = None
    # The engine's time of the recall: a memory expired by then is never read (engine/expiry.py).
    now: float = float("inf")


@dataclass(frozen=True)
class Snapshot:
    """One read transaction of the tenant, and its caches brought up to it."""

    store: TenantStore
    txn: ReadTxn
    index: VectorIndex
    state: tuple[int, int]  # txn.index_state(): read once for both caches


# The steps never change an array in place: the empty values are shared.
NO_PAIRS = np.zeros((0, 2), dtype=np.int64)


class Candidates(NamedTuple):
    """Both paths' candidates. ``ids`` is every row of the vector cache (ascending: a memory's
    row is found by binary search), ``vectors`` every row's vector (row-major)."""

    ids: np.ndarray
    vectors: np.ndarray
    scores: np.ndarray | RowScores | None  # the cosine of every row; None: no vector path
    vector_rows: np.ndarray  # the vector path's best rows, best first
    text_hits: TextRanking  # BM25's best hits, best first


class Pool(NamedTuple):
    """The fused candidates before they are ranked, by their row in the vector cache."""

    rows: np.ndarray
    scores: np.ndarray  # fused
    cosine: np.ndarray  # the vector path's (-inf: outside the filters)
    bm25: np.ndarray
    finite: np.ndarray  # inside the filters
    refined: np.ndarray | None  # the query vector after feedback (None: none)
    # (candidate, thread neighbour) positions in ``rows``, both ways round (the context step's)
    pairs: np.ndarray = NO_PAIRS

    @classmethod
    def empty(cls) -> Pool:
        nothing = np.zeros(0)
        return cls(np.zeros(0, dtype=np.int64), nothing, nothing, nothing, np.zeros(0, dtype=bool), None)

    def ranking(self, ids: np.ndarray, limit: int) -> Ranking:
        """The best ``limit`` candidates, best first, ties by the lower id: those scoring above 0
        (a vector candidate does, ``top_rows``; so does a text hit) inside the filters."""
        keep = np.flatnonzero((self.scores > 0) & self.finite)
        memory_ids = ids[self.rows[keep]]
        order = np.lexsort((memory_ids, -self.scores[keep]))[:limit]
        keep = keep[order]
        return Ranking(memory_ids[order], self.scores[keep], self.cosine[keep], self.bm25[keep])


NO_ROWS = np.zeros(0, dtype=np.int64)
NO_VECTORS = np.zeros((0, 0), dtype=np.float32)
NO_HITS = TextRanking.empty()
NO_CANDIDATES = Candidates(NO_ROWS, NO_VECTORS, None, NO_ROWS, NO_HITS)
EMPTY_POOL = Pool.empty()
EMPTY_RANKING = Ranking.empty()


@dataclass(slots=True)
class Recalling:
    """One recall's working state: each step reads what the steps before it wrote."""

    query: Query
    snapshot: Snapshot
    candidates: Candidates = NO_CANDIDATES  # candidates (the first step)
    pool: Pool = EMPTY_POOL  # fuse, context, neighbours, window
    ranking: Ranking = EMPTY_RANKING  # rank, then the lifts
    read: list[Candidate] = field(default_factory=list)  # read: the best candidates whose rows are read
    rows: dict[int, MemoryRow] = field(default_factory=dict)  # read
    scores: dict[int, float] = field(default_factory=dict)  # the priors: the read candidates' new scores
    best: list[tuple[Candidate, MemoryRow, float]] = field(default_factory=list)  # select


class Step(Protocol):
    """One step of a recall: it reads and writes ``Recalling``."""

    @property
    def name(self) -> RecallStep: ...

    def __call__(self, recalling: Recalling) -> None: ...
