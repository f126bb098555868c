"""What replication to object storage costs and how far behind it runs: one server replicating
(``--replica-url`` to SeaweedFS's S3 on loopback, tests/replica_support.py) and one not, in the
same run, the same calls interleaved.

    python -m bench.replication --writes 600 --batches 60 --runs 5 --out results/replication.json

Hashing embedder, loopback. Measured, each from this process:

* ``Retain``: a synchronous retain on one of 10 tenants, the two servers taking turns call by call;
* ``RetainBatch``: batches of 100 items, items per second, the two servers taking turns batch by
  batch;
* the barrier: a synchronous retain asked at REPLICATED, then ``Flush`` of its token (its write is
  visible at once, so the Flush is the wait for object storage alone);
* the lag during an ingest: ``mnemosyne_replication_lag_seconds`` read every 50 ms while batches
  of 100 go to 10 tenants back to back.

With ``--runs N`` the off/on comparison is made N times (which server goes first alternating) and
each figure is the median of the runs' figures.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from contextlib import ExitStack

from bench.common import percentiles, print_table, replica_bucket, replicating_server, running_server, write_json
from mnemosyne.client import MemoryClient
from mnemosyne.v1 import hot_path_pb2, memory_pb2
from tests.support import ServerProcess, gauge

TENANTS = 10
BATCH = 100


def _texts(who: str, n: int, count: int) -> list[str]:
    return [f"{who} note {n}-{i}: crate {i % 53} holds part P-{n:04d}{i:03d}" for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--runs", type=int, default=5, help="interleaved off/on comparisons (medians)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = stack.enter_context(replica_bucket())
        servers = {
            "off": stack.enter_context(running_server(metrics=True)),
            "on": stack.enter_context(replicating_server(url)),
        }
        results = _measure(servers, args)
    rows = [(name, r.get("p50_ms", ""), r.get("p99_ms", ""), r.get("items_per_s", "")) for name, r in results.items()]
    print_table(
        f"replication: off vs on, same run, medians of {args.runs}", ["measure", "p50 ms", "p99 ms", "items/s"], rows
    )
    if args.out:
        write_json(args.out, {"writes": args.writes, "runs": args.runs, "results": results})


def _median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}


def _measure(servers: dict[str, ServerProcess], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    clients = {who: MemoryClient(server.target, session_consistency=False) for who, server in servers.items()}
    retain_runs: dict[str, list[dict[str, float]]] = {who: [] for who in clients}
    batch_runs: dict[str, list[dict[str, float]]] = {who: [] for who in clients}
    for run in range(args.runs):
        order = list(clients.items())[:: 1 if run % 2 == 0 else -1]
        retain: dict[str, list[float]] = {who: [] for who in clients}
        for n in range(args.writes):
            for who, client in order[:: 1 if n % 2 == 0 else -1]:
                began = time.perf_counter()
                client.retain(f"{who}-{n % TENANTS}", _texts(f"{who} run {run}", n, 1)[0])
                retain[who].append(time.perf_counter() - began)
        spent = {who: 0.0 for who in clients}
        for n in range(args.batches):
            for who, client in order[:: 1 if n % 2 == 0 else -1]:
                began = time.perf_counter()
                client.retain_batch(f"{who}-batch-{n % TENANTS}", _texts(f"{who} run {run}", n, BATCH))
                spent[who] += time.perf_counter() - began
        for who in clients:
            retain_runs[who].append(percentiles(retain[who]))
            batch_runs[who].append({"items_per_s": round(args.batches * BATCH / spent[who])})
    results = {f"Retain, replication {who}": _median_of(runs) for who, runs in retain_runs.items()}
    results |= {f"RetainBatch, replication {who}": _median_of(runs) for who, runs in batch_runs.items()}
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
