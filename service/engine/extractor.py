"""Extraction: from a memory's text to structured facts and subject–predicate–object triples.

An extractor call is what the specification calls "the model call": it is counted (``model_calls``) and a
replay of work already extracted must not call it again. The default ``RulesExtractor`` needs no
network: it finds identifiers (RF-88213), e-mail addresses, dates, numbers with units and simple
"X is Y" / "X's Y is Z" / "X status: Y" statements.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field

from mnemosyne.runtime import read_priority

Fact = tuple[str, str, str]  # (kind, value, normalized)
Triple = tuple[str, str, str]  # (subject, predicate, object)


@dataclass(frozen=True)
class Extraction:
    facts: list[Fact] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)


class Extractor(abc.ABC):
    """Contract: ``extract`` is deterministic for a given text and configuration, raises only on a
    failure of the model behind it (never for odd input), may be slow, and is always called outside
    any store transaction. Each call counts as exactly one model call."""

    name: str = "extractor"
    # Threads the engine may use to extract the items of multi-item writes (a pool shared by
    # the server, WritePath._extract in engine/write_path.py). 1 for work done in this process (the GIL makes threads
    # useless); more for a remote model, whose calls mostly wait on the network.
    concurrency: int = 1
    # Whether ``extract`` is Python running in this process the whole call (no model to wait
    # for): a write's extractions then take turns with other long writes and give way to reads
    # (mnemosyne/read_priority.py).
    holds_interpreter: bool = False

    @abc.abstractmethod
    def extract(self, text: str) -> Extraction: ...


_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for m in names
}
_MONTH = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IDENTIFIER = re.compile(r"\b(?=[A-Za-z0-9_-]*\d)[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+\b|\b[A-Z]{2,}\d{2,}\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_UNITS = (
    r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|"
    r"ms|s|kg|g|mg|lbs?|km|m|cm|mm|miles?|mi|ft|gb|mb|kb|tb|"
    r"percent|%|usd|eur|gbp|dollars?|euros?|pounds?|items?|people|persons?|times?)"
)
_QUANTITY = re.compile(rf"(?<![\w.-])([$€£]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?{_UNITS})(?![\w])", re.I)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_POSSESSIVE = re.compile(
    r"^\s*(?P<s>[\w][\w .-]{0,60}?)'s\s+(?P<p>[\w][\w -]{0,40}?)\s+(?:is|are|was|were)\s+(?P<o>.{1,120}?)\s*$", re.I
)
_COPULA = re.compile(r"^\s*(?P<s>[\w][\w .-]{0,60}?)\s+(?:is|are|was|were)\s+(?P<o>.{1,120}?)\s*$", re.I)
# A conversation transcript line starts with its speaker ("user: ...", "user (Caroline): ..."); see
# engine/conversation.py.
_SPEAKER = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}(?: \([^\n]{1,200}?\))?:\s+(?P<rest>.+)$")
# Cheap necessary conditions, tested before the patterns above (same results, far less regex
# work on the common text that has no digit, no "@", no colon, no apostrophe): every pattern
# from _IDENTIFIER to _QUANTITY needs a decimal digit (``\d``, the same Unicode class), _EMAIL an
# "@", _COLON and _SPEAKER a ":", _POSSESSIVE an apostrophe, _COPULA a verb between blanks.
_ANY_DIGIT = re.compile(r"\d")
_COPULA_VERB = re.compile(r"\s(?:is|are|was|were)\s", re.I)
_COLON = re.compile(
    r"^\s*(?P<s>[\w][\w .-]{0,60}?)\s+(?P<p>status|state|owner|priority|email|phone|address|name)\s*:\s*(?P<o>.{1,120}?)\s*$",
    re.I,
)


def _sentences(text: str) -> list[str]:
    """``_SENTENCE_BREAK.split(text)``, without running the regex on the common text that has no
    line break and no ".", "!" or "?" followed by white space (``str.isspace`` is ``\\s``)."""
    if "\n" in text:
        return _SENTENCE_BREAK.split(text)
    last = len(text) - 1
    for mark in ".!?":
        at = text.find(mark)
        while 0 <= at < last:
            if text[at + 1].isspace():
                return _SENTENCE_BREAK.split(text)
            at = text.find(mark, at + 1)
    return [text]


def _clean(text: str) -> str:
    return " ".join(text.strip().strip("\"'").split()).lower()


def _date(year: str, month: int, day: str) -> str:
    return f"{int(year):04d}-{month:02d}-{int(day):02d}"


class RulesExtractor(Extractor):
    """Regular expressions only: deterministic, offline, microseconds per call."""

    name = "rules"
    holds_interpreter = True

    def extract(self, text: str) -> Extraction:
        facts: list[Fact] = []
        seen: set[tuple[str, str]] = set()

        def add(kind: str, value: str, normalized: str) -> None:
            if (kind, normalized) not in seen:
                seen.add((kind, normalized))
                facts.append((kind, value, normalized))

        if "@" in text:
            for match in _EMAIL.finditer(text):
                add("email", match.group(0), match.group(0).lower())
        if _ANY_DIGIT.search(text):
            emails = {f[1] for f in facts}
            for match in _IDENTIFIER.finditer(text):
                value = match.group(0)
                if not any(value in e for e in emails):
                    add("identifier", value, value.upper())
            read_priority.give_way()  # each pass reads the whole text (~1 ms for 32 KB)
            for match in _ISO_DATE.finditer(text):
                add("date", match.group(0), match.group(0))
            for match in _DAY_MONTH_YEAR.finditer(text):
                day, month, year = match.groups()
                add("date", match.group(0), _date(year, _MONTHS[month.lower().rstrip(".")], day))
            read_priority.give_way()
            for match in _MONTH_DAY_YEAR.finditer(text):
                month, day, year = match.groups()
                add("date", match.group(0), _date(year, _MONTHS[month.lower().rstrip(".")], day))
            read_priority.give_way()
            for match in _QUANTITY.finditer(text):
                value = match.group(1)
                add("quantity", value, " ".join(value.lower().replace(",", "").split()))

        triples: list[Triple] = []
        read_priority.give_way()
        for sentence in _sentences(text):
            sentence = sentence.strip().rstrip(".!?")
            if len(sentence) > 240:
                continue
            triple = self._statement(sentence)
            if triple and triple not in triples:
                triples.append(triple)
                add("statement", sentence.strip(), " | ".join(triple))
        return Extraction(facts=facts, triples=triples)

    @classmethod
    def _statement(cls, sentence: str) -> Triple | None:
        triple = cls._plain_statement(sentence)
        if triple is None and ":" in sentence:
            # "user: ticket RF-88213 status: refunded" -> read the line without its speaker.
            speaker = _SPEAKER.match(sentence)
            if speaker:
                triple = cls._plain_statement(speaker["rest"])
        return triple

    @staticmethod
    def _plain_statement(sentence: str) -> Triple | None:
        for pattern, needs in ((_COLON, ":"), (_POSSESSIVE, "'")):
            match = pattern.match(sentence) if needs in sentence else None
            if match:
                return (_clean(match["s"]), _clean(match["p"]), _clean(match["o"]))
        match = _COPULA.match(sentence) if _COPULA_VERB.search(sentence) else None
        if match:
            return (_clean(match["s"]), "is", _clean(match["o"]))
        return None
