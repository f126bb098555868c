"""What a background consolidation pass costs a tenant when there is nothing to do: the search for
threads to consolidate (``threads_to_consolidate``, one read transaction) over a tenant whose
threaded memories were all consolidated, and, for comparison, over the same tenant before any was.
In process, on a temporary directory; medians of ``--runs`` interleaved queries.

    python bench/consolidation_pass.py --threads 10000 --per-thread 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem, ThreadRef

TENANT = "bench"


def _search_ms(engine: Engine) -> float:
    with engine.pool.tenant(TENANT, create=False) as store:
        assert store is not None
        with store.read() as txn:
            started = time.perf_counter()
            txn.threads_to_consolidate(idle_before=time.time() + 60, limit=100)
            return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--per-thread", type=int, default=10)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        engine = Engine(EngineConfig(data_dir=Path(directory), synchronous="NORMAL"))
        try:
            items = [
                RetainItem(f"memory {t}-{i} about topic {t * 7 + i}", thread=ThreadRef(f"th{t}", i))
                for t in range(args.threads)
                for i in range(args.per_thread)
            ]
            for start in range(0, len(items), 500):
                engine.retain_batch(TENANT, items[start : start + 500])
            none, done = [], []
            for _ in range(args.runs):  # interleaved: mark, measure, unmark
                none.append(_search_ms(engine))
                with engine.pool.tenant(TENANT, create=False) as store:
                    assert store is not None
                    with store.write() as txn:
                        for t in range(args.threads):
                            txn.mark_thread_consolidated(f"th{t}", 2**62)
                done.append(_search_ms(engine))
                with engine.pool.tenant(TENANT, create=False) as store:
                    assert store is not None
                    with store.write() as txn:
                        txn.connection.execute("DELETE FROM consolidated_threads")
        finally:
            engine.close()
    total = args.threads * args.per_thread
    print(f"{total} threaded memories in {args.threads} threads, median of {args.runs}:")
    print(f"  none consolidated yet (100 found): {statistics.median(none):.1f} ms")
    print(f"  all consolidated (nothing to do):  {statistics.median(done):.1f} ms")


if __name__ == "__main__":
    main()
