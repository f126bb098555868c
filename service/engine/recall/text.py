"""The full-text path: the query's terms, BM25's best hits, and their re-weighing.

User text never reaches FTS5 as syntax: the query is cut into words (Unicode letters and digits
only), each quoted, and joined with OR. Quotes, ``*``, ``AND``/``NEAR(``, ``:`` and parentheses
are thus searched as the words they contain, or dropped when they contain none. Stop words are
left out of the full-text query (unless the query has nothing else): ORed, they match nearly
every memory and drown the words that matter. BM25 is FTS5's (or the same scores from the
tenant's postings cache, engine/postings.py), re-weighed to a milder length normalisation
(``soften_length_normalisation``), the hits holding every term first (``coordinate``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from mnemosyne.engine import phrase_postings, postings
from mnemosyne.engine.postings import postings_cache
from mnemosyne.engine.recall.ranking import TextRanking
from mnemosyne.engine.recall.state import Query, Snapshot
from mnemosyne.engine.sorted_ids import in_sorted
from mnemosyne.engine.terms import STOP_WORDS, words
from mnemosyne.store.fts_stats import TextHits
from mnemosyne.store.tenant_store import ReadTxn
from mnemosyne.store.unspaced_scripts import letter_pairs

MAX_QUERY_TERMS = 64
# BM25's k1 and b as FTS5 computes them (fts5_aux.c): what soften_length_normalisation converts from.
BM25_K1 = 1.2
FTS5_B = 0.75

_IDENTIFIER_CHUNK = re.compile(r"\w+(?:[-./@+]\w+)+")
_EDGE_PUNCTUATION = "\"'()[]{}<>,;:!?*^~`"


def query_terms(query: str) -> list[str]:
    """The full-text terms of free text: identifier-like chunks (RF-88213, alice@example.com,
    v1.2) as one phrase, every other word alone (a script without spaces as its letter pairs, as
    the index spells it); stop words dropped when anything else is left."""
    terms: list[str] = []
    for chunk in letter_pairs(query).split():
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


def soften_length_normalisation(text: TextHits, *, b: float) -> TextRanking:
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
    lengths = np.array(text.lengths, dtype=np.float64)
    average = text.average_length
    if average <= 0 or b == FTS5_B or not len(ids):
        return TextRanking(ids, relevance, lengths)
    # The two denominators at tf = 1, each ``constant + slope * length``.
    fts5 = (1.0 + BM25_K1 * (1.0 - FTS5_B)) + (BM25_K1 * FTS5_B / average) * lengths
    ours = (1.0 + BM25_K1 * (1.0 - b)) + (BM25_K1 * b / average) * lengths
    fts5 /= ours
    fts5[lengths <= 0] = 1.0
    relevance *= fts5
    order = (-relevance).argsort(kind="stable")
    return TextRanking(ids[order], relevance[order], lengths[order])


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
        np.concatenate([all_hits.lengths, any_hits.lengths[rest]]),
    )


def text_hits(
    query: Query,
    snapshot: Snapshot,
    allowed: np.ndarray | None,
    *,
    b: float,
    max_coordinated_terms: int,
    from_postings: bool,
) -> TextRanking:
    """The full-text path: BM25 from the tenant's postings cache when it can answer exactly
    (engine/postings.py; ``from_postings``), else FTS5's, re-weighed to ``b``; the hits holding
    every term lifted (``coordinate``). ``allowed``: a filtered recall's memory ids, sorted."""
    terms, depth = query.terms, query.depth
    coordinated = 2 <= len(terms) <= max_coordinated_terms
    cached = None
    if from_postings:
        view = postings_cache(snapshot.store).sync(snapshot.txn, snapshot.state)
        phrases = phrase_postings.phrases(terms) if view is not None else None
        if view is not None and phrases is not None:
            texts = snapshot.txn.indexed_texts
            cached = postings.search(view, phrases, limit=depth, texts=texts, allowed=allowed)
    any_terms = cached.any_terms if cached else _fts(query, snapshot.txn, "OR")
    hits = soften_length_normalisation(any_terms, b=b)
    # Coordination matters only when more memories match than BM25's cut keeps (then its
    # clamped IDF decides which get in); without the cache it costs a second query.
    if coordinated and len(hits.ids) >= depth:
        all_terms = cached.all_terms if cached else _fts(query, snapshot.txn, "AND")
        hits = coordinate(hits, soften_length_normalisation(all_terms, b=b))
    return hits


def _fts(query: Query, txn: ReadTxn, operator: str) -> TextHits:
    """FTS5's own best ``depth`` rows for the terms joined by ``operator``."""
    match = match_expression(query.terms, operator=operator)
    assert match is not None  # terms is not empty
    return txn.fts_search(match, limit=query.depth, scopes=query.scopes, metadata_equals=query.filters)
