"""Each step's share of a recall, in process: the engine's recall spans timed over many queries.

    python -m bench.recall_profile [--memories 10000] [--queries 300] [--rounds 3] [--mode hybrid]
    python -m bench.recall_profile --tenant-file F [--index-file A]   # a large tenant, saved


One engine in this process (the server's interpreter settings, no network) with one tenant of
``--memories`` synthetic memories (bench/corpus.py, as bench.latency loads them: no threads) and
the hashing embedder (or ``--embedder minilm``). A tracer installed for the run
(runtime/tracing.py: the same spans an OTLP exporter would record) times every recall step and the
two legs inside the candidates step; the table gives each span's median and mean per recall and its
share of the recalls' summed time (the rest: validation, opening the tenant and the read
transaction, the hits as values, and the timer's own cost: the row "spans not timed" is the same
recalls without it, in turns with the timed ones). The legs run inside ``candidates``, so their
rows are a breakdown of it, not added to the total.

``--tenant-file`` recalls from a copy of a tenant file that ``bench.latency_large --save-file`` kept
(its tenant, ``bench-large``; ``--memories`` is then its count, for the corpus's queries), with
the production threshold of the approximate index: the graph is built first (or loaded from
``--index-file``, a ``tenants/bench-large.ann`` of the same file), and the full-text postings
loaded, before anything is timed. ``--seconds`` then recalls in a loop for that long first (for a
sampling profiler attached to this process's id, which it prints).

``--gap-us`` sleeps that long before each recall (``--gap-busy``: spins that long instead): a
served recall follows the client's and gRPC's work, not another recall, and this shows what that
costs each step (a recall right after another finds the processor's caches holding its code and
data).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import print_table
from bench.corpus import Corpus
from bench.latency_large import memories_in
from mnemosyne.runtime import tracing
from mnemosyne.runtime.interpreter import tune_interpreter

TENANT = "bench-profile"
SAVED_TENANT = "bench-large"  # bench.latency_large's
K = 10


class StepTimer:
    """A tracer that only times spans (by name, summed per recall: a step may run twice)."""

    tenant_ids = False

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def span(self, name: str, attributes: tracing.Attributes) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] += time.perf_counter() - started

    def call(self, method: str, carrier: tracing.Headers) -> tracing.CallSpan:
        raise AssertionError("no calls in process")

    def hop(self, name: str, attributes: tracing.Attributes) -> tracing.HopSpan:
        raise AssertionError("no hops in process")

    def annotate(self, key: str, value: str) -> None:
        pass

    def take(self) -> dict[str, float]:
        taken, self.current = dict(self.current), defaultdict(float)
        return taken


def wait_for_caches(engine: Any, tenant: str, query: str) -> None:
    """Until a saved tenant's approximate index is published and its full-text postings are
    loaded (both in the background, started by a recall)."""
    from mnemosyne.engine.ann import ann_index
    from mnemosyne.engine.postings import postings_cache

    started = time.monotonic()
    while True:
        engine.recall(tenant, query, k=K)
        with engine.pool.tenant(tenant, create=False) as store:
            graph = ann_index(store, engine.recall.embedders.of(store).dim).graph
            if graph is not None and postings_cache(store).loads:
                break
        time.sleep(1)
    print(f"graph and postings ready in {time.monotonic() - started:.0f} s", flush=True)


def measure(
    engine: Any, tenant: str, queries: list[str], rounds: int, mode: Any, gap: float = 0.0, busy: bool = False
) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Each query recalled twice a round, its spans timed and not (in turns), each after ``gap``
    seconds asleep (``busy``: spinning): (seconds of each timed recall, of each untimed one, each
    span's seconds per timed recall)."""
    timer = StepTimer()
    per_span: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    untimed: list[float] = []
    for _ in range(rounds):
        for n, query in enumerate(queries):
            for timed in (True, False) if n % 2 else (False, True):
                tracing.install(timer if timed else None)
                timer.take()
                if gap and busy:
                    until = time.perf_counter() + gap
                    while time.perf_counter() < until:
                        pass
                elif gap:
                    time.sleep(gap)
                started = time.perf_counter()
                engine.recall(tenant, query, k=K, mode=mode)
                (totals if timed else untimed).append(time.perf_counter() - started)
                tracing.install(None)
                if timed:
                    for name, took in timer.take().items():
                        per_span[name].append(took)
    return totals, untimed, per_span


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "text"])
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--tenant-file", type=Path, default=None, help="recall from a copy of this tenant file")
    parser.add_argument("--index-file", type=Path, default=None, help="its approximate index (else built first)")
    parser.add_argument("--seconds", type=float, default=0.0, help="recall in a loop this long first")
    parser.add_argument("--gap-us", type=float, default=0.0, help="sleep this long before each recall")
    parser.add_argument("--gap-busy", action="store_true", help="spin through the gap instead of sleeping")
    args = parser.parse_args(argv)

    tune_interpreter()  # the server's interpreter settings, before numpy loads
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RecallMode, RetainItem

    corpus = Corpus()
    mode = RecallMode(args.mode)
    if args.tenant_file is not None:
        args.memories = memories_in(args.tenant_file)
    queries = corpus.queries(args.memories, args.queries)
    tenant = TENANT if args.tenant_file is None else SAVED_TENANT
    with tempfile.TemporaryDirectory(prefix="recall-profile-") as tmp:
        if args.tenant_file is not None:
            (Path(tmp) / "tenants").mkdir()
            shutil.copyfile(args.tenant_file, Path(tmp) / "tenants" / f"{tenant}.sqlite")
            if args.index_file is not None:
                shutil.copyfile(args.index_file, Path(tmp) / "tenants" / f"{tenant}.ann")
        engine = Engine(EngineConfig(data_dir=Path(tmp), embedder=args.embedder))
        try:
            if args.tenant_file is None:
                for start in range(0, args.memories, 1000):
                    texts = corpus.memories(start, min(1000, args.memories - start))
                    engine.retain_batch(tenant, [RetainItem(text) for text in texts])
            else:
                wait_for_caches(engine, tenant, queries[0])
            for q in queries[:20]:  # warm-up: the first recall loads the caches
                engine.recall(tenant, q, k=K, mode=mode)
            if args.seconds:
                print(f"recalling for {args.seconds:.0f} s in process {os.getpid()}", flush=True)
                until = time.monotonic() + args.seconds
                while time.monotonic() < until:
                    for q in queries:
                        engine.recall(tenant, q, k=K, mode=mode)
            totals, untimed, per_span = measure(
                engine, tenant, queries, args.rounds, mode, args.gap_us / 1e6, args.gap_busy
            )
        finally:
            engine.close()
    summed = sum(totals)
    rows = [["recall (whole)", statistics.median(totals) * 1e6, summed / len(totals) * 1e6, 100.0]]
    # The same recalls without the tracer (as served: tracing off): what timing the spans cost.
    rows.append(
        [
            "recall, spans not timed",
            statistics.median(untimed) * 1e6,
            sum(untimed) / len(untimed) * 1e6,
            100 * sum(untimed) / summed,
        ]
    )
    for name, spent in per_span.items():
        # A span that ran in only some recalls: its mean over all recalls, 0 where it did not run.
        rows.append([name, statistics.median(spent) * 1e6, sum(spent) / len(totals) * 1e6, 100 * sum(spent) / summed])
    steps = sum(sum(spent) for name, spent in per_span.items() if not name.startswith("recall.leg."))
    rows.append(["(outside the steps)", float("nan"), (summed - steps) / len(totals) * 1e6, 100 * (1 - steps / summed)])
    print_table(
        f"Recall steps in process, {args.mode}, {args.embedder}, k={K}, {args.memories} memories, "
        f"{len(totals)} recalls"
        + (f", each after {args.gap_us:g} us {'spinning' if args.gap_busy else 'asleep'}" if args.gap_us else ""),
        ["span", "median us", "mean us", "share %"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
