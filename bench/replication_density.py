"""What replication costs per tenant in Litestream, whether a member holds many tenants with a
bounded active set, and how long a large tenant takes to come back:

    python -m bench.replication_density --tenants 1000 --memories 100000 --out results/density.json
    python -m bench.replication_density --tenants 10000 --active 1000 --memories 0

* density: one replicating server (SeaweedFS's S3 on loopback, tests/replica_support.py). With
  ``--tenants`` above ``--active``, it first writes once to every tenant with a short idle time
  (``--replica-idle-seconds 1``: each tenant leaves Litestream once replicated), a refused write
  (REPLICATION_FULL) retried after 0.2 s, counting refusals and the most tenants registered at once; then, restarted with an idle time long enough that
  every tenant written stays registered and ``--replica-active-limit`` ``--active``, ``--active``
  tenants get one more write each (so that many are registered), Litestream's resident memory
  (VmRSS) and open descriptors are read from /proc against the same figures before, Retain's
  p50/p99 is measured with the active set full, and one write to a tenant outside it must be
  refused (REPLICATION_FULL);
* restore: one tenant of ``--memories`` memories (batches of 1,000), replicated, then restored by
  ``mnemosyne restore --from-replica --data-dir`` into an empty directory: its wall time.

Hashing embedder, loopback (a real store adds its network time to the restore).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import percentiles, print_table, replica_bucket, replicating_server, write_json
from mnemosyne.client import MemoryClient, ResourceExhaustedError, RetainItem
from tests.replica_support import litestream_pid, replica_env
from tests.support import ServerProcess, gauge

BATCH = 1000
Figures = dict[str, float | str]


def _rss_mb_and_fds(pid: int) -> tuple[float, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def _wait_caught_up(server: ServerProcess, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while gauge(server, "mnemosyne_replication_lag_seconds") != 0.0:
        if time.monotonic() > deadline:
            raise RuntimeError("replication did not catch up")
        time.sleep(0.2)


def _tenant(n: int) -> str:
    return f"d{n:05d}"


def _write_each_once(server: ServerProcess, tenants: int) -> Figures:
    """One write to each of ``tenants`` tenants, one after the other, the registered count sampled."""
    most, refused, done = 0.0, 0, threading.Event()

    def sample() -> None:
        nonlocal most
        while not done.is_set():
            most = max(most, gauge(server, "mnemosyne_replication_active_tenants"))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.monotonic()
    try:
        with MemoryClient(server.target, retries=0) as client:
            for n in range(tenants):
                while True:
                    try:
                        client.retain(_tenant(n), f"tenant {n} keeps its umbrella by the door")
                        break
                    except ResourceExhaustedError:  # the active set is full: as a client would, wait
                        refused += 1
                        time.sleep(0.2)
        _wait_caught_up(server)
    finally:
        done.set()
        sampler.join()
    return {
        "tenants_written": tenants,
        "most_registered_at_once": most,
        "writes_refused_then_retried": refused,
        "seconds_to_write_and_replicate": round(time.monotonic() - began, 1),
    }


def _active_set(server: ServerProcess, active: int) -> Figures:
    """``active`` tenants with a write each (all registered), what that costs Litestream, Retain
    with the set full, and a write outside the set refused."""
    pid = litestream_pid(server)
    assert pid is not None, "no Litestream child"
    rss_before, fds_before = _rss_mb_and_fds(pid)
    began = time.monotonic()
    with MemoryClient(server.target, retries=0) as client:
        for n in range(active):
            client.retain(_tenant(n), f"tenant {n} is active: the kettle is on")
        _wait_caught_up(server)
        written = time.monotonic() - began
        registered = gauge(server, "mnemosyne_replication_active_tenants")
        rss_after, fds_after = _rss_mb_and_fds(pid)
        retain = []
        for n in range(min(active, 500)):
            started = time.perf_counter()
            client.retain(_tenant((n * 7) % active), f"active write {n}: shelf {n % 31}")
            retain.append(time.perf_counter() - started)
        try:
            client.retain("outside-the-active-set", "one tenant too many")
            outside = "accepted"
        except ResourceExhaustedError as error:
            outside = error.reason
    figures = percentiles(retain)
    return {
        "tenants_registered": registered,
        "litestream_rss_mb_before": round(rss_before, 1),
        "litestream_rss_mb_after": round(rss_after, 1),
        "rss_mb_per_1000_tenants": round((rss_after - rss_before) * 1000 / max(registered, 1), 1),
        "descriptors_per_1000_tenants": round((fds_after - fds_before) * 1000 / max(registered, 1)),
        "seconds_to_write_and_replicate": round(written, 1),
        "retain_p50_ms_with_the_set_full": round(figures["p50_ms"], 2),
        "retain_p99_ms_with_the_set_full": round(figures["p99_ms"], 2),
        "a_write_outside_the_full_set": outside,
    }


def _restore(url: str, memories: int, into: Path) -> Figures:
    with (
        replicating_server(url, args=["--replica-idle-seconds", "3600"]) as server,
        MemoryClient(server.target) as client,
    ):
        for start in range(0, memories, BATCH):
            items = [
                RetainItem(f"big note {i}: shelf {i % 97} holds box B-{i:07d}") for i in range(start, start + BATCH)
            ]
            client.retain_batch("big", items)
        _wait_caught_up(server)
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemosyne.cli",
            "restore",
            "--from-replica",
            url,
            "--tenant",
            "big",
            "--data-dir",
            str(into),
        ],
        env={**os.environ, **replica_env()},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    return {
        "memories": memories,
        "restore_seconds": round(time.monotonic() - began, 2),
        "file_mb": round((into / "tenants" / "big.sqlite").stat().st_size / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--active", type=int, default=1000, help="--replica-active-limit, and the set filled")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results: dict[str, Figures] = {}
    with replica_bucket() as url, tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        member = Path(tmp) / "member"
        limit = ["--replica-active-limit", str(args.active)]
        if args.tenants > args.active:
            with replicating_server(url, args=["--replica-idle-seconds", "1", *limit], data_dir=member) as server:
                results["every tenant written once"] = _write_each_once(server, args.tenants)
        if args.tenants:
            flags = ["--replica-idle-seconds", "3600", *limit]
            with replicating_server(url, args=flags, data_dir=member) as server:
                results["the active set full"] = _active_set(server, min(args.tenants, args.active))
        if args.memories:
            results["restore"] = _restore(url, args.memories, Path(tmp) / "restored")
    for name, figures in results.items():
        print_table(name, ["figure", "value"], list(figures.items()))
    if args.out:
        write_json(args.out, dict(results))


if __name__ == "__main__":
    main()
