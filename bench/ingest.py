"""Ingest throughput: synchronous Retain, RetainBatch, hot-path enqueue + Flush, Chroma add.

    python -m bench.ingest --out results/ingest.json [--items 2000] [--synchronous full|normal]

The same texts go through each path, each into a fresh tenant of one real server (and a fresh
Chroma collection), timed from this process through the real client:

* ``retain``: one ``Retain`` per item, one after the other (each commits before it returns);
* ``retain_batch``: ``RetainBatch`` of ``--batch`` items (one transaction per batch);
* ``hot_path``: ``Retain(fast=True)`` on a tenant whose hot path is enabled, then one ``Flush``:
  enqueue time per item (and its server-side p99 from trailing metadata when the server sends it)
  and the total including the Flush. Skipped, with a note, on a server without the hot path;
* ``chroma_add``: ``collection.add`` of the same items in batches of ``--batch`` with the same
  vectors passed explicitly (embedding time is not counted for Chroma; Mnemosyne's rows include
  its own embedding and extraction).

Durability: the server runs with ``--synchronous`` (FULL by default: fsync at each commit).
Chroma's embedded store uses SQLite in WAL mode with its own default setting and no per-add fsync
control; the JSON records both.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from bench.common import ASK_SERVER_TIME, percentiles, print_table, running_server, write_json
from bench.corpus import Corpus

if TYPE_CHECKING:
    from mnemosyne.client import MemoryClient

Row = dict[str, Any]  # a row of the table (and of the JSON written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--single-items", type=int, default=500, help="items for the one-by-one Retain row")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--synchronous", default="full", choices=["full", "normal"])
    parser.add_argument("--no-chroma", action="store_true")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    from mnemosyne.client import MemoryClient
    from mnemosyne.engine.embedder import HashingEmbedder

    corpus = Corpus(seed=23)
    texts = corpus.memories(0, args.items)
    rows: dict[str, Row] = {}

    def measure(name: str, items: int, run: Callable[[], Row | None]) -> None:
        t0 = time.perf_counter()
        extra = run()
        if extra is not None and extra.get("skipped"):
            rows[name] = extra
            return
        elapsed = time.perf_counter() - t0
        rows[name] = {
            "items": items,
            "seconds": elapsed,
            "items_per_s": items / elapsed,
            "us_per_item": elapsed / items * 1e6,
            **(extra or {}),
        }

    with (
        running_server(args=["--synchronous", args.synchronous]) as server,
        MemoryClient(server.target, timeout=600) as client,
    ):

        def single() -> None:
            for text in texts[: args.single_items]:
                client.retain("ingest-single", text)

        def batch() -> None:
            for start in range(0, len(texts), args.batch):
                client.retain_batch("ingest-batch", texts[start : start + args.batch])

        def hot_path() -> Row | None:
            return _hot_path(client, texts[: args.single_items])

        measure("retain", args.single_items, single)
        measure("retain_batch", len(texts), batch)
        measure("hot_path_enqueue_flush", args.single_items, hot_path)

    if not args.no_chroma:
        import chromadb

        vectors = HashingEmbedder().embed(texts)
        with tempfile.TemporaryDirectory(prefix="chroma-ingest-") as tmp:
            chroma = chromadb.PersistentClient(path=tmp, settings=chromadb.Settings(anonymized_telemetry=False))
            collection = chroma.create_collection("bench-ingest", configuration={"hnsw": {"space": "cosine"}})

            def chroma_add() -> None:
                for start in range(0, len(texts), args.batch):
                    collection.add(
                        ids=[str(i) for i in range(start, min(start + args.batch, len(texts)))],
                        embeddings=vectors[start : start + args.batch],
                        documents=texts[start : start + args.batch],
                    )

            measure("chroma_add", len(texts), chroma_add)

    single_us = rows["retain"]["us_per_item"]
    table = []
    for name, row in rows.items():
        if row.get("skipped"):
            table.append([name, "-", "-", "-", "-", row["skipped"]])
            continue
        note = row.get("note", "")
        table.append([name, row["items"], row["items_per_s"], row["us_per_item"], single_us / row["us_per_item"], note])
    print_table(
        f"Ingest (server synchronous={args.synchronous.upper()}, batches of {args.batch})",
        ["path", "items", "items/s", "µs/item", "× single Retain", "note"],
        table,
    )
    write_json(
        args.out,
        {
            "benchmark": "ingest",
            "synchronous": args.synchronous.upper(),
            "batch": args.batch,
            "chroma_durability": "chromadb PersistentClient defaults (SQLite WAL)",
            "rows": rows,
            "batch_over_single": single_us / rows["retain_batch"]["us_per_item"],
        },
    )
    return 0


def _hot_path(client: MemoryClient, texts: list[str]) -> Row:
    """Enqueue every text with fast=True, then Flush; {"skipped": why} without a hot path."""
    from mnemosyne.v1 import hot_path_pb2, hot_path_pb2_grpc, memory_pb2

    stub = hot_path_pb2_grpc.HotPathServiceStub(client.channel)
    tenant = "ingest-hot"
    try:
        stub.Enable(hot_path_pb2.HotPathRequest(tenant=tenant), metadata=client.call_metadata, timeout=30)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return {"skipped": "this server has no hot path (HotPathService answers UNIMPLEMENTED)"}
        raise
    enqueue, server = [], []
    for text in texts:
        t0 = time.perf_counter()
        _, rpc = client.memory.Retain.with_call(
            memory_pb2.RetainRequest(tenant=tenant, text=text, fast=True),
            metadata=(*client.call_metadata, *ASK_SERVER_TIME),
            timeout=60,
        )
        enqueue.append(time.perf_counter() - t0)
        trailing = dict(rpc.trailing_metadata() or ())
        if "mnemosyne-server-time-us" in trailing:
            server.append(float(trailing["mnemosyne-server-time-us"]) / 1e6)
    t0 = time.perf_counter()
    stub.Flush(
        hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=600), metadata=client.call_metadata, timeout=660
    )
    flush_s = time.perf_counter() - t0
    return {
        "enqueue": percentiles(enqueue),
        "enqueue_server": percentiles(server) if server else None,
        "flush_seconds": flush_s,
        "note": f"enqueue p50 {np.percentile(enqueue, 50) * 1e3:.2f} ms, flush {flush_s:.2f} s",
    }


if __name__ == "__main__":
    raise SystemExit(main())
