"""Hot-path numbers: enqueue latency (server side) and flush latency under a 5,000-write backlog;
and reading your own write with its consistency token behind that backlog (docs/hot-path.md
"Read your own writes").

    python bench/hot_path_latency.py [--enqueues 2000] [--warm-up 500] [--backlog 5000] [--synchronous full|normal]
                                     [--hot-path-sync round|enqueue] [--rate 200] [--worker-batch N]
                                     [--token-reads 300] [--only-tokens] [--embedder hashing|minilm]

Runs the server's Engine in process, so the enqueue figures are the server-side cost of a fast
Retain (validation, request-id check, one short BEGIN IMMEDIATE transaction appending to the
durable log, commit), without network. The backlog is built with the workers held (the
MNEMOSYNE_TEST_HOLD_WORKERS seam), so the flush starts with exactly ``--backlog`` open
operations; the figure is the time from the flush call until every one of them is committed and
recallable.

The token-read phase (``--token-reads``): a 5,000-write backlog is queued in one tenant and scope
(duplicates and conflicts among it) and left to drain; meanwhile a session makes a fast write and
reads it (a recall for it) — twice over, without a token (the read answers at once, mostly
without the write) and with the write's token (the read waits for it, the workers taking it
ahead of the backlog) — while a Flush issued after the session's first write, the barrier the
token replaces, waits for the whole backlog. It reports the token read's wait (p50/p99), the
Flush's time for the same write, and the enqueue p99 of each run (with tokens: the enqueue with
the issue of its token, carrying the session's previous one). Samples are taken while the backlog
is deeper than a tenth of itself.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


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
    parser.add_argument("--token-reads", type=int, default=300, help="most token reads behind the backlog (0: skip)")
    parser.add_argument("--only-tokens", action="store_true", help="run only the token-read phase")
    parser.add_argument(
        "--embedder",
        choices=["hashing", "minilm"],
        default="hashing",
        help="the tenants' embedder (hashing: the figures before issue 42; minilm: the default install's)",
    )
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
                embedder=args.embedder,
                synchronous=args.synchronous.upper(),
                hot_path=HotPathConfig(
                    sync=args.hot_path_sync,
                    **({"batch": args.worker_batch} if args.worker_batch else {}),
                ),
            ),
            seams=Seams(hold_workers_file=hold),
        )
        try:
            if args.token_reads:
                token_reads(engine, args.backlog, args.token_reads, args.warm_up)
            if args.only_tokens:
                return
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


def token_reads(engine: Any, backlog: int, reads: int, warm_up: int) -> None:
    """The token-read phase (the module's docstring), in one run: without tokens, then with."""
    from mnemosyne.engine.types import RetainItem

    for run, tokens in (("without tokens", False), ("with tokens", True)):
        tenant = f"tokens-{int(tokens)}"
        engine.hot_path.set_enabled(tenant, True)
        for i in range(warm_up):
            engine.retain(tenant, RetainItem(f"warm-up {i}: crate WU-{i:06d}"), fast=True)
        engine.hot_path.flush(tenant, timeout=600)
        for i in range(0, backlog, 1000):  # one scope, with exact duplicates and same-subject conflicts
            engine.retain_batch(
                tenant,
                [
                    RetainItem(f"Ticket RF-{j % 50} status: {('open', 'refunded', 'closed')[j % 3]}.")
                    if j % 2
                    else RetainItem(f"backlog {j % 1500}: shelf SH-{j % 1500:06d}")
                    for j in range(i, min(i + 1000, backlog))
                ],
                fast=True,
            )
        enqueues, waits, found, flush = _session(engine, tenant, backlog, reads, tokens)
        print(
            f"{run}, behind a {backlog}-write backlog in one scope: enqueue p50 {_p(enqueues, 50):.0f} us, "
            f"p99 {_p(enqueues, 99):.0f} us; read of the write just made p50 {_p(waits, 50):.1f} ms, "
            f"p99 {_p(waits, 99):.1f} ms, found {found} of {len(waits)}; Flush of the first write: {flush:.2f} s"
        )


def _session(
    engine: Any, tenant: str, backlog: int, reads: int, tokens: bool
) -> tuple[list[float], list[float], int, float]:
    """A session writing and reading its own writes while the backlog drains; (enqueue us, read
    ms, reads that found their write, the Flush's seconds)."""
    from mnemosyne.engine.consistency import WritesOpen
    from mnemosyne.engine.types import RetainItem

    enqueues: list[float] = []
    waits: list[float] = []
    found, token, flush = 0, "", [0.0]
    flusher: threading.Thread | None = None
    for i in range(reads):
        if i % 10 == 0 and engine.hot_path.status(tenant).queue_depth < backlog // 10:
            break  # drained: what follows is no longer behind a backlog
        text = f"session note {i}: locker LK-{i:05d} holds parcel P-{i:05d}"
        start = time.perf_counter()
        outcome = engine.retain(tenant, RetainItem(text), fast=True)
        if tokens:
            token = engine.consistency.issue(tenant, [outcome.event_id], carried=token)
        enqueues.append((time.perf_counter() - start) * 1e6)
        if flusher is None:
            flusher = threading.Thread(target=_timed_flush, args=(engine, tenant, flush))
            flusher.start()
        start = time.perf_counter()
        if tokens:
            try:
                engine.consistency.check(tenant, token)
            except WritesOpen as pending:
                engine.hot_path.awaited.wait(tenant, pending.spans, 60.0)
        hits = engine.recall(tenant, f"locker LK-{i:05d} parcel P-{i:05d}", k=1).hits
        waits.append((time.perf_counter() - start) * 1e3)
        found += bool(hits) and hits[0].memory.text == text
    assert flusher is not None
    flusher.join()
    return enqueues, waits, found, flush[0]


def _timed_flush(engine: Any, tenant: str, seconds: list[float]) -> None:
    start = time.perf_counter()
    engine.hot_path.flush(tenant, timeout=600)
    seconds[0] = time.perf_counter() - start


def _p(samples: list[float], percentile: int) -> float:
    ordered = sorted(samples)
    return ordered[max(0, int(len(ordered) * percentile / 100) - 1)] if ordered else 0.0


if __name__ == "__main__":
    main()
