"""Cost of near-duplicate naming at write time, and of a Dedup report, in process.

    OPENBLAS_NUM_THREADS=1 python bench/bench_dedup.py --memories 10000

Fills a tenant with N memories (batches of 1,000), then times single Retains with naming off
(threshold 2) and on (the default 0.85), and one Dedup report over the tenant.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.dedup import DEFAULT_THRESHOLD
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem

WORDS = "refund ticket order customer shipping invoice account payment delivery status review card bank email phone address".split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--retains", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(1)

    def text(i: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(12)) + f" order {i}"

    for threshold in (2.0, DEFAULT_THRESHOLD):
        with tempfile.TemporaryDirectory() as data:
            engine = Engine(EngineConfig(data_dir=Path(data), synchronous="NORMAL", near_duplicate_threshold=threshold))
            n = args.memories
            for start in range(0, n, 1000):
                engine.retain_batch("bench", [RetainItem(text(i)) for i in range(start, min(n, start + 1000))])
            began = time.perf_counter()
            for i in range(args.retains):
                engine.retain("bench", RetainItem(text(n + i)))
            per_item = (time.perf_counter() - began) / args.retains * 1e6
            print(f"threshold={threshold}: {per_item:.0f} us per single Retain into {n} memories")
            if threshold <= 1.0:
                began = time.perf_counter()
                report = engine.dedup("bench")
                print(
                    f"Dedup report over {n + args.retains} memories: {time.perf_counter() - began:.2f} s, "
                    f"{len(report.groups)} groups"
                )
            engine.close()


if __name__ == "__main__":
    main()
