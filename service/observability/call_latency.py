"""The latency histogram of every call the server answers (``mnemosyne_rpc_duration_seconds``), by
method and final status code.

Every call observes it once, so ``observe`` is one lookup, one bisect and two additions under one
lock, where prometheus_client's ``Histogram`` child takes six Python calls and two locks
(docs/performance.md, "the edge's cost per call"). The scrape shows the same family a ``Histogram``
gives: cumulative ``_bucket`` samples with ``le`` (an observation equal to a bound counts in that
bucket), ``_count`` and ``_sum``; no ``_created`` series (the server switches those off).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LABELS = ("method", "code")


class CallLatency(Collector):
    """Observed seconds by (method, code): a bounded set (the methods of our registered services,
    gRPC's status code names), never a client's string."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(sorted(float(bound) for bound in buckets))
        self._le = (*(floatToGoString(bound) for bound in self._bounds), "+Inf")  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
        # (method, code) -> a count per bucket (the last one +Inf), then the sum of the seconds.
        self._series: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()  # a scrape reads the series from the metrics port's thread
        registry.register(self)

    def observe(self, method: str, code: str, seconds: float) -> None:
        with self._lock:
            counts = self._series.get((method, code))
            if counts is None:
                counts = self._series[(method, code)] = [0.0] * (len(self._le) + 1)
            counts[bisect_left(self._bounds, seconds)] += 1
            counts[-1] += seconds

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=LABELS)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            series = [(labels, list(counts)) for labels, counts in self._series.items()]
        family = HistogramMetricFamily(self._name, self._documentation, labels=LABELS)
        for labels, counts in series:
            family.add_metric(list(labels), _cumulative(self._le, counts[:-1]), counts[-1])
        yield family


def _cumulative(le: Sequence[str], counts: Sequence[float]) -> list[tuple[str, float]]:
    total = 0.0
    buckets = []
    for bound, count in zip(le, counts, strict=True):
        total += count
        buckets.append((bound, total))
    return buckets
