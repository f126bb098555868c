"""A deterministic synthetic corpus for the speed benchmarks (no data set needed).

Memories are sentences of 10-24 content words drawn with a Zipf law (flattened head) from a
20,000-word made-up vocabulary, with common English function words between them, some with an identifier (``RF-12345``); queries are 2-4
content words of a random memory, so each has at least one true match. The same seed gives the
same texts on every machine.
"""

from __future__ import annotations

import numpy as np

_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
_FUNCTION = "the a of to and in that is was for on with as at by from it this be".split()


def vocabulary(size: int = 20_000, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        w = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 5))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Corpus:
    def __init__(self, seed: int = 11) -> None:
        self.vocab = vocabulary()
        # Zipf over content words with a flattened head (rank + 50): the most frequent made-up
        # word is in ~10% of memories, like a common content word of real text; the function
        # words (the head of real Zipf) are drawn separately below.
        ranks = np.arange(1, len(self.vocab) + 1) + 50
        self.p = (1.0 / ranks**1.05) / (1.0 / ranks**1.05).sum()
        # ``rng.choice(n, size, p=p)`` draws ``cdf.searchsorted(rng.random(size), side="right")``
        # with this cdf, rebuilt on every call (20,000 sums): built once, the same words 6x faster.
        self.cdf = self.p.cumsum()
        self.cdf /= self.cdf[-1]
        self.seed = seed

    def memories(self, start: int, count: int) -> list[str]:
        """Memories number start..start+count-1 (each one is a function of its number)."""
        out = []
        for n in range(start, start + count):
            rng = np.random.default_rng((self.seed, n))
            length = int(rng.integers(10, 25))
            content = self.cdf.searchsorted(rng.random(length), side="right")
            words = []
            for i in content:
                words.append(self.vocab[i])
                if rng.random() < 0.35:
                    words.append(_FUNCTION[int(rng.integers(len(_FUNCTION)))])
            if rng.random() < 0.1:
                words.append(f"RF-{int(rng.integers(10_000, 99_999))}")
            out.append(" ".join(words).capitalize() + ".")
        return out

    def queries(self, population: int, count: int, seed: int = 3) -> list[str]:
        rng = np.random.default_rng(seed)
        out = []
        for n in rng.integers(0, population, size=count):
            words = [w for w in self.memories(int(n), 1)[0].rstrip(".").lower().split() if w not in _FUNCTION]
            pick = rng.choice(len(words), size=min(len(words), int(rng.integers(2, 5))), replace=False)
            out.append(" ".join(words[i] for i in sorted(pick)))
        return out
