"""BM25 length normalisation: recall re-weighs FTS5's fixed b = 0.75 to b = 0.4 from FTS5's own
token counts, so a long memory holding more of the query's words is not buried under a two-word
one holding a single word."""

from __future__ import annotations

import apsw

from mnemosyne.client import MemoryClient, RetainItem
from mnemosyne.engine.recall import HASHING_SETTINGS
from mnemosyne.engine.recall.text import soften_length_normalisation
from mnemosyne.store.fts_stats import TextHits, fts5_average_length, fts5_row_length, fts5_varints
from mnemosyne.store.schema import MIGRATIONS

LONG = (
    "We went camping by the lake last weekend with the kids and the dog, hiked up the ridge trail in the "
    "afternoon, watched the sunset over the water, and at night we sat around the fire and roasted "
    "marshmallows while my youngest told ghost stories until everyone fell asleep in the tent"
)
SHORT = "Marshmallows? Yum."


def test_a_long_memory_with_more_query_words_outranks_a_two_word_one(client: MemoryClient, tenant: str) -> None:
    fillers = [f"Note {i}: the weekly meeting moved to room {i} on Tuesday" for i in range(40)]
    ids = [o.memory_id for o in client.retain_batch(tenant, [RetainItem(t) for t in [SHORT, LONG, *fillers]])]
    # FTS5's own bm25 (b = 0.75) puts SHORT first: its one word in two tokens beats three words in 52.
    hits = client.recall(tenant, "roasted marshmallows at the fire", k=2, mode="text")
    assert [h.memory.id for h in hits] == [ids[1], ids[0]], [h.memory.text for h in hits]
    assert hits[0].text_score > hits[1].text_score > 0


def test_row_lengths_and_mean_are_read_from_fts5_as_it_counted_them() -> None:
    """Pins the shadow-table format the store decodes (docsize varints, the averages record)."""
    db = apsw.Connection(":memory:")
    with db:
        db.execute(MIGRATIONS[0])
    texts = {1: "one two three", 2: " ".join(f"w{i}" for i in range(300)), 3: "Café, déjà-vu!"}
    for rowid, text in texts.items():
        db.execute("INSERT INTO memories_fts(rowid, body) VALUES(?, ?)", (rowid, text))
    sizes = dict(db.execute("SELECT id, sz FROM memories_fts_docsize"))
    assert {rowid: fts5_row_length(sz) for rowid, sz in sizes.items()} == {1: 3, 2: 300, 3: 3}
    row = db.execute("SELECT block FROM memories_fts_data WHERE id = 1").fetchone()
    assert row is not None, "fts5 wrote no averages record"
    (averages,) = row
    assert fts5_average_length(averages) == 306 / 3


def test_varints_decode_and_unreadable_input_means_unknown() -> None:
    assert fts5_varints(bytes([0x05]), 1) == [5]
    assert fts5_varints(bytes([0x82, 0x2C]), 1) == [300]
    assert fts5_varints(bytes([0xFF] * 8 + [0x01]), 1) == [(1 << 64) - 255]
    assert fts5_varints(bytes([0x03, 0x81, 0x74]), 2) == [3, 244]
    assert fts5_varints(bytes([0x81]), 1) == [0]  # cut short
    assert fts5_row_length(None) == 0 and fts5_average_length(b"") == 0.0


def test_unknown_lengths_leave_fts5_order_and_known_ones_follow_b() -> None:
    def softened(lengths: list[int], average: float, b: float = HASHING_SETTINGS.bm25_b) -> list[tuple[int, float]]:
        ranking = soften_length_normalisation(TextHits([1, 2], [4.0, 3.9], lengths, average), b=b)
        return list(zip(ranking.ids.tolist(), ranking.relevance.tolist()))

    hits = [(1, 4.0), (2, 3.9)]
    assert softened([2, 52], 0.0) == hits
    assert softened([0, 0], 12.0) == hits
    assert [m for m, _ in softened([2, 52], 12.0)] == [2, 1]
    # With b = 0.75 it is FTS5's own score.
    assert softened([2, 52], 12.0, b=0.75) == hits
