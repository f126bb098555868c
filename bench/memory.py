"""Bytes per memory on disk and in RAM, at 100k memories in one tenant.

    python -m bench.memory --out results/memory.json [--memories 100000]

Loads the tenant through RetainBatch, then reads: the tenant's files (database + WAL) per memory;
the server's RSS before any tenant, after the load, after the first recall (which builds the
vector cache), and once the tenant's full-text postings are loaded (engine/postings.py: in the
background, past 20,000 memories), per memory. The vector cache alone is ``dim * 4`` bytes of float32, as much again
for its row-major copy, and an 8-byte id per memory (its buffers grow by doubling, so up to
twice that is reserved).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import print_table, running_server, wait_for_postings, write_json
from bench.corpus import Corpus
from bench.latency import server_rss_bytes, tenant_bytes
from mnemosyne.engine.postings import INLINE_ROWS

TENANT = "bench-memory"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    from mnemosyne.client import MemoryClient

    corpus = Corpus()
    with running_server() as server, MemoryClient(server.target, timeout=600) as client:
        pid = server.pid
        start_rss = server_rss_bytes(pid)
        text_bytes = 0
        t0 = time.perf_counter()
        for start in range(0, args.memories, 1000):
            texts = corpus.memories(start, min(1000, args.memories - start))
            text_bytes += sum(len(t.encode()) for t in texts)
            client.retain_batch(TENANT, texts)
        load_s = time.perf_counter() - t0
        loaded_rss = server_rss_bytes(pid)
        client.recall(TENANT, "warm the vector cache", k=10)
        recalled_rss = server_rss_bytes(pid)
        if args.memories > INLINE_ROWS:
            wait_for_postings(server, time.monotonic() + 600)
        postings_rss = server_rss_bytes(pid)
        disk = tenant_bytes(server.data_dir, TENANT)
    n = args.memories
    result = {
        "benchmark": "memory",
        "memories": n,
        "load_seconds": load_s,
        "mean_text_bytes": text_bytes / n,
        "disk_bytes": disk,
        "disk_bytes_per_memory": disk / n,
        "rss_start": start_rss,
        "rss_loaded": loaded_rss,
        "rss_after_recall": recalled_rss,
        "rss_with_postings": postings_rss,
        "ram_bytes_per_memory": (postings_rss - start_rss) / n,
        "postings_bytes_per_memory": (postings_rss - recalled_rss) / n,
        "vector_cache_bytes_per_memory": 384 * 4 * 2 + 8,
    }
    print_table(
        f"Memory at {n} memories in one tenant (mean text {text_bytes / n:.0f} bytes)",
        ["measure", "bytes per memory"],
        [
            ["disk (database + WAL)", round(disk / n)],
            ["RAM: server RSS growth, load + first recall + full-text postings", round((postings_rss - start_rss) / n)],
            ["RAM: of which vector cache (float32 x 384, its row-major copy, id)", 384 * 4 * 2 + 8],
            [
                "RAM: of which the full-text postings (RSS growth while they load)",
                round((postings_rss - recalled_rss) / n),
            ],
        ],
    )
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
