"""With the default embedder (MiniLM, which reads a text's first 256 word pieces): a fact past that
point of a long memory is still found (through the full-text leg, which indexes the whole text),
and a tenant writing in another language recalls no worse than with the hashing embedder (its
exact words, through the same leg)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from mnemosyne import MemoryBrain
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.embedders import make_embedder
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.recall.text import fts_match_expression
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder
from mnemosyne.engine.types import RetainItem
from mnemosyne.store.memory_rows import indexed_text
from mnemosyne.store.schema import MIGRATIONS, SCHEMA_VERSION
from mnemosyne.store.unspaced_scripts import REINDEX, letter_pairs

FILLER = "The quarterly planning notes cover staffing, travel, hardware and the office move. "


def test_a_fact_past_256_word_pieces_is_still_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", "minilm")
    long_text = FILLER * 30 + "The vault combination is 7-3-9-1, kept by Ingrid."
    minilm = make_embedder("minilm")
    assert isinstance(minilm, MiniLMEmbedder)
    # Cut at 256 word pieces: the model never reads the fact (the vector is the filler's alone).
    with_fact, without = minilm.embed([long_text, FILLER * 30])
    assert len(minilm.word_pieces(long_text)) == 256 and float(with_fact @ without) > 0.9999
    with MemoryBrain(tmp_path / "mem", "notes") as brain:
        memory = brain.retain(long_text).memory_id
        for other in ("Ingrid likes sailing", "The office move is planned for May", "Hardware orders go through Bob"):
            brain.retain(other)
        for question in ("What is the vault combination?", "Who keeps the vault combination?"):
            assert brain.recall(question, k=1)[0].memory.id == memory


# Long memories (minutes of a meeting, a trip's notes) with one fact far past the model's window,
# beside short memories sharing a word of the question and on its topic.
LONG_CASES = [
    (
        "The spare key to the boathouse hangs on the hook behind the bait fridge.",
        "Where is the spare key to the boathouse?",
        ["The boathouse roof was repaired last summer", "A spare paddle is in the car"],
    ),
    (
        "Priya's visa appointment at the consulate is on the ninth of March at 10:15.",
        "When is Priya's visa appointment?",
        ["Priya renewed her passport in January", "The consulate is closed on public holidays"],
    ),
    (
        "The wifi in the cabin only works when the blue extender is plugged in upstairs.",
        "How do I get the cabin wifi working?",
        ["The cabin has a wood stove", "The wifi at the office is slow"],
    ),
]
MINUTES = [
    "Attendance was good and the agenda was accepted without changes.",
    "The treasurer went through the spending of the last quarter line by line.",
    "Several members asked for the newsletter to come out more often.",
    "The summer party will again be held at the lake if the weather allows.",
    "A volunteer offered to update the membership list before the next meeting.",
]


@pytest.mark.parametrize("words_before", [300, 2000])
def test_a_fact_far_into_a_long_memory_beats_short_memories_sharing_a_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words_before: int
) -> None:
    """The full-text leg finds the long memory, and the passages step gives it the cosine of its
    sentence holding the question's words: first, with either embedder (before, MiniLM ranked
    the long memory below both short ones: its vector is its first 254 word pieces')."""
    minutes = " ".join(MINUTES * (1 + words_before // sum(len(m.split()) for m in MINUTES)))
    for embedder in ("hashing", "minilm"):
        monkeypatch.setenv("MNEMOSYNE_EMBEDDER", embedder)
        for n, (fact, question, others) in enumerate(LONG_CASES):
            with MemoryBrain(tmp_path / f"{embedder}-{words_before}-{n}", "minutes") as brain:
                memory = brain.retain(f"{minutes} {fact} {' '.join(MINUTES[:2])}").memory_id
                for other in [*others, *MINUTES[2:]]:
                    brain.retain(other)
                assert brain.recall(question, k=1)[0].memory.id == memory, (embedder, question)


# A tenant writing German and Japanese: each question names the memory's own words.
FOREIGN = [
    ("Die Rechnung für den Kühlschrank wurde am Montag bezahlt", "Wann wurde die Kühlschrank Rechnung bezahlt"),
    ("Der Zahnarzttermin ist am Donnerstag um neun Uhr", "Zahnarzttermin Donnerstag"),
    ("Meine Schwester wohnt jetzt in Hamburg", "Wo wohnt meine Schwester"),
    ("Das Passwort für das WLAN steht auf dem Router", "WLAN Passwort Router"),
    ("会議は木曜日の午後三時に変更されました", "会議は何時ですか"),
    ("田中さんの犬の名前はポチです", "田中さんの犬の名前"),
    ("東京の事務所は来月閉鎖されます", "東京の事務所"),
]


def recalled_first(data_dir: Path, monkeypatch: pytest.MonkeyPatch, embedder: str) -> int:
    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", embedder)
    with MemoryBrain(data_dir, "fremd") as brain:
        ids = [brain.retain(text).memory_id for text, _ in FOREIGN]
        return sum(brain.recall(question, k=1)[0].memory.id == i for (_, question), i in zip(FOREIGN, ids))


def test_a_non_english_tenant_recalls_no_worse_than_with_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashing = recalled_first(tmp_path / "hashing", monkeypatch, "hashing")
    minilm = recalled_first(tmp_path / "minilm", monkeypatch, "minilm")
    assert minilm >= hashing and minilm == len(FOREIGN), (minilm, hashing)


# Memories the model reads nothing of (every word piece [UNK]: emoji, scripts its vocabulary
# lacks) all get one vector; a query of that kind would get it too, cosine 1.0 with each of them.
UNREADABLE = ["🎂🎉", "ሰላም ነው", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ"]


@pytest.mark.parametrize("mode", ["hybrid", "vector"])
def test_a_query_the_model_cannot_read_matches_nothing_by_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", "minilm")
    minilm = make_embedder("minilm")
    assert not any(minilm.reads(text) for text in [*UNREADABLE, "🍔🍟", "ሰላም"]) and minilm.reads("🎂 party")
    with MemoryBrain(tmp_path / "mem", "emoji") as brain:
        ids = {text: brain.retain(text).memory_id for text in [*UNREADABLE, "Carol prefers tea over coffee"]}
        assert brain.recall("🍔🍟", mode=mode) == []
        # Its own words are still found, through the full-text leg (hybrid).
        found = [hit.memory.id for hit in brain.recall("ሰላም", mode=mode)]
        assert found == ([ids["ሰላም ነው"]] if mode == "hybrid" else [])
        # A query the model reads some of is embedded as before.
        assert brain.recall("Carol tea 🍵", mode=mode, k=1)[0].memory.id == ids["Carol prefers tea over coffee"]


# Tenants writing scripts without spaces between words: each question shares a word or two with
# its memory, never the whole sentence (FTS5's tokenizer made the sentence one token).
UNSPACED = {
    "zh": [
        ("下周二我们要去北京开会", "什么时候去北京"),
        ("我儿子最喜欢吃草莓蛋糕", "儿子喜欢吃什么"),
        ("公司的新办公室在火车站旁边", "新办公室在哪里"),
        ("奶奶的生日是十月三号", "奶奶生日是哪天"),
        ("冰箱里的牛奶已经过期了", "牛奶还能喝吗"),
        ("钥匙放在门口的鞋柜上面", "钥匙在哪儿"),
    ],
    "zh-hant": [
        ("我們的航班延誤了兩個小時", "航班延誤多久"),
        ("圖書館星期日不開門", "圖書館什麼時候開門"),
        ("醫生說每天要喝八杯水", "醫生說要喝多少水"),
    ],
    "ja": [
        ("来週の月曜日に歯医者の予約があります", "歯医者の予約はいつ"),
        ("娘はピアノを習っています", "娘は何を習っていますか"),
        ("駅前のパン屋は火曜日が休みです", "パン屋の休みは"),
    ],
    "th": [
        ("ลูกชายชอบกินข้าวผัดกุ้ง", "ลูกชายชอบกินอะไร"),
        ("ประชุมพรุ่งนี้เลื่อนไปบ่ายสามโมง", "ประชุมพรุ่งนี้กี่โมง"),
        ("กุญแจบ้านอยู่ในลิ้นชัก", "กุญแจบ้านอยู่ไหน"),
    ],
}


@pytest.mark.parametrize("language", sorted(UNSPACED))
def test_a_tenant_in_a_script_without_spaces_finds_each_memory_by_the_words_its_question_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, language: str
) -> None:
    """Through the full-text leg, which indexes such a run as its letter pairs
    (store/unspaced_scripts.py), with either embedder; with MiniLM no worse than with hashing
    (its vocabulary lacks most simplified Chinese letters: a question of mostly ``[UNK]`` is ranked
    by its words, not by the one vector such texts share)."""
    pairs = UNSPACED[language]
    found = {}
    for embedder in ("hashing", "minilm"):
        monkeypatch.setenv("MNEMOSYNE_EMBEDDER", embedder)
        with MemoryBrain(tmp_path / embedder, "unspaced") as brain:
            ids = [brain.retain(text).memory_id for text, _ in pairs]
            found[embedder] = [brain.recall(question, k=1)[0].memory.id for _, question in pairs]
            assert [brain.recall(question, k=1, mode="text")[0].memory.id for _, question in pairs] == ids
        assert found[embedder] == ids, (embedder, [q for (_, q), i, f in zip(pairs, ids, found[embedder]) if i != f])


def test_a_file_indexed_before_the_letter_pairs_is_respelt_as_it_opens(tmp_path: Path) -> None:
    """A tenant file of the version before (its rows indexed with their text as it was) is
    migrated as it opens: its memories in these scripts are found by a shared word, the others as
    before, and a forget afterwards leaves the index whole (a 'delete' told another text than the
    one indexed would corrupt its counts: FTS5's integrity check)."""
    texts = [text for text, _ in UNSPACED["zh"]] + ["an English note about the garden"]
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    ids = [done.memory_id for done in engine.retain_batch("old", [RetainItem(text) for text in texts])]
    path = engine.pool.path_for("old")
    engine.close()
    connection = apsw.Connection(str(path))
    with connection:
        for memory_id, body, words in connection.execute("SELECT id, body, index_words FROM memories").fetchall():
            assert isinstance(body, str) and isinstance(words, str | None)
            connection.execute(
                "INSERT INTO memories_fts(memories_fts, rowid, body) VALUES('delete', ?, ?)",
                (memory_id, indexed_text(body, words)),
            )
            connection.execute(
                "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)", (memory_id, f"{body}\n{words}" if words else body)
            )
        connection.pragma("user_version", MIGRATIONS.index(REINDEX))
    connection.close()
    reopened = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    try:
        reopened.memories.forget("old", ids[0])
        with reopened.pool.tenant("old", create=False) as store:
            assert store is not None
            with store.write() as txn:
                assert txn.connection.pragma("user_version") == SCHEMA_VERSION
                txn.connection.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES('integrity-check', 0)")
                fts5 = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT 1"
                for (_, question), memory_id in list(zip(UNSPACED["zh"], ids))[1:] + [(("", "garden"), ids[-1])]:
                    assert txn.connection.execute(fts5, (fts_match_expression(question),)).fetchall() == [(memory_id,)]
                txn.connection.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, memories_fts, row)")
                terms = {term for (term,) in txn.connection.execute("SELECT term FROM temp.terms")}
                forgotten = set(letter_pairs(texts[0]).split()) - set(letter_pairs(" ".join(texts[1:])).split())
                assert terms and not terms & (forgotten | {texts[0]}), terms & (forgotten | {texts[0]})
    finally:
        reopened.close()
