"""RetainBatch vs single Retains: per-item cost and speed-up, under the same durability setting.

    python bench/ingest_ratio.py [--items 2000] [--batch 100] [--synchronous full|normal] [--mode engine|grpc|both]

``engine`` measures the server-side write path in process (Engine, no network); ``grpc`` goes
through a real server process and the client, as an application would. Both write synchronously
(no hot path), each memory in a fresh tenant, so the two sides do the same work per item.
Prints absolute microseconds per item and the ratio (single / batch).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def texts(n: int, tag: str) -> list[str]:
    return [f"{tag} item {i}: order ORD-{i:06d} ships {i % 9 + 1} boxes to depot D{i % 13}" for i in range(n)]


def per_item_us(
    retain: Callable[[str], object], retain_batch: Callable[[list[str]], object], items: int, batch: int
) -> tuple[float, float]:
    """(µs per item one by one, µs per item in batches), each into its own tenant's texts."""
    start = time.perf_counter()
    for text in texts(items, "single"):
        retain(text)
    single_us = (time.perf_counter() - start) / items * 1e6
    batched = texts(items, "batched")
    start = time.perf_counter()
    for i in range(0, items, batch):
        retain_batch(batched[i : i + batch])
    return single_us, (time.perf_counter() - start) / items * 1e6


def bench_engine(items: int, batch: int, synchronous: str) -> tuple[float, float]:
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.types import RetainItem

    with tempfile.TemporaryDirectory() as d:
        engine = Engine(EngineConfig(data_dir=Path(d), synchronous=synchronous))
        try:
            return per_item_us(
                lambda text: engine.retain("single", RetainItem(text)),
                lambda chunk: engine.retain_batch("batched", [RetainItem(t) for t in chunk]),
                items,
                batch,
            )
        finally:
            engine.close()


def bench_grpc(items: int, batch: int, synchronous: str) -> tuple[float, float]:
    from mnemosyne.cli.server_process import ServerProcess
    from mnemosyne.client import MemoryClient

    with tempfile.TemporaryDirectory() as d:
        server = ServerProcess(Path(d) / "data", args=["--synchronous", synchronous]).start()
        try:
            with MemoryClient(server.target, timeout=600) as client:
                return per_item_us(
                    lambda text: client.retain("single", text, request_id=uuid.uuid4().hex),
                    lambda chunk: client.retain_batch("batched", chunk),
                    items,
                    batch,
                )
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--synchronous", choices=["full", "normal"], default="full")
    parser.add_argument("--mode", choices=["engine", "grpc", "both"], default="both")
    args = parser.parse_args()
    modes = ["engine", "grpc"] if args.mode == "both" else [args.mode]
    for mode in modes:
        run = bench_engine if mode == "engine" else bench_grpc
        single_us, batch_us = run(args.items, args.batch, args.synchronous.upper())
        print(
            f"{mode:6s} synchronous={args.synchronous} items={args.items} batch={args.batch}: "
            f"single {single_us:8.1f} us/item, batch {batch_us:8.1f} us/item, speed-up {single_us / batch_us:5.1f}x"
        )


if __name__ == "__main__":
    main()
