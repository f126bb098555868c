"""What replication costs per tenant in Litestream, and how long a large tenant takes to come back:

    python -m bench.replication_density --tenants 1000 --memories 100000 --out results/density.json

* density: one replicating server (SeaweedFS's S3 on loopback, tests/replica_support.py) with an
  idle time long enough that every tenant written stays registered; ``--tenants`` tenants each
  get one synchronous write, then Litestream's resident memory (VmRSS) and open descriptors are
  read from /proc, against the same figures before the first write;
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
import time
from pathlib import Path

from bench.common import print_table, write_json
from mnemosyne.client import MemoryClient, RetainItem
from tests.replica_support import ObjectStorage, replica_env
from tests.support import ServerProcess, gauge
from tests.test_replication import litestream_pid

BATCH = 1000


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


def _density(server: ServerProcess, tenants: int) -> dict[str, float]:
    pid = litestream_pid(server)
    assert pid is not None, "no Litestream child"
    rss_before, fds_before = _rss_mb_and_fds(pid)
    began = time.monotonic()
    with MemoryClient(server.target) as client:
        for n in range(tenants):
            client.retain(f"d{n:05d}", f"tenant {n} keeps its umbrella by the door")
    _wait_caught_up(server)
    written = time.monotonic() - began
    registered = gauge(server, "mnemosyne_replication_active_tenants")
    rss_after, fds_after = _rss_mb_and_fds(pid)
    return {
        "tenants_registered": registered,
        "litestream_rss_mb_before": round(rss_before, 1),
        "litestream_rss_mb_after": round(rss_after, 1),
        "rss_mb_per_1000_tenants": round((rss_after - rss_before) * 1000 / max(registered, 1), 1),
        "descriptors_per_1000_tenants": round((fds_after - fds_before) * 1000 / max(registered, 1)),
        "seconds_to_write_and_replicate": round(written, 1),
    }


def _restore(server: ServerProcess, url: str, memories: int, into: Path) -> dict[str, float]:
    with MemoryClient(server.target) as client:
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
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        storage = ObjectStorage(Path(tmp) / "s3").start()
        try:
            url = storage.url(storage.new_bucket())
            limit = str(max(args.tenants + 10, 1000))
            flags = ["--replica-url", url, "--replica-idle-seconds", "3600", "--replica-active-limit", limit]
            server = ServerProcess(Path(tmp) / "member", env=replica_env(), args=flags, metrics=True)
            server.start(timeout=120)
            try:
                results: dict[str, dict[str, float]] = {}
                if args.tenants:
                    results["density"] = _density(server, args.tenants)
                if args.memories:
                    results["restore"] = _restore(server, url, args.memories, Path(tmp) / "restored")
            finally:
                server.stop()
        finally:
            storage.stop()
    for name, figures in results.items():
        print_table(name, ["figure", "value"], list(figures.items()))
    if args.out:
        write_json(args.out, dict(results))


if __name__ == "__main__":
    main()
