"""Moving tenants (docs/scale-out.md, "Moving tenants"): how long a move takes, and how long the
tenant's writes are unavailable, for one large tenant and for many small ones.

    python -m bench.moves --memories 100000 --small 1000 --parallel 4 --out results/moves.json

Two members (m0, m1) run as child processes; the client is this process. Each tenant is filled on
m0 (its owner by the list), then moved to m1 with ``MoveTenant`` (what ``mnemosyne rebalance``
calls), while a writer retains into the large tenant in a loop, each write repeated with its
request id until acknowledged: the longest gap between two acknowledged writes is the
write-unavailability window as a client sees it (fence to activation, plus its retry delay).

* ``large``: one tenant of ``--memories`` memories (filled in batches of 100);
* ``small``: ``--small`` tenants of 5 memories each, moved ``--parallel`` at a time: the total
  time and each move's duration (each tenant is write-unavailable at most that long).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import print_table, write_json
from mnemosyne.cli.server_process import LocalMembers
from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.store.membership import owner_of


def _tenants_of_m0(prefix: str, count: int) -> list[str]:
    found: list[str] = []
    i = 0
    while len(found) < count:
        tenant = f"{prefix}-{i}"
        if owner_of(tenant, ["m0", "m1"]) == "m0":
            found.append(tenant)
        i += 1
    return found


def _fill(client: MemoryClient, tenant: str, memories: int) -> None:
    for start in range(0, memories, 100):
        items = [
            f"{tenant} record {n}: shipment {n % 977} left depot {n % 31} on day {n % 365}"
            for n in range(start, min(memories, start + 100))
        ]
        client.retain_batch(tenant, items)


def _window(members: LocalMembers, tenant: str, stop: threading.Event, gaps: list[float]) -> None:
    """Acknowledged writes into ``tenant`` in a loop; the longest gap between two of them."""
    with MemoryClient("", members=members.members, retries=0) as client:
        last = time.monotonic()
        while not stop.is_set():
            request_id = uuid.uuid4().hex
            while True:
                try:
                    client.retain(tenant, f"during the move {request_id}", request_id=request_id)
                    break
                except MnemosyneClientError:
                    time.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--out", default="results/moves.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-moves-") as root:
        members = LocalMembers(Path(root), 2).start()
        try:
            with MemoryClient("", members=members.members, timeout=600) as client:
                (large,) = _tenants_of_m0("large", 1)
                started = time.monotonic()
                _fill(client, large, args.memories)
                print(f"filled {large} with {args.memories} memories in {time.monotonic() - started:.0f} s")
                small = _tenants_of_m0("small", args.small)
                for tenant in small:
                    client.retain_batch(tenant, [f"{tenant} note {n}: the ferry leaves at {n}" for n in range(5)])
                print(f"filled {len(small)} small tenants")
                stop, gaps = threading.Event(), list[float]()
                writer = threading.Thread(target=_window, args=(members, large, stop, gaps))
                writer.start()
                time.sleep(2.0)
                started = time.monotonic()
                result = client.move_tenant(large, "m1", member="m0")
                large_seconds = time.monotonic() - started
                time.sleep(2.0)
                stop.set()
                writer.join()
                durations: list[float] = []

                def move(tenant: str) -> None:
                    began = time.monotonic()
                    client.move_tenant(tenant, "m1", member="m0")
                    durations.append(time.monotonic() - began)

                started = time.monotonic()
                with ThreadPoolExecutor(args.parallel) as pool:
                    list(pool.map(move, small))
                small_seconds = time.monotonic() - started
        finally:
            members.stop()
    rows = [
        ["large: one tenant", args.memories, f"{result.bytes / 1e6:.1f} MB", large_seconds, max(gaps)],
        [
            f"small: {args.small} tenants, {args.parallel} at a time",
            5 * args.small,
            "-",
            small_seconds,
            f"median {statistics.median(durations):.3f}, max {max(durations):.3f}",
        ],
    ]
    print_table("moves (seconds)", ["what", "memories", "sent", "move s", "write-unavailable s"], rows)
    write_json(
        args.out,
        {
            "large": {"memories": args.memories, "bytes": result.bytes, "seconds": large_seconds, "window": max(gaps)},
            "small": {
                "tenants": args.small,
                "parallel": args.parallel,
                "seconds": small_seconds,
                "move_median": statistics.median(durations),
                "move_max": max(durations),
            },
        },
    )


if __name__ == "__main__":
    main()
