"""The lifts of the ranked candidates by what the question names (every mode but text only):
a day, month or year lifts the candidates dated inside it (``dates``: dates written in the text,
relative times resolved at write time by engine/relative_time.py, and the day a memory happened);
one of the tenant's speakers (memories retained with a ``speaker``; whole words, case aside) lifts
what that speaker said or wrote (``speaker``: a question about a person is mostly answered by
what that person said); and the best candidates gain by how much of their summed score their
thread holds (``threads``: a session of several matches is about the question)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mnemosyne.engine import relative_time
from mnemosyne.engine.recall.ranking import Ranking, lift, reordered, sorted_unique
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Recalling
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.sorted_ids import in_sorted


def dated(
    ranking: Ranking,
    facts: Sequence[tuple[int, str]],
    occurred: Sequence[tuple[int, int]],
    span: relative_time.QuerySpan,
    boost: float,
) -> Ranking:
    """Candidates holding a date inside the question's span (``facts``: a date written in the
    text, or a relative time resolved at write time) or that happened on a day inside it
    (``occurred``: their ``occurred_at``) gain ``boost`` x the best score; best first again."""
    inside = set()
    for memory_id, normalized in facts:
        covered = relative_time.fact_span(normalized)
        if covered is not None and span.overlaps(covered):
            inside.add(memory_id)
    for memory_id, occurred_at_us in occurred:
        day = relative_time.day_of(occurred_at_us)
        if span.overlaps((day, day)):
            inside.add(memory_id)
    if not inside:
        return ranking
    return lift(ranking, in_sorted(np.array(sorted(inside), dtype=np.int64), ranking.memory_ids), boost)


def spoken_by(ranking: Ranking, speakers: np.ndarray, named: np.ndarray, boost: float) -> Ranking:
    """Candidates whose speaker (``speakers``: a code per candidate, -1 for none) is one the
    question names (``named``, sorted codes) gain ``boost`` x the best score; best first again."""
    return lift(ranking, in_sorted(named, speakers), boost)


def thread_support(ranking: Ranking, threads: np.ndarray, weight: float) -> Ranking:
    """Each of the first ``len(threads)`` candidates (``threads``: their thread codes, -1 for
    none) gains ``weight`` x the best score x its thread's share of their summed score, relative
    to the busiest thread's; best first again (ties by lower id). A thread (a session, a ticket)
    holding several good matches is about what the question asks, so each of its candidates is
    more likely the answer than an equal match alone in its thread (passage retrieval's document
    score, with the thread as the document). Without threads, the ranking is unchanged."""
    has = threads >= 0
    if not has.any():
        return ranking
    memory_ids, scores, cosine, bm25 = ranking.columns
    head = scores[: len(threads)]
    codes = threads[has]
    thread_of = np.searchsorted(sorted_unique(codes), codes)  # np.unique's inverse, for less
    sums = np.bincount(thread_of, weights=head[has])
    share = np.zeros(len(scores))
    share[np.flatnonzero(has)] = sums[thread_of] / sums.max()
    return reordered(memory_ids, scores + weight * float(scores.max()) * share, cosine, bm25)


class LiftDated:
    """A question naming a day, month or year: the candidates dated inside it first."""

    name = RecallStep.DATES

    def __init__(self, settings: RecallSettings) -> None:
        self.boost = settings.date_boost

    def __call__(self, recalling: Recalling) -> None:
        span = relative_time.query_span(recalling.query.text)
        if span is not None and len(recalling.ranking):
            facts, occurred = recalling.snapshot.txn.dates(recalling.ranking.memory_ids.tolist())
            recalling.ranking = dated(recalling.ranking, facts, occurred, span, self.boost)


class LiftSpoken:
    """A question naming one of the tenant's speakers: what that speaker said first."""

    name = RecallStep.SPEAKER

    def __init__(self, settings: RecallSettings) -> None:
        self.boost = settings.speaker_boost

    def __call__(self, recalling: Recalling) -> None:
        if not len(recalling.ranking):
            return
        index = recalling.snapshot.index
        named = index.named_speakers(recalling.query.text)
        if len(named):
            speakers = index.speakers_of(recalling.ranking.memory_ids)
            recalling.ranking = spoken_by(recalling.ranking, speakers, named, self.boost)


class SupportThreads:
    """The candidates of threads holding several good matches first."""

    name = RecallStep.THREADS

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.thread_weight
        self.depth = settings.thread_depth

    def __call__(self, recalling: Recalling) -> None:
        if len(recalling.ranking):
            threads = recalling.snapshot.index.threads_of(recalling.ranking.memory_ids[: self.depth])
            recalling.ranking = thread_support(recalling.ranking, threads, self.weight)
