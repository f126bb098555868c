"""Hybrid recall: vector similarity and FTS5 BM25, fused by score.

User text never reaches FTS5 as syntax: the query is cut into words (Unicode letters and digits
only), each quoted, and joined with OR. Quotes, ``*``, ``AND``/``NEAR(``, ``:`` and parentheses
are thus searched as the words they contain, or dropped when they contain none. Stop words are
left out of the full-text query (unless the query has nothing else): ORed, they match nearly
every memory and drown the words that matter. BM25 is FTS5's, re-weighed to a milder length
normalisation (b = 0.4 instead of FTS5's fixed 0.75; ``soften_length_normalisation``).

Fusion (measured on LoCoMo by ``bench/locomo.py``, where it beat reciprocal-rank fusion): the
candidates are the best rows of each path; each gets ``w * bm25 / max(bm25) + (1 - w) * cosine``
with ``w`` the embedder's ``text_weight``. With the embedder's ``feedback`` > 0 and BM25 hits, the
query vector is then moved toward the mean of the best three candidates (pseudo-relevance
feedback) and the candidates are re-scored with it: one small product over the candidates, never
over all rows.

Context (issue 25, measured the same way): the best candidates' thread neighbours (memories
retained with a ``thread``) join the candidates, and each candidate gains part of its best
neighbour's score (``with_neighbours``); with an embedder's ``window_weight`` (MiniLM), the cosine
of each candidate's context window, its vector with its neighbours', is added (``window_cosine``:
a second stage over the candidates from vectors already in the cache, no model call). A question
naming a day, month or year lifts the candidates dated inside it (``dated``: dates written in the
text, and relative times resolved at write time, engine/relative_time.py). A question naming
one of the tenant's speakers (memories retained with a ``speaker``; whole words, case aside)
lifts the candidates that speaker said or wrote (``spoken_by``, by the embedder's
``speaker_boost``): a question about a person is mostly answered by what that person said; with
an embedder's ``speaker_query_mix`` (MiniLM), such a question's vector is also blended with that
of the question without the name (``blend``), which otherwise pulls toward every memory that
calls the person by name. The best THREAD_DEPTH candidates then gain by how much of their
summed score their thread holds (``thread_support``: a session of several matches is about the
question). With an embedder's ``length_prior`` (the default one), the memories read for the
response, at least LENGTH_DEPTH, gain part of the best score by their length
(``with_length_prior``); with its ``names_prior`` (both embedders) they gain part of it by the
names they hold (``with_names_prior``: the particulars, places, people, works, that questions ask
for); and with its ``question_penalty`` those that end by asking a question lose part of theirs
(``asking``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import numpy as np

from mnemosyne.engine import conflicts, postings, relative_time
from mnemosyne.engine import limits as check
from mnemosyne.engine.ann import DEFAULT_THRESHOLD, RowScores
from mnemosyne.engine.embedder import Embedder, check_tenant_embedder
from mnemosyne.engine.index import approximate_candidates, vector_index
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.memories import memory_from_row
from mnemosyne.engine.postings import postings_cache
from mnemosyne.engine.question_form import asks_for_many
from mnemosyne.engine.terms import STOP_WORDS, capitalised_words, words
from mnemosyne.engine.types import Hit, Recalled, RecallMode
from mnemosyne.store.fts_stats import TextHits
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

MAX_QUERY_TERMS = 64
# The sparse product (vector_scores) when at most 1/4 of the query's dimensions are non-zero.
SPARSE_QUERY_FRACTION = 4
# Memories per block of the sparse product: the gathered block (used dimensions x block) stays in
# cache for the product that reads it.
SPARSE_BLOCK = 16384
FEEDBACK_DOCS = 3
# A candidate gains this share of its best thread neighbour's score (LoCoMo dev, hashing: 0.2 /
# 0.3 / 0.4 / 0.5 / 0.7 / 1.0 -> recall@10 0.693 / 0.707 / 0.717 / 0.714 / 0.719 / 0.699).
NEIGHBOUR_WEIGHT = 0.4
# Candidates whose thread neighbours are looked up, the best after fusion: two index seeks each
# (LoCoMo dev recall@10 the same from 20 to 100; 100 cost 0.25 ms more at 10k memories).
CONTEXT_DEPTH = 20
# A context window's vector: the memory's own plus this share of each neighbour's.
WINDOW_NEIGHBOURS = 0.5
# The candidates the length prior re-weighs: the memories read for the response are at least these.
LENGTH_DEPTH = 20
MIN_SCORE = 1e-9  # a hit's score stays above 0
# A candidate dated inside the question's span gains this share of the best score.
DATE_BOOST = 0.2
# Thread support: each of the best THREAD_DEPTH candidates gains this share of the best score
# times its thread's share of their summed score (the busiest thread's: all of it). LoCoMo dev
# recall@10, hashing (with the speaker at 0.5 and the question penalty) 0.759 / 0.769 / 0.769 at
# 0 / 0.1 / 0.15; MiniLM 0.782 -> 0.790 at 0.1 (multi-hop 0.500 -> 0.492).
THREAD_WEIGHT = 0.1
# The candidates thread support sums and lifts (0.769 at 50, 0.767 at 30, 0.765 at 20, hashing).
THREAD_DEPTH = 50
# The marks that end a question: ASCII, full-width (CJK), Arabic, Greek, Armenian, Ethiopic.
QUESTION_MARKS = "?\uff1f\u061f\u037e\u055e\u1367"
# The marks that end a sentence: a full stop, an exclamation mark (both also full-width, and the
# CJK full stop and Devanagari danda) or a question mark.
_SENTENCE_END = re.compile("[.!\uff0e\uff01\u3002\u0964" + QUESTION_MARKS + "]")
# BM25's k1 and b: FTS5's k1, and b = 0.4 (Anserini's default for passages) instead of FTS5's 0.75.
BM25_K1 = 1.2
FTS5_B = 0.75
BM25_B = 0.4

_IDENTIFIER_CHUNK = re.compile(r"\w+(?:[-./@+]\w+)+")
_EDGE_PUNCTUATION = "\"'()[]{}<>,;:!?*^~`"


def query_terms(query: str) -> list[str]:
    """The full-text terms of free text: identifier-like chunks (RF-88213, alice@example.com,
    v1.2) as one phrase, every other word alone; stop words dropped when anything else is left."""
    terms: list[str] = []
    for chunk in query.split():
        chunk = chunk.strip(_EDGE_PUNCTUATION)
        parts = [" ".join(words(chunk))] if _IDENTIFIER_CHUNK.fullmatch(chunk) else words(chunk)
        terms.extend(t for t in parts if t)
    terms = list(dict.fromkeys(terms))
    return ([t for t in terms if t not in STOP_WORDS] or terms)[:MAX_QUERY_TERMS]


def fts_match_expression(query: str, *, operator: str = "OR") -> str | None:
    """A safe FTS5 MATCH expression for free text, or None when the text has no words.

    With ``OR`` (the default) BM25 ranks documents matching more (and rarer) terms first; ``AND``
    matches only documents holding every term (see ``coordinate``).
    """
    return match_expression(query_terms(query), operator=operator)


def match_expression(terms: Sequence[str], *, operator: str = "OR") -> str | None:
    """``fts_match_expression`` of terms already taken from the text by ``query_terms``."""
    # Terms are made of \w characters and spaces only, so they cannot contain a quote.
    return f" {operator} ".join('"' + t + '"' for t in terms) if terms else None


class TextRanking(NamedTuple):
    """Full-text hits, best first: memory ids (int64) and their BM25 relevance (float64)."""

    ids: np.ndarray
    relevance: np.ndarray


def soften_length_normalisation(text: TextHits, *, b: float = BM25_B) -> TextRanking:
    """FTS5's hits re-weighted from its fixed length normalisation (b = 0.75) to ``b``, best first.

    BM25 divides a term's weight by ``tf + k1 * (1 - b + b * length / mean length)``. FTS5 fixes
    b = 0.75, tuned for long documents; a memory is a short passage, where the longer ones are not
    padded but hold more (a turn with a shared photo's caption, a detailed answer), and b = 0.75
    pushed them below short turns sharing one word with the query. For a term found once in a row
    (most terms of a short memory) multiplying by the ratio of the two denominators gives BM25 with
    ``b`` exactly; for repeated terms, nearly. Only the rows FTS5 returned are re-weighed (arrays
    of at most the search depth, never all memories). A row of unknown length is left as is.
    """
    ids = np.array(text.ids, dtype=np.int64)
    relevance = np.array(text.relevance, dtype=np.float64)
    average = text.average_length
    if average <= 0 or b == FTS5_B or not len(ids):
        return TextRanking(ids, relevance)
    lengths = np.array(text.lengths, dtype=np.float64)
    ratio = lengths / average
    factor = (1.0 + BM25_K1 * (1.0 - FTS5_B + FTS5_B * ratio)) / (1.0 + BM25_K1 * (1.0 - b + b * ratio))
    relevance = np.where(lengths > 0, relevance * factor, relevance)
    order = np.argsort(-relevance, kind="stable")
    return TextRanking(ids[order], relevance[order])


def coordinate(any_hits: TextRanking, all_hits: TextRanking) -> TextRanking:
    """Rank the memories holding EVERY query term above those holding only some.

    FTS5's BM25 gives a term found in more than half of the memories no weight at all (its IDF is
    clamped), so for "refund ticket" over a tenant where "ticket" is everywhere, a short memory
    with only "refund" outranked the one with both. Lifting the all-terms hits above the best
    any-term relevance restores coordination (as Lucene's coord factor did) without touching
    BM25's order within each group.
    """
    if not len(all_hits.ids):
        return any_hits
    lift = float(any_hits.relevance.max()) if len(any_hits.ids) else 0.0
    rest = ~in_sorted(np.sort(all_hits.ids), any_hits.ids)
    return TextRanking(
        np.concatenate([all_hits.ids, any_hits.ids[rest]]),
        np.concatenate([all_hits.relevance + lift, any_hits.relevance[rest]]),
    )


def in_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Which of ``needles`` the sorted ``haystack`` holds: one binary search each (np.isin, which
    sorts both, costs ~20 us over a hundred candidates)."""
    if not len(haystack):
        return np.zeros(len(needles), dtype=bool)
    found: np.ndarray = haystack[np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)] == needles
    return found


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a hundred ints at a third of its cost (a sort and a mask)."""
    values = np.sort(values)
    kept: np.ndarray = values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values
    return kept


@dataclass
class Candidate:
    memory_id: int
    score: float = 0.0
    vector_score: float = 0.0
    text_score: float = 0.0


class Ranking(Sequence[Candidate]):
    """Fused candidates, best first, held as arrays: a Candidate object is made only for the
    slice a caller reads (usually the first k of up to a hundred)."""

    def __init__(self, memory_ids: np.ndarray, scores: np.ndarray, cosine: np.ndarray, bm25: np.ndarray) -> None:
        self._columns = (memory_ids, scores, cosine, bm25)

    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(memory ids, scores, cosine, bm25), best first."""
        return self._columns

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...
    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [Candidate(*row) for row in zip(*(column[index].tolist() for column in self._columns))]
        return Candidate(*(column[index].item() for column in self._columns))


def vector_scores(query_vector: np.ndarray, matrix: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Cosine of every row (rows and query are unit vectors); -inf where ``allowed`` is False.

    A query vector with few non-zero dimensions, over a dimension-major matrix (index.py), reads
    only those dimensions' rows of the buffer: gathered a block of memories at a time, each block
    multiplied by the used weights in one BLAS call (10k memories: 115 -> 60 us; 100k: 1.8 ->
    1.1 ms against one pass per dimension). The loop is over blocks, never over memories.
    """
    nonzero = np.flatnonzero(query_vector)
    columns = matrix.T
    if len(nonzero) <= len(query_vector) // SPARSE_QUERY_FRACTION and columns.strides[1] == columns.itemsize:
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


def top_rows(scores: np.ndarray, limit: int) -> np.ndarray:
    """Row numbers of the ``limit`` best scores, best first, only rows scoring above 0.

    A row sharing no feature with the query (cosine <= 0) is not a match, only a filler.
    """
    limit = min(limit, len(scores))
    if limit <= 0:
        return np.zeros(0, dtype=np.int64)
    # The limit-th best value, then every row reaching it (ascending, so ties keep the lower
    # row): half the cost of an argpartition, which moves an index array along.
    threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
    top = np.flatnonzero(scores >= threshold)
    top = top[np.argsort(-scores[top], kind="stable")][:limit]
    return top[scores[top] > 0]


def fuse(
    query_vector: np.ndarray | None,
    ids: np.ndarray,
    vectors: np.ndarray,
    scores: np.ndarray | RowScores | None,
    vector_rows: np.ndarray,
    text_hits: TextRanking,
    *,
    text_weight: float,
    feedback: float,
    limit: int,
    neighbours_of: Callable[[np.ndarray], np.ndarray] | None = None,
    neighbour_weight: float = 0.0,
    window_weight: float = 0.0,
) -> Ranking:
    """Score fusion of the vector candidates (row numbers) and the BM25 hits (memory ids).

    ``scores`` holds the cosine of every row (None when the vector path is off); ``vectors`` holds
    every row's vector (row-major: feedback reads whole candidate vectors); ``ids`` is sorted
    ascending, so a BM25 hit's row is found by binary search. With ``neighbours_of`` (memory ids
    -> an (n, 2) array of (memory id, thread neighbour id) pairs), the best CONTEXT_DEPTH
    candidates' neighbours join the candidates and lend them part of their score
    (``with_neighbours``), and with
    ``window_weight`` their context windows are scored too (``window_cosine``). The best
    ``limit``, best first, ties by lower id.
    """
    text_ids, relevance = text_hits
    if scores is None:  # text only
        order = np.lexsort((text_ids, -relevance))[:limit]
        return Ranking(text_ids[order], relevance[order], np.zeros(len(order)), relevance[order])
    # Each BM25 hit's row; a hit the cache does not hold is dropped.
    text_rows = np.minimum(np.searchsorted(ids, text_ids), max(len(ids) - 1, 0))
    found = ids[text_rows] == text_ids if len(ids) else np.zeros(len(text_ids), dtype=bool)
    text_rows, relevance = text_rows[found], relevance[found]
    top = relevance.max() if len(relevance) else 0.0
    top_relevance = float(top) if top > 0 else 1.0
    # Sorted, and holding every text hit (each once): a hit's place in it is a binary search.
    rows = sorted_unique(np.concatenate([vector_rows, text_rows]))
    bm25 = np.zeros(len(rows))
    bm25[np.searchsorted(rows, text_rows)] = relevance
    text_part = text_weight * bm25 / top_relevance
    cosine = scores[rows].astype(np.float64)
    finite = np.isfinite(cosine)  # -inf: outside the filters
    direction = query_vector
    fused = text_part + (1.0 - text_weight) * np.maximum(cosine, 0.0)
    # Feedback only when BM25 took part: anchored by matching words, the best candidates pull the
    # query toward their wording (LoCoMo hybrid +0.020 recall@10); from the vector alone it
    # drifts (vector-only -0.040).
    if feedback > 0 and query_vector is not None and len(text_ids) and len(rows) > FEEDBACK_DOCS:
        best = rows[np.argsort(-fused, kind="stable")[:FEEDBACK_DOCS]]
        refined = query_vector + feedback * (vectors[best].sum(axis=0) / FEEDBACK_DOCS)  # their mean
        norm = float(np.sqrt(refined.dot(refined)))
        if norm > 0:
            direction = refined / norm
            refined_cosine = (vectors[rows] @ direction).astype(np.float64)
            fused = text_part + (1.0 - text_weight) * np.maximum(refined_cosine, 0.0)
    if neighbours_of is not None and (neighbour_weight > 0 or window_weight > 0) and len(rows):
        head = rows[np.argsort(-np.where(finite, fused, -np.inf), kind="stable")[:CONTEXT_DEPTH]]
        pairs = neighbours_of(ids[head])
        if len(pairs) or window_weight > 0:  # else nothing joins and nothing is lent
            pair_rows = np.minimum(np.searchsorted(ids, pairs), len(ids) - 1)
            pair_rows = pair_rows[(ids[pair_rows] == pairs).all(axis=1)]
            # The neighbours that were no candidate join, scored as candidates are (no text hit:
            # ``rows`` holds them all). ``rows`` is sorted: a binary search, not setdiff1d's sort.
            new = sorted_unique(pair_rows[:, 1])
            new = new[~in_sorted(rows, new)]
            if len(new):
                new_cosine = scores[new].astype(np.float64)
                along = new_cosine if direction is query_vector else (vectors[new] @ direction).astype(np.float64)
                rows = np.concatenate([rows, new])
                bm25 = np.concatenate([bm25, np.zeros(len(new))])
                cosine = np.concatenate([cosine, new_cosine])
                finite = np.concatenate([finite, np.isfinite(new_cosine)])
                fused = np.concatenate([fused, (1.0 - text_weight) * np.maximum(along, 0.0)])
            # (candidate, neighbour) positions in ``rows``, both ways round; a neighbour outside the
            # filters lends nothing.
            order = np.argsort(rows)
            both = order[np.searchsorted(rows[order], np.concatenate([pair_rows, pair_rows[:, ::-1]]))]
            both = both[finite[both[:, 1]]]
            lifted = with_neighbours(fused, both, neighbour_weight) if neighbour_weight > 0 else fused
            if window_weight > 0 and query_vector is not None:
                lifted = lifted + window_weight * window_cosine(query_vector, vectors[rows], both)
            fused = lifted
    # A vector candidate scores above 0 (top_rows); a text hit has bm25 > 0.
    keep = np.flatnonzero((fused > 0) & finite)
    memory_ids = ids[rows[keep]]
    # Best first, ties by lower id.
    order = np.lexsort((memory_ids, -fused[keep]))[:limit]
    keep = keep[order]
    return Ranking(memory_ids[order], fused[keep], cosine[keep], bm25[keep])


def with_neighbours(fused: np.ndarray, pairs: np.ndarray, weight: float) -> np.ndarray:
    """Each candidate's score plus ``weight`` x the best score of its thread neighbours.

    ``pairs`` holds (candidate, neighbour) positions in ``fused``. In a conversation the turn
    holding an answer often shares few words with the question while the turn beside it (the
    question that prompted it, the reply to it) matches: part of the neighbour's score lifts it
    into the top k."""
    best = np.zeros(len(fused))
    np.maximum.at(best, pairs[:, 0], fused[pairs[:, 1]])
    return fused + weight * best


def window_cosine(query_vector: np.ndarray, vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The second stage: each candidate's context window (its vector plus WINDOW_NEIGHBOURS x each
    thread neighbour's, from the vectors already in the cache: no model call) against the query,
    by cosine (0 when negative). ``pairs`` are (candidate, neighbour) rows of ``vectors``."""
    window = vectors.astype(np.float64)
    np.add.at(window, pairs[:, 0], WINDOW_NEIGHBOURS * vectors[pairs[:, 1]])
    norms = np.linalg.norm(window, axis=1)
    norms[norms == 0] = 1.0
    similarity: np.ndarray = np.maximum((window @ query_vector) / norms, 0.0)
    return similarity


def blend(full: np.ndarray, stripped: np.ndarray, share: float) -> np.ndarray:
    """The unit vector along ``(1 - share) x full + share x stripped`` (zero when that is zero):
    a query's vector with the words ``stripped`` lacks (a named speaker's) weighing less."""
    mixed = (1.0 - share) * full.astype(np.float64) + share * stripped.astype(np.float64)
    norm = float(np.sqrt(mixed.dot(mixed)))
    out: np.ndarray = (mixed / norm if norm > 0 else mixed).astype(np.float32)
    return out


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
    return lift(ranking, in_sorted(np.array(sorted(inside), dtype=np.int64), ranking.columns[0]), boost)


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
    _, thread_of = np.unique(threads[has], return_inverse=True)
    sums = np.bincount(thread_of, weights=head[has])
    share = np.zeros(len(scores))
    share[np.flatnonzero(has)] = sums[thread_of] / sums.max()
    lifted = scores + weight * float(scores.max()) * share
    order = np.lexsort((memory_ids, -lifted))
    return Ranking(memory_ids[order], lifted[order], cosine[order], bm25[order])


def lift(ranking: Ranking, chosen: np.ndarray, boost: float) -> Ranking:
    """The ``chosen`` candidates (a mask) gain ``boost`` x the best score; best first again (ties
    by lower id)."""
    if not chosen.any():
        return ranking
    memory_ids, scores, cosine, bm25 = ranking.columns
    lifted = scores + boost * float(scores.max()) * chosen
    order = np.lexsort((memory_ids, -lifted))
    return Ranking(memory_ids[order], lifted[order], cosine[order], bm25[order])


def with_length_prior(ranked: Sequence[Candidate], rows: Mapping[int, MemoryRow], weight: float) -> dict[int, float]:
    """Each read candidate's score plus ``weight`` x the best score x ln(its length / the mean
    length of the read ones, forgotten and merged ones aside), kept above 0: memory id -> score.
    Of two memories that match a question about as well, the longer one more often holds the
    answer (it says more: a detailed reply, a shared photo's caption), and BM25 and the cosine,
    both normalised for length, do not see that (LoCoMo dev recall@10 0.722 -> 0.737, multi-hop
    0.405 -> 0.426, hashing)."""
    live = {i: r for i, r in rows.items() if not r.forgotten and not r.merged_into}
    lengths = {c.memory_id: len(live[c.memory_id].body) for c in ranked if c.memory_id in live}
    if not lengths:
        return {}
    mean = sum(lengths.values()) / len(lengths)
    top = max(c.score for c in ranked)
    return {
        c.memory_id: max(c.score + weight * top * math.log(max(lengths[c.memory_id], 1) / mean), MIN_SCORE)
        for c in ranked
        if c.memory_id in lengths
    }


def with_names_prior(
    ranked: Sequence[Candidate],
    rows: Mapping[int, MemoryRow],
    scores: Mapping[int, float],
    weight: float,
    known: frozenset[str],
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) plus ``weight`` x the best
    score x ln(1 + the names it holds): the distinct words written as names are
    (``terms.capitalised_words``), the tenant's speakers' (``known``) and the calendar's aside:
    memory id -> score, for the changed ones and ``scores``'. A question asks for particulars
    (which cities, which books, whose name), and of the memories that match it about as well the
    one naming places, people or works more often holds them."""
    out = dict(scores)
    if not ranked:
        return out
    top = max(c.score for c in ranked)
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is None or row.forgotten or row.merged_into:
            continue
        names = len(capitalised_words(row.body) - known)
        if names:
            out[c.memory_id] = scores.get(c.memory_id, c.score) + weight * top * math.log1p(names)
    return out


def best_hits(
    ranked: Sequence[Candidate], rows: Mapping[int, MemoryRow], scores: Mapping[int, float], k: int
) -> list[tuple[Candidate, MemoryRow, float]]:
    """The best ``k`` read candidates (by ``scores``, else their own score; ties by the lower id)
    with their rows and final scores: those newer than the snapshot, forgotten or merged away by
    Dedup left out, superseded ones (CONFLICTS) weighed below current facts."""
    best = []
    for candidate in ranked:
        row = rows.get(candidate.memory_id)
        if row is None or row.forgotten or row.merged_into:
            continue
        score = scores.get(candidate.memory_id, candidate.score)
        if row.superseded_by:
            score *= conflicts.SUPERSEDED_WEIGHT
        best.append((candidate, row, score))
    best.sort(key=lambda b: (-b[2], b[1].id))
    return best[:k]


def asks(text: str) -> bool:
    """Whether ``text`` ends by asking: its last sentence-ending mark is a question mark."""
    ends = _SENTENCE_END.findall(text)
    return bool(ends) and ends[-1] in QUESTION_MARKS


def asking(
    ranked: Sequence[Candidate], rows: Mapping[int, MemoryRow], scores: Mapping[int, float], weight: float
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) times ``1 - weight`` when its
    memory ends by asking a question: memory id -> score, for the changed ones and ``scores``'.
    A memory that asks ("What's her name?") seldom holds an answer: of the best 30 LoCoMo dev
    candidates 1.9% of those ending with a question are cited as evidence against 4.1% of the
    others (hashing; MiniLM 1.5% against 4.6%). It still lent its score to its thread neighbours
    (``with_neighbours`` ran before)."""
    out = dict(scores)
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is not None and asks(row.body):
            out[c.memory_id] = max(scores.get(c.memory_id, c.score) * (1.0 - weight), MIN_SCORE)
    return out


class Recall:
    """The whole recall algorithm, start to end: validation, the two paths over one read
    snapshot, fusion, supersession, and the response budget."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        embedder: Embedder,
        limits: Limits,
        steps_off: frozenset[str] = frozenset(),
        ann_threshold: int = DEFAULT_THRESHOLD,
    ) -> None:
        self.pool = pool
        self.ann_threshold = ann_threshold  # memories from which the approximate index serves (engine/ann.py)
        self.embedder = embedder
        self.limits = limits
        # Steps switched off (a test seam, for the ablation; none in production).
        self.neighbour_weight = 0.0 if "neighbours" in steps_off else NEIGHBOUR_WEIGHT
        self.window_weight = 0.0 if "window" in steps_off else embedder.window_weight
        self.date_boost = 0.0 if "dates" in steps_off else DATE_BOOST
        self.length_prior = 0.0 if "length" in steps_off else embedder.length_prior
        self.list_length_prior = 0.0 if "lists" in steps_off else embedder.list_length_prior
        self.speaker_boost = 0.0 if "speaker" in steps_off else embedder.speaker_boost
        self.thread_weight = 0.0 if "threads" in steps_off else THREAD_WEIGHT
        self.question_penalty = 0.0 if "questions" in steps_off else embedder.question_penalty
        self.speaker_query_mix = 0.0 if "speaker_query" in steps_off else embedder.speaker_query_mix
        self.names_prior = 0.0 if "names" in steps_off else embedder.names_prior
        # BM25 from the postings cache (off: FTS5 scores every recall; the same hits).
        self.postings = "postings" not in steps_off

    def __call__(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 5,
        scopes: Sequence[str] = (),
        metadata_equals: Mapping[str, str] | None = None,
        mode: RecallMode = RecallMode.HYBRID,
    ) -> Recalled:
        """The best ``k`` memories for ``query`` (hybrid by default), current facts first, within
        the response budget (what does not fit is named in ``omitted_memory_ids``). One read
        transaction: a memory committed before the call began is a candidate, a forgotten or
        merged one never appears."""
        check.validate_query(query, self.limits)
        k = check.validate_k(k, self.limits)
        scopes = sorted({check.validate_scope(s) for s in scopes})
        filters = check.validate_metadata(metadata_equals or {}, self.limits, field="metadata_equals")
        # Text only: no embedding (the text path never reads it).
        query_vector = self._query_vector(tenant, query) if mode is not RecallMode.TEXT else None
        terms = query_terms(query)
        depth = max(4 * k, 50)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return Recalled([])
            index = vector_index(store, self.embedder.dim)
            with store.read() as txn:
                check_tenant_embedder(txn, self.embedder, write=False)
                state = txn.index_state()  # one read for both caches
                ids = np.zeros(0, dtype=np.int64)
                vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)
                scores: np.ndarray | RowScores | None = None
                vector_rows = np.zeros(0, dtype=np.int64)
                text_hits = TextRanking(np.zeros(0, dtype=np.int64), np.zeros(0))
                if query_vector is not None:
                    view = index.sync_view(txn, state)
                    ids, matrix, vectors = view
                    allowed = None
                    if scopes or filters:
                        allowed = np.isin(ids, np.array(txn.filtered_ids(scopes, filters), dtype=np.int64))
                    # A large tenant's candidates come from its approximate index (a filtered
                    # recall, or one while the index is made, scans exactly).
                    found = None
                    if allowed is None:
                        found = approximate_candidates(
                            store,
                            index,
                            view,
                            query_vector,
                            depth,
                            self.ann_threshold,
                            alone=mode is RecallMode.VECTOR or not terms,
                        )
                    if found is None:
                        scores = vector_scores(query_vector, matrix, allowed)
                        vector_rows = top_rows(scores, depth)
                    else:
                        scores, vector_rows = found
                if mode is not RecallMode.VECTOR and terms:
                    text_hits = self._text_hits(store, txn, state, terms, depth, scopes, filters)
                fused = fuse(
                    query_vector,
                    ids,
                    vectors,
                    scores,
                    vector_rows,
                    text_hits,
                    text_weight=self.embedder.text_weight,
                    feedback=self.embedder.feedback,
                    limit=2 * depth,
                    neighbours_of=index.thread_neighbours,
                    neighbour_weight=self.neighbour_weight,
                    window_weight=self.window_weight,
                )
                # A question naming a day, month or year: the candidates dated inside it first.
                span = relative_time.query_span(query) if self.date_boost > 0 else None
                # Not for text only (its LoCoMo figures are without it).
                if span is not None and scores is not None and len(fused):
                    facts, occurred = txn.dates(fused.columns[0].tolist())
                    fused = dated(fused, facts, occurred, span, self.date_boost)
                # A question naming a speaker: what that speaker said first (not for text only either).
                if self.speaker_boost > 0 and scores is not None and len(fused):
                    named = index.named_speakers(query)
                    if len(named):
                        fused = spoken_by(fused, index.speakers_of(fused.columns[0]), named, self.speaker_boost)
                # The candidates of threads holding several good matches first.
                if self.thread_weight > 0 and scores is not None and len(fused):
                    threads = index.threads_of(fused.columns[0][:THREAD_DEPTH])
                    fused = thread_support(fused, threads, self.thread_weight)
                # Read the first k memories; widen the window (CONFLICTS) only until it holds k
                # current ones (superseded ones rank after them, merged and forgotten ones never
                # appear, rows newer than this snapshot are invisible) or the candidates run out.
                # Hybrid only (its LoCoMo figures are with it).
                prior = self.length_prior if mode is RecallMode.HYBRID else 0.0
                # A list or count question: its answers are the memories that say more.
                if mode is RecallMode.HYBRID and self.list_length_prior > 0 and asks_for_many(query):
                    prior = self.list_length_prior
                penalty = self.question_penalty if mode is RecallMode.HYBRID else 0.0
                names = self.names_prior if mode is RecallMode.HYBRID else 0.0
                deep = prior > 0 or penalty > 0 or names > 0
                window, fetched, rows = (max(k, LENGTH_DEPTH) if deep else k), 0, {}
                while True:
                    rows.update(txn.memories_by_ids(fused.columns[0][fetched:window].tolist(), with_details=False))
                    fetched = window
                    current = sum(1 for r in rows.values() if conflicts.is_current(r))
                    if current >= k or window >= len(fused):
                        break
                    window *= 2
                ranked = fused[:window]
                lifted = with_length_prior(ranked, rows, prior) if prior > 0 else {}
                if names > 0:
                    known = index.speaker_words() | relative_time.CALENDAR_WORDS
                    lifted = with_names_prior(ranked, rows, lifted, names, known)
                if penalty > 0:  # after the prior: it scales the prior's score
                    lifted = asking(ranked, rows, lifted, penalty)
                best = best_hits(ranked, rows, lifted, k)
                # Facts and triples only for the memories returned, in the same snapshot.
                txn.fill_details([row for _, row, _ in best])
        hits = [Hit(memory_from_row(row), score, c.vector_score, c.text_score) for c, row, score in best]
        kept = check.within_budget([check.memory_bytes(h.memory) for h in hits])
        return Recalled(hits[:kept], tuple(h.memory.id for h in hits[kept:]))

    def _query_vector(self, tenant: str, query: str) -> np.ndarray:
        """The query's vector: with the embedder's ``speaker_query_mix``, when the query names one
        of the tenant's speakers, blended with the vector of the query without their names (both
        texts in one model call, outside any transaction: the names are looked up in a read
        transaction of their own, so a restart or a cache behind the file never changes them)."""
        without = self._without_named_speakers(tenant, query) if self.speaker_query_mix > 0 else None
        if without is None:
            vector: np.ndarray = self.embedder.embed([query])[0]
            return vector
        full, stripped = self.embedder.embed([query, without])
        return blend(full, stripped, self.speaker_query_mix)

    def _without_named_speakers(self, tenant: str, query: str) -> str | None:
        """``query`` without the tenant's speakers it names (``VectorIndex.without_named_speakers``),
        or None when it names none (or the tenant does not exist)."""
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return None
            index = vector_index(store, self.embedder.dim)
            with store.read() as txn:
                check_tenant_embedder(txn, self.embedder, write=False)
                index.sync_view(txn)
            return index.without_named_speakers(query)

    def _text_hits(
        self,
        store: TenantStore,
        txn: ReadTxn,
        state: tuple[int, int],
        terms: Sequence[str],
        depth: int,
        scopes: Sequence[str],
        filters: dict[str, str],
    ) -> TextRanking:
        """The full-text path: BM25 from the tenant's postings cache when it can answer exactly
        (engine/postings.py), else FTS5's; the hits holding every term lifted (``coordinate``)."""
        # Coordination needs at least two terms; past six, hardly any memory holds them all.
        coordinated = 2 <= len(terms) <= 6
        cached = None
        if self.postings and not scopes and not filters:
            view = postings_cache(store).sync(txn, state)
            phrases = postings.phrases(view, terms) if view is not None else None
            if view is not None and phrases is not None:
                cached = postings.search(view, phrases, limit=depth)
        any_terms = cached.any_terms if cached else self._fts(txn, terms, "OR", depth, scopes, filters)
        text_hits = soften_length_normalisation(any_terms)
        # Coordination matters only when more memories match than BM25's cut keeps (then its
        # clamped IDF decides which get in); without the cache it costs a second query.
        if coordinated and len(text_hits.ids) >= depth:
            all_terms = cached.all_terms if cached else self._fts(txn, terms, "AND", depth, scopes, filters)
            text_hits = coordinate(text_hits, soften_length_normalisation(all_terms))
        return text_hits

    @staticmethod
    def _fts(
        txn: ReadTxn, terms: Sequence[str], operator: str, depth: int, scopes: Sequence[str], filters: dict[str, str]
    ) -> TextHits:
        """FTS5's own best ``depth`` rows for the terms joined by ``operator``."""
        match = match_expression(terms, operator=operator)
        assert match is not None  # terms is not empty
        return txn.fts_search(match, limit=depth, scopes=scopes, metadata_equals=filters)
