"""The priors over the memories read for the response (hybrid mode only): what a memory's own text
says about how likely it holds an answer, beyond how well it matches. Each re-weighs the read
candidates' scores (memory id -> score, for the changed ones and those changed before):

* ``length``: of two close matches the longer one, which says more (a detailed reply, a shared
  photo's caption), gains; BM25 and the cosine, both normalised for length, do not see that;
* ``lists``: the same for a list or count question (question_form.asks_for_many), with its own
  share: its answers are spread over several memories;
* ``names``: the memory naming more places, people and works gains: questions ask for particulars;
* ``answers``: for a question asking for a time, a cause or a number (answer_kinds.asked_kind),
  the memory holding one gains: among memories about the same thing, the one that says *when*;
* ``questions``: a memory that ends by asking a question loses: it seldom holds an answer (it
  still lent its score to its thread neighbours, which ran before).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from mnemosyne.engine import answer_kinds, relative_time
from mnemosyne.engine.recall.ranking import Candidate
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Query, Recalling, Step
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.terms import capitalised_words
from mnemosyne.store.memory_rows import MemoryRow

MIN_SCORE = 1e-9  # a hit's score stays above 0
# The marks that end a question: ASCII, full-width (CJK), Arabic, Greek, Armenian, Ethiopic.
QUESTION_MARKS = "?\uff1f\u061f\u037e\u055e\u1367"
# The marks that end a sentence: a full stop, an exclamation mark (both also full-width, and the
# CJK full stop and Devanagari danda) or a question mark.
_SENTENCE_END = re.compile("[.!\uff0e\uff01\u3002\u0964" + QUESTION_MARKS + "]")


def with_length_prior(
    ranked: Sequence[Candidate], rows: Mapping[int, MemoryRow], scores: Mapping[int, float], weight: float
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) plus ``weight`` x the best
    score x ln(its length / the mean length of the read ones, forgotten and merged ones aside),
    kept above 0."""
    lengths: dict[int, int] = {}
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is not None and not row.forgotten and not row.merged_into:
            lengths[c.memory_id] = len(row.body)
    out = dict(scores)
    if not lengths:
        return out
    mean = sum(lengths.values()) / len(lengths)
    scale = weight * max(c.score for c in ranked)
    for c in ranked:
        length = lengths.get(c.memory_id)
        if length is not None:
            out[c.memory_id] = max(
                scores.get(c.memory_id, c.score) + scale * math.log(max(length, 1) / mean), MIN_SCORE
            )
    return out


def with_names_prior(
    ranked: Sequence[Candidate],
    rows: Mapping[int, MemoryRow],
    scores: Mapping[int, float],
    weight: float,
    known: frozenset[str],
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) plus ``weight`` x the best
    score x ln(1 + the names it holds): the distinct words written as names are
    (``terms.capitalised_words``), the tenant's speakers' (``known``) and the calendar's aside."""
    out = dict(scores)
    if not ranked:
        return out
    scale = weight * max(c.score for c in ranked)
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is None or row.forgotten or row.merged_into:
            continue
        names = len(capitalised_words(row.body) - known)
        if names:
            out[c.memory_id] = scores.get(c.memory_id, c.score) + scale * math.log1p(names)
    return out


def with_answer_prior(
    ranked: Sequence[Candidate],
    rows: Mapping[int, MemoryRow],
    scores: Mapping[int, float],
    weight: float,
    kind: answer_kinds.AnswerKind,
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) plus ``weight`` x the best
    score when its memory holds an answer of ``kind`` (``answer_kinds.holds``)."""
    out = dict(scores)
    if not ranked:
        return out
    lift = weight * max(c.score for c in ranked)
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is not None and not row.forgotten and not row.merged_into and answer_kinds.holds(kind, row.body):
            out[c.memory_id] = scores.get(c.memory_id, c.score) + lift
    return out


def asks(text: str) -> bool:
    """Whether ``text`` ends by asking: its last sentence-ending mark is a question mark."""
    if text.isascii():  # its marks are . ! ?: three searches from the end, not a list of every mark
        question = text.rfind("?")
        return question > text.rfind(".") and question > text.rfind("!")
    ends = _SENTENCE_END.findall(text)
    return bool(ends) and ends[-1] in QUESTION_MARKS


def asking(
    ranked: Sequence[Candidate], rows: Mapping[int, MemoryRow], scores: Mapping[int, float], weight: float
) -> dict[int, float]:
    """Each read candidate's score (from ``scores``, else its own) times ``1 - weight`` when its
    memory ends by asking a question (``asks``), kept above 0."""
    out = dict(scores)
    for c in ranked:
        row = rows.get(c.memory_id)
        if row is not None and asks(row.body):
            out[c.memory_id] = max(scores.get(c.memory_id, c.score) * (1.0 - weight), MIN_SCORE)
    return out


class Prior(Step, Protocol):
    # Whether it re-weighs every question's candidates (else only those ``applies`` takes).
    every_question: bool

    def applies(self, query: Query) -> bool:
        """Whether it re-weighs this query's candidates (then more memories are read for it)."""
        ...


class LengthPrior:
    """The longer of two close matches first (a list or count question's: the lists step's, when
    it runs)."""

    name = RecallStep.LENGTH
    every_question = False

    def __init__(self, settings: RecallSettings, *, lists_apart: bool) -> None:
        self.weight = settings.length_prior
        self.lists_apart = lists_apart  # the lists step weighs list questions

    def applies(self, query: Query) -> bool:
        return not (self.lists_apart and query.asks_for_many)

    def __call__(self, recalling: Recalling) -> None:
        if self.applies(recalling.query):
            recalling.scores = with_length_prior(recalling.read, recalling.rows, recalling.scores, self.weight)


class ListLengthPrior(LengthPrior):
    """A list or count question: the memories that say more first, by the list share."""

    name = RecallStep.LISTS

    def __init__(self, settings: RecallSettings) -> None:
        super().__init__(settings, lists_apart=False)
        self.weight = settings.list_length_prior

    def applies(self, query: Query) -> bool:
        return query.asks_for_many


class NamesPrior:
    """The memories naming more places, people and works first."""

    name = RecallStep.NAMES
    every_question = True

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.names_prior

    def applies(self, query: Query) -> bool:
        return True

    def __call__(self, recalling: Recalling) -> None:
        known = recalling.snapshot.index.speaker_words() | relative_time.CALENDAR_WORDS
        recalling.scores = with_names_prior(recalling.read, recalling.rows, recalling.scores, self.weight, known)


class AnswerPrior:
    """A question asking for a time, a cause or a number: the memories holding one first."""

    name = RecallStep.ANSWERS
    every_question = False

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.answer_prior

    def applies(self, query: Query) -> bool:
        return query.asks_for is not None

    def __call__(self, recalling: Recalling) -> None:
        kind = recalling.query.asks_for
        if kind is not None:
            recalling.scores = with_answer_prior(recalling.read, recalling.rows, recalling.scores, self.weight, kind)


class QuestionPenalty:
    """A memory that ends by asking a question lower (after the other priors: it scales them)."""

    name = RecallStep.QUESTIONS
    every_question = True

    def __init__(self, settings: RecallSettings) -> None:
        self.weight = settings.question_penalty

    def applies(self, query: Query) -> bool:
        return True

    def __call__(self, recalling: Recalling) -> None:
        recalling.scores = asking(recalling.read, recalling.rows, recalling.scores, self.weight)
