"""Recall latency at 1k / 10k / 100k memories in one tenant, beside Chroma on the same vectors.

    python -m bench.latency --out results/latency.json [--sizes 1000,10000,100000] [--queries 300]
    python -m bench.latency --out results/latency-minilm.json --sizes 10000 --embedder minilm

One tenant grows through the sizes (RetainBatch through the real client). At each size:

* ``server``: time inside the Recall handler (engine + response), read from the trailing metadata
  ``mnemosyne-server-time-us``; per recall mode (hybrid is the default; vector and text show the
  two paths alone), and ``hybrid_over_slower_leg``: the hybrid p50 over the slower leg's;
* ``e2e``: ``MemoryClient.recall`` wall time in this process (gRPC over loopback included);
* ``ping``: the no-op ``AdminService.Ping`` through the same client: the gRPC floor;
* ``chroma``: ``collection.query`` of an embedded ``chromadb.PersistentClient`` (cosine HNSW,
  ``ef_search`` from ``--chroma-ef``) holding the same documents with the same vectors, passed
  explicitly (made by the server's embedder, a deterministic function); ``chroma_recall`` is its
  top-10 overlap with exact (numpy) search on those vectors;
* ``embed``: the query's embedding alone, by the server's embedder in this process (the same
  model, one thread, as the server runs it), timed query by query in the same rounds: the part of
  the server's time that Chroma, given the vectors, does not spend. ``server less embed`` is the
  server p50 minus the embed p50.

``--embedder`` is the server's (and the vectors'): ``hashing`` (the default here, a deterministic
function of the text: both sides hold the same vectors) or ``minilm`` (the server's default; its
memories' vectors are made by the server and, for Chroma, by the same model here, equal to float
rounding). A tenant past the embedder's approximate-index threshold (MiniLM's 5,000) is timed once
its graph holds every row (built, or caught up at a larger size).

The phases (each mode's server time, end to end, Ping, Chroma) take turns in ``ROUNDS`` rounds,
each over its share of the queries, so a drift of the machine's speed reaches every column alike.

Also records the server's RSS and the tenant file size at each size (``bench.memory`` reports
them per memory).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf.message import Message

from bench.common import ASK_SERVER_TIME, percentiles, print_table, running_server, wait_for_graph, write_json
from bench.corpus import Corpus

TENANT = "bench-latency"
K = 10
ROUNDS = 6


def server_rss_bytes(pid: int) -> int:
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def tenant_bytes(data_dir: Path, tenant: str) -> int:
    return sum(p.stat().st_size for p in (data_dir / "tenants").glob(f"{tenant}.sqlite*"))


def timed_server_calls(
    call: grpc.UnaryUnaryMultiCallable[Any, Any], requests: Sequence[Message], metadata: tuple[tuple[str, str], ...]
) -> tuple[list[float], list[float]]:
    """(server-side seconds, wall seconds) of ``call.with_call`` for each request."""
    server, wall = [], []
    for request in requests:
        t0 = time.perf_counter()
        _, rpc = call.with_call(request, metadata=(*metadata, *ASK_SERVER_TIME), timeout=60)
        wall.append(time.perf_counter() - t0)
        trailing = dict(rpc.trailing_metadata() or ())
        server.append(float(trailing["mnemosyne-server-time-us"]) / 1e6)
    return server, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--chroma-ef", type=int, default=1000, help="Chroma hnsw ef_search")
    parser.add_argument("--no-chroma", action="store_true")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    from mnemosyne.client import MemoryClient
    from mnemosyne.engine.embedders import make_embedder
    from mnemosyne.engine.recall.settings import settings_for
    from mnemosyne.v1 import admin_pb2, memory_pb2

    corpus = Corpus()
    embedder = make_embedder(args.embedder)
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="chroma-bench-") as chroma_dir,
        running_server(embedder=args.embedder) as server,
        MemoryClient(server.target, timeout=600) as client,
    ):
        collection = None
        if not args.no_chroma:
            import chromadb

            chroma = chromadb.PersistentClient(path=chroma_dir, settings=chromadb.Settings(anonymized_telemetry=False))
            collection = chroma.create_collection(
                "bench-latency", configuration={"hnsw": {"space": "cosine", "ef_search": args.chroma_ef}}
            )
        vectors = np.zeros((0, embedder.dim), dtype=np.float32)
        have = 0
        for size in sizes:
            t0 = time.perf_counter()
            for start in range(have, size, 1000):
                texts = corpus.memories(start, min(1000, size - start))
                client.retain_batch(TENANT, texts)
                batch_vectors = embedder.embed(texts)
                vectors = np.concatenate([vectors, batch_vectors])
                if collection is not None:
                    collection.add(
                        ids=[str(start + i) for i in range(len(texts))], embeddings=batch_vectors, documents=texts
                    )
            have = size
            print(f"{size} memories loaded in {time.perf_counter() - t0:.1f} s", flush=True)

            queries = corpus.queries(size, args.queries)
            client.recall(TENANT, queries[0], k=K)  # loads the vector cache; starts a graph's build
            if size >= settings_for(embedder).ann_threshold:  # built, or caught up with this size's rows
                wait_for_graph(server, time.monotonic() + 1800, rows=size)
            for q in queries[:20]:  # warm-up
                client.recall(TENANT, q, k=K)
            row: dict[str, Any] = {"memories": size}
            modes = (
                ("hybrid", memory_pb2.RECALL_MODE_HYBRID),
                ("vector", memory_pb2.RECALL_MODE_VECTOR),
                ("text", memory_pb2.RECALL_MODE_TEXT),
            )
            query_vectors = embedder.embed(queries)
            exact = np.argsort(-(query_vectors @ vectors.T), axis=1)[:, :K]
            samples: dict[str, list[float]] = defaultdict(list)
            overlap: list[float] = []
            # The phases take turns, ROUNDS times over a slice of the queries each: the machine's
            # speed drifts by tens of percent within a minute, and a ratio of two phases measured
            # one after the other measured the drift as much as the systems.
            for turn in range(ROUNDS):
                share = queries[turn::ROUNDS]
                for mode_name, mode in modes:
                    requests = [memory_pb2.RecallRequest(tenant=TENANT, query=q, k=K, mode=mode) for q in share]
                    samples[f"server_{mode_name}"] += timed_server_calls(
                        client.memory.Recall, requests, client.call_metadata
                    )[0]
                for q in share:
                    t0 = time.perf_counter()
                    client.recall(TENANT, q, k=K)
                    samples["e2e_hybrid"].append(time.perf_counter() - t0)
                for _ in share:
                    t0 = time.perf_counter()
                    client.ping()
                    samples["ping_e2e"].append(time.perf_counter() - t0)
                for q in share:
                    t0 = time.perf_counter()
                    embedder.embed([q])
                    samples["query_embed"].append(time.perf_counter() - t0)
                if collection is not None:
                    for qv, truth in zip(query_vectors[turn::ROUNDS], exact[turn::ROUNDS]):
                        t0 = time.perf_counter()
                        answer = collection.query(query_embeddings=[qv], n_results=K)
                        samples["chroma_query"].append(time.perf_counter() - t0)
                        overlap.append(len({int(i) for i in answer["ids"][0]} & set(truth.tolist())) / K)
            for name, values in samples.items():
                row[name] = percentiles(values)
            # Issue 24's and 46's measure: the hybrid p50 over the slower of its two legs' alone.
            slower = max(row["server_vector"]["p50_ms"], row["server_text"]["p50_ms"])
            row["hybrid_over_slower_leg"] = row["server_hybrid"]["p50_ms"] / slower
            row["ping_server"] = percentiles(
                timed_server_calls(client.admin.Ping, [admin_pb2.PingRequest()] * 50, client.call_metadata)[0]
            )
            if collection is not None:
                row["chroma_recall_vs_exact"] = float(np.mean(overlap))
                row["chroma_ef_search"] = args.chroma_ef
            row["server_rss_bytes"] = server_rss_bytes(server.pid)
            row["tenant_file_bytes"] = tenant_bytes(server.data_dir, TENANT)
            results.append(row)
            print(f"  done {size}", flush=True)

    table = []
    for r in results:
        chroma = r.get("chroma_query", {})
        table.append(
            [
                r["memories"],
                r["server_hybrid"]["p50_ms"],
                r["server_hybrid"]["p99_ms"],
                r["server_vector"]["p50_ms"],
                r["server_text"]["p50_ms"],
                r["hybrid_over_slower_leg"],
                r["e2e_hybrid"]["p50_ms"],
                r["e2e_hybrid"]["p99_ms"],
                r["ping_e2e"]["p50_ms"],
                chroma.get("p50_ms", float("nan")),
                chroma.get("p99_ms", float("nan")),
                r.get("chroma_recall_vs_exact", float("nan")),
                r["server_hybrid"]["p50_ms"] / chroma["p50_ms"] if chroma else float("nan"),
                r["e2e_hybrid"]["p50_ms"] / chroma["p50_ms"] if chroma else float("nan"),
                r["query_embed"]["p50_ms"],
                (r["server_hybrid"]["p50_ms"] - r["query_embed"]["p50_ms"]) / chroma["p50_ms"]
                if chroma
                else float("nan"),
            ]
        )
    print_table(
        f"Recall latency, k=10, {embedder.name}, ms (server = in the Recall handler; e2e = through "
        "MemoryClient; ping = no-op RPC; embed = the query's embedding alone)",
        [
            "memories",
            "server p50",
            "server p99",
            "vector-only p50",
            "text-only p50",
            "hybrid/slower",
            "e2e p50",
            "e2e p99",
            "ping p50",
            "chroma p50",
            "chroma p99",
            "chroma recall",
            "server/chroma",
            "e2e/chroma",
            "embed p50",
            "server less embed/chroma",
        ],
        table,
    )
    write_json(
        args.out,
        {"benchmark": "recall-latency", "k": K, "queries": args.queries, "embedder": embedder.name, "results": results},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
