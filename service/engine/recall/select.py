"""The read and select steps: the rows of the best candidates, read in the recall's snapshot, and
the best ``k`` of them. Superseded memories (CONFLICTS) rank after current facts, merged,
forgotten and expired ones never appear, rows newer than the snapshot are invisible."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mnemosyne.engine import conflicts
from mnemosyne.engine.recall.priors import Prior
from mnemosyne.engine.recall.ranking import Candidate, Ranking
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Recalling
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.store.memory_rows import MemoryRow


def read_rows(
    ranking: Ranking, fetch: Callable[[list[int]], Mapping[int, MemoryRow]], k: int, window: int
) -> tuple[list[Candidate], dict[int, MemoryRow]]:
    """The first ``window`` candidates and their rows (``fetch``: memory ids -> the rows the
    snapshot holds), the window doubled until it holds ``k`` current memories or the candidates
    run out: the rows are read only as far as the response needs."""
    fetched = 0
    rows: dict[int, MemoryRow] = {}
    while True:
        rows.update(fetch(ranking.memory_ids[fetched:window].tolist()))
        fetched = window
        current = sum(1 for r in rows.values() if conflicts.is_current(r))
        if current >= k or window >= len(ranking):
            break
        window *= 2
    return ranking[:window], rows


def best_hits(
    ranked: Sequence[Candidate],
    rows: Mapping[int, MemoryRow],
    scores: Mapping[int, float],
    k: int,
    superseded_weight: float,
) -> list[tuple[Candidate, MemoryRow, float]]:
    """The best ``k`` read candidates (by ``scores``, else their own score; ties by the lower id)
    with their rows and final scores: those newer than the snapshot, forgotten or merged away by
    Dedup left out, superseded ones weighed by ``superseded_weight``."""
    best = []
    for candidate in ranked:
        row = rows.get(candidate.memory_id)
        if row is None or row.forgotten or row.merged_into:
            continue
        score = scores.get(candidate.memory_id, candidate.score)
        if row.superseded_by:
            score *= superseded_weight
        best.append((candidate, row, score))
    best.sort(key=lambda b: (-b[2], b[1].id))
    return best[:k]


class Read:
    """The rows of the best candidates: the first ``k``, at least ``read_depth`` when a prior
    re-weighs this query's (so it can lift one from below the first ``k``)."""

    name = RecallStep.READ

    def __init__(self, settings: RecallSettings, priors: Sequence[Prior]) -> None:
        self.depth = settings.read_depth
        self.priors = priors
        self.always_deep = any(prior.every_question for prior in priors)

    def __call__(self, recalling: Recalling) -> None:
        query, txn = recalling.query, recalling.snapshot.txn
        deep = self.always_deep or any(prior.applies(query) for prior in self.priors)
        window = max(query.k, self.depth) if deep else query.k

        def fetch(ids: list[int]) -> dict[int, MemoryRow]:
            rows = txn.memories_by_ids(ids, with_details=False)
            # Expired memories are hidden (engine/expiry.py): never read, so never a hit.
            return {i: r for i, r in rows.items() if r.expires_at is None or r.expires_at > query.now}

        recalling.read, recalling.rows = read_rows(recalling.ranking, fetch, query.k, window)


class Select:
    """The best ``k`` read memories, current facts first; their facts and triples read in the
    same snapshot."""

    name = RecallStep.SELECT

    def __init__(self, settings: RecallSettings) -> None:
        self.superseded_weight = settings.superseded_weight

    def __call__(self, recalling: Recalling) -> None:
        best = best_hits(recalling.read, recalling.rows, recalling.scores, recalling.query.k, self.superseded_weight)
        recalling.snapshot.txn.fill_details([row for _, row, _ in best])
        recalling.best = best
