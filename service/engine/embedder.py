"""Embedding: text to a unit-length float32 vector.

The default ``HashingEmbedder`` needs no model and no network: hashed features (feature hashing
with a sign bit) of the text's content words (stop words dropped, light stems), pairs of adjacent
content words and character trigrams, log-scaled and L2-normalised. Its hash is a fixed function of
the bytes (CRC-32), never Python's salted ``hash()``, so the same text gets the same vector in every
process and after every restart.

Each embedder also says how recall should weigh it against BM25 (``text_weight``) and whether to
refine the query vector with pseudo-relevance feedback (``feedback``): a bag-of-features vector is
weak alone and gains from the best first hits; a sentence model is strong alone.
"""

from __future__ import annotations

import abc
import zlib

import numpy as np

from mnemosyne.engine.terms import content_words, stem, words

__all__ = ["EMBEDDERS", "Embedder", "HashingEmbedder", "make_embedder", "words"]


class Embedder(abc.ABC):
    """Contract: ``embed`` returns a C-contiguous float32 array of shape (len(texts), dim) whose
    rows have unit length (or are all zero for a text with no features); the same text always
    gets the same row; it may be slow and is always called outside any store transaction."""

    name: str = "embedder"
    dim: int = 0
    # Recall's fusion: score = text_weight * BM25/max(BM25) + (1 - text_weight) * cosine; then, if
    # feedback > 0, the query vector plus feedback x the mean of the top hits' vectors re-scores them.
    text_weight: float = 0.5
    feedback: float = 0.0

    @abc.abstractmethod
    def embed(self, texts: list[str]) -> np.ndarray: ...


_TOKEN_CACHE_SIZE = 1 << 16


class HashingEmbedder(Embedder):
    # v2: stop words dropped and words stemmed before hashing (v1 vectors are not comparable).
    name = "hashing-v2"
    text_weight = 0.5
    feedback = 1.0

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        # word -> (stem, its features); bounded (cleared when full). Concurrent calls may race on
        # it harmlessly: a miss only recomputes the same value.
        self._cache: dict[str, tuple[str, list[int], list[float]]] = {}

    def _hashed(self, feature: str, weight: float) -> tuple[int, float]:
        h = zlib.crc32(feature.encode("utf-8"))
        return h % self.dim, (weight if (h >> 31) & 1 else -weight)

    def _token_features(self, word: str) -> tuple[str, list[int], list[float]]:
        """A word's stem, and the index and signed weight of its stem's word and character-trigram
        features (cached: words repeat, so most of a text's features are looked up, not hashed)."""
        cached = self._cache.get(word)
        if cached is None:
            token = stem(word)
            pairs = [self._hashed("w:" + token, 1.0)]
            padded = f"<{token}>"
            if len(padded) > 4:
                pairs += [self._hashed("c:" + padded[j : j + 3], 0.25) for j in range(len(padded) - 2)]
            cached = (token, [i for i, _ in pairs], [w for _, w in pairs])
            if len(self._cache) >= _TOKEN_CACHE_SIZE:
                self._cache.clear()
            self._cache[word] = cached
        return cached

    def embed(self, texts: list[str]) -> np.ndarray:
        # All features of all texts go into flat arrays, summed per (row, index) by one bincount:
        # no per-feature numpy call and no Python loop over vector cells.
        indices: list[int] = []
        values: list[float] = []
        counts: list[int] = []
        dim = self.dim
        for text in texts:
            before = len(indices)
            previous = None
            for word in content_words(words(text)):
                token, token_indices, token_weights = self._token_features(word)
                indices.extend(token_indices)
                values.extend(token_weights)
                if previous is not None:
                    j, w = self._hashed("b:" + previous + " " + token, 0.5)
                    indices.append(j)
                    values.append(w)
                previous = token
            counts.append(len(indices) - before)
        positions = np.asarray(indices, dtype=np.int64) + np.repeat(np.arange(len(texts), dtype=np.int64) * dim, counts)
        summed = np.bincount(
            positions, weights=np.asarray(values, dtype=np.float64), minlength=len(texts) * dim
        ).reshape(len(texts), dim)
        out = (np.sign(summed) * np.log1p(np.abs(summed))).astype(np.float32)
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
