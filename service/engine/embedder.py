"""Embedding: text to a unit-length float32 vector.

The default ``HashingEmbedder`` needs no model and no network: hashed word, word-pair and
character n-gram features (feature hashing with a sign bit), log-scaled and L2-normalised. Its
hash is a fixed function of the bytes (CRC-32), never Python's salted ``hash()``, so the same text
gets the same vector in every process and after every restart.
"""

from __future__ import annotations

import abc
import re
import zlib

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class Embedder(abc.ABC):
    """Contract: ``embed`` returns a C-contiguous float32 array of shape (len(texts), dim) whose
    rows have unit length (or are all zero for a text with no features); the same text always
    gets the same row; it may be slow and is always called outside any store transaction."""

    name: str = "embedder"
    dim: int = 0

    @abc.abstractmethod
    def embed(self, texts: list[str]) -> np.ndarray: ...


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class HashingEmbedder(Embedder):
    name = "hashing-v1"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _features(self, text: str) -> dict[int, float]:
        features: dict[int, float] = {}
        dim = self.dim

        def add(feature: str, weight: float) -> None:
            h = zlib.crc32(feature.encode("utf-8"))
            index = h % dim
            sign = 1.0 if (h >> 31) & 1 else -1.0
            features[index] = features.get(index, 0.0) + sign * weight

        tokens = words(text)
        for i, token in enumerate(tokens):
            add("w:" + token, 1.0)
            if i + 1 < len(tokens):
                add("b:" + token + " " + tokens[i + 1], 0.5)
            padded = f"<{token}>"
            if len(padded) > 4:
                for j in range(len(padded) - 2):
                    add("c:" + padded[j : j + 3], 0.25)
        return features

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for index, value in self._features(text).items():
                out[row, index] = np.sign(value) * np.log1p(abs(value))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


EMBEDDERS = ("hashing", "minilm")


def make_embedder(name: str) -> Embedder:
    """The embedder a server runs, by its configuration name (``--embedder``/MNEMOSYNE_EMBEDDER)."""
    if name == "hashing":
        return HashingEmbedder()
    if name == "minilm":
        # Imported here: the model stack is an optional extra, never loaded by default.
        from mnemosyne.engine.sentence_embedder import MiniLMEmbedder

        return MiniLMEmbedder()
    from mnemosyne.errors import InvalidArgument

    raise InvalidArgument(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}", reason="EMBEDDER_UNKNOWN")
