"""What a 10k recall costs the server beyond the query's embed: the p50 of the MiniLM tenant's
recalls, each less its own query embed, against the hashing tenant's recall p50 (issue 42's target: <= 1.1x).

    python -m bench.recall_over_embed [--memories 10000] [--samples 300] [--rounds 3]

Two engines in this process (the server's recall without the network, which both would pay
alike), each with one tenant of the same ``--memories`` texts (bench/latency_10k.py's), one with
the MiniLM embedder and one with hashing, each with its embedder's own ``--ann-threshold`` (a
graph built first where the tenant is past it: MiniLM's from 5,000 memories). Each round times, query by query and interleaved, the
MiniLM tenant's hybrid recall (k = 10) with the model's time inside it (taken off that recall's)
and the hashing tenant's recall; the figure is the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.latency_10k import WORDS, sentence
from mnemosyne.runtime.interpreter import tune_interpreter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300, help="queries per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    tune_interpreter()  # the server's interpreter settings, before numpy loads
    from mnemosyne.engine.ann import wait_for_builds
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RetainItem

    rng = random.Random(1)
    texts = [sentence(rng, i) for i in range(args.memories)]
    with tempfile.TemporaryDirectory(prefix="recall-over-embed-") as tmp:
        engines = {
            name: Engine(EngineConfig(data_dir=Path(tmp) / name, embedder=name)) for name in ("minilm", "hashing")
        }
        try:
            for name, engine in engines.items():
                started = time.perf_counter()
                for start in range(0, len(texts), 500):
                    engine.retain_batch("bench", [RetainItem(text) for text in texts[start : start + 500]])
                print(f"{name}: {len(texts)} memories retained in {time.perf_counter() - started:.0f} s", flush=True)
            minilm, hashing = engines["minilm"], engines["hashing"]
            for engine in engines.values():  # a tenant past its embedder's threshold builds its graph first
                engine.recall("bench", "warm up", k=10)
            wait_for_builds(600)
            embedder = minilm.recall.embedders.default
            embed = embedder.embed
            embedding: list[float] = []

            def timed_embed(texts: list[str]) -> np.ndarray:
                # The model's time inside each recall, taken off that recall's own time.
                started = time.perf_counter()
                vectors = embed(texts)
                embedding.append(time.perf_counter() - started)
                return vectors

            embedder.embed = timed_embed  # type: ignore[method-assign]  # the bench's stopwatch only
            ratios = []
            for round_number in range(args.rounds):
                queries = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(args.samples)]
                timings: dict[str, list[float]] = {"minilm recall": [], "its query embed": [], "hashing recall": []}
                for query in queries:
                    embedding.clear()
                    started = time.perf_counter()
                    minilm.recall("bench", query, k=10)
                    timings["minilm recall"].append(time.perf_counter() - started)
                    timings["its query embed"].append(sum(embedding))
                    started = time.perf_counter()
                    hashing.recall("bench", query, k=10)
                    timings["hashing recall"].append(time.perf_counter() - started)
                beyond = np.array(timings["minilm recall"]) - np.array(timings["its query embed"])
                p50 = {label: float(np.percentile(samples, 50)) * 1e3 for label, samples in timings.items()}
                ratio = float(np.percentile(beyond, 50)) * 1e3 / p50["hashing recall"]
                ratios.append(ratio)
                print(
                    f"round {round_number + 1}: "
                    + ", ".join(f"{label} p50 {ms:.2f} ms" for label, ms in p50.items())
                    + f"; recall minus its embed p50 {float(np.percentile(beyond, 50)) * 1e3:.2f} ms"
                    + f", / hashing's recall = {ratio:.2f}",
                    flush=True,
                )
            print(f"median of {args.rounds} rounds: {statistics.median(ratios):.2f} (target <= 1.1)")
        finally:
            for engine in engines.values():
                engine.close()


if __name__ == "__main__":
    main()
