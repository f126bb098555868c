"""The tokens FTS5 indexes: the full-text table's own tokenizer, callable outside a query.

``memories_fts`` is tokenized by ``porter unicode61 remove_diacritics 2`` (schema.py); the engine's
postings cache (engine/postings.py) must see exactly the tokens FTS5 sees, so it asks FTS5's
tokenizer through APSW's ``fts5_tokenizer`` rather than imitating it. The tokenizers are pure
functions of the text, so one in-memory connection serves every tenant (an APSW connection
serializes its calls).
"""

from __future__ import annotations

from typing import cast

import apsw

TOKENIZER_ARGS = ["unicode61", "remove_diacritics", "2"]
_TOKENIZER = apsw.Connection(":memory:").fts5_tokenizer("porter", TOKENIZER_ARGS)


def fts5_tokens(text: str, *, query: bool = False) -> list[str]:
    """The tokens FTS5 indexes for ``text`` (or searches for, with ``query``), in order."""
    reason = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    found = _TOKENIZER(text.encode(), reason, None, include_offsets=False, include_colocated=False)
    return cast(list[str], found)  # without offsets or colocated tokens: the tokens alone
