"""How long a tenant's WAL files grow under a writer that never pauses, and during exports of it
(docs/operations.md, "Limits and quotas"): one server (hashing embedder), a tenant seeded with
``--seed`` batches of 500 memories, then one writer (batches of 50, or single fast writes with
``--fast``) while ``--exports`` exports of the tenant run one after another. Reported: the tenant
file's and its hot-path inbox's ``-wal`` sizes, polled every 20 ms (largest before the exports,
during each, at the end), and the writes refused (``WAL_LIMIT_REACHED`` past twice the WAL's bound
while an export's copy holds its snapshot; the writer waits the refusal's retry delay).

    python -m bench.wal_growth --seed 60 --exports 3
    python -m bench.wal_growth --seed 2 --fast --seconds 20
    python -m bench.wal_growth --seed 10 --replicate --seconds 25
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import threading
import time
from pathlib import Path

from bench.common import replica_bucket, replicating_server, running_server
from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import MemoryClient, ResourceExhaustedError

TENANT = "growing"
POLL_SECONDS = 0.02
MB = 1e6


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class Watch:
    """The largest sizes of the tenant's two WAL files since the last ``reset``."""

    def __init__(self, server: ServerProcess) -> None:
        self.wal = Path(f"{server.tenant_file(TENANT)}-wal")
        self.inbox_wal = server.data_dir / "inbox" / f"{TENANT}.inbox.sqlite-wal"
        self.peak = {"tenant": 0, "inbox": 0}
        self.stop = threading.Event()

    def reset(self) -> None:
        self.peak = {"tenant": 0, "inbox": 0}

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak["tenant"] = max(self.peak["tenant"], _size(self.wal))
            self.peak["inbox"] = max(self.peak["inbox"], _size(self.inbox_wal))
            time.sleep(POLL_SECONDS)


def _writer(server: ServerProcess, args: argparse.Namespace, stop: threading.Event, counts: dict[str, int]) -> None:
    with MemoryClient(server.target, retries=0) as client:
        while not stop.is_set():
            noise = secrets.token_hex(args.item_bytes // 2)
            try:
                if args.fast:
                    client.retain(TENANT, f"fast {counts['written']} {noise}", fast=True)
                else:
                    client.retain_batch(TENANT, [f"w {counts['written']} {k} {noise}" for k in range(50)])
                counts["written"] += 1
            except ResourceExhaustedError as exc:
                counts["refused"] += 1
                time.sleep(exc.retry_after_seconds or 1.0)


def measure(server: ServerProcess, args: argparse.Namespace) -> None:
    with MemoryClient(server.target) as client:
        if args.fast:
            client.hot_path(TENANT, "enable")
        started = time.monotonic()
        for batch in range(args.seed):
            noise = secrets.token_hex(args.item_bytes // 2)
            client.retain_batch(TENANT, [f"seed {batch} {i} {noise}" for i in range(500)])
        print(f"seeded in {time.monotonic() - started:.1f} s: file {_size(server.tenant_file(TENANT)) / MB:.1f} MB")
    watch = Watch(server)
    counts = {"written": 0, "refused": 0}
    threads = [
        threading.Thread(target=watch.run),
        threading.Thread(target=_writer, args=(server, args, watch.stop, counts)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(2)
    print(
        f"before the exports: tenant WAL {watch.peak['tenant'] / MB:.1f} MB, inbox WAL {watch.peak['inbox'] / MB:.1f} MB"
    )
    with MemoryClient(server.target) as client:
        for n in range(args.exports):
            watch.reset()
            started = time.monotonic()
            sent = sum(len(getattr(part, "data", b"")) for part in client.export_tenant(TENANT))
            print(
                f"export {n}: {sent / MB:.1f} MB in {time.monotonic() - started:.2f} s; "
                f"tenant WAL at most {watch.peak['tenant'] / MB:.1f} MB meanwhile"
            )
    watch.reset()
    time.sleep(max(0.0, args.seconds - 2))
    watch.stop.set()
    for thread in threads:
        thread.join()
    print(
        f"end: {counts['written']} writes, {counts['refused']} refused; tenant file "
        f"{_size(server.tenant_file(TENANT)) / MB:.1f} MB; after the exports the tenant WAL reached "
        f"{watch.peak['tenant'] / MB:.1f} MB, the inbox WAL {watch.peak['inbox'] / MB:.1f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=20, help="batches of 500 memories written first")
    parser.add_argument("--seconds", type=float, default=20.0, help="the writer's run, besides the exports")
    parser.add_argument("--exports", type=int, default=3)
    parser.add_argument("--fast", action="store_true", help="single fast writes (the hot path) instead of batches")
    parser.add_argument("--item-bytes", type=int, default=2000, help="bytes of each memory's text")
    parser.add_argument("--replicate", action="store_true", help="replicating to SeaweedFS's S3 on loopback")
    parser.add_argument("--args", default="", help="more flags of mnemosyne serve, one string")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.replicate:
            server = stack.enter_context(
                replicating_server(stack.enter_context(replica_bucket()), args=args.args.split())
            )
        else:
            server = stack.enter_context(running_server(args=args.args.split()))
        measure(server, args)


if __name__ == "__main__":
    main()
