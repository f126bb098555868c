"""BERT's uncased WordPiece tokenizer: text to the word-piece ids all-MiniLM-L6-v2 reads.

The same ids as the Hugging Face ``tokenizers`` library's ``BertNormalizer`` (clean the text,
space out CJK ideographs, strip accents, lowercase character by character), ``BertPreTokenizer``
(split on whitespace, isolate punctuation) and ``WordPiece`` (greedy longest match, ``##`` for a
continuation, ``[UNK]`` for a word of more than 100 characters or one it cannot cover), then
``[CLS] ... [SEP]``, cut to the model's length. Written here rather than taken from ``tokenizers``,
whose wheel and the Hugging Face hub client it pulls in would add ~38 MB to the default install
(docs/decisions.md, "Meaning by default"); tests/test_minilm_equality.py compares its ids with the
library's on every text it has.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

# The longest word WordPiece splits; a longer one is one [UNK] (the model's tokenizer.json).
MAX_WORD_CHARACTERS = 100
# The categories the normalizer drops as control characters (it keeps unassigned code points).
_CONTROL = frozenset(("Cc", "Cf", "Co", "Cs"))
# Characters normalised and split at a time: 254 word pieces take ~1,000 characters of English,
# so a 32 KB text stops after its first window or two instead of normalising all of it.
WINDOW_CHARACTERS = 2048
# Distinct words whose pieces are kept: a memory's words repeat across a tenant.
_WORD_CACHE = 1 << 16


def _is_chinese(code: int) -> bool:
    """The CJK ideograph blocks BERT's normalizer spaces out (each ideograph is a word)."""
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B920 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


@lru_cache(maxsize=4096)
def _normal_character(character: str) -> str:
    """One character as BERT's normalizer leaves it: "" (a control, format or private-use
    character, NUL, U+FFFD; an unassigned one stays), " " (whitespace), else without its accents
    (NFD, then no nonspacing marks), lowercased, and spaced out when a CJK ideograph."""
    if character in "\t\n\r":
        return " "
    code = ord(character)
    if code == 0 or code == 0xFFFD or unicodedata.category(character) in _CONTROL:
        return ""
    if character.isspace():
        return " "
    decomposed = unicodedata.normalize("NFD", character)
    kept = "".join(c.lower() for c in decomposed if unicodedata.category(c) != "Mn")
    return f" {kept} " if _is_chinese(code) else kept


@lru_cache(maxsize=1024)
def _is_punctuation(character: str) -> bool:
    """ASCII punctuation (``$``, ``+``, ``<`` ... too) or any Unicode punctuation (P*)."""
    code = ord(character)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(character).startswith("P")


def pre_tokens(text: str) -> list[str]:
    """The words of ``text`` after normalisation: split on whitespace, each punctuation mark a
    word of its own."""
    normal = "".join(map(_normal_character, text)) if not text.isascii() else _ascii_normal(text)
    out: list[str] = []
    for chunk in normal.split():
        if chunk.isalnum():
            out.append(chunk)
            continue
        start = 0
        for i, character in enumerate(chunk):
            if _is_punctuation(character):
                if start < i:
                    out.append(chunk[start:i])
                out.append(character)
                start = i + 1
        if start < len(chunk):
            out.append(chunk[start:])
    return out


def _ascii_normal(text: str) -> str:
    """``_normal_character`` over ASCII text at once: its controls dropped, lowercased."""
    if not text.isprintable():
        text = "".join(map(_normal_character, text))
    return text.lower()


def _windows(text: str) -> Iterator[str]:
    """``text`` in pieces of about WINDOW_CHARACTERS, each cut just before a space: a space always
    ends a word (the normaliser maps each character on its own), so the pieces' words are the
    text's, and a long text's words past the model's length are never normalised or split."""
    start = 0
    while len(text) - start > WINDOW_CHARACTERS:
        end = text.find(" ", start + WINDOW_CHARACTERS)
        if end == -1:
            break
        yield text[start:end]
        start = end
    yield text[start:]


class WordPiece:
    """Word-piece ids from a BERT ``vocab.txt`` (one piece a line, its id the line number)."""

    def __init__(self, vocab_file: Path, *, max_length: int) -> None:
        pieces = vocab_file.read_text(encoding="utf-8").split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
        self.vocab = {piece: i for i, piece in enumerate(pieces)}
        self.unknown = self.vocab["[UNK]"]
        self.first = self.vocab["[CLS]"]
        self.last = self.vocab["[SEP]"]
        self.pad = self.vocab["[PAD]"]
        self.max_length = max_length
        self._words: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int]:
        """``[CLS]``, the text's word pieces (the first ``max_length - 2``), ``[SEP]``."""
        room = self.max_length - 2
        pieces: list[int] = []
        words = self._words
        for window in _windows(text):
            for word in pre_tokens(window):
                known = words.get(word)
                if known is None:
                    if len(words) >= _WORD_CACHE:
                        words.clear()
                    known = words[word] = self._word_pieces(word)
                pieces.extend(known)
                if len(pieces) >= room:
                    del pieces[room:]
                    return [self.first, *pieces, self.last]
        return [self.first, *pieces, self.last]

    def _word_pieces(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARACTERS:
            return [self.unknown]
        vocab = self.vocab
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return [self.unknown]
            start = end
        return out
