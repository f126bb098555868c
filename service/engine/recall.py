"""Hybrid recall: vector similarity and FTS5 BM25, fused by reciprocal rank.

User text never reaches FTS5 as syntax: the query is cut into words (Unicode letters and digits
only), each quoted, and joined with OR. Quotes, ``*``, ``AND``/``NEAR(``, ``:`` and parentheses
are thus searched as the words they contain, or dropped when they contain none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mnemosyne.engine.embedder import words

RRF_K = 60.0
MAX_QUERY_TERMS = 64


_IDENTIFIER_CHUNK = re.compile(r"\w+(?:[-./@+]\w+)+")
_EDGE_PUNCTUATION = "\"'()[]{}<>,;:!?*^~`"


def fts_match_expression(query: str) -> str | None:
    """A safe FTS5 MATCH expression for free text, or None when the text has no words.

    Identifier-like chunks (RF-88213, alice@example.com, v1.2) become one phrase, so their parts
    must appear together; every other word is its own term. Terms are ORed: BM25 ranks documents
    matching more (and rarer) terms first.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for chunk in query.split():
        chunk = chunk.strip(_EDGE_PUNCTUATION)
        parts = [" ".join(words(chunk))] if _IDENTIFIER_CHUNK.fullmatch(chunk) else words(chunk)
        for term in parts:
            if term and term not in seen:
                seen.add(term)
                # Terms are made of \w characters and spaces only, so they cannot contain a quote.
                terms.append('"' + term + '"')
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return " OR ".join(terms[:MAX_QUERY_TERMS]) if terms else None


@dataclass
class Candidate:
    memory_id: int
    score: float = 0.0
    vector_score: float = 0.0
    text_score: float = 0.0


def top_vector_hits(
    query_vector: np.ndarray,
    ids: np.ndarray,
    matrix: np.ndarray,
    *,
    limit: int,
    allowed: np.ndarray | None,
) -> list[tuple[int, float]]:
    """(memory id, cosine) of the best ``limit`` rows; ``allowed`` is a boolean row mask."""
    if len(ids) == 0 or limit <= 0:
        return []
    scores = matrix @ query_vector
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
        limit = min(limit, int(allowed.sum()))
        if limit == 0:
            return []
    limit = min(limit, len(scores))
    top = np.argpartition(-scores, limit - 1)[:limit]
    top = top[np.argsort(-scores[top], kind="stable")]
    # A row sharing no feature with the query (cosine <= 0) is not a match, only a filler.
    return [(int(ids[i]), float(scores[i])) for i in top if scores[i] > 0]


def fuse(
    vector_hits: Sequence[tuple[int, float]],
    text_hits: Sequence[tuple[int, float]],
) -> list[Candidate]:
    """Reciprocal-rank fusion of the two ranked lists, best first (ties by lower id)."""
    candidates: dict[int, Candidate] = {}
    for rank, (memory_id, cosine) in enumerate(vector_hits):
        c = candidates.setdefault(memory_id, Candidate(memory_id))
        c.vector_score = cosine
        c.score += 1.0 / (RRF_K + rank + 1)
    for rank, (memory_id, relevance) in enumerate(text_hits):
        c = candidates.setdefault(memory_id, Candidate(memory_id))
        c.text_score = relevance
        c.score += 1.0 / (RRF_K + rank + 1)
    return sorted(candidates.values(), key=lambda c: (-c.score, c.memory_id))
