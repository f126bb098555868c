"""Hybrid recall: vector similarity and FTS5 BM25, fused by reciprocal rank.

User text never reaches FTS5 as syntax: the query is cut into words (Unicode letters and digits
only), each chunk between spaces becomes one quoted phrase, and the phrases are joined with OR.
Quotes, ``*``, ``AND``/``NEAR(``, ``:`` and parentheses are thus searched as the words they
contain, or dropped when they contain none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mnemosyne.engine.embedder import words

RRF_K = 60.0
MAX_QUERY_PHRASES = 64


def fts_match_expression(query: str) -> str | None:
    """A safe FTS5 MATCH expression for free text, or None when the text has no words."""
    phrases: list[str] = []
    seen: set[str] = set()
    for chunk in query.split():
        chunk_words = words(chunk)
        if not chunk_words:
            continue
        phrase = " ".join(chunk_words)
        if phrase not in seen:
            seen.add(phrase)
            # Each word is made of \w characters only, so it cannot contain a double quote.
            phrases.append('"' + phrase + '"')
        if len(phrases) >= MAX_QUERY_PHRASES:
            break
    return " OR ".join(phrases) if phrases else None


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
