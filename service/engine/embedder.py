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
from array import array
from typing import NamedTuple

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


_CACHE_SIZE = 1 << 16


class _Token(NamedTuple):
    """What the embedder needs of one word, computed once per distinct word."""

    indices: bytes  # its stem's word and character-trigram features, packed int64 vector indices,
    weights: bytes  # and packed float64 signed weights: a text's features are then one join
    count: int
    stem: bytes
    pair_prefix: int  # CRC-32 of "b:<stem> ": a pair's hash continues it with the next stem


class HashingEmbedder(Embedder):
    # v2: stop words dropped and words stemmed before hashing (v1 vectors are not comparable).
    name = "hashing-v2"
    text_weight = 0.5
    feedback = 1.0

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        # Bounded caches (cleared when full). Concurrent calls may race on them harmlessly: a
        # miss only recomputes the same value.
        self._tokens: dict[str, _Token] = {}
        self._trigrams: dict[str, tuple[int, float]] = {}

    def _hashed(self, feature: str, weight: float) -> tuple[int, float]:
        h = zlib.crc32(feature.encode("utf-8"))
        return h % self.dim, (weight if (h >> 31) & 1 else -weight)

    def _trigram(self, trigram: str) -> tuple[int, float]:
        pair = self._trigrams.get(trigram)
        if pair is None:
            if len(self._trigrams) >= _CACHE_SIZE:
                self._trigrams.clear()
            pair = self._trigrams[trigram] = self._hashed("c:" + trigram, 0.25)
        return pair

    def _token(self, word: str) -> _Token:
        token = stem(word)
        index, weight = self._hashed("w:" + token, 1.0)
        indices, weights = [index], [weight]
        padded = f"<{token}>"
        if len(padded) > 4:
            known = self._trigrams
            for j in range(len(padded) - 2):
                trigram = padded[j : j + 3]
                index, weight = known.get(trigram) or self._trigram(trigram)
                indices.append(index)
                weights.append(weight)
        encoded = token.encode("utf-8")
        entry = _Token(
            array("q", indices).tobytes(), array("d", weights).tobytes(), len(indices), encoded,
            zlib.crc32(b"b:" + encoded + b" "),
        )
        if len(self._tokens) >= _CACHE_SIZE:
            self._tokens.clear()
        self._tokens[word] = entry
        return entry

    def embed(self, texts: list[str]) -> np.ndarray:
        # Per word, only cached bytes are appended (its packed features); they are joined once and
        # summed per (row, index) by one bincount: no per-feature Python object and no Python
        # loop over vector cells. A pair of adjacent stems hashes as CRC-32("b:<first> <second>"),
        # computed by continuing the first's cached CRC of "b:<first> " over the second's bytes:
        # one C call per pair. (All weights are sums of 1, 1/2 and 1/4: exact in float64 in any
        # order, so the vectors are bit for bit those of the first, feature-by-feature version.)
        tokens, make = self._tokens, self._token
        crc32 = zlib.crc32
        indices: list[bytes] = []
        weights: list[bytes] = []
        pair_hashes: list[int] = []
        counts: list[int] = []
        pair_counts: list[int] = []
        for text in texts:
            count, pairs_before = 0, len(pair_hashes)
            previous = None
            for word in content_words(words(text)):
                token = tokens.get(word) or make(word)
                indices.append(token.indices)
                weights.append(token.weights)
                count += token.count
                if previous is not None:
                    pair_hashes.append(crc32(token.stem, previous))
                previous = token.pair_prefix
            counts.append(count)
            pair_counts.append(len(pair_hashes) - pairs_before)
        dim, rows = self.dim, np.arange(len(texts), dtype=np.int64) * self.dim
        hashes = np.asarray(pair_hashes, dtype=np.int64)
        word_positions = np.frombuffer(b"".join(indices), dtype=np.int64) + np.repeat(rows, counts)
        pair_positions = hashes % dim + np.repeat(rows, pair_counts)
        positions = np.concatenate((word_positions, pair_positions))
        values = np.concatenate(
            (np.frombuffer(b"".join(weights), dtype=np.float64), np.where((hashes >> 31) & 1, 0.5, -0.5))
        )
        summed = np.bincount(positions, weights=values, minlength=len(texts) * dim)
        # float64 even when no text has a feature (bincount of nothing counts in integers)
        summed = summed.astype(np.float64, copy=False).reshape(len(texts), dim)
        # sign(x) * log(1 + |x|), in place
        scaled = np.abs(summed)
        np.log1p(scaled, out=scaled)
        np.copysign(scaled, summed, out=scaled)
        out = scaled.astype(np.float32)
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
