"""Many tenants in one server: open files, RSS, first-touch and warm recall latency, and
``AggregateStats`` over every tenant.

    python -m bench.scale --out results/scale.json [--tenants 10000] [--per-tenant 3] [--max-open-tenants 1024]

Creates ``--tenants`` tenants of ``--per-tenant`` memories each (one RetainBatch per tenant, four
client threads), then measures the server process: open file descriptors (``/proc/<pid>/fd``) and
RSS, and the Recall latency of a tenant touched for the first time since its file was closed by the
LRU (first touch: open + schema check + vector cache load) against the same tenant recalled again
(warm), and the time of ``AggregateStats`` (admin) over every tenant, read the way the Python client
reads it (the whole stream; its default deadline is 30 s), run ``--aggregate-runs`` times. The server
runs ``--synchronous normal`` by default here (the fsync per tenant creation
measures the disk, not the server); ``--synchronous full`` is accepted.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import percentiles, print_table, running_server, write_json
from bench.corpus import Corpus


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--per-tenant", type=int, default=3)
    parser.add_argument("--max-open-tenants", type=int, default=1024)
    parser.add_argument("--synchronous", default="normal", choices=["full", "normal"])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--aggregate-runs", type=int, default=3)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    import psutil

    from mnemosyne.client import MemoryClient

    corpus = Corpus(seed=5)
    texts = corpus.memories(0, 2000)
    server_args = ["--synchronous", args.synchronous, "--max-open-tenants", str(args.max_open_tenants)]
    with running_server(args=server_args) as server, MemoryClient(server.target, timeout=600) as client:
        process = psutil.Process(server.pid)
        baseline = {"rss_bytes": process.memory_info().rss, "open_fds": open_fds(process.pid)}

        def create(n: int) -> None:
            items = [texts[(n * args.per_tenant + i) % len(texts)] for i in range(args.per_tenant)]
            client.retain_batch(f"tenant-{n:06d}", items)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, range(args.tenants)))
        ingest_s = time.perf_counter() - t0
        loaded = {"rss_bytes": process.memory_info().rss, "open_fds": open_fds(process.pid)}

        # The oldest tenants were closed by the LRU long ago: their next recall opens the file.
        sample = list(range(min(args.samples, max(0, args.tenants - args.max_open_tenants))))
        first, warm = [], []
        for n in sample:
            tenant = f"tenant-{n:06d}"
            query = " ".join(texts[(n * args.per_tenant) % len(texts)].lower().split()[:3])
            t1 = time.perf_counter()
            client.recall(tenant, query, k=3)
            first.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            client.recall(tenant, query, k=3)
            warm.append(time.perf_counter() - t1)
        time.sleep(1.0)  # idle
        idle = {"rss_bytes": process.memory_info().rss, "open_fds": open_fds(process.pid)}
        aggregate = []
        for _ in range(args.aggregate_runs):
            t1 = time.perf_counter()
            totals = client.aggregate_stats()
            aggregate.append(time.perf_counter() - t1)
            assert len(totals.tenants) == args.tenants and totals.total.memories == args.tenants * args.per_tenant
        files = len(list((server.data_dir / "tenants").glob("*.sqlite")))

    result = {
        "benchmark": "scale",
        "tenants": args.tenants,
        "per_tenant": args.per_tenant,
        "max_open_tenants": args.max_open_tenants,
        "synchronous": args.synchronous.upper(),
        "tenant_files": files,
        "ingest_seconds": ingest_s,
        "baseline": baseline,
        "loaded": loaded,
        "idle_after_recalls": idle,
        "first_touch_recall": percentiles(first),
        "warm_recall": percentiles(warm),
        "aggregate_stats_seconds": aggregate,
    }
    print_table(
        f"{args.tenants} tenants x {args.per_tenant} memories, LRU {args.max_open_tenants} open tenants",
        ["measure", "value"],
        [
            ["tenant files", files],
            ["open fds (start / loaded / idle)", f"{baseline['open_fds']} / {loaded['open_fds']} / {idle['open_fds']}"],
            [
                "RSS MiB (start / loaded / idle)",
                f"{baseline['rss_bytes'] / 2**20:.0f} / {loaded['rss_bytes'] / 2**20:.0f} / {idle['rss_bytes'] / 2**20:.0f}",
            ],
            [
                "first-touch recall p50 / p99 ms",
                f"{result['first_touch_recall']['p50_ms']:.2f} / {result['first_touch_recall']['p99_ms']:.2f}",
            ],
            [
                "warm recall p50 / p99 ms",
                f"{result['warm_recall']['p50_ms']:.2f} / {result['warm_recall']['p99_ms']:.2f}",
            ],
            ["create (one RetainBatch each) s", f"{ingest_s:.1f}"],
            ["AggregateStats over every tenant s (each run)", " / ".join(f"{s:.1f}" for s in aggregate)],
        ],
    )
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
