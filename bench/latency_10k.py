"""Retain and recall latency on a tenant of 10,000 memories, end to end through the client.

    python -m bench.latency_10k [--memories 10000] [--samples 500]

Starts its own server (synchronous=full, the default) in a temporary directory, fills one tenant
with RetainBatch, then times single Retains, Recalls and the no-op Ping (the gRPC floor).
"""

from __future__ import annotations

import argparse
import random

from bench.common import percentiles, running_server, timed
from mnemosyne.client import MemoryClient, RetainItem

WORDS = (
    "refund ticket customer order invoice parcel delivery account password meeting budget "
    "review finance support shipping return policy warranty discount loyalty card booth"
).split()


def sentence(rng: random.Random, i: int) -> str:
    return f"{' '.join(rng.choice(WORDS) for _ in range(8))} case {i} code RF-{rng.randint(10000, 99999)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    rng = random.Random(1)
    with running_server() as server, MemoryClient(server.target) as client:
        for start in range(0, args.memories, 1000):
            client.retain_batch(
                "bench", [RetainItem(sentence(rng, i)) for i in range(start, min(start + 1000, args.memories))]
            )
        ping = timed(lambda i: client.ping(), args.samples)
        retain = timed(lambda i: client.retain("bench", sentence(rng, 10**6 + i)), args.samples)
        recall = timed(
            lambda i: client.recall("bench", " ".join(rng.choice(WORDS) for _ in range(3)), k=10), args.samples
        )
    print(
        f"{'operation':<22}{'p50 ms':>10}{'p99 ms':>10}   (tenant of {args.memories} memories, {args.samples} samples)"
    )
    for name, samples in (("Ping (gRPC floor)", ping), ("Retain (sync, full)", retain), ("Recall k=10", recall)):
        p = percentiles(samples)
        print(f"{name:<22}{p['p50_ms']:>10.2f}{p['p99_ms']:>10.2f}")


if __name__ == "__main__":
    main()
