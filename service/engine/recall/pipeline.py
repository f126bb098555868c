"""Which steps a recall runs, in order, for each mode: the list ``Recall`` runs. A step whose
weight is 0 in the embedder's settings, or that a test switched off, is not in it."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from functools import cached_property

from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.recall.candidates import FindCandidates
from mnemosyne.engine.recall.context import JoinContext, LendNeighbours, ScoreWindows
from mnemosyne.engine.recall.fusion import Fuse, Rank, RankText
from mnemosyne.engine.recall.lifts import LiftDated, LiftSpoken, SupportThreads
from mnemosyne.engine.recall.passages import ScorePassages
from mnemosyne.engine.recall.priors import (
    AnswerPrior,
    LengthPrior,
    ListLengthPrior,
    NamesPrior,
    Prior,
    QuestionPenalty,
)
from mnemosyne.engine.recall.query import Embed, EmbedWithoutSpeakers, QueryStep
from mnemosyne.engine.recall.select import Read, Select
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.state import Step
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.engine.types import RecallMode


@dataclass(frozen=True)
class Pipeline:
    """One mode's steps: the query's vector (None: text only), then the steps over the read
    snapshot, in the order they run."""

    embed: QueryStep | None
    steps: tuple[Step, ...]

    @cached_property
    def reads_question_form(self) -> bool:
        """Whether a step weighs list and count questions apart (``Query.asks_for_many``)."""
        return RecallStep.LISTS in self.names

    @cached_property
    def reads_answer_kind(self) -> bool:
        """Whether a step weighs the memories holding the kind of answer asked (``Query.asks_for``)."""
        return RecallStep.ANSWERS in self.names

    @cached_property
    def spans(self) -> tuple[str, ...]:
        """Each step's trace span, in ``steps``' order."""
        return tuple(f"recall.{step.name.value}" for step in self.steps)

    @property
    def names(self) -> tuple[RecallStep, ...]:
        return (*((self.embed.name,) if self.embed else ()), *(step.name for step in self.steps))


def build_pipeline(
    mode: RecallMode,
    settings: RecallSettings,
    off: Set[RecallStep],
    *,
    embedder: Embedder,
    ann_threshold: int,
) -> Pipeline:
    """The steps of a recall in ``mode``: the lifts need the vector path (not text only), the
    priors are hybrid only."""

    def on(step: RecallStep, weight: float = 1.0) -> bool:
        return step not in off and weight > 0

    s = settings
    candidates = FindCandidates(s, from_postings=on(RecallStep.POSTINGS), ann_threshold=ann_threshold)
    if mode is RecallMode.TEXT:
        return Pipeline(None, (candidates, RankText(), Read(s, priors=()), Select(s)))
    embed: QueryStep = Embed(embedder)
    if on(RecallStep.SPEAKER_QUERY, s.speaker_query_mix):
        embed = EmbedWithoutSpeakers(embedder, s)
    steps: list[Step] = [candidates, Fuse(s)]
    if on(RecallStep.PASSAGES, s.passages):
        steps.append(ScorePassages(s, embedder))
    neighbours, window = on(RecallStep.NEIGHBOURS, s.neighbour_weight), on(RecallStep.WINDOW, s.window_weight)
    if neighbours or window:
        steps.append(JoinContext(s))
    if neighbours:
        steps.append(LendNeighbours(s))
    if window:
        steps.append(ScoreWindows(s))
    steps.append(Rank())
    if on(RecallStep.DATES, s.date_boost):
        steps.append(LiftDated(s))
    if on(RecallStep.SPEAKER, s.speaker_boost):
        steps.append(LiftSpoken(s))
    if on(RecallStep.THREADS, s.thread_weight):
        steps.append(SupportThreads(s))
    priors = hybrid_priors(s, off) if mode is RecallMode.HYBRID else []
    return Pipeline(embed, (*steps, Read(s, priors=priors), *priors, Select(s)))


def hybrid_priors(settings: RecallSettings, off: Set[RecallStep]) -> list[Prior]:
    """The priors, in order: a length prior first (the others start from its scores), the
    question penalty last (it scales the others')."""
    s = settings
    lists = RecallStep.LISTS not in off and s.list_length_prior > 0
    priors: list[Prior] = []
    if RecallStep.LENGTH not in off and s.length_prior > 0:
        priors.append(LengthPrior(s, lists_apart=lists))
    if lists:
        priors.append(ListLengthPrior(s))
    if RecallStep.NAMES not in off and s.names_prior > 0:
        priors.append(NamesPrior(s))
    if RecallStep.ANSWERS not in off and s.answer_prior > 0:
        priors.append(AnswerPrior(s))
    if RecallStep.QUESTIONS not in off and s.question_penalty > 0:
        priors.append(QuestionPenalty(s))
    return priors
