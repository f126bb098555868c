"""Recall's use of time and threads (issue 25): a turn gains part of its thread neighbours' score,
relative times are resolved against ``occurred_at`` at write time (facts, and indexed), a question
naming a date ranks memories dated inside it first; each shown against the same memories without
the fields, through a real server. Pure functions (resolution, the window's cosine) directly."""

from __future__ import annotations

import datetime

import apsw
import numpy as np
import pytest

from mnemosyne.client import MemoryClient, RetainItem, ThreadRef
from mnemosyne.engine.recall import MINILM_SETTINGS
from mnemosyne.engine.recall.context import window_cosine
from mnemosyne.engine.relative_time import QuerySpan, fact_span, query_span, resolve

MARCH_17 = datetime.datetime(2023, 3, 17, 14, 0, tzinfo=datetime.UTC).timestamp()
DISTRACTORS = [
    "I love hiking in the mountains near the lake",
    "Hiking boots are on sale at the store this month",
    "My brother went hiking once and hated it",
    "We watched a film about hiking the Appalachian trail",
]


def _conversation(client: MemoryClient, tenant: str, *, threaded: bool) -> dict[str, int]:
    turns = [
        ("s1", "Where did you go hiking last weekend, Jo?"),
        ("s1", "Up Mount Tamalpais with the dog, the views were amazing."),
        ("s1", "Sounds lovely."),
    ] + [(f"d{i}", text) for i, text in enumerate(DISTRACTORS)]
    items = [
        RetainItem(text, thread=ThreadRef(thread, i) if threaded else None, occurred_at=MARCH_17)
        for i, (thread, text) in enumerate(turns)
    ]
    return {text: r.memory_id for (_, text), r in zip(turns, client.retain_batch(tenant, items))}


def test_the_answer_beside_the_matching_turn_is_recalled_through_its_thread(client: MemoryClient, tenant: str) -> None:
    query = "where did Jo go hiking"
    answer = "Up Mount Tamalpais with the dog, the views were amazing."
    plain = _conversation(client, f"{tenant}-plain", threaded=False)
    assert plain[answer] not in [h.memory.id for h in client.recall(f"{tenant}-plain", query, k=3)]
    threaded = _conversation(client, tenant, threaded=True)
    hits = [h.memory.id for h in client.recall(tenant, query, k=3)]
    assert threaded[answer] in hits and hits[0] == threaded["Where did you go hiking last weekend, Jo?"]


def test_a_neighbour_outside_the_filters_is_neither_returned_nor_lends_its_score(
    client: MemoryClient, tenant: str
) -> None:
    client.retain(tenant, "Where did you go hiking last weekend, Jo?", thread=ThreadRef("s", 0))
    answer = client.retain(tenant, "Up Mount Tamalpais with the dog", scope="workspace/a", thread=ThreadRef("s", 1))
    for text in DISTRACTORS:
        client.retain(tenant, text, scope="workspace/a")
    hits = client.recall(tenant, "where did Jo go hiking", k=10, scopes=["workspace/a"])
    assert all(h.memory.scope == "workspace/a" for h in hits)
    assert answer.memory_id not in [h.memory.id for h in hits]  # nothing of it matches; its neighbour is filtered out


def test_a_relative_time_is_resolved_against_occurred_at_and_found_by_its_date(
    client: MemoryClient, tenant: str
) -> None:
    said = client.retain(tenant, "I finally tried the pottery class yesterday", occurred_at=MARCH_17)
    undated = client.retain(tenant, "My sister tried the pottery class yesterday")
    for day in range(1, 15):
        client.retain(tenant, f"On {day} March 2023 I went to the pottery class again", occurred_at=MARCH_17)
    memory = client.get_memory(tenant, said.memory_id)
    assert ("date", "yesterday", "2023-03-16") in [(f.kind, f.value, f.normalized) for f in memory.facts]
    assert memory.text == "I finally tried the pottery class yesterday"  # the text is never rewritten
    assert not [f for f in client.get_memory(tenant, undated.memory_id).facts if f.kind == "date"]
    hits = client.recall(tenant, "What did I try on March 16, 2023?", k=3)
    assert hits[0].memory.id == said.memory_id
    assert client.recall(tenant, "16 March 2023", k=1, mode="text")[0].memory.id == said.memory_id


def test_a_question_s_date_finds_what_happened_that_day_and_a_day_written_without_its_year(
    client: MemoryClient, tenant: str
) -> None:
    day = datetime.datetime(2022, 3, 16, 18, 0, tzinfo=datetime.UTC).timestamp()
    others = [
        client.retain(tenant, f"Painting a sunset at the studio, session {n}", occurred_at=day - n * 86400).memory_id
        for n in range(1, 12)
    ]
    # Said on 16 March with no date in its words (and last: a tie goes to the lower id), its
    # occurred_at is the date.
    that_day = client.retain(tenant, "Painting a sunset at the studio, session 0", occurred_at=day)
    # Said later, naming the day without its year: resolved against its own occurred_at.
    recalled = client.retain(tenant, "On 16 March I painted a lake at the studio", occurred_at=day + 5 * 86400)
    written = client.get_memory(tenant, recalled.memory_id).facts
    assert ("date", "16 March", "2022-03-16") in [(f.kind, f.value, f.normalized) for f in written]
    for query in ("What was I painting on March 16, 2022?", "What was I painting on 16 March?"):
        first_two = {h.memory.id for h in client.recall(tenant, query, k=2)}
        assert first_two == {that_day.memory_id, recalled.memory_id}, query
    # Another day: the session of that day is lifted above the other sessions.
    hits = [h.memory.id for h in client.recall(tenant, "What was I painting on 13 March 2022?", k=13)]
    assert [i for i in hits if i in others][0] == others[2]


def test_a_forget_takes_the_resolved_words_out_of_the_index(server_factory, tenant: str) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        kept = client.retain(tenant, "The boiler was serviced", occurred_at=MARCH_17).memory_id
        gone = client.retain(tenant, "The roof was fixed yesterday", occurred_at=MARCH_17 + 14 * 365 * 86400).memory_id
        assert [h.memory.id for h in client.recall(tenant, "2037", k=5, mode="text")] == [gone]
        client.forget(tenant, gone)
        assert client.recall(tenant, "2037", k=5, mode="text") == []
        assert client.verify_integrity(tenant).valid
        assert [h.memory.id for h in client.recall(tenant, "boiler", k=5)] == [kept]
    server.stop()
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        connection.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, memories_fts, row)")
        terms = {t for (t,) in connection.execute("SELECT term FROM temp.vocab")}
        assert "2037" not in terms and "roof" not in terms and "boiler" in terms
    finally:
        connection.close()


def test_an_update_resolves_the_new_text_against_the_memory_s_time_and_unindexes_the_old_words(
    server_factory,
    tenant: str,
) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, "The roof was fixed yesterday", occurred_at=MARCH_17).memory_id
        assert [h.memory.id for h in client.recall(tenant, "16 March 2023", k=5, mode="text")] == [memory_id]
        client.update_memory(tenant, memory_id, "The gutter was cleaned two days ago")
        memory = client.get_memory(tenant, memory_id)
        assert [(f.value, f.normalized) for f in memory.facts if f.kind == "date"] == [("two days ago", "2023-03-15")]
        assert client.recall(tenant, "16", k=5, mode="text") == []  # the old day's words left the index
        assert [h.memory.id for h in client.recall(tenant, "15", k=5, mode="text")] == [memory_id]
        assert client.verify_integrity(tenant).valid
    server.stop()
    connection = apsw.Connection(str(server.tenant_file(tenant)), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        connection.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, memories_fts, row)")
        terms = {t for (t,) in connection.execute("SELECT term FROM temp.vocab")}
        assert "16" not in terms and "roof" not in terms and "15" in terms and "gutter" in terms
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("we met yesterday", [("yesterday", "2023-03-16")]),
        (
            "last night and the day before yesterday",
            [("last night", "2023-03-16"), ("the day before yesterday", "2023-03-15")],
        ),
        ("Tonight!", [("Tonight", "2023-03-17")]),
        ("two days ago, in 3 days", [("two days ago", "2023-03-15"), ("in 3 days", "2023-03-20")]),
        ("last week", [("last week", "2023-03-06/2023-03-12")]),
        ("next weekend", [("next weekend", "2023-03-25")]),
        (
            "last Friday, this Friday, next Friday",
            [("last Friday", "2023-03-10"), ("this Friday", "2023-03-17"), ("next Friday", "2023-03-24")],
        ),
        ("a few months ago", [("a few months ago", "2022-12")]),
        ("next month and last year", [("next month", "2023-04"), ("last year", "2022")]),
        ("nothing relative here, 5 days of rain", []),
        ("the day after tomorrow", [("the day after tomorrow", "2023-03-19")]),
        (
            "two weeks from now, 3 days from today",
            [("two weeks from now", "2023-03-27/2023-04-02"), ("3 days from today", "2023-03-20")],
        ),
        (
            "on 16 March, March 3rd and the 1st of April",
            [("16 March", "2023-03-16"), ("March 3rd", "2023-03-03"), ("the 1st of April", "2023-04-01")],
        ),
        ("on 31 April", []),  # no such day
        ("16 March 2023 and March 3, 2023", []),  # whole dates: the extractor's
        ("I may 5 times; on 16 march", []),  # a month is written with its capital
    ],
)
def test_relative_times_resolve_against_the_anchor(text: str, expected: list[tuple[str, str]]) -> None:
    facts, words = resolve(text, int(MARCH_17 * 1e6))  # a Friday
    assert [(value, normalized) for _, value, normalized in facts] == expected
    assert all(kind == "date" for kind, _, _ in facts)
    assert bool(words) == bool(expected)
    assert resolve(text, None) == ([], "")  # no anchor, nothing resolved


def test_resolution_across_year_ends_and_the_calendar_edges() -> None:
    new_year = int(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp() * 1e6)
    assert resolve("yesterday, last month", new_year)[0] == [
        ("date", "yesterday", "2023-12-31"),
        ("date", "last month", "2023-12"),
    ]
    # A day without its year is the nearest such day: the last December's, the next leap day.
    assert resolve("on 28 December, on 29 February", new_year)[0] == [
        ("date", "28 December", "2023-12-28"),
        ("date", "29 February", "2024-02-29"),
    ]
    end = int((datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC).timestamp()) * 1e6)
    assert resolve("tomorrow, yesterday, next year", end)[0] == [
        ("date", "yesterday", "9999-12-30")
    ]  # year 10000 is skipped


def test_a_question_names_one_span_or_none() -> None:
    day = datetime.date(2022, 3, 16)
    assert query_span("Which activity was James pursuing on March 16, 2022?") == QuerySpan(day, day)
    assert query_span("what happened on 16th March 2022") == QuerySpan(day, day)
    july = QuerySpan(datetime.date(2023, 7, 1), datetime.date(2023, 7, 31))
    assert query_span("What did Mel paint in July 2023?") == july
    assert query_span("beach trips in 2023") == QuerySpan(datetime.date(2023, 1, 1), datetime.date(2023, 12, 31))
    assert query_span("on 7 July, 2023 and on 8 July 2023") is None  # two spans: not one constraint
    assert query_span("on 31 February 2023") is None
    assert query_span("what may I ask") is None  # "may" is no month without "in" or a day
    # Without a year: that day or month in any year.
    on_16_march = query_span("what happened on march 16th?")
    assert on_16_march is not None and on_16_march.every_year
    assert query_span("What did she do on 16 March?") == on_16_march
    assert on_16_march.overlaps((datetime.date(1999, 3, 16),) * 2)
    assert not on_16_march.overlaps((datetime.date(2023, 3, 17),) * 2)
    assert on_16_march.overlaps((datetime.date(2023, 3, 13), datetime.date(2023, 3, 19)))  # a week
    assert not july.overlaps((datetime.date(2022, 7, 4),) * 2)  # a year named is that year only
    june = query_span("camping in June")
    assert june is not None and june.every_year and june.overlaps((datetime.date(2021, 6, 30),) * 2)
    february = query_span("during February")
    assert february is not None and february.overlaps((datetime.date(2023, 2, 28),) * 2)  # a common year's last day
    leap_day = query_span("on 29 February")
    assert leap_day is not None and leap_day.overlaps((datetime.date(2024, 2, 29),) * 2)
    assert not leap_day.overlaps((datetime.date(2023, 1, 1), datetime.date(2023, 12, 31)))  # no such day in 2023
    december = query_span("in December")
    assert december is not None and december.overlaps((datetime.date(9999, 12, 31),) * 2)
    assert fact_span("2023-03-06/2023-03-12") == (datetime.date(2023, 3, 6), datetime.date(2023, 3, 12))
    assert fact_span("2023-02") == (datetime.date(2023, 2, 1), datetime.date(2023, 2, 28))
    assert fact_span("RF-1") is None


def test_the_window_of_a_candidate_includes_its_neighbours() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=np.float32)
    query = np.array([1.0, 0.0], dtype=np.float32)
    rows, cosine, share = np.arange(3), (vectors @ query).astype(np.float64), MINILM_SETTINGS.window_neighbours
    alone = window_cosine(query, vectors, rows, cosine, np.zeros((0, 2), dtype=np.int64), share=share)
    assert alone.tolist() == [1.0, 0.0, 0.0]
    # Row 1 is row 0's neighbour: its window now leans toward the query; row 2's does not.
    paired = window_cosine(query, vectors, rows, cosine, np.array([[1, 0], [0, 1]]), share=share)
    assert paired[1] > 0.4 and paired[2] == 0.0 and 0.8 < paired[0] < 1.0


def _party(client: MemoryClient, tenant: str) -> int:
    for text in ["Sam said the party was fun", "The party was on Saturday", "Sam danced at the party", "Jo cooked"]:
        client.retain(tenant, text)
    detailed = (
        "For the party Sam cooked a big pan of paella with saffron, lemon and grilled prawns, enough for twenty people"
    )
    return client.retain(tenant, detailed).memory_id


def test_the_longer_of_two_close_matches_ranks_first(server_factory, tenant: str) -> None:
    query = "what did Sam cook for the party"
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "length"}).start().target) as client:
        _party(client, tenant)
        assert client.recall(tenant, query, k=2)[0].memory.text == "Jo cooked"  # without the prior
    with MemoryClient(server_factory().start().target) as client:
        detailed = _party(client, tenant)
        hits = client.recall(tenant, query, k=2)
        assert hits[0].memory.id == detailed and all(h.score > 0 for h in hits)
        assert client.recall(tenant, query, k=2, mode="text")[0].memory.text == "Jo cooked"  # hybrid only
