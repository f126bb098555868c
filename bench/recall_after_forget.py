"""A recall's latency right after a forget, at 10k memories in one tenant (engine in this process).

    python -m bench.recall_after_forget [--memories 10000] [--forgets 30] [--embedder hashing]

Each round forgets one memory and recalls at once, twice: ``between`` recalls after the forget's
commit and before its word to the tenant's caches (``drop_vectors``, ``drop_texts``: what a recall
on another thread meets when it lands in between), ``after`` once the forget returned as a call
does. Prints the p50 / p90 / max of each, in milliseconds, and the vector cache's full loads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import percentiles
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.index import cached_vectors, drop_vectors
from mnemosyne.engine.postings import drop_texts
from mnemosyne.engine.types import RetainItem

TENANT = "bench"


def _figures(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"p50 {percentiles(ordered)['p50_ms']:.1f} ms, p90 {p90 * 1e3:.1f} ms, max {ordered[-1] * 1e3:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--forgets", type=int, default=30)
    parser.add_argument("--embedder", default="hashing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        engine = Engine(EngineConfig(data_dir=Path(data), embedder=args.embedder))
        try:
            ids: list[int] = []
            for start in range(0, args.memories, 1000):
                batch = [
                    RetainItem(f"note {i}: customer C-{i % 97} asked about order O-{i} shipped to city {i % 31}")
                    for i in range(start, min(start + 1000, args.memories))
                ]
                ids += [o.memory_id for o in engine.retain_batch(TENANT, batch)]
            engine.recall(TENANT, "customer order shipped")  # the caches loaded
            between: list[float] = []
            after: list[float] = []
            with engine.pool.tenant(TENANT, create=False) as store:
                assert store is not None
                for n in range(args.forgets):
                    forgotten = ids[n * 7]
                    with store.write() as write:  # committed; the caches are told below
                        _, before = write.index_state()
                        write.forget_memory(forgotten)
                        _, now = write.index_state()
                    started = time.perf_counter()
                    engine.recall(TENANT, f"order O-{n * 7 + 1} customer")
                    between.append(time.perf_counter() - started)
                    drop_vectors(store, [forgotten], from_epoch=before, to_epoch=now)
                    drop_texts(store, [forgotten], from_epoch=before, to_epoch=now)
                    store.erase_traces()
                    engine.memories.forget(TENANT, ids[n * 7 + 3])
                    started = time.perf_counter()
                    engine.recall(TENANT, f"order O-{n * 7 + 4} customer")
                    after.append(time.perf_counter() - started)
                cache = cached_vectors(store)
                reloads = cache.reloads if cache is not None else 0
            print(f"{args.memories} memories, {args.forgets} forgets, embedder {args.embedder}")
            print(f"recall between a forget's commit and its word to the caches: {_figures(between)}")
            print(f"recall right after a forget returned: {_figures(after)}")
            print(f"vector cache full loads: {reloads}")
        finally:
            engine.close()


if __name__ == "__main__":
    main()
