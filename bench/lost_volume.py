"""How long a server on a new volume takes to get back every tenant object storage holds
(engine/lost_tenants.py, docs/replication.md "Restore"): one replicating server (SeaweedFS's S3 on
loopback) writes one memory to each of ``--tenants`` tenants and waits until they are replicated;
it is SIGKILLed, its data directory deleted and started again on the empty one. Reported: the
seconds from its start until its background restore marked the data directory done, and the
tenants a second.

    python -m bench.lost_volume --tenants 200 --runs 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import replica_bucket, replicating_server
from mnemosyne.client import MemoryClient
from tests.support import gauge, wait_until

MARK = Path("tenants") / "replica-restored.json"


def one_run(url: str, tenants: int) -> float:
    """Seconds from the restarted server's start until every tenant is back."""
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-lost-") as tmp:
        data_dir = Path(tmp) / "data"
        with replicating_server(url, data_dir=data_dir) as server:
            with MemoryClient(server.target) as client:
                for i in range(tenants):
                    client.retain(f"lost{i}", f"the memory of tenant {i}")
            wait_until(lambda: gauge(server, "mnemosyne_replication_lag_seconds") == 0.0)
            server.kill()
            shutil.rmtree(data_dir)
            started = time.monotonic()
            server.start(60)
            while not (data_dir / MARK).exists():
                time.sleep(0.05)
            seconds = time.monotonic() - started
            restored = json.loads((data_dir / MARK).read_text())["restored"]
            assert restored == tenants, f"{restored} of {tenants} tenants restored"
            return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with replica_bucket() as url:  # a bucket of its own: the runs' tenants never mix
            runs.append(one_run(url, args.tenants))
        print(f"{args.tenants} tenants back in {runs[-1]:.1f} s ({args.tenants / runs[-1]:.1f} a second)", flush=True)
    median = statistics.median(runs)
    print(f"median of {len(runs)}: {median:.1f} s, {args.tenants / median:.1f} tenants a second")


if __name__ == "__main__":
    main()
