"""With the default embedder (MiniLM, which reads a text's first 256 word pieces): a fact past that
point of a long memory is still found (through the full-text leg, which indexes the whole text),
and a tenant writing in another language recalls no worse than with the hashing embedder (its
exact words, through the same leg)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemosyne import MemoryBrain
from mnemosyne.engine.embedders import make_embedder
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder

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
