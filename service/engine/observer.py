"""What the engine reports to whoever watches it, without knowing who that is.

The engine calls an ``EngineObserver`` after each committed write (never for a write that rolled
back), and exposes its live figures (open tenant files, queue depth, oldest pending write) as
plain methods. The server's metrics (observability/metrics.py) implement the observer with
Prometheus counters; the engine never imports Prometheus.

Contract: observer methods are called from the worker threads of calls and of the hot path, after the transaction committed
and outside every lock; they must be fast and must not raise (an exception is swallowed so a
broken observer cannot fail a committed write).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("mnemosyne.observer")


class EngineObserver:
    """No-op base: override what you watch."""

    def retained(self, *, created: int, duplicates: int, model_calls: int, embed_calls: int) -> None:
        """A write committed: ``created`` new memories, ``duplicates`` exact duplicates answered,
        ``model_calls`` extractions and ``embed_calls`` embedding calls made for it."""

    def consolidation_proposed(self, *, model_calls: int) -> None:
        """A session consolidation journaled a proposal that cost ``model_calls`` model calls."""

    def cas_rejected(self, reason: str) -> None:
        """A compare-and-set (workspace generation check) was rejected; ``reason`` is the error's
        stable UPPER_SNAKE reason (a small fixed set, safe as a metric label)."""

    def event_failed(self, reason: str) -> None:
        """A hot-path operation failed for good after its bounded attempts (a poison write);
        ``reason`` is its stable UPPER_SNAKE error reason."""

    def integrity_checked(self, *, valid: bool) -> None:
        """An audit of one tenant's file (VerifyIntegrity) ended: ``valid`` False when its chain or
        its contents do not match."""


class SafeObserver(EngineObserver):
    """Wraps an observer so that its failures are logged, never raised into the engine."""

    def __init__(self, inner: EngineObserver) -> None:
        self._inner = inner

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # pragma: no cover - a faulty observer must not fail a committed write
            log.exception("engine observer failed")

    def retained(self, *, created: int, duplicates: int, model_calls: int, embed_calls: int) -> None:
        self._call(
            lambda: self._inner.retained(
                created=created, duplicates=duplicates, model_calls=model_calls, embed_calls=embed_calls
            )
        )

    def consolidation_proposed(self, *, model_calls: int) -> None:
        self._call(lambda: self._inner.consolidation_proposed(model_calls=model_calls))

    def cas_rejected(self, reason: str) -> None:
        self._call(lambda: self._inner.cas_rejected(reason))

    def event_failed(self, reason: str) -> None:
        self._call(lambda: self._inner.event_failed(reason))

    def integrity_checked(self, *, valid: bool) -> None:
        self._call(lambda: self._inner.integrity_checked(valid=valid))
