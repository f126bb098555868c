"""Paraphrase cases: a question worded unlike the memory it means (the Carol case of issue 42 and
32 more, three phrasings each; tests/data/paraphrase_cases.json, written before any tuning). The
target is the meant memory first in every case; this version puts it first for 95 of the 99
questions with the default embedder (45 with hashing, which matches words: docs/recall-quality.md),
so the test holds the Carol case in every phrasing and that count as a floor. A second set of 20
cases (60 questions, paraphrase_cases_heldout.json) was written after the settings were tuned and
never used to choose one: an estimate of how cases we do not have fare, held to its own floor.
``python -m bench.paraphrases [--cases held-out] --misses`` prints both embedders' scores and the misses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mnemosyne import MemoryBrain

DATA = Path(__file__).parent / "data"
CASES = json.loads((DATA / "paraphrase_cases.json").read_text(encoding="utf-8"))
HELD_OUT = json.loads((DATA / "paraphrase_cases_heldout.json").read_text(encoding="utf-8"))
Cases = list[dict[str, Any]]


def first_hits(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, embedder: str, cases: Cases = CASES
) -> list[tuple[str, bool]]:
    """Each question with whether its meant memory came first, each case in a tenant of its own."""
    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", embedder)
    outcome = []
    with MemoryBrain(data_dir) as brain:
        for number, case in enumerate(cases):
            brain.tenant = f"case{number}"
            ids = [brain.retain(text).memory_id for text in case["memories"]]
            for question in case["questions"]:
                hits = brain.recall(question, k=1)
                outcome.append((question, bool(hits) and hits[0].memory.id == ids[case["meant"]]))
    return outcome


def test_the_cases_are_many_and_worded_several_ways() -> None:
    assert len(CASES) >= 31 and CASES[0]["questions"][0] == "What does Carol drink?"
    assert len(HELD_OUT) == 20
    for case in CASES + HELD_OUT:
        assert len(case["questions"]) >= 3 and 0 <= case["meant"] < len(case["memories"])


# Measured on this version (bench/paraphrases.py); the target is all 99.
FIRST_AT_LEAST = 95
HELD_OUT_FIRST_AT_LEAST = 54  # of 60


def test_the_default_embedder_finds_the_meant_memory_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = first_hits(tmp_path / "minilm", monkeypatch, "minilm")
    carol = CASES[0]["questions"]
    assert all(first for question, first in outcome if question in carol), outcome[: len(carol)]
    missed = [question for question, first in outcome if not first]
    assert len(outcome) - len(missed) >= FIRST_AT_LEAST, f"{len(missed)} of {len(outcome)} missed: {missed}"


def test_cases_never_tuned_on_fare_as_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome = first_hits(tmp_path / "minilm", monkeypatch, "minilm", HELD_OUT)
    missed = [question for question, first in outcome if not first]
    assert len(outcome) - len(missed) >= HELD_OUT_FIRST_AT_LEAST, f"{len(missed)} of {len(outcome)} missed: {missed}"
