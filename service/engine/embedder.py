"""Embedding: text to a unit-length float32 vector.

The default ``HashingEmbedder`` needs no model and no network: hashed features (feature hashing
with a sign bit) of the text's content words (stop words dropped, light stems), pairs of adjacent
content words and character trigrams, log-scaled and L2-normalised. Its hash is a fixed function of
the bytes (CRC-32), never Python's salted ``hash()``, so the same text gets the same vector in every
process and after every restart.

How recall weighs each embedder's vectors against BM25, and every other weight of its ranking, is
in recall's settings for that embedder (engine/recall/settings.py), not here.
"""

from __future__ import annotations

import abc
import itertools
import operator
import zlib
from array import array
from typing import NamedTuple

import numpy as np

from mnemosyne.engine.terms import content_words, stem, words
from mnemosyne.errors import FailedPrecondition
from mnemosyne.store.tenant_store import ReadTxn, WriteTxn

__all__ = ["Embedder", "HashingEmbedder", "check_tenant_embedder", "words"]


class Embedder(abc.ABC):
    """Contract: ``embed`` returns a C-contiguous float32 array of shape (len(texts), dim) whose
    rows have unit length (or are all zero for a text with no features); the same text always
    gets the same row; it may be slow and is always called outside any store transaction."""

    name: str = "embedder"
    dim: int = 0
    # Whether ``embed`` is Python (and numpy) running in this process, holding the interpreter:
    # a write's embedding then takes turns with other long writes and gives way to reads, a slice
    # of its texts at a time (mnemosyne/read_priority.py).
    holds_interpreter: bool = False

    @property
    def recorded(self) -> str:
        """What a tenant file records of the embedder its vectors were made by ("name/dim")."""
        return f"{self.name}/{self.dim}"

    @abc.abstractmethod
    def embed(self, texts: list[str]) -> np.ndarray: ...

    def reads(self, text: str) -> bool:
        """Whether ``text``'s vector says anything of it: False when the model reads at most a
        few of its words (most unknown to it, or none at all), as every such text gets nearly the
        one same vector. A recall's query of that kind then finds nothing by vector, its words
        only through the full-text leg (engine/recall/recall.py)."""
        return True

    def reads_in_part(self, text: str) -> bool:
        """Whether the model reads only the beginning of ``text`` (its window is full)."""
        return False

    def unread(self, text: str) -> frozenset[str]:
        """The words of ``text`` its vector cannot tell from other words (lower-cased): two texts
        that differ only there get the same vector, so near duplicates must agree on them literally
        (engine/dedup.py). Empty for an embedder whose features are the text's own characters."""
        return frozenset()


_CACHE_SIZE = 1 << 16
# From this many new ASCII words in one call, their tokens are built by array operations
# (_ascii_tokens) instead of word by word (_token): same bytes, a fixed numpy cost to amortise.
_VECTORISE_FROM = 32


def _crc32_table() -> np.ndarray:
    """zlib's CRC-32 (reflected polynomial 0xEDB88320) byte table, to continue CRCs in arrays."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1).astype(np.uint32)
    return table


_CRC_TABLE = _crc32_table()
_WORD_CRC, _TRIGRAM_CRC, _PAIR_CRC = zlib.crc32(b"w:"), zlib.crc32(b"c:"), zlib.crc32(b"b:")


class _Token(NamedTuple):
    """What the embedder needs of one word, computed once per distinct word."""

    indices: bytes  # its stem's word and character-trigram features, packed int64 vector indices,
    weights: bytes  # and packed float64 signed weights: a text's features are then one join
    features: int  # how many of them
    stem: bytes
    pair_prefix: int  # CRC-32 of "b:<stem> ": a pair's hash continues it with the next stem


class HashingEmbedder(Embedder):
    # v2: stop words dropped and words stemmed before hashing (v1 vectors are not comparable).
    name = "hashing-v2"
    holds_interpreter = True

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
        return _Token(
            indices=array("q", indices).tobytes(),
            weights=array("d", weights).tobytes(),
            features=len(indices),
            stem=encoded,
            pair_prefix=zlib.crc32(b"b:" + encoded + b" "),
        )

    def _ascii_tokens(self, words: list[str]) -> list[_Token]:
        """``_token`` of many ASCII words at once (bit for bit: tests/test_recall_quality.py). Each
        CRC continues a cached prefix CRC (zlib.crc32(data, crc_of_prefix)); the trigrams' CRCs
        (three bytes each after "c:") are stepped through the CRC table for all of them at once."""
        dim = self.dim
        stems = [stem(word).encode("ascii") for word in words]
        lengths = np.fromiter(map(len, stems), dtype=np.int64, count=len(stems))
        word_hashes = np.fromiter(map(zlib.crc32, stems, itertools.repeat(_WORD_CRC)), dtype=np.int64, count=len(stems))
        # The padded stems "<stem>" end to end; a stem of three or more letters has len(stem)
        # trigrams, one starting at each of its padded positions but the last two.
        joined = np.frombuffer(b"<" + b"><".join(stems) + b">", dtype=np.uint8)
        trigram_counts = np.where(lengths >= 3, lengths, 0)
        padded_starts = np.concatenate(([0], np.cumsum(lengths + 2)[:-1]))
        first_trigram = np.cumsum(trigram_counts) - trigram_counts
        starts = np.repeat(padded_starts - first_trigram, trigram_counts) + np.arange(int(trigram_counts.sum()))
        state = np.full(len(starts), _TRIGRAM_CRC ^ 0xFFFFFFFF, dtype=np.uint32)
        for offset in range(3):
            state = _CRC_TABLE[(state ^ joined[starts + offset]) & 0xFF] ^ (state >> 8)
        trigram_hashes = (state ^ np.uint32(0xFFFFFFFF)).astype(np.int64)
        # Per word: its word feature, then its trigrams, as _token lays them out.
        counts = 1 + trigram_counts
        word_slots = np.cumsum(counts) - counts
        indices = np.empty(int(counts.sum()), dtype=np.int64)
        weights = np.empty(len(indices), dtype=np.float64)
        indices[word_slots] = word_hashes % dim
        weights[word_slots] = np.where((word_hashes >> 31) & 1, 1.0, -1.0)
        trigram_slots = np.ones(len(indices), dtype=bool)
        trigram_slots[word_slots] = False
        indices[trigram_slots] = trigram_hashes % dim
        weights[trigram_slots] = np.where((trigram_hashes >> 31) & 1, 0.25, -0.25)
        index_bytes, weight_bytes = indices.tobytes(), weights.tobytes()
        pair_prefixes = map(zlib.crc32, itertools.repeat(b" "), map(zlib.crc32, stems, itertools.repeat(_PAIR_CRC)))
        return [
            _Token(
                indices=index_bytes[8 * a : 8 * (a + n)],
                weights=weight_bytes[8 * a : 8 * (a + n)],
                features=n,
                stem=word_stem,
                pair_prefix=prefix,
            )
            for a, n, word_stem, prefix in zip(word_slots.tolist(), counts.tolist(), stems, pair_prefixes)
        ]

    def embed(self, texts: list[str]) -> np.ndarray:
        # No Python loop per word: the words' cached tokens come from one C-level map, their
        # packed features are joined once, and every (row, index) is summed by one bincount. A
        # pair of adjacent stems hashes as CRC-32("b:<first> <second>"), computed by continuing
        # the first's cached CRC of "b:<first> " over the second's bytes: one C call per adjacent
        # pair of the flattened words (those spanning two texts are dropped). All weights are
        # sums of 1, 1/2 and 1/4: exact in float64 in any order, so the vectors are bit for bit
        # those of the first, feature-by-feature version.
        flat: list[str] = []
        lengths: list[int] = []
        for text in texts:
            kept = content_words(words(text))
            flat.extend(kept)
            lengths.append(len(kept))
        tokens = self._tokens_of(flat)
        dim, n = self.dim, len(texts)
        word_rows = np.repeat(np.arange(n, dtype=np.int64) * dim, lengths)
        feature_counts = np.fromiter(map(_COUNT, tokens), dtype=np.int64, count=len(tokens))
        word_positions = np.frombuffer(b"".join(map(_INDICES, tokens)), dtype=np.int64) + np.repeat(
            word_rows, feature_counts
        )
        hashes = np.fromiter(
            map(zlib.crc32, map(_STEM, tokens[1:]), map(_PAIR_PREFIX, tokens)),
            dtype=np.int64,
            count=max(len(tokens) - 1, 0),
        )
        pair_rows = word_rows[1:]
        if n > 1:  # drop the pairs that span two texts
            same_text = pair_rows == word_rows[:-1]
            hashes, pair_rows = hashes[same_text], pair_rows[same_text]
        positions = np.concatenate((word_positions, hashes % dim + pair_rows))
        values = np.concatenate(
            (np.frombuffer(b"".join(map(_WEIGHTS, tokens)), dtype=np.float64), np.where((hashes >> 31) & 1, 0.5, -0.5))
        )
        counted = np.bincount(positions, weights=values, minlength=n * dim)
        # float64 even when no text has a feature (bincount of nothing counts in integers)
        summed = counted.astype(np.float64, copy=False).reshape(n, dim)
        # sign(x) * log(1 + |x|), in place
        scaled = np.abs(summed)
        np.log1p(scaled, out=scaled)
        np.copysign(scaled, summed, out=scaled)
        out = scaled.astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def _tokens_of(self, flat: list[str]) -> list[_Token]:
        """The token of each word: cached, or computed once per call for each word not cached."""
        cache = self._tokens
        missing = set(flat).difference(cache)
        if len(cache) + len(missing) > _CACHE_SIZE:
            cache.clear()
        plain = [word for word in missing if word.isascii()] if len(missing) >= _VECTORISE_FROM else []
        if plain:
            cache.update(zip(plain, self._ascii_tokens(plain)))
            missing.difference_update(plain)
        for word in missing:
            cache[word] = self._token(word)
        tokens = list(map(cache.get, flat))
        if None in tokens:  # a concurrent call cleared the cache meanwhile
            local = {word: cache.get(word) or self._token(word) for word in set(flat)}
            tokens = list(map(local.__getitem__, flat))
        return tokens  # type: ignore[return-value]  # no None left: every word was filled in just above


_INDICES, _WEIGHTS, _COUNT, _STEM, _PAIR_PREFIX = (operator.itemgetter(i) for i in range(5))


def check_tenant_embedder(txn: ReadTxn, embedder: Embedder, *, write: bool) -> None:
    """A tenant's vectors are made by one embedder; mixing two would corrupt similarity. The
    first write records this one; any other later is EMBEDDER_MISMATCH."""
    recorded = txn.meta("embedder")
    mine = embedder.recorded
    if recorded is None:
        if write:
            assert isinstance(txn, WriteTxn)
            txn.set_meta("embedder", mine)
        return
    if recorded != mine:
        raise FailedPrecondition(
            f"this tenant's vectors were made by embedder {recorded}, but the server runs {mine}; "
            "start the server with the tenant's embedder",
            reason="EMBEDDER_MISMATCH",
        )
