"""Recall's steps one by one (engine/recall/), each on small hand-made inputs: real numpy arrays and
rows, the step's own function, no server. Which steps run for an embedder and a mode is checked on
the pipeline a real ``Recall`` builds; the names are the ones the docs, the bench and the
``MNEMOSYNE_TEST_RECALL_OFF`` seam use. The whole recall is proven end to end by
tests/test_recall*.py and, for the figures, ``bench.locomo``."""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mnemosyne.engine.answer_kinds import AnswerKind, asked_kind
from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.embedders import TenantEmbedders
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.question_form import asks_for_many
from mnemosyne.engine.recall import HASHING_SETTINGS, MINILM_SETTINGS, Recall, RecallSettings, RecallStep, settings_for
from mnemosyne.engine.recall.candidates import FindCandidates, top_rows, vector_scores
from mnemosyne.engine.recall.context import join_neighbours, with_neighbours
from mnemosyne.engine.recall.fusion import fuse, text_ranking
from mnemosyne.engine.recall.lifts import dated, spoken_by, thread_support
from mnemosyne.engine.recall.passages import best_passage
from mnemosyne.engine.recall.pipeline import build_pipeline
from mnemosyne.engine.recall.priors import (
    AnswerPrior,
    LengthPrior,
    ListLengthPrior,
    asking,
    asks,
    with_answer_prior,
    with_length_prior,
    with_names_prior,
)
from mnemosyne.engine.recall.query import blend
from mnemosyne.engine.recall.ranking import Candidate, Ranking, TextRanking
from mnemosyne.engine.recall.select import best_hits, read_rows
from mnemosyne.engine.recall.state import Query
from mnemosyne.engine.recall.steps import SWITCHABLE, switched_off
from mnemosyne.engine.recall.text import coordinate
from mnemosyne.engine.relative_time import QuerySpan
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder
from mnemosyne.engine.terms import stem
from mnemosyne.engine.types import RecallMode
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.pool import TenantPool
from tests.docs_support import DOCS, ROOT, section, table_rows

OLD_NAMES: tuple[str, ...] = ("neighbours", "window", "dates", "length", "lists", "speaker", "threads", "questions")
OLD_NAMES += ("speaker_query", "names", "postings", "relative_time", "passages", "answers")


def _ranking(ids: list[int], scores: list[float]) -> Ranking:
    return Ranking(np.array(ids, dtype=np.int64), np.array(scores), np.zeros(len(ids)), np.zeros(len(ids)))


def _text_hits(ids: list[int], relevance: list[float]) -> TextRanking:
    return TextRanking(np.array(ids, dtype=np.int64), np.array(relevance), np.zeros(len(ids)))


def _row(
    memory_id: int, body: str = "a memory", *, forgotten: bool = False, merged_into: int = 0, superseded_by: int = 0
) -> MemoryRow:
    return MemoryRow(
        memory_id, "global", body, {}, 0.0, forgotten, merged_into=merged_into, superseded_by=superseded_by
    )


def _query(text: str) -> Query:
    return Query(text, [], 5, 50, [], {}, RecallMode.HYBRID, None, asks_for_many(text), asked_kind(text))


# -- the names ------------------------------------------------------------------------------------


def test_the_old_ablation_names_are_the_steps_that_can_be_switched_off() -> None:
    assert switched_off(OLD_NAMES) == frozenset(RecallStep(name) for name in OLD_NAMES)
    assert set(SWITCHABLE) == set(OLD_NAMES)
    for name in ("speakers", "fuse", "select", ""):
        with pytest.raises(ValueError, match="no recall step that can be switched off"):
            switched_off([name])


def test_the_docs_list_every_step_in_the_order_it_runs() -> None:
    rows = table_rows(section((DOCS / "recall-quality.md").read_text(), "The steps"))
    assert rows[0] == ["step", "what it does", "where", "switched off"]
    names = [cells[0].strip("`") for cells in rows[2:]]
    assert names == list(RecallStep)
    assert [cells[0].strip("`") for cells in rows[2:] if cells[3] == "yes"] == list(SWITCHABLE)


def test_the_bench_switches_off_the_same_steps() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "bench.locomo", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "--off {" + ",".join(SWITCHABLE) + "}" in help_text
    refused = subprocess.run(
        [sys.executable, "-m", "bench.locomo", "--data", "x.json", "--out", "x.json", "--off", "speakers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "invalid choice: 'speakers'" in refused.stderr


# -- the settings ---------------------------------------------------------------------------------


def test_every_setting_says_why_and_no_embedder_carries_one() -> None:
    source = (ROOT / "service/engine/recall/settings.py").read_text().splitlines()
    for setting in dataclasses.fields(RecallSettings):
        (line,) = [i for i, text in enumerate(source) if re.match(rf"    {setting.name}: ", text)]
        assert source[line - 1].strip().startswith("#"), f"{setting.name} has no reason above it"
        assert not hasattr(HashingEmbedder, setting.name) and not hasattr(MiniLMEmbedder, setting.name)
        assert not hasattr(Embedder, setting.name)


def test_the_recall_takes_the_settings_of_its_embedder() -> None:
    class Unknown(HashingEmbedder):
        name = "unknown"

    assert settings_for(HashingEmbedder()) is HASHING_SETTINGS
    assert settings_for(Unknown()) == RecallSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        HASHING_SETTINGS.text_weight = 0.1  # type: ignore[misc]  # frozen: that is what is checked


def _names(settings: RecallSettings, mode: RecallMode, off: frozenset[RecallStep] = frozenset()) -> list[str]:
    built = build_pipeline(mode, settings, off, embedder=HashingEmbedder(), ann_threshold=10**9)
    return [str(name) for name in built.names]


def test_each_embedder_runs_the_steps_its_settings_weigh() -> None:
    hybrid, vector, text = RecallMode.HYBRID, RecallMode.VECTOR, RecallMode.TEXT
    lifts = ["rank", "dates", "speaker", "threads", "read"]
    assert _names(HASHING_SETTINGS, hybrid) == [
        *["embed", "candidates", "fuse", "context", "neighbours", *lifts],
        *["length", "lists", "names", "answers", "questions", "select"],
    ]
    assert _names(MINILM_SETTINGS, hybrid) == [
        *["speaker_query", "candidates", "fuse", "passages", "context", "neighbours", "window", *lifts],
        *["lists", "names", "answers", "questions", "select"],
    ]
    assert _names(MINILM_SETTINGS, vector) == [
        *["speaker_query", "candidates", "fuse", "passages", "context", "neighbours", "window", *lifts, "select"]
    ]
    assert _names(HASHING_SETTINGS, text) == ["candidates", "rank", "read", "select"]


def test_a_step_switched_off_leaves_the_list() -> None:
    off = switched_off(["neighbours", "speaker_query", "names", "dates"])
    assert _names(MINILM_SETTINGS, RecallMode.HYBRID, off) == [
        *["embed", "candidates", "fuse", "passages", "context", "window", "rank", "speaker", "threads", "read"],
        *["lists", "answers", "questions", "select"],
    ]
    off = switched_off(["neighbours", "window", "threads", "length", "lists", "questions", "names", "answers"])
    assert _names(MINILM_SETTINGS, RecallMode.HYBRID, off) == [
        *["speaker_query", "candidates", "fuse", "passages", "rank", "dates", "speaker", "read", "select"]
    ]


def test_a_long_memorys_passage_is_its_sentence_holding_most_of_the_questions_words() -> None:
    text = "The budget was agreed. Lunch is at noon!\nThe generator fuel is stored in shed four. The generator hums."
    stems = frozenset(stem(word) for word in ("generator", "fuel", "stored"))
    assert best_passage(text, stems) == "The generator fuel is stored in shed four."
    assert best_passage(text, frozenset({"boat"})) is None


def test_a_recall_refuses_a_step_it_does_not_know(tmp_path: Path) -> None:
    pool = TenantPool(tmp_path, max_open=4, synchronous="NORMAL")
    try:
        with pytest.raises(ValueError, match="'window_cosine' is no recall step"):
            Recall(
                pool=pool, embedders=TenantEmbedders(HashingEmbedder()), limits=Limits(), steps_off={"window_cosine"}
            )
    finally:
        pool.close()


def test_the_approximate_index_serves_from_each_embedders_own_threshold_unless_the_operator_sets_one(
    tmp_path: Path,
) -> None:
    """A dense embedder's exact scan reads every dimension of every row: its graph serves from
    5,000 memories, a hashing tenant's from 50,000; --ann-threshold, when set, for every tenant."""

    class Dense(HashingEmbedder):  # named as MiniLM (its settings), without loading the model
        name = MiniLMEmbedder.name

    pool = TenantPool(tmp_path, max_open=4, synchronous="NORMAL")
    try:
        for given, hashing, dense in ((0, 50_000, 5_000), (7, 7, 7)):
            recall = Recall(
                pool=pool, embedders=TenantEmbedders(HashingEmbedder()), limits=Limits(), ann_threshold=given
            )
            for embedder, expected in ((HashingEmbedder(), hashing), (Dense(), dense)):
                for mode in RecallMode:
                    candidates = recall.ranking(embedder).pipelines[mode].steps[0]
                    assert isinstance(candidates, FindCandidates) and candidates.ann_threshold == expected
    finally:
        pool.close()


# -- embed / speaker_query ------------------------------------------------------------------------


def test_speaker_query_blends_the_two_vectors_into_a_unit_vector() -> None:
    full, stripped = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    assert blend(full, stripped, 0.5) == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
    assert blend(full, stripped, 0.0).tolist() == [1.0, 0.0]
    assert blend(full, -full, 0.5).tolist() == [0.0, 0.0]  # nothing left: no division by zero


# -- candidates -----------------------------------------------------------------------------------


def test_candidates_are_the_rows_above_0_best_first_ties_by_the_lower_row() -> None:
    scores = np.array([0.2, 0.9, 0.0, 0.9, -0.5, 0.4], dtype=np.float32)
    assert top_rows(scores, 3).tolist() == [1, 3, 5]
    assert top_rows(scores, 10).tolist() == [1, 3, 5, 0]  # no filler with no feature shared
    assert top_rows(scores, 0).tolist() == []


def test_a_cosine_within_rounding_of_0_is_no_candidate_whatever_the_summation_order() -> None:
    """Shared features that cancel (a hashed feature met with opposite signs) sum to 0 only
    up to float32 rounding, whose sign follows the BLAS's summation order: such a memory is never
    a candidate, on any machine."""
    embedder = HashingEmbedder()
    query = embedder.embed(["train to Lyon"])[0]
    plants = embedder.embed(["The office plants are watered on Fridays"])[0]
    shared = np.flatnonzero((query != 0) & (plants != 0))
    products = query[shared] * plants[shared]
    assert len(shared) >= 2 and math.isclose(float(products.sum(dtype=np.float64)), 0.0, abs_tol=1e-12)
    for rounding in (0.0, 3e-9, -3e-9, 6e-8):  # what different summation orders give
        scores = np.array([0.5, rounding, 0.1], dtype=np.float32)
        assert top_rows(scores, 10).tolist() == [0, 2]


def test_candidates_scores_are_the_same_sparse_or_dense_and_minus_inf_outside_the_filters() -> None:
    rng = np.random.default_rng(7)
    matrix = np.asfortranarray(rng.standard_normal((40, 16)).astype(np.float32))  # dimension-major
    sparse = np.zeros(16, dtype=np.float32)
    sparse[[2, 9]] = [0.6, 0.8]
    expected = np.ascontiguousarray(matrix) @ sparse
    assert np.allclose(vector_scores(sparse, matrix, None), expected, atol=1e-6)
    allowed = np.arange(40) % 2 == 0
    scores = vector_scores(sparse, matrix, allowed)
    assert np.isneginf(scores[~allowed]).all() and np.allclose(scores[allowed], expected[allowed], atol=1e-6)


def test_candidates_holding_every_term_come_first_within_bm25() -> None:
    any_hits = _text_hits([5, 6, 7], [3.0, 2.0, 1.0])
    all_hits = _text_hits([7], [0.5])
    coordinated = coordinate(any_hits, all_hits)
    assert coordinated.ids.tolist() == [7, 5, 6] and coordinated.relevance.tolist() == [3.5, 3.0, 2.0]


# -- fuse and rank --------------------------------------------------------------------------------

# Four memories (ids 10-40, rows 0-3) and the query [1, 0]: cosines 1, 0.6, 0 and -1.
IDS = np.array([10, 20, 30, 40], dtype=np.int64)
VECTORS = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
QUERY = np.array([1.0, 0.0], dtype=np.float32)


def _fused(
    vector_rows: list[int],
    text: TextRanking,
    *,
    text_weight: float = 0.5,
    text_floor: float = 0.0,
    feedback: float = 0.0,
):
    rows = np.array(vector_rows, dtype=np.int64)
    scores = VECTORS @ QUERY
    return fuse(
        QUERY,
        IDS,
        VECTORS,
        scores,
        rows,
        text,
        text_weight=text_weight,
        text_floor=text_floor,
        feedback=feedback,
        feedback_candidates=1,
    )


def test_fuse_weighs_bm25_by_its_best_hit_and_the_cosine_by_the_rest() -> None:
    # Memory 30 is a text hit; 99 is not in the cache (dropped, and not the best relevance).
    pool = _fused([0, 1], _text_hits([30, 99], [2.0, 4.0]))
    assert pool.rows.tolist() == [0, 1, 2]
    assert pool.scores.tolist() == pytest.approx([0.5, 0.3, 0.5])
    assert pool.refined is None
    # rank: best first, ties by the lower id, cut to the limit.
    assert pool.ranking(IDS, 10).memory_ids.tolist() == [10, 30, 20]
    assert pool.ranking(IDS, 2).memory_ids.tolist() == [10, 30]


def test_fuse_divides_bm25_by_at_least_the_floor_so_a_word_found_everywhere_weighs_nothing() -> None:
    # FTS5 clamps the IDF of a word in most memories (a name in every one) to about 1e-6: divided
    # by its best alone, that hit took BM25's whole share and outranked the best cosine.
    everywhere = _text_hits([20], [1e-6])
    assert _fused([0, 1], everywhere).ranking(IDS, 10).memory_ids.tolist() == [20, 10]
    floored = _fused([0, 1], everywhere, text_floor=2.0)
    assert floored.scores.tolist() == pytest.approx([0.5, 0.3 + 0.25e-6])
    assert floored.ranking(IDS, 10).memory_ids.tolist() == [10, 20]
    # A best hit above the floor is divided by itself, as without one.
    strong = _fused([0, 1], _text_hits([20], [4.0]), text_floor=2.0)
    assert strong.scores.tolist() == pytest.approx([0.5, 0.8])


def test_fuse_feedback_moves_the_query_toward_the_best_candidate() -> None:
    text = _text_hits([30], [1.0])
    plain = _fused([0, 1], text, text_weight=0.9)
    assert plain.ranking(IDS, 10).memory_ids.tolist() == [30, 10, 20]
    moved = _fused([0, 1], text, text_weight=0.9, feedback=1.0)
    assert moved.refined is not None and moved.refined == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
    assert moved.ranking(IDS, 10).memory_ids.tolist() == [30, 20, 10]  # 20 leans toward 30


def test_rank_of_text_only_is_bm25_s_order_ties_by_the_lower_id() -> None:
    ranking = text_ranking(_text_hits([9, 4, 7], [1.0, 2.0, 2.0]), 2)
    assert ranking.memory_ids.tolist() == [4, 7] and ranking.columns[2].tolist() == [0.0, 0.0]


# -- context and neighbours -----------------------------------------------------------------------


def test_context_joins_the_best_candidates_thread_neighbours_and_neighbours_lend_their_score() -> None:
    scores = np.array([1.0, 0.5, 0.2, -np.inf])  # memory 40 is outside the filters
    pool = fuse(
        QUERY,
        IDS,
        VECTORS,
        scores,
        np.array([0]),
        TextRanking.empty(),
        text_weight=0.5,
        text_floor=0.0,
        feedback=0.0,
        feedback_candidates=3,
    )
    asked = []

    def neighbours_of(memory_ids: np.ndarray) -> np.ndarray:
        asked.append(memory_ids.tolist())
        return np.array([[10, 20], [10, 40]], dtype=np.int64)

    joined = join_neighbours(pool, IDS, VECTORS, scores, neighbours_of, depth=20, text_weight=0.5)
    assert asked == [[10]]
    assert joined.rows.tolist() == [0, 1, 3] and joined.scores.tolist() == [0.5, 0.25, 0.0]
    # (candidate, neighbour) both ways round, none lending from outside the filters.
    assert sorted(map(tuple, joined.pairs.tolist())) == [(0, 1), (1, 0), (2, 0)]
    lent = with_neighbours(joined.scores, joined.pairs, 0.4)
    assert lent.tolist() == pytest.approx([0.6, 0.45, 0.2])
    assert joined._replace(scores=lent).ranking(IDS, 10).memory_ids.tolist() == [10, 20]


def test_context_without_neighbours_leaves_the_pool_as_it_was() -> None:
    pool = _fused([0, 1], TextRanking.empty())
    same = join_neighbours(
        pool, IDS, VECTORS, VECTORS @ QUERY, lambda ids: np.zeros((0, 2), dtype=np.int64), depth=20, text_weight=0.5
    )
    assert same is pool and len(same.pairs) == 0


# -- dates, speaker, threads ----------------------------------------------------------------------


def _microseconds(day: datetime.date) -> int:
    return int(datetime.datetime(day.year, day.month, day.day, 12, tzinfo=datetime.UTC).timestamp() * 1_000_000)


def test_dates_lifts_the_candidates_dated_or_happening_inside_the_span() -> None:
    ranking = _ranking([1, 2, 3], [1.0, 0.9, 0.8])
    may = QuerySpan(datetime.date(2023, 5, 1), datetime.date(2023, 5, 31))
    june_1st = [(2, _microseconds(datetime.date(2023, 6, 1)))]
    assert dated(ranking, [(3, "2023-05-16")], june_1st, may, 0.5).memory_ids.tolist() == [3, 1, 2]
    may_20th = [(2, _microseconds(datetime.date(2023, 5, 20)))]
    assert dated(ranking, [(3, "2023-07")], may_20th, may, 0.5).memory_ids.tolist() == [2, 1, 3]
    assert dated(ranking, [(3, "2022-05")], [], may, 0.5) is ranking
    every_may = QuerySpan(datetime.date(2000, 5, 1), datetime.date(2000, 5, 31), every_year=True)
    assert dated(ranking, [(3, "2022-05")], [], every_may, 0.5).memory_ids.tolist() == [3, 1, 2]


def test_speaker_lifts_what_a_named_speaker_said() -> None:
    ranking = _ranking([1, 2, 3], [1.0, 0.9, 0.8])
    lifted = spoken_by(ranking, np.array([-1, 7, 5]), np.array([5]), 0.3)
    assert lifted.memory_ids.tolist() == [3, 1, 2] and lifted.columns[1].tolist() == pytest.approx([1.1, 1.0, 0.9])


def test_threads_lifts_the_candidates_of_a_thread_holding_several_matches() -> None:
    ranking = _ranking([1, 2, 3, 4], [1.0, 0.9, 0.8, 0.7])
    supported = thread_support(ranking, np.array([0, 1, 1, -1]), 0.5)
    # Thread 1 holds 1.7 of the score, thread 0 1.0: shares 1 and 1/1.7 of 0.5 x the best.
    assert supported.memory_ids.tolist() == [2, 3, 1, 4]
    assert supported.columns[1].tolist() == pytest.approx([1.4, 1.3, 1.0 + 0.5 / 1.7, 0.7])
    assert thread_support(ranking, np.array([-1, -1]), 0.5) is ranking


# -- read, the priors, select ---------------------------------------------------------------------


def test_read_widens_the_window_until_it_holds_k_current_memories() -> None:
    ranking = _ranking([1, 2, 3, 4, 5, 6], [6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    rows = {1: _row(1, superseded_by=9), 2: _row(2, forgotten=True), 3: _row(3), 4: _row(4), 5: _row(5)}
    fetched: list[list[int]] = []

    def fetch(ids: list[int]) -> dict[int, MemoryRow]:
        fetched.append(ids)
        return {i: rows[i] for i in ids if i in rows}

    read, got = read_rows(ranking, fetch, 2, 2)
    assert fetched == [[1, 2], [3, 4]] and [c.memory_id for c in read] == [1, 2, 3, 4] and set(got) == {1, 2, 3, 4}
    fetched.clear()
    read, _ = read_rows(ranking, fetch, 5, 4)  # only 3 current in all: the candidates run out
    assert fetched == [[1, 2, 3, 4], [5, 6]] and len(read) == 6


def test_length_lifts_the_longer_of_two_close_matches() -> None:
    ranked = [Candidate(1, 1.0), Candidate(2, 0.9)]
    rows = {1: _row(1, "x" * 10), 2: _row(2, "y" * 40)}
    scores = with_length_prior(ranked, rows, {}, 0.5)
    assert scores == pytest.approx({1: 1.0 + 0.5 * math.log(10 / 25), 2: 0.9 + 0.5 * math.log(40 / 25)})
    assert with_length_prior(ranked, {1: _row(1, forgotten=True)}, {}, 0.5) == {}


def test_lists_takes_the_list_questions_and_length_the_others() -> None:
    many, one = _query("What books has Tim read?"), _query("What is Tim's favourite book?")
    length, lists = LengthPrior(HASHING_SETTINGS, lists_apart=True), ListLengthPrior(HASHING_SETTINGS)
    assert (length.applies(many), lists.applies(many)) == (False, True)
    assert (length.applies(one), lists.applies(one)) == (True, False)
    assert LengthPrior(HASHING_SETTINGS, lists_apart=False).applies(many)  # lists switched off


def test_names_lifts_the_memories_naming_more_places_people_and_works() -> None:
    ranked = [Candidate(1, 1.0), Candidate(2, 1.0), Candidate(3, 1.0)]
    rows = {
        1: _row(1, "We drove to Seattle with Nicole in May."),
        2: _row(2, "we drove there."),
        3: _row(3, "Caroline came along.", merged_into=1),
    }
    scores = with_names_prior(ranked, rows, {2: 0.5}, 0.2, frozenset({"nicole", "may"}))
    assert scores == pytest.approx({1: 1.0 + 0.2 * math.log1p(1), 2: 0.5})  # Seattle only


def test_answers_lifts_the_memories_holding_the_kind_of_answer_asked() -> None:
    ranked = [Candidate(1, 1.0), Candidate(2, 0.9), Candidate(3, 0.8)]
    rows = {
        1: _row(1, "Backups are kept for thirty days"),
        2: _row(2, "The backup runs every night at 2 am"),
        3: _row(3, "The backup ran on Monday", forgotten=True),
    }
    scores = with_answer_prior(ranked, rows, {2: 0.85}, 0.1, AnswerKind.TIME)
    assert scores == pytest.approx({2: 0.85 + 0.1})  # the given score, plus 0.1 x the best (1.0)
    prior = AnswerPrior(MINILM_SETTINGS)
    assert prior.applies(_query("When does the backup run?")) and not prior.applies(_query("Where is the backup?"))


def test_questions_lowers_a_memory_that_ends_by_asking() -> None:
    ranked = [Candidate(1, 1.0), Candidate(2, 0.8)]
    rows = {1: _row(1, "Did you go? I did."), 2: _row(2, "I went. Did you?")}
    assert asking(ranked, rows, {2: 0.9}, 0.2) == pytest.approx({2: 0.72})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Did you go? I did.", False),
        ("I went. Did you?", True),
        ("Really?! Wow!", False),
        ("Is it? Yes! Or is it?", True),
        ("no marks at all", False),
        ("", False),
        ("?", True),
        ("v1.2 is out, is it not?\n\n", True),
        ("¿Vienes mañana?", True),  # not ASCII: the general rule
        ("你去了吗？我去了。", False),
        ("我去了。你去了吗？", True),
        ("Café? Non.", False),
    ],
)
def test_a_memory_asks_when_its_last_sentence_mark_is_a_question_mark(text: str, expected: bool) -> None:
    assert asks(text) is expected


def test_select_keeps_the_best_k_current_first_ties_by_the_lower_id() -> None:
    ranked = [Candidate(i, 1.0) for i in (5, 4, 3, 2, 1, 6)]
    rows = {
        5: _row(5, superseded_by=7),
        4: _row(4),
        3: _row(3, forgotten=True),
        2: _row(2, merged_into=4),
        1: _row(1),
    }  # 6 is newer than the snapshot: no row
    best = best_hits(ranked, rows, {4: 0.9}, 3, 0.5)
    assert [(c.memory_id, score) for c, _, score in best] == [(1, 1.0), (4, 0.9), (5, 0.5)]
    assert [c.memory_id for c, _, _ in best_hits(ranked, rows, {}, 1, 0.5)] == [1]
