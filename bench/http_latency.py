"""Recall over HTTP/JSON beside recall over gRPC, on one server with 10k memories in one tenant.

    python -m bench.http_latency --out results/http_latency.json [--size 10000] [--rounds 5] [--seconds 4]

Four cells take turns in every round, so a drift of the machine's speed reaches each alike:
gRPC (``MemoryClient.recall``, the real client) and HTTP (``POST /v1/tenants/T/memories:recall``
over one keep-alive ``http.client`` connection per client, the JSON parsed), each with 1 and
16 concurrent clients (threads of this process), each for ``--seconds``. Reported per cell: the
median over rounds of p50, p99 and calls per second. Target: HTTP p50 within 1.5x of gRPC's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
from collections.abc import Callable

from bench.common import percentiles, print_table, running_server, write_json
from bench.corpus import Corpus
from mnemosyne.client import MemoryClient

TENANT = "bench-http"
K = 10


def _grpc_caller(target: str) -> tuple[Callable[[str], object], Callable[[], None]]:
    client = MemoryClient(target)
    return (lambda query: client.recall(TENANT, query, k=K)), client.close


def _http_caller(port: int) -> tuple[Callable[[str], object], Callable[[], None]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/v1/tenants/{TENANT}/memories:recall"

    def recall(query: str) -> object:
        connection.request("POST", path, json.dumps({"query": query, "k": K}), {"content-type": "application/json"})
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body[:300]
        return json.loads(body)

    return recall, connection.close


def run_cell(
    make: Callable[[], tuple[Callable[[str], object], Callable[[], None]]],
    clients: int,
    queries: list[str],
    seconds: float,
) -> dict[str, float]:
    samples: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker(n: int) -> None:
        call, close = make()
        try:
            call(queries[n])  # warm the connection
            start.wait()
            i = n
            while time.perf_counter() < deadline[0]:
                t0 = time.perf_counter()
                call(queries[i % len(queries)])
                samples[n].append(time.perf_counter() - t0)
                i += clients
        finally:
            close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds + 0.05
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    every = [s for per in samples for s in per]
    stats = percentiles(every)
    return {"p50_ms": stats["p50_ms"], "p99_ms": stats["p99_ms"], "calls_per_s": len(every) / elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/http_latency.json")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    corpus = Corpus()
    queries = corpus.queries(args.size, 300)
    with running_server(http=True) as server:
        with MemoryClient(server.target) as client:
            for start in range(0, args.size, 1000):
                client.retain_batch(TENANT, corpus.memories(start, min(1000, args.size - start)))
        cells: dict[tuple[str, int], list[dict[str, float]]] = {
            (transport, clients): [] for clients in (1, 16) for transport in ("grpc", "http")
        }
        makers = {
            "grpc": lambda: _grpc_caller(server.target),
            "http": lambda: _http_caller(server.http_port),
        }
        for round_number in range(args.rounds):
            for (transport, clients), results in cells.items():
                results.append(run_cell(makers[transport], clients, queries, args.seconds))
            print(f"round {round_number + 1}/{args.rounds} done", flush=True)
    summary = {
        f"{transport}-{clients}": {key: statistics.median(r[key] for r in results) for key in results[0]}
        for (transport, clients), results in cells.items()
    }
    rows = []
    for clients in (1, 16):
        g, h = summary[f"grpc-{clients}"], summary[f"http-{clients}"]
        rows.append(
            [
                clients,
                g["p50_ms"],
                h["p50_ms"],
                h["p50_ms"] / g["p50_ms"],
                g["p99_ms"],
                h["p99_ms"],
                g["calls_per_s"],
                h["calls_per_s"],
            ]
        )
    print_table(
        f"Recall at {args.size} memories, median of {args.rounds} interleaved rounds of {args.seconds:g} s",
        [
            "clients",
            "gRPC p50 ms",
            "HTTP p50 ms",
            "HTTP/gRPC p50",
            "gRPC p99 ms",
            "HTTP p99 ms",
            "gRPC calls/s",
            "HTTP calls/s",
        ],
        rows,
    )
    write_json(
        args.out,
        {
            "size": args.size,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "summary": summary,
            "cells": {f"{t}-{c}": r for (t, c), r in cells.items()},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
