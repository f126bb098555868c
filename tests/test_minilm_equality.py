"""The default embedder equals the reference: sentence-transformers' all-MiniLM-L6-v2 on 200 fixed
texts (tests/data/minilm_texts.json: over 256 word pieces, non-Latin scripts, emoji, empty and
whitespace-only texts, identifiers), whose vectors and word-piece ids scripts/make-minilm-reference
made once with pinned versions. No torch here: the reference is the committed file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemosyne.engine import wordpiece
from mnemosyne.engine.sentence_embedder import MAX_WORD_PIECES, MiniLMEmbedder

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(DATA / "minilm_reference.npz") as npz:
        return {name: npz[name] for name in npz.files}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    loaded: list[str] = json.loads((DATA / "minilm_texts.json").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_the_texts_cover_what_the_issue_names(texts, reference) -> None:
    counts = reference["id_counts"]
    assert len(texts) == 200 == len(counts) == len(reference["vectors"])
    assert int(reference["max_seq_length"]) == MAX_WORD_PIECES
    assert (counts == MAX_WORD_PIECES).sum() >= 5  # cut at 256 word pieces by the reference
    assert "" in texts and sum(1 for t in texts if t and not t.strip()) >= 5
    assert any(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts)  # CJK
    assert any(any("\u0400" <= c <= "\u04ff" for c in t) for t in texts)  # Cyrillic
    assert any(any(ord(c) >= 0x1F300 for c in t) for t in texts)  # emoji
    assert any("_" in t and " " not in t for t in texts)  # identifiers


def test_word_pieces_equal_the_reference_tokenizers(minilm, texts, reference) -> None:
    ends = np.cumsum(reference["id_counts"])
    expected = np.split(reference["ids"], ends[:-1])
    wrong = [
        (t, minilm.word_pieces(t), e.tolist()) for t, e in zip(texts, expected) if minilm.word_pieces(t) != e.tolist()
    ]
    assert not wrong, wrong[:3]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(
        st.text(
            st.sampled_from(["a", "B", "é", "中", "-", "\u00a0", "\t", "\x00", "\u0301", "\U0001f600"]), max_size=9
        ),
        max_size=60,
    ),
    separators=st.lists(st.sampled_from([" ", "  ", "\n", " \n", "\u3000"]), min_size=1),
    window=st.integers(1, 12),
)
def test_the_word_pieces_of_a_long_text_read_window_by_window_equal_those_of_the_whole(
    minilm, monkeypatch, words: list[str], separators: list[str], window: int
) -> None:
    text = "".join(word + separators[i % len(separators)] for i, word in enumerate(words))
    whole = minilm.word_pieces(text)
    with monkeypatch.context() as patch:
        patch.setattr(wordpiece, "WINDOW_CHARACTERS", window)
        assert minilm.word_pieces(text) == whole


def test_vectors_equal_sentence_transformers(minilm, texts, reference) -> None:
    vectors = minilm.embed(texts)
    assert vectors.shape == (200, 384) and vectors.dtype == np.float32 and vectors.flags.c_contiguous
    cosines = np.einsum("ij,ij->i", vectors, reference["vectors"])
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.999, (texts[worst][:80], float(cosines[worst]))
    # One text at a time (no padding beside longer texts) gives the same vectors.
    for i in (0, 80, worst, len(texts) - 1):
        single = minilm.embed([texts[i]])[0]
        assert float(single @ reference["vectors"][i]) >= 0.999


def test_the_default_embedder_loads_no_torch() -> None:
    # In a process of its own: another test of this session may have loaded torch. The engine's
    # configuration loads usearch (engine/ann.py) before ONNX Runtime: the order that crashed.
    probe = (
        "import sys; import mnemosyne.engine.config; from mnemosyne.engine.embedders import make_embedder; "
        "make_embedder('minilm').embed(['a sentence']); "
        "print(sorted({'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
