"""The poison-marker test seam (MNEMOSYNE_TEST_POISON_MARKER, runtime/seams.py): how a test makes
an operation that fails every attempt, to see it end ``failed`` without blocking the others."""

from __future__ import annotations

from mnemosyne.engine.extractor import Extraction, Extractor


class ModelError(Exception):
    """The extraction model failed on an item."""


class PoisonedExtractor(Extractor):
    """Fails on every text containing the marker; otherwise the extractor it wraps."""

    def __init__(self, inner: Extractor, marker: str) -> None:
        self._inner = inner
        self._marker = marker
        self.name = inner.name
        self.concurrency = inner.concurrency
        self.holds_interpreter = inner.holds_interpreter

    def extract(self, text: str) -> Extraction:
        if self._marker in text:
            raise ModelError("the extractor failed on this text (poison marker)")
        return self._inner.extract(text)
