"""Recall's answers prior (issue 42): a question asking for a time, a cause or a number lifts the
memories holding one (``engine/answer_kinds.py``), so among memories about the same thing the
one that says *when* or *why* comes first, where the sentence model alone ranks another
(``MNEMOSYNE_TEST_RECALL_OFF=answers`` switches it off). In process with the default embedder,
on texts of their own (neither paraphrase set); which questions and texts count is shown on
``asked_kind`` and ``holds`` themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemosyne.engine.answer_kinds import AnswerKind, asked_kind, holds
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem
from mnemosyne.runtime.seams import Seams

TIME, CAUSE, AMOUNT = AnswerKind.TIME, AnswerKind.CAUSE, AnswerKind.AMOUNT

# Each case: its memories (about one thing), the one meant, a question the model alone misses.
CASES = [
    (
        [
            "Sam missed the exam because he had the flu",
            "Sam studied for the exam with friends",
            "Sam's exam was in chemistry",
        ],
        0,
        "Why wasn't Sam at the exam?",
    ),
    (
        [
            "The vet clinic treats cats and dogs",
            "The vet clinic is closed on Sundays",
            "The vet clinic is run by Dr. Ortiz",
        ],
        1,
        "When can't I bring my cat to the vet?",
    ),
]


@pytest.fixture(scope="module")
def first_hits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[bool]]]:
    """Whether each case's meant memory came first, with the step and without it."""
    outcome = {}
    for label, off in (("with", frozenset[str]()), ("without", frozenset({"answers"}))):
        data_dir = tmp_path_factory.mktemp(f"answers-{label}")
        engine = Engine(EngineConfig(data_dir=Path(data_dir), embedder="minilm"), seams=Seams(recall_steps_off=off))
        try:
            firsts = []
            for number, (memories, meant, question) in enumerate(CASES):
                tenant = f"case{number}"
                ids = [o.memory_id for o in engine.retain_batch(tenant, [RetainItem(m, "", {}) for m in memories])]
                hits = engine.recall(tenant, question, k=3).hits
                firsts.append(hits[0].memory.id == ids[meant])
            outcome[label] = firsts
        finally:
            engine.close()
    yield outcome


def test_a_when_or_why_question_finds_the_memory_saying_when_or_why_first(first_hits: dict[str, list[bool]]) -> None:
    assert first_hits["with"] == [True, True]


def test_without_the_step_the_model_alone_ranks_another_first(first_hits: dict[str, list[bool]]) -> None:
    # What the step is for: were these found anyway, the test above would prove nothing of it.
    assert first_hits["without"] == [False, False]


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When does the backup run?", TIME),
        ("  when is it?", TIME),
        ("How often is the lawn mowed?", TIME),
        ("What time does the shop open?", TIME),
        ("Which day is the market?", TIME),
        ("Since when has she lived here?", TIME),
        ("Why did the build fail?", CAUSE),
        ("How come the lights are off?", CAUSE),
        ("What caused the outage?", CAUSE),
        ("What was the reason for the delay?", CAUSE),
        ("How much did the bike cost?", AMOUNT),
        ("How many cats does Ana have?", AMOUNT),
        ("How old is Elena's son?", AMOUNT),
        ("What is Dan's job?", None),
        ("Where does Sofia live?", None),
        ("Whenever I call, who answers?", None),  # a word beginning with "when" is not "when"
        ("Why", CAUSE),
        ("Dan went there when?", None),  # the kind is read from the question's head only
        ("Wann ist das Treffen?", None),  # English only
        ("", None),
    ],
)
def test_the_kind_of_answer_is_read_from_the_questions_head(question: str, kind: AnswerKind | None) -> None:
    assert asked_kind(question) == kind


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        (TIME, "The backup job runs every night at 2 am", True),
        (TIME, "The rent is due on the first of every month", True),
        (TIME, "The clinic is closed on Sundays", True),
        (TIME, "We met at 14:30 in the lobby", True),
        (TIME, "She moved here in 2019", True),
        (TIME, "I saw it yesterday", True),
        (TIME, "Backups are kept for thirty days", False),  # a duration says how long, not when
        (TIME, "The landlord's name is Mr. Keller", False),
        (CAUSE, "The flight was cancelled because of a storm", True),
        (CAUSE, "The bridge was closed due to flooding", True),
        (CAUSE, "It broke since the cable was loose", True),
        (CAUSE, "She has lived here since 2019", False),  # "since" of time is no cause
        (CAUSE, "The deployment script is written in Bash", False),
        (AMOUNT, "The bike cost 900 euros", True),
        (AMOUNT, "Ana has three cats", True),
        (AMOUNT, "The bike is blue", False),
    ],
)
def test_a_text_holds_an_answer_of_the_kind(kind: AnswerKind, text: str, expected: bool) -> None:
    assert holds(kind, text) is expected
