"""Hot-path numbers: enqueue latency (server side) and flush latency under a 5,000-write backlog.

    python bench/hot_path_latency.py [--enqueues 2000] [--warm-up 500] [--backlog 5000] [--synchronous full|normal]
                                     [--hot-path-sync round|enqueue] [--rate 200] [--worker-batch N]

Runs the server's Engine in process, so the enqueue figures are the server-side cost of a fast
Retain (validation, request-id check, one short BEGIN IMMEDIATE transaction appending to the
durable log, commit), without network. The backlog is built with the workers held (the
MNEMOSYNE_TEST_HOLD_WORKERS seam), so the flush starts with exactly ``--backlog`` open
operations; the figure is the time from the flush call until every one of them is committed and
recallable.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--enqueues", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument(
        "--hot-path-sync",
        choices=["round", "enqueue"],
        default="round",
        help="when a fast write is fsynced with synchronous=full (the server's --hot-path-sync)",
    )
    parser.add_argument("--worker-batch", type=int, default=0, help="operations per worker commit (0: default)")
    parser.add_argument(
        "--rate", type=float, default=200.0, help="enqueues per second of the paced draining phase (0: skip it)"
    )
    parser.add_argument("--warm-up", type=int, default=500, help="writes to each tenant before its timed enqueues")
    args = parser.parse_args()

    from mnemosyne.runtime.interpreter import tune_interpreter

    tune_interpreter()  # the server's interpreter settings, before numpy loads
    from mnemosyne.engine.config import EngineConfig, HotPathConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RetainItem
    from mnemosyne.runtime.seams import Seams

    with tempfile.TemporaryDirectory() as d:
        hold = Path(d) / "hold"
        engine = Engine(
            EngineConfig(
                data_dir=Path(d) / "data",
                synchronous=args.synchronous.upper(),
                hot_path=HotPathConfig(
                    sync=args.hot_path_sync,
                    **({"batch": args.worker_batch} if args.worker_batch else {}),
                ),
            ),
            seams=Seams(hold_workers_file=hold),
        )
        try:
            # Held workers: the enqueue's own cost. Draining workers: the same enqueues while the
            # workers apply the operations as they arrive (their commits take the same write lock),
            # back to back (the workers never catch up: the worst case), then paced at --rate per
            # second (the workers keep up, as with an agent writing between its turns).
            phases = [("workers held", "held", 0.0), ("workers draining, back to back", "draining", 0.0)]
            if args.rate > 0:
                phases.append((f"workers draining, paced at {args.rate:g}/s", "paced", args.rate))
            for phase, tenant, rate in phases:
                engine.hot_path.set_enabled(tenant, True)
                # A fresh tenant's first few hundred writes also grow its WAL file to its working
                # size; --warm-up writes (applied and flushed) measure the steady state after that.
                for i in range(args.warm_up):
                    engine.retain(tenant, RetainItem(f"warm-up {i}: crate WU-{i:06d}"), fast=True)
                engine.hot_path.flush(tenant, timeout=600)
                if tenant == "held":
                    hold.touch()
                samples = []
                began = time.perf_counter()
                for i in range(args.enqueues):
                    item = RetainItem(f"enqueue sample {i}: tote TT-{i:06d}")
                    if rate:
                        time.sleep(max(0.0, began + i / rate - time.perf_counter()))
                    start = time.perf_counter()
                    outcome = engine.retain(tenant, item, request_id=f"r{i}", fast=True)
                    samples.append((time.perf_counter() - start) * 1e6)
                    assert outcome.event_id
                hold.unlink(missing_ok=True)
                engine.hot_path.flush(tenant, timeout=600)
                samples.sort()
                p50 = statistics.median(samples)
                p99 = samples[int(len(samples) * 0.99) - 1]
                print(
                    f"enqueue (server side, synchronous={args.synchronous}, hot-path-sync={args.hot_path_sync}, {phase}, after {args.warm_up} warm-up writes): "
                    f"p50 {p50:.0f} us, p99 {p99:.0f} us, n={len(samples)}"
                )

            engine.hot_path.set_enabled("backlog", True)
            hold.touch()
            for i in range(0, args.backlog, 1000):
                engine.retain_batch(
                    "backlog",
                    [RetainItem(f"backlog {j}: shelf SH-{j:06d}") for j in range(i, min(i + 1000, args.backlog))],
                    fast=True,
                )
            depth = engine.hot_path.status("backlog").queue_depth
            hold.unlink()
            start = time.perf_counter()
            flushed = engine.hot_path.flush("backlog", timeout=600)
            seconds = time.perf_counter() - start
            print(
                f"flush under a {depth}-write backlog (synchronous={args.synchronous}, hot-path-sync={args.hot_path_sync}): {seconds:.2f} s "
                f"({seconds / max(1, flushed.flushed) * 1e6:.0f} us per operation), "
                f"{flushed.succeeded} succeeded, {flushed.failed} failed"
            )
        finally:
            engine.close()


if __name__ == "__main__":
    main()
