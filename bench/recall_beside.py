"""What making the query's vector beside the full-text leg saves (engine/recall/side.py), in
process, query by query against the same recall with the vector made first.

    python -m bench.recall_beside [--embedder minilm] [--memories 10000] [--queries 300] [--rounds 3] [--mode hybrid]

One engine in this process (the server's interpreter settings) with one tenant of ``--memories``
synthetic memories (bench/corpus.py, as bench.latency loads them). Each query is recalled twice,
in alternating order: as the server does (the model's inference on a helper thread while this
thread opens the snapshot and runs the full-text leg), and with every helper held busy, so the
recall makes its vector first on its own thread, as before side.py (the same code path a busy
server takes). Each round prints both p50s and their ratio; the last line, the median of the
rounds' ratios. Wall time per recall: a helper's CPU is not counted, its wait is.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.corpus import Corpus
from mnemosyne.runtime.interpreter import tune_interpreter

TENANT = "bench-beside"
K = 10


def hold_helpers() -> threading.Event:
    """Every helper of the process busy until the event returned is set (side_threads)."""
    from mnemosyne.engine.recall.side import side_threads

    release, me, inline = threading.Event(), threading.get_ident(), []

    def hold() -> bool:
        return inline.append(True) is None if threading.get_ident() == me else release.wait()

    while not inline:  # until a call found no idle helper
        side_threads().start(hold)
    return release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", default="minilm", choices=["hashing", "minilm"])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "text"])
    args = parser.parse_args(argv)

    tune_interpreter()  # the server's interpreter settings, before numpy loads
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RecallMode, RetainItem

    corpus = Corpus()
    mode = RecallMode(args.mode)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="recall-beside-") as tmp:
        engine = Engine(EngineConfig(data_dir=Path(tmp), embedder=args.embedder))
        try:
            for start in range(0, args.memories, 1000):
                texts = corpus.memories(start, min(1000, args.memories - start))
                engine.retain_batch(TENANT, [RetainItem(text) for text in texts])
            for round_number in range(args.rounds):
                queries = corpus.queries(args.memories, args.queries, seed=round_number)
                timings: dict[str, list[float]] = {"beside": [], "first": []}
                for n, query in enumerate(queries):
                    for way in ("beside", "first") if n % 2 else ("first", "beside"):
                        release = hold_helpers() if way == "first" else None
                        started = time.perf_counter()
                        engine.recall(TENANT, query, k=K, mode=mode)
                        timings[way].append(time.perf_counter() - started)
                        if release is not None:
                            release.set()
                            time.sleep(0.002)  # the helpers idle again before the next recall
                p50 = {way: statistics.median(samples) * 1e3 for way, samples in timings.items()}
                ratios.append(p50["beside"] / p50["first"])
                print(
                    f"round {round_number + 1}: beside p50 {p50['beside']:.3f} ms, vector first p50 "
                    f"{p50['first']:.3f} ms, ratio {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            engine.close()
    print(f"median of {args.rounds} rounds, beside / first: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
