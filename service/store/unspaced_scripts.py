"""Scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) in
the full-text index. FTS5's ``unicode61`` tokenizer cuts words at spaces and punctuation only, so
such a sentence is one token (in the scripts with vowel signs, fragments cut at each sign), which
no question shares: the full-text leg found such a memory only by its whole sentence. The indexed
text spells each run of these scripts as its overlapping pairs of letters (the signs left out),
as Lucene's CJK bigram filter and Elasticsearch's ``cjk`` analyzer do, so a question shares the
pairs of the words it shares ("电费什么时候付的" and "电费已经在星期一付了" share "电费"). A query's
terms are spelt the same way (engine/recall/text.py ``query_terms``).

``REINDEX`` is the migration that respells the rows of a file indexed before (a tenant of an
earlier version pays it once, as it opens, in proportion to its memories in these scripts); it
calls the SQL function ``register`` gives the migrating connection."""

from __future__ import annotations

import re
import unicodedata

import apsw

# Thai, Lao, Myanmar, Khmer, Hiragana, Katakana (with its phonetic extensions and half-width
# forms), the CJK ideographs (extension A, the unified block, the compatibility ideographs and the
# supplementary planes' extensions).
_RUN = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+"
)


def letter_pairs(text: str) -> str:
    """``text`` with each run of an unspaced script spelt as its overlapping letter pairs (a run
    of one letter as that letter), each pair a word of its own."""
    if text.isascii():  # most texts: one C call
        return text
    return _RUN.sub(_pairs, text)


def _pairs(run: re.Match[str]) -> str:
    letters = [c for c in run.group() if not unicodedata.category(c).startswith("M")]
    return " " + " ".join([a + b for a, b in zip(letters, letters[1:])] or letters) + " "


# The rows of the index (the live, unmerged memories) and the text each was indexed with before
# (store/memory_rows.py ``indexed_text`` without the pairs): those that change are deleted with it
# and indexed again.
_INDEXED_BEFORE = """(SELECT id, CASE WHEN index_words <> '' THEN body || char(10) || index_words ELSE body END AS text
  FROM memories WHERE forgotten_at IS NULL AND merged_into IS NULL)"""
REINDEX = f"""
INSERT INTO memories_fts(memories_fts, rowid, body)
  SELECT 'delete', id, text FROM {_INDEXED_BEFORE} WHERE mnemosyne_letter_pairs(text) <> text;
INSERT INTO memories_fts(rowid, body)
  SELECT id, mnemosyne_letter_pairs(text) FROM {_INDEXED_BEFORE} WHERE mnemosyne_letter_pairs(text) <> text;
"""


def register(connection: apsw.Connection) -> None:
    """The function ``REINDEX`` calls, on a connection that migrates a file."""
    connection.create_scalar_function("mnemosyne_letter_pairs", _letter_pairs_of_value, 1, deterministic=True)


def _letter_pairs_of_value(*values: apsw.SQLiteValue) -> apsw.SQLiteValue:
    (text,) = values  # a body (NOT NULL) with its index words
    return letter_pairs(str(text))
