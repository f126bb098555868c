"""What replication to object storage costs and how far behind it runs: one server replicating
(``--replica-url`` to SeaweedFS's S3 on loopback, tests/replica_support.py) and one not, in the
same run, the same calls interleaved.

    python -m bench.replication --writes 400 --out results/replication.json

Hashing embedder, loopback. Measured, each from this process:

* ``Retain``: a synchronous retain on one of 10 tenants, the two servers taking turns;
* ``RetainBatch``: batches of 100 items, items per second;
* the barrier: a synchronous retain asked at REPLICATED, then ``Flush`` of its token (its write is
  visible at once, so the Flush is the wait for object storage alone);
* the lag during an ingest: ``mnemosyne_replication_lag_seconds`` read every 50 ms while batches
  of 100 go to 10 tenants back to back.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine, percentiles, print_table, write_json
from mnemosyne.client import MemoryClient
from mnemosyne.v1 import hot_path_pb2, memory_pb2
from tests.replica_support import ObjectStorage, replica_env
from tests.support import ServerProcess, gauge

TENANTS = 10
BATCH = 100


def _texts(who: str, n: int, count: int) -> list[str]:
    return [f"{who} note {n}-{i}: crate {i % 53} holds part P-{n:04d}{i:03d}" for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        storage = ObjectStorage(Path(tmp) / "s3").start()
        try:
            bucket = storage.new_bucket()
            servers = {
                "off": ServerProcess(Path(tmp) / "off", metrics=True),
                "on": ServerProcess(
                    Path(tmp) / "on", env=replica_env(), args=["--replica-url", storage.url(bucket)], metrics=True
                ),
            }
            for server in servers.values():
                server.start(timeout=120)
            try:
                results = _measure(servers, args)
            finally:
                for server in servers.values():
                    server.stop()
        finally:
            storage.stop()
    rows = [(name, r.get("p50_ms", ""), r.get("p99_ms", ""), r.get("items_per_s", "")) for name, r in results.items()]
    print_table("replication: off vs on, same run", ["measure", "p50 ms", "p99 ms", "items/s"], rows)
    if args.out:
        write_json(args.out, {"machine": machine(), "writes": args.writes, "results": results})


def _measure(servers: dict[str, ServerProcess], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    clients = {who: MemoryClient(server.target, session_consistency=False) for who, server in servers.items()}
    retain: dict[str, list[float]] = {who: [] for who in clients}
    for n in range(args.writes):
        for who, client in list(clients.items())[:: 1 if n % 2 == 0 else -1]:
            began = time.perf_counter()
            client.retain(f"{who}-{n % TENANTS}", _texts(who, n, 1)[0])
            retain[who].append(time.perf_counter() - began)
    results = {f"Retain, replication {who}": percentiles(s) for who, s in retain.items()}
    for who, client in clients.items():
        began = time.perf_counter()
        for n in range(args.batches):
            client.retain_batch(f"{who}-batch-{n % TENANTS}", _texts(who, n, BATCH))
        results[f"RetainBatch, replication {who}"] = {
            "items_per_s": round(args.batches * BATCH / (time.perf_counter() - began))
        }
    results["REPLICATED barrier (Flush of a sync write's token)"] = percentiles(
        _barrier(clients["on"], args.writes // 4)
    )
    results["replication lag during an ingest"] = _lag(servers["on"], clients["on"], args.batches)
    for client in clients.values():
        client.close()
    return results


def _barrier(client: MemoryClient, rounds: int) -> list[float]:
    waits = []
    for n in range(rounds):
        response = client.call(
            client.memory.Retain,
            memory_pb2.RetainRequest(tenant=f"barrier-{n % TENANTS}", text=f"barrier note {n}: gate {n % 7}"),
            retry=False,
            metadata=[("mnemosyne-consistency-level", "replicated")],
            session=False,
        )
        began = time.perf_counter()
        client.call(
            client.hot_path_stub.Flush,
            hot_path_pb2.FlushRequest(tenant=f"barrier-{n % TENANTS}", consistency_token=response.consistency_token),
            retry=False,
            session=False,
        )
        waits.append(time.perf_counter() - began)
    return waits


def _lag(server: ServerProcess, client: MemoryClient, batches: int) -> dict[str, float]:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(gauge(server, "mnemosyne_replication_lag_seconds"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for n in range(batches * 2):
            client.retain_batch(f"lag-{n % TENANTS}", _texts("lag", n, BATCH))
    finally:
        done.set()
        sampler.join()
    return percentiles(samples)


if __name__ == "__main__":
    main()
