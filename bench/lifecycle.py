"""Tenant lifecycle costs: backup throughput, the longest pause a writer sees during a backup, and
what an erasure (ForgetMemory) costs.

    python -m bench.lifecycle --out results/lifecycle.json [--memories 100000] [--small-tenants 10000]

Against one real server (hashing embedder), through the real client:

* ``backup, one large tenant``: a tenant of ``--memories`` memories (RetainBatch of 500), then
  ``mnemosyne backup``'s own code (backup_dir.write_backup) into a fresh directory, while one
  writer retains into another tenant one memory at a time: MB/s of tenant files received, and the
  writer's longest Retain during the backup next to its p99 before it;
* ``backup, many small tenants``: ``--small-tenants`` tenants of 3 memories each, backed up the
  same way: tenants/s and MB/s;
* ``forget``: ``--forgets`` ForgetMemory calls on the large tenant, each timed (the full-text
  index's secure delete of the memory's entries and the WAL truncation are in it), with a timed
  Retain on the same tenant between two of them (the forget drops its row from the vector cache in
  place, so the Retain reloads nothing; earlier versions reloaded all the tenant's vectors there).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine, percentiles, print_table, running_server, write_json
from mnemosyne.cli.backup import write_backup
from mnemosyne.client import MemoryClient


def _fill(client: MemoryClient, tenant: str, count: int) -> list[int]:
    ids: list[int] = []
    for start in range(0, count, 500):
        texts = [
            f"note {i}: customer C-{i % 997} asked about order O-{i} shipped to city {i % 113} on day {i % 28}"
            for i in range(start, min(count, start + 500))
        ]
        ids.extend(r.memory_id for r in client.retain_batch(tenant, texts))
    return ids


def _backup_while_writing(client: MemoryClient, target: str, directory: Path) -> dict[str, object]:
    stop = threading.Event()
    pauses: list[float] = []
    baseline: list[float] = []

    def write(into: list[float]) -> None:
        with MemoryClient(target) as writer:
            i = 0
            while not stop.is_set():
                started = time.perf_counter()
                writer.retain("bench-writer", f"writer note {i} {time.time()}")
                into.append(time.perf_counter() - started)
                i += 1

    before = threading.Thread(target=write, args=(baseline,))
    before.start()
    time.sleep(2.0)
    stop.set()
    before.join()
    stop.clear()
    during = threading.Thread(target=write, args=(pauses,))
    during.start()
    started = time.perf_counter()
    summary = write_backup(client, directory)
    seconds = time.perf_counter() - started
    stop.set()
    during.join()
    return {
        "seconds": seconds,
        "bytes": summary.bytes,
        "tenants": summary.copied,
        "mb_per_s": summary.bytes / 1e6 / seconds,
        "tenants_per_s": summary.copied / seconds,
        "writer_before": percentiles(baseline),
        "writer_during": percentiles(pauses),
        "writer_longest_ms": max(pauses) * 1e3 if pauses else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--small-tenants", type=int, default=10_000)
    parser.add_argument("--forgets", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    results: dict[str, object] = {"machine": machine(), "memories": args.memories, "small_tenants": args.small_tenants}
    with (
        running_server() as server,
        MemoryClient(server.target, timeout=600) as client,
        tempfile.TemporaryDirectory() as tmp,
    ):
        ids = _fill(client, "bench-large", args.memories)
        results["large"] = _backup_while_writing(client, server.target, Path(tmp) / "large")

        retains = [0.0] * args.forgets
        forgets = [0.0] * args.forgets
        for n in range(args.forgets):
            started = time.perf_counter()
            client.retain("bench-large", f"an extra note {n} to compare with a forget")
            retains[n] = time.perf_counter() - started
            started = time.perf_counter()
            client.forget("bench-large", ids[n * 7])
            forgets[n] = time.perf_counter() - started
        results["forget"] = percentiles(forgets)
        results["retain_same_tenant"] = percentiles(retains)

        for i in range(args.small_tenants):
            client.retain_batch(f"bench-small-{i}", [f"small tenant {i} note {j}" for j in range(3)])
        small_dir = Path(tmp) / "small"
        results["small"] = _backup_while_writing(client, server.target, small_dir)

    large, small = results["large"], results["small"]
    assert isinstance(large, dict) and isinstance(small, dict)
    print_table(
        "Backup",
        ["case", "tenants", "MB", "seconds", "MB/s", "tenants/s", "writer p99 before (ms)", "longest writer call (ms)"],
        [
            [
                f"one tenant of {args.memories} memories",
                large["tenants"],
                f"{large['bytes'] / 1e6:.1f}",
                f"{large['seconds']:.2f}",
                f"{large['mb_per_s']:.1f}",
                f"{large['tenants_per_s']:.2f}",
                f"{large['writer_before']['p99_ms']:.1f}",
                f"{large['writer_longest_ms']:.1f}",
            ],
            [
                f"{args.small_tenants} tenants of 3 memories (+ the large one)",
                small["tenants"],
                f"{small['bytes'] / 1e6:.1f}",
                f"{small['seconds']:.2f}",
                f"{small['mb_per_s']:.1f}",
                f"{small['tenants_per_s']:.1f}",
                f"{small['writer_before']['p99_ms']:.1f}",
                f"{small['writer_longest_ms']:.1f}",
            ],
        ],
    )
    forget, retain = results["forget"], results["retain_same_tenant"]
    assert isinstance(forget, dict) and isinstance(retain, dict)
    print_table(
        f"ForgetMemory on a tenant of {args.memories} memories",
        ["call", "p50 (ms)", "p99 (ms)", "n"],
        [
            ["ForgetMemory", f"{forget['p50_ms']:.1f}", f"{forget['p99_ms']:.1f}", forget["n"]],
            ["Retain between two forgets", f"{retain['p50_ms']:.1f}", f"{retain['p99_ms']:.1f}", retain["n"]],
        ],
    )
    if args.out:
        write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
