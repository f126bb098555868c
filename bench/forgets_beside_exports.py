"""How long a forget takes while exports of its tenant run back to back (docs/operations.md,
"Erasure of a memory"): one server (hashing embedder), a tenant seeded with ``--seed`` batches of
500 memories, then for ``--seconds`` two threads exporting it one export after another and one
thread retaining a memory and forgetting it, every 0.25 s. An erasure revokes the copies being
sent, so some exports end ABORTED ``COPY_REVOKED`` (counted apart). Reported: each kind's count,
p50, p90 and slowest, in seconds.

    python -m bench.forgets_beside_exports --seed 8 --seconds 40
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable

from bench.common import running_server
from mnemosyne.client import AbortedError, MemoryClient

TENANT = "exported"


def _timed_until(stop: float, call: Callable[[], object], done: list[float], aborted: list[float]) -> None:
    while time.monotonic() < stop:
        start = time.perf_counter()
        try:
            call()
        except AbortedError:
            aborted.append(time.perf_counter() - start)
        else:
            done.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=8, help="batches of 500 memories in the tenant first")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    with running_server() as server, MemoryClient(server.target) as client:
        for batch in range(args.seed):
            client.retain_batch(TENANT, [f"memory {batch}-{i}: {uuid.uuid4().hex} {i % 97}" for i in range(500)])
        stop = time.monotonic() + args.seconds
        exports: list[float] = []
        revoked: list[float] = []
        forgets: list[float] = []

        def export() -> None:
            for _ in client.export_tenant(TENANT):
                pass

        def forget() -> None:
            memory = client.retain(TENANT, f"a secret {uuid.uuid4().hex}").memory_id
            time.sleep(0.05)
            started = time.perf_counter()
            client.forget(TENANT, memory)
            forgets.append(time.perf_counter() - started)
            time.sleep(0.2)

        threads = [threading.Thread(target=_timed_until, args=(stop, export, exports, revoked)) for _ in range(2)]
        threads.append(threading.Thread(target=_timed_until, args=(stop, forget, [], [])))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for name, seconds in (("export", exports), ("export revoked", revoked), ("forget", forgets)):
        ordered = sorted(seconds) or [float("nan")]
        print(
            f"{name:15} n={len(seconds):4} p50={statistics.median(ordered):.3f} "
            f"p90={ordered[int(len(ordered) * 0.9)]:.3f} slowest={ordered[-1]:.3f} s"
        )


if __name__ == "__main__":
    main()
