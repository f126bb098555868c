"""A query phrase's postings: the rows of a tenant's postings cache (engine/postings.py) holding
a phrase of several tokens (an identifier: RF-12345, v2.1, a@b.c), and its instances in each.

The postings keep no positions: the rows holding every token are found from the tokens'
postings (binary searches, the rarest first), and each one's indexed text, read in the recall's
snapshot, is tokenized by FTS5's own tokenizer and searched for the tokens in a row, each start
counted, overlapping ones too, as FTS5 counts a phrase's instances for ``bm25()``. Only when at
most PHRASE_ROWS rows hold every token (an identifier's number is rare), and the rows a query's
phrases read hold at most PHRASE_TOKENS tokens together (a query of many identifiers, or long
memories): past that, reading and tokenizing the texts costs more than FTS5's positions, and FTS5
answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mnemosyne.store.fts_tokens import fts5_tokens

PHRASE_ROWS = 64
PHRASE_TOKENS = 16_384  # of every phrase of one query: ~1 ms of reading and tokenizing

Phrase = tuple[str, ...]  # a query term's tokens: one for a word, several for an identifier
Posting = tuple[np.ndarray, np.ndarray]  # rows ascending, and a count in each
# The indexed texts of live memories by id, read in the recall's snapshot (``ReadTxn.indexed_texts``).
Texts = Callable[[list[int]], dict[int, str]]


def phrases(terms: Sequence[str]) -> list[Phrase] | None:
    """The tokens of each of recall's query terms (FTS5's query tokenizer); None: a term has none."""
    found = [tuple(fts5_tokens(term, query=True)) for term in terms]
    return None if any(not tokens for tokens in found) else found


def phrase_posting(
    phrase: Phrase, tokens: Sequence[Posting], ids: np.ndarray, lengths: np.ndarray, texts: Texts, budget: int
) -> tuple[Posting, int] | None:
    """The rows holding ``phrase`` (given each of its tokens' postings; ``ids`` and ``lengths``:
    each row's memory id and token count) and its instances in each, and the tokens read for it;
    None when more than PHRASE_ROWS rows hold every token, they hold more than ``budget`` tokens,
    or the snapshot does not hold a row's text."""
    rows, *others = sorted((rows for rows, _ in tokens), key=len)
    for other in others:
        rows = rows[other[np.minimum(np.searchsorted(other, rows), len(other) - 1)] == rows] if len(rows) else rows
    if len(rows) > PHRASE_ROWS:
        return None
    spent = int(lengths[rows].sum())
    if spent > budget:
        return None
    memory_ids = ids[rows].tolist()
    held = texts(memory_ids) if memory_ids else {}
    if len(held) != len(memory_ids):
        return None
    counts = np.array([instances(fts5_tokens(held[i]), phrase) for i in memory_ids], dtype=np.int64)
    return (rows[counts > 0], counts[counts > 0].astype(np.uint16)), spent


def instances(tokens: list[str], phrase: Phrase) -> int:
    """How many times ``phrase`` starts in ``tokens`` (overlapping instances each counted)."""
    first, size = phrase[0], len(phrase)
    return sum(1 for at, token in enumerate(tokens) if token == first and tuple(tokens[at : at + size]) == phrase)
