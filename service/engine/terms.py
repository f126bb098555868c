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
