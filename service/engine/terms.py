"""Terms of free text, shared by the embedder and the full-text query: words, stop words, stems.

Stop words are the function words of English (articles, pronouns, auxiliaries, prepositions,
question words). In a memory store they occur in nearly every memory, so as query terms they only
add noise to BM25 and to hashed features; a text made of nothing else keeps them, so it can still
be found.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t d ll m re ve o y don didn doesn
    isn wasn aren weren hasn haven hadn won wouldn couldn shouldn""".split()
)

# Longest first; a stem keeps at least three letters, so "sing" or "red" are never cut.
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", ""))
_ENDINGS = tuple(suffix for suffix, _ in _SUFFIXES)


def words(text: str) -> list[str]:
    """Lower-cased runs of Unicode letters and digits."""
    return _WORD.findall(text.lower())


def content_words(tokens: list[str]) -> list[str]:
    """``tokens`` without stop words, or all of them when nothing else is left."""
    kept = [t for t in tokens if t not in STOP_WORDS]
    return kept or tokens


def stem(word: str) -> str:
    """A light suffix-stripping stem (plurals, -ing, -ed, -ly): "painted", "painting" -> "paint"."""
    if not word.endswith(_ENDINGS):  # one C call for the many words without any of them
        return word
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    return word


# Marks after which a word opens a sentence, so its capital is grammar, not a name: full stops,
# exclamation and question marks (ASCII, full-width, CJK, Devanagari, Arabic, Greek, Armenian,
# Ethiopic) and the colon and semicolon.
_OPENING_MARKS = frozenset(".!?:;\uff0e\uff01\uff1f\u3002\u0964\u061f\u037e\u055e\u1367")
# Skipped when looking back from a word for the mark before it.
_QUOTES_AND_BRACKETS = frozenset("\"'()[]{}<>\u2018\u2019\u201c\u201d\u00ab\u00bb\u300c\u300d-\u2013\u2014*_")
# Words' runs of two or more letters (no digits, no underscore) not starting with an ASCII
# lower-case one: most words of a text are skipped by the regular expression, not by Python.
_LETTERS = re.compile(r"\b[^\W\d_a-z][^\W\d_]+")
# The same in an ASCII text, without the word boundary (the engine's slowest part of this scan):
# a run found inside a word is dropped by the caller. Three times as fast, the same words.
_ASCII_LETTERS = re.compile(r"[A-Z][A-Za-z]+")


def capitalised_words(text: str) -> set[str]:
    """The distinct words of ``text`` written as names are, an upper-case letter and then
    lower-case ones, that do not open a sentence (nor the text), lower-cased: in a script with
    case, the names of people, places, works and brands ("Seattle", "Nicole"). A word of one
    letter ("I") or all capitals ("OK") is none; a script without case has none."""
    found = set()
    ascii_only = text.isascii()
    for match in (_ASCII_LETTERS if ascii_only else _LETTERS).finditer(text):
        word = match.group()
        at = match.start() - 1
        if ascii_only and at >= 0 and (text[at].isalnum() or text[at] == "_"):
            continue  # inside a word: no word boundary before it
        if not (word[0].isupper() and word[1:].islower()):
            continue
        # The last character before the word that is no space, quote or bracket opens it or not.
        while at >= 0 and (text[at].isspace() or text[at] in _QUOTES_AND_BRACKETS):
            at -= 1
        if at >= 0 and text[at] not in _OPENING_MARKS:
            found.add(word.lower())
    return found
