"""Retain and recall latency on a tenant of 10,000 memories, end to end through the client.

    python -m bench.latency_10k [--memories 10000] [--samples 500]

Starts its own server (synchronous=full, the default) in a temporary directory, fills one tenant
with RetainBatch, then times single Retains, Recalls and the no-op Ping (the gRPC floor).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time

from mnemosyne.client import MemoryClient, RetainItem

WORDS = ("refund ticket customer order invoice parcel delivery account password meeting budget "
         "review finance support shipping return policy warranty discount loyalty card booth").split()


def sentence(rng: random.Random, i: int) -> str:
    return f"{' '.join(rng.choice(WORDS) for _ in range(8))} case {i} code RF-{rng.randint(10000, 99999)}"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen(
            [sys.executable, "-m", "mnemosyne.cli", "serve", "--data-dir", data, "--port", "0", "--metrics-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        try:
            port = json.loads(server.stdout.readline())["port"]  # type: ignore[union-attr]
            with MemoryClient(f"127.0.0.1:{port}") as client:
                for start in range(0, args.memories, 1000):
                    client.retain_batch("bench", [RetainItem(sentence(rng, i)) for i in range(start, min(start + 1000, args.memories))])
                ping = timed(lambda i: client.ping(), args.samples)
                retain = timed(lambda i: client.retain("bench", sentence(rng, 10**6 + i)), args.samples)
                recall = timed(lambda i: client.recall("bench", " ".join(rng.choice(WORDS) for _ in range(3)), k=10), args.samples)
        finally:
            server.terminate()
            server.wait()
    print(f"{'operation':<22}{'p50 ms':>10}{'p99 ms':>10}   (tenant of {args.memories} memories, {args.samples} samples)")
    for name, samples in (("Ping (gRPC floor)", ping), ("Retain (sync, full)", retain), ("Recall k=10", recall)):
        print(f"{name:<22}{statistics.median(samples):>10.2f}{percentile(samples, 0.99):>10.2f}")


if __name__ == "__main__":
    main()
