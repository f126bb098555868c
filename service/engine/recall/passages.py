"""The passages step: a long memory the model read only in part (MiniLM reads a text's first 254
word pieces) has a vector of its beginning, diluted by all of it, so a fact further on reaches
the candidates only through its words (the full-text leg) and, there, loses to short memories
sharing a word of the question whose vectors are on its topic. For the best few full-text hits
the model read in part, the sentence holding most of the question's words is embedded (one model
call for them all) and the memory's cosine becomes the better of its own and that sentence's.
A memory read whole, or a recall without such a hit, costs nothing more than reading those hits'
texts."""

from __future__ import annotations

import re

import numpy as np

from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Recalling
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.terms import stem, words

# A text of fewer full-text tokens (words) is taken as read whole, its text not read: a word is
# one word piece or a few, so 254 word pieces take ~150 words of English, ~60 of the longest.
READ_WHOLE_TOKENS = 60
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


def best_passage(text: str, stems: frozenset[str]) -> str | None:
    """The sentence of ``text`` holding most of ``stems`` (the first of those that hold as many);
    None when none holds any."""
    best, most = None, 0
    for sentence in _SENTENCE_END.split(text):
        held = len(stems.intersection(stem(word) for word in words(sentence)))
        if held > most:
            best, most = sentence, held
    return best


class ScorePassages:
    """A long text hit's cosine from its passage holding the question's words (the module's
    docstring), for the best ``passages`` full-text hits."""

    name = RecallStep.PASSAGES

    def __init__(self, settings: RecallSettings, embedder: Embedder) -> None:
        self.limit = settings.passages
        self.text_weight = settings.text_weight
        self.embedder = embedder

    def __call__(self, recalling: Recalling) -> None:
        pool, query, found = recalling.pool, recalling.query, recalling.candidates
        hits = found.text_hits
        long = hits.lengths[: self.limit] >= READ_WHOLE_TOKENS
        if not long.any() or query.vector is None:
            return
        memory_ids = hits.ids[: self.limit][long]
        if not len(pool.rows):
            return
        # Each hit's row, then its place in the pool (both sorted): none for a hit the vector cache
        # does not hold, or one outside the filters.
        rows = np.minimum(np.searchsorted(found.ids, memory_ids), len(found.ids) - 1)
        at = np.minimum(np.searchsorted(pool.rows, rows), len(pool.rows) - 1)
        kept = (found.ids[rows] == memory_ids) & (pool.rows[at] == rows) & pool.finite[at]
        memory_ids, at = memory_ids[kept], at[kept]
        texts = recalling.snapshot.txn.bodies([int(i) for i in memory_ids])
        stems = frozenset(stem(word) for term in query.terms for word in term.split())
        embedded, passages = [], []
        for memory_id, position in zip(memory_ids.tolist(), at.tolist()):
            text = texts.get(memory_id, "")
            if self.embedder.reads_in_part(text):
                passage = best_passage(text, stems)
                if passage is not None:
                    embedded.append(position)
                    passages.append(passage)
        if not passages:
            return
        cosine = (self.embedder.embed(passages) @ query.vector).astype(np.float64)
        better = cosine > pool.cosine[embedded]
        if not better.any():
            return
        chosen = np.array(embedded)[better]
        gained = np.maximum(cosine[better], 0.0) - np.maximum(pool.cosine[chosen], 0.0)
        scores, cosines = pool.scores.copy(), pool.cosine.copy()
        scores[chosen] += (1.0 - self.text_weight) * gained
        cosines[chosen] = cosine[better]
        recalling.pool = pool._replace(scores=scores, cosine=cosines)
