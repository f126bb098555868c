"""Recall of a large tenant: the approximate index (engine/ann.py) against the exact scan.

    python -m bench.latency_large --memories 100000 [--queries 1000] [--out results/large.json]
    python -m bench.latency_large --memories 1000000   # outside CI: ~25 min here
    python -m bench.latency_large --tenant-file F      # serve a file an earlier --save-file kept
    python -m bench.latency_large --tenant-file F --index-file A   # and its graph (--save-index)

The corpus (bench/corpus.py, the hashing embedder) is written into the tenant file by an
in-process Engine (``Engine.retain_batch``, the same write path a RetainBatch runs, without
gRPC: at 1M memories the round trips alone would take most of the half hour). The file is then
copied to a second data directory and two servers serve the copies: one with the index off
(``--ann-threshold`` above the tenant's size: every recall scans exactly) and one with it on
(``--threshold``, by default the production threshold or the tenant's size if smaller).
The first recall on the second starts the index build; its time is read from the server's log,
and its memory from the server's RSS before and after and the size of ``tenants/<tenant>.ann``.

Then ``--queries`` queries, each mode (hybrid, vector-only, text-only) on both servers in turn,
``ROUNDS`` rounds over a share of the queries each (the machine's speed drifts), server-side time
from the trailing metadata ``mnemosyne-server-time-us``. Recall vs exact: the overlap of each
query's top 10 from the indexed server with the exact server's, per mode (hybrid: the final fused
top 10, what a caller gets).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.common import (
    ASK_SERVER_TIME,
    percentiles,
    print_table,
    running_server,
    wait_for_graph,
    wait_for_postings,
    write_json,
)
from bench.corpus import Corpus
from bench.latency import server_rss_bytes
from mnemosyne.engine.ann import DEFAULT_THRESHOLD
from mnemosyne.engine.postings import INLINE_ROWS

if TYPE_CHECKING:
    from mnemosyne.client import MemoryClient
    from mnemosyne.v1 import memory_pb2

TENANT = "bench-large"
K = 10
ROUNDS = 6
BATCH = 1000


def load(data_dir: Path, memories: int) -> float:
    """Write the corpus into the tenant's file in this process; seconds taken."""
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RetainItem

    corpus = Corpus()
    # Near-duplicate naming off (above 1): it compares each new memory with every earlier one.
    # The hashing embedder, as the servers below (bench.common.running_server): not the default.
    config = EngineConfig(data_dir=data_dir, synchronous="NORMAL", near_duplicate_threshold=1.5, embedder="hashing")
    engine = Engine(config)
    started = time.perf_counter()
    try:
        for start in range(0, memories, BATCH):
            texts = corpus.memories(start, min(BATCH, memories - start))
            engine.retain_batch(TENANT, [RetainItem(text=t) for t in texts])
            if start and start % 100_000 == 0:
                print(f"  {start} memories written, {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        engine.close()
    return time.perf_counter() - started


def timed_hits(
    client: MemoryClient, requests: Sequence[memory_pb2.RecallRequest]
) -> tuple[list[float], list[set[int]]]:
    """(server-side seconds, hit ids) of each recall request, from the trailing metadata."""
    seconds: list[float] = []
    hits: list[set[int]] = []
    for request in requests:
        response, rpc = client.memory.Recall.with_call(
            request, metadata=(*client.call_metadata, *ASK_SERVER_TIME), timeout=60
        )
        seconds.append(float(dict(rpc.trailing_metadata() or ())["mnemosyne-server-time-us"]) / 1e6)
        hits.append({h.memory.id for h in response.hits})
    return seconds, hits


def memories_in(tenant_file: Path) -> int:
    import apsw

    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = connection.execute("SELECT count(*) FROM memories").fetchone()
        assert row is not None  # a count always has its row
        return int(row[0])
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--threshold", type=int, default=None, help="--ann-threshold of the indexed server")
    parser.add_argument("--save-file", type=Path, default=None, help="keep a copy of the written tenant file here")
    parser.add_argument("--build-timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--tenant-file",
        type=Path,
        default=None,
        help="serve a copy of this tenant file (written by an earlier run, cut short) instead of writing one",
    )
    parser.add_argument("--save-index", type=Path, default=None, help="keep a copy of the built index file here")
    parser.add_argument(
        "--index-file", type=Path, default=None, help="with --tenant-file: the indexed server loads this index file"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()

    from mnemosyne.client import MemoryClient
    from mnemosyne.v1 import memory_pb2

    with tempfile.TemporaryDirectory(prefix="mnemo-large-") as tmp:
        exact_dir, ann_dir = Path(tmp) / "exact", Path(tmp) / "ann"
        if args.tenant_file is None:
            seconds = load(exact_dir, args.memories)
            print(f"{args.memories} memories written in {seconds:.0f} s", flush=True)
            if args.save_file is not None:
                shutil.copyfile(exact_dir / "tenants" / f"{TENANT}.sqlite", args.save_file)
        else:
            seconds = float("nan")
            (exact_dir / "tenants").mkdir(parents=True)
            shutil.copyfile(args.tenant_file, exact_dir / "tenants" / f"{TENANT}.sqlite")
            args.memories = memories_in(exact_dir / "tenants" / f"{TENANT}.sqlite")
            print(f"{args.memories} memories in {args.tenant_file}", flush=True)
        (ann_dir / "tenants").mkdir(parents=True)
        shutil.copyfile(exact_dir / "tenants" / f"{TENANT}.sqlite", ann_dir / "tenants" / f"{TENANT}.sqlite")
        if args.index_file is not None:  # the graph of the same file, built by an earlier run
            shutil.copyfile(args.index_file, ann_dir / "tenants" / f"{TENANT}.ann")
        threshold = ["--ann-threshold", str(args.threshold or min(DEFAULT_THRESHOLD, args.memories))]
        with (
            running_server(data_dir=exact_dir, args=["--ann-threshold", str(10 * args.memories + 1)]) as exact,
            running_server(data_dir=ann_dir, args=threshold) as indexed,
            MemoryClient(exact.target, timeout=600) as exact_client,
            MemoryClient(indexed.target, timeout=600) as ann_client,
        ):
            queries = Corpus().queries(args.memories, args.queries)
            for client in (exact_client, ann_client):  # loads the vector caches; starts the build
                client.recall(TENANT, queries[0], k=K)
            rss_before = server_rss_bytes(indexed.pid)
            deadline = time.monotonic() + args.build_timeout
            built = wait_for_graph(indexed, deadline)
            # Both servers' full-text postings (engine/postings.py), loaded in the background too
            # past INLINE_ROWS (fewer: the first recall's sync took them inline).
            for server in (exact, indexed) if args.memories > INLINE_ROWS else ():
                wait_for_postings(server, deadline)
            ann_file = ann_dir / "tenants" / f"{TENANT}.ann"
            while not ann_file.exists():
                time.sleep(0.2)
            if args.save_index is not None:
                shutil.copyfile(ann_file, args.save_index)
            row: dict[str, Any] = {
                "memories": args.memories,
                "load_seconds": seconds,
                "build_seconds": float(built.group(3)) if built.group(1) == "built" else float("nan"),  # nan: loaded
                "indexed_rows": int(built.group(2)),
                "rss_before_index_bytes": rss_before,
                "rss_after_index_bytes": server_rss_bytes(indexed.pid),
                "index_file_bytes": ann_file.stat().st_size,
                "exact_server_rss_bytes": server_rss_bytes(exact.pid),
                "tenant_file_bytes": (ann_dir / "tenants" / f"{TENANT}.sqlite").stat().st_size,
            }
            for q in queries[:20]:
                exact_client.recall(TENANT, q, k=K)
                ann_client.recall(TENANT, q, k=K)
            modes = {"hybrid": memory_pb2.RECALL_MODE_HYBRID, "vector": memory_pb2.RECALL_MODE_VECTOR}
            modes["text"] = memory_pb2.RECALL_MODE_TEXT
            samples: dict[str, list[float]] = defaultdict(list)
            overlap: dict[str, list[float]] = defaultdict(list)
            for turn in range(ROUNDS):
                share = queries[turn::ROUNDS]
                for name, mode in modes.items():
                    requests = [memory_pb2.RecallRequest(tenant=TENANT, query=q, k=K, mode=mode) for q in share]
                    exact_seconds, truths = timed_hits(exact_client, requests)
                    ann_seconds, gots = timed_hits(ann_client, requests)
                    samples[f"exact_{name}"] += exact_seconds
                    samples[f"ann_{name}"] += ann_seconds
                    if name != "text":
                        overlap[name] += [len(t & g) / max(1, len(t)) for t, g in zip(truths, gots)]
            for name, values in samples.items():
                row[name] = percentiles(values)
            for name, values in overlap.items():
                row[f"recall_vs_exact_{name}"] = float(np.mean(values))
            print(f"  done {args.memories}", flush=True)

    print_table(
        f"Recall of a large tenant, k={K}, server-side ms; recall vs exact over {args.queries} queries",
        ["memories", "mode", "exact p50", "exact p99", "ann p50", "ann p99", "recall vs exact"],
        [
            [
                args.memories,
                name,
                row[f"exact_{name}"]["p50_ms"],
                row[f"exact_{name}"]["p99_ms"],
                row[f"ann_{name}"]["p50_ms"],
                row[f"ann_{name}"]["p99_ms"],
                row.get(f"recall_vs_exact_{name}", float("nan")),
            ]
            for name in modes
        ],
    )
    print(
        f"load {row['load_seconds']:.0f} s; index build {row['build_seconds']:.1f} s ({row['indexed_rows']} rows); "
        f"RSS {int(row['rss_before_index_bytes']) / 2**20:.0f} -> {int(row['rss_after_index_bytes']) / 2**20:.0f} MiB "
        f"(exact server {int(row['exact_server_rss_bytes']) / 2**20:.0f} MiB); "
        f"index file {int(row['index_file_bytes']) / 2**20:.0f} MiB; "
        f"tenant file {int(row['tenant_file_bytes']) / 2**20:.0f} MiB; "
        f"whole run {time.perf_counter() - began:.0f} s"
    )
    if args.out:
        write_json(args.out, {"benchmark": "recall-large-tenant", "k": K, "queries": args.queries, "results": [row]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
