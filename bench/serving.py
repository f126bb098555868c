"""Serving under concurrency: Recall through our gRPC server beside Chroma's server, at 1 and 16 clients.

    python -m bench.serving --out results/serving.json [--memories 10000] [--seconds 3] [--rounds 3]
        [--clients 1,16] [--mode processes|threads|both] [--baseline-python ../main/.venv/bin/python]
        [--baseline-args FLAGS] [--baseline-env K=V] [--systems ours_recall,...] [--profile results/profile.txt]
    python -m bench.serving --summarize results/serving-1.json results/serving-2.json results/serving-3.json

Four servers hold the same 10k memories (bench/corpus.py), each started here on loopback:

* ``ours``: ``mnemosyne serve`` (hashing embedder), called with ``MemoryClient.recall`` (k = 10,
  hybrid, end to end: the client's conversion of the hits included);
* ``base``: with ``--baseline-python``, another installation's server (e.g. main's), the same calls
  (or, with ``--baseline-args``/``--baseline-env``, this one with other flags or variables);
* ``chroma``: Chroma's own server (``chroma run --path DIR --port P``, HTTP), called with
  ``chromadb.HttpClient`` ``collection.query`` (k = 10, the same vectors as our embedder's, passed
  explicitly, cosine HNSW at ``--chroma-ef`` ef_search, as bench/latency.py's in-process Chroma);
* ``bare``: a bare grpc.aio server of the same kind as ours (the same channel options and
  interpreter settings, one event loop) answering only ``AdminService/Ping``, which decodes the
  request and returns an empty response: the floor of a Python gRPC call here. Our own Ping, the
  same client code, is measured beside it (``ours_ping``, ``base_ping``).

Each client has its own connection (a MemoryClient, an HttpClient) and calls in a closed loop for
``--seconds``; calls/s counts the calls finished in that window, from every client. Clients are
**processes** (one each: the fair set-up, as a Python client's own GIL otherwise limits what 16
threads can send) or **threads** of one process (how the issue first measured), or both
(``--mode both``). The phases (system x clients x mode) take turns in ``--rounds`` rounds, so a
drift of the machine's speed reaches every column alike; each cell reports the median over rounds
of calls/s, p50, p99 and the server process's CPU time (user + system) per call.

``--profile FILE``: after the rounds, 16 client processes call ``--profile-system`` of ``ours`` while
py-spy (``pip install py-spy``) samples the server (``--profile-flags``, by default ``--gil``: only
the thread holding the GIL), the flat profile written to FILE (collapsed stacks beside it,
FILE.folded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.common import percentiles, print_table, running_server, write_json
from bench.corpus import Corpus

TENANT = "bench-serving"
COLLECTION = "bench-serving"
K = 10
QUERIES = 300


# -- the bare grpc.aio server ----------------------------------------------------------------------


def bare_server_main(trailer: bool = False) -> None:
    """A grpc.aio server with our options and interpreter settings, one method: AdminService/Ping
    (answered with one trailing metadata pair of its own when ``trailer``: bench/ping_floor.py)."""
    from mnemosyne.runtime.interpreter import tune_interpreter

    tune_interpreter()
    import grpc

    from mnemosyne.engine.limits import Limits
    from mnemosyne.transport.admission import AdmissionLimits
    from mnemosyne.transport.server import server_options
    from mnemosyne.v1 import admin_pb2

    async def ping(request: admin_pb2.PingRequest, context: Any) -> admin_pb2.PingResponse:
        if trailer:
            context.set_trailing_metadata((("mnemosyne-server-time-us", f"{time.perf_counter() % 1000:.1f}"),))
        return admin_pb2.PingResponse()

    async def serve() -> None:
        server = grpc.aio.server(options=server_options(Limits().max_request_bytes, AdmissionLimits()))
        handler = grpc.unary_unary_rpc_method_handler(
            ping,
            request_deserializer=admin_pb2.PingRequest.FromString,
            response_serializer=admin_pb2.PingResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("mnemosyne.v1.AdminService", {"Ping": handler})]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(json.dumps({"port": port}), flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


@contextmanager
def bare_server() -> Iterator[tuple[str, int]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.serving", "--bare-server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = json.loads(process.stdout.readline())["port"]
        yield f"127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


# -- Chroma's server -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def chroma_server(path: Path) -> Iterator[tuple[int, int]]:
    import chromadb

    port = _free_port()
    chroma = Path(sys.executable).with_name("chroma")
    log = open(path.parent / "chroma.log", "w")
    process = subprocess.Popen(
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    log.close()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port, settings=_chroma_settings()).heartbeat()
                break
            except Exception as exc:
                if process.poll() is not None or time.monotonic() > deadline:
                    log_text = (path.parent / "chroma.log").read_text()[-2000:]
                    raise RuntimeError(f"chroma run did not start: {log_text}") from exc
                time.sleep(0.2)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def _chroma_settings() -> Any:
    import chromadb

    return chromadb.Settings(anonymized_telemetry=False)


# -- clients: one per (slot, system), in a worker process -------------------------------------------


class Callers:
    """What a client slot calls, per system; clients made on first use and kept (warm connections)."""

    def __init__(self, targets: dict[str, Any]) -> None:
        from mnemosyne.engine.embedder import HashingEmbedder

        self.targets = targets
        self.queries = Corpus().queries(targets["memories"], QUERIES)
        self.vectors = HashingEmbedder().embed(self.queries)
        self._made: dict[tuple[int, str], Callable[[int], object]] = {}
        self._lock = threading.Lock()

    def caller(self, slot: int, system: str) -> Callable[[int], object]:
        with self._lock:
            made = self._made.get((slot, system))
            if made is None:
                made = self._made[(slot, system)] = self._make(system)
            return made

    def _make(self, system: str) -> Callable[[int], object]:
        from mnemosyne.client import MemoryClient
        from mnemosyne.v1 import admin_pb2

        name, _, what = system.partition("_")
        if name == "chroma":
            import chromadb

            collection = chromadb.HttpClient(
                host="127.0.0.1", port=self.targets["chroma"], settings=_chroma_settings()
            ).get_collection(COLLECTION)
            vectors = self.vectors
            return lambda i: collection.query(query_embeddings=[vectors[i % len(vectors)]], n_results=K)
        client = MemoryClient(self.targets[name], timeout=60)
        if what == "ping":
            ping, request, metadata = client.admin.Ping, admin_pb2.PingRequest(), client.call_metadata
            return lambda i: ping(request, metadata=metadata, timeout=60)
        queries = self.queries
        return lambda i: client.recall(TENANT, queries[i % len(queries)], k=K)


def closed_loop(call: Callable[[int], object], offset: int, start_at: float, seconds: float) -> tuple[int, list[float]]:
    """Call back to back from ``start_at`` (time.time()) for ``seconds``: (calls finished in the
    window, each call's latency)."""
    while time.time() < start_at:
        time.sleep(0.0005)
    end = start_at + seconds
    latencies = []
    i = offset
    while True:
        t0 = time.perf_counter()
        call(i)
        latencies.append(time.perf_counter() - t0)
        i += 1
        if time.time() >= end:
            return len(latencies), latencies


def in_threads(
    callers: Callers, system: str, threads: int, first: int, start_at: float, seconds: float
) -> tuple[int, list[float], float]:
    """``threads`` clients (slots ``first``...) calling ``system`` in closed loops: (calls, latencies,
    this process's CPU seconds meanwhile)."""
    results: list[tuple[int, list[float]]] = [(0, [])] * threads
    for slot in range(first, first + threads):  # made before the clock starts
        callers.caller(slot, system)
    cpu = time.process_time()

    def run(n: int) -> None:
        slot = first + n
        results[n] = closed_loop(callers.caller(slot, system), slot * 17, start_at, seconds)

    pool = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(r[0] for r in results), [x for r in results for x in r[1]], time.process_time() - cpu


def worker_main(conn: multiprocessing.connection.Connection, targets: dict[str, Any]) -> None:
    """A client process: for each command (system, threads, first slot, start_at, seconds), that many
    threads call in closed loops; sends back (calls, latencies)."""
    callers = Callers(targets)
    conn.send("ready")
    while (command := conn.recv()) is not None:
        conn.send(in_threads(callers, *command))


class Clients:
    """``most`` client processes (processes mode uses n of them, one thread each; threads mode the
    first, with n threads)."""

    def __init__(self, most: int, targets: dict[str, Any]) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns = []
        self._processes = []
        for _ in range(most):
            mine, theirs = context.Pipe()
            process = context.Process(target=worker_main, args=(theirs, targets), daemon=True)
            process.start()
            self._conns.append(mine)
            self._processes.append(process)
        for conn in self._conns:
            assert conn.recv() == "ready"

    def run(self, system: str, clients: int, mode: str, seconds: float) -> dict[str, float]:
        start_at = time.time() + 0.3
        if mode == "threads":
            commands = [(self._conns[0], (system, clients, 0, start_at, seconds))]
        else:
            commands = [(self._conns[n], (system, 1, n, start_at, seconds)) for n in range(clients)]
        for conn, command in commands:
            conn.send(command)
        calls, latencies, cpu = 0, [], 0.0
        for conn, _ in commands:
            n, values, seconds_of_cpu = conn.recv()
            calls += n
            latencies += values
            cpu += seconds_of_cpu
        return {"calls_per_s": calls / seconds, "client_cpu_ms": 1000 * cpu / max(calls, 1), **percentiles(latencies)}

    def close(self) -> None:
        for conn in self._conns:
            conn.send(None)
        for process in self._processes:
            process.join(timeout=10)


# -- loading ----------------------------------------------------------------------------------------------


def load(memories: int, ours: list[str], chroma_port: int | None, ef_search: int) -> None:
    import chromadb

    from mnemosyne.client import MemoryClient
    from mnemosyne.engine.embedder import HashingEmbedder

    corpus, embedder = Corpus(), HashingEmbedder()
    collection = (
        chromadb.HttpClient(host="127.0.0.1", port=chroma_port, settings=_chroma_settings()).create_collection(
            COLLECTION, configuration={"hnsw": {"space": "cosine", "ef_search": ef_search}}
        )
        if chroma_port is not None
        else None
    )
    with ExitStack() as stack:
        clients = [stack.enter_context(MemoryClient(target, timeout=600)) for target in ours]
        for start in range(0, memories, 1000):
            texts = corpus.memories(start, min(1000, memories - start))
            for client in clients:
                client.retain_batch(TENANT, texts)
            if collection is not None:
                collection.add(
                    ids=[str(start + i) for i in range(len(texts))], embeddings=embedder.embed(texts), documents=texts
                )
        for client in clients:  # the first recall loads the vector cache
            for q in corpus.queries(memories, 20):
                client.recall(TENANT, q, k=K)


# -- the profile ---------------------------------------------------------------------------------------------


def profile(clients: Clients, system: str, pid: int, seconds: float, out: Path, flags: list[str]) -> None:
    """py-spy samples the server (the thread holding the GIL) while 16 client processes recall."""
    folded = out.with_name(out.name + ".folded")
    spy = subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "250",
            *flags,
            "--format",
            "raw",
            "--output",
            str(folded),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    clients.run(system, 16, "processes", seconds)
    spy.wait(timeout=60)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [
        f"py-spy {' '.join(flags)}, {total} samples at 250/s over {seconds:g} s, 16 client processes calling {system}",
        "",
    ]
    lines += ["own time (the frame running):"] + [f"{100 * n / total:6.2f}%  {f}" for f, n in own.most_common(40)]
    lines += ["", "inclusive:"] + [f"{100 * n / total:6.2f}%  {f}" for f, n in inclusive.most_common(60)]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


# -- main -------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--mode", default="processes", choices=["processes", "threads", "both"])
    parser.add_argument("--chroma-ef", type=int, default=1000, help="Chroma hnsw ef_search")
    parser.add_argument("--baseline-python", help="also serve from this interpreter's installation (e.g. main's)")
    parser.add_argument("--baseline-args", default="", help="the baseline is this installation with these flags")
    parser.add_argument("--baseline-env", default="", help="...and these environment variables (K=V K=V)")
    parser.add_argument("--server-args", default="", help="extra flags of our server (not the baseline's)")
    parser.add_argument("--systems", default="", help="only these systems (comma-separated)")
    parser.add_argument("--profile", type=Path, help="py-spy profile of our server at 16 clients, to this file")
    parser.add_argument("--profile-flags", default="--gil", help="py-spy record's flags (e.g. '--native --idle')")
    parser.add_argument("--profile-system", default="ours_recall", choices=["ours_recall", "ours_ping"])
    parser.add_argument("--summarize", nargs="+", type=Path, help="print the median of these runs' ratios, and stop")
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.bare_server:
        bare_server_main()
        return 0
    if args.summarize:
        summarize(args.summarize)
        return 0
    if args.out is None:
        parser.error("--out is required")
    counts = [int(c) for c in args.clients.split(",")]
    modes = ["processes", "threads"] if args.mode == "both" else [args.mode]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-serving-")))
        ours = stack.enter_context(running_server(args=args.server_args.split()))
        targets: dict[str, Any] = {"memories": args.memories, "ours": ours.target}
        pids = {"ours": ours.pid}
        if args.baseline_python or args.baseline_args or args.baseline_env:
            base = stack.enter_context(
                running_server(
                    python=args.baseline_python,
                    args=args.baseline_args.split(),
                    env=dict(kv.split("=", 1) for kv in args.baseline_env.split()),
                )
            )
            targets["base"], pids["base"] = base.target, base.pid
        systems = ["ours_recall", *(["base_recall"] if "base" in targets else []), "chroma_query"]
        systems += ["ours_ping", *(["base_ping"] if "base" in targets else []), "bare_ping"]
        if args.systems:
            systems = [s for s in systems if s in args.systems.split(",")]
        if "chroma_query" in systems:
            targets["chroma"], pids["chroma"] = stack.enter_context(chroma_server(tmp / "chroma"))
        if "bare_ping" in systems:
            targets["bare"], pids["bare"] = stack.enter_context(bare_server())
        t0 = time.perf_counter()
        load(
            args.memories,
            [t for n, t in targets.items() if n in ("ours", "base")],
            targets.get("chroma"),
            args.chroma_ef,
        )
        print(f"{args.memories} memories loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        clients = Clients(max(counts), targets)
        stack.callback(clients.close)
        for system in systems:  # warm-up: every connection of every slot
            for mode in modes:
                clients.run(system, max(counts), mode, 0.3)
        cells: dict[tuple[str, str, int], list[dict[str, float]]] = defaultdict(list)
        for turn in range(args.rounds):
            order = systems if turn % 2 == 0 else systems[::-1]
            for mode in modes:
                for n in counts:
                    for system in order:
                        server = psutil.Process(pids[system.partition("_")[0]])
                        before = sum(server.cpu_times()[:2])
                        cell = clients.run(system, n, mode, args.seconds)
                        # The server's CPU per call (the window plus the 0.3 s lead-in, when it is idle).
                        cell["server_cpu_ms_per_call"] = (
                            1e3 * (sum(server.cpu_times()[:2]) - before) / (cell["calls_per_s"] * args.seconds)
                        )
                        cells[(mode, system, n)].append(cell)
            print(f"round {turn + 1} of {args.rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
        if args.profile is not None:
            profile(
                clients,
                args.profile_system,
                ours.pid,
                2 * args.seconds,
                args.profile,
                args.profile_flags.split(),
            )

    def median(values: list[dict[str, float]], key: str) -> float:
        return float(np.median([v[key] for v in values]))

    results: dict[str, dict[str, Any]] = {
        f"{mode}/{system}/{n}": {
            "calls_per_s": median(v, "calls_per_s"),
            "p50_ms": median(v, "p50_ms"),
            "p99_ms": median(v, "p99_ms"),
            "server_cpu_ms_per_call": median(v, "server_cpu_ms_per_call"),
            "client_cpu_ms": median(v, "client_cpu_ms"),
            "rounds": v,
        }
        for (mode, system, n), v in cells.items()
    }
    for mode in modes:
        print_table(
            f"{args.memories} memories, k={K}, clients as {mode}, {args.seconds:g} s per cell, median of {args.rounds} rounds",
            [
                "system",
                *[f"{n}: calls/s" for n in counts],
                *[f"{n}: p50 / p99 ms" for n in counts],
                *[f"{n}: server CPU ms/call" for n in counts],
                *[f"{n}: client CPU ms/call" for n in counts],
            ],
            [
                [
                    system,
                    *[results[f"{mode}/{system}/{n}"]["calls_per_s"] for n in counts],
                    *[
                        f"{results[f'{mode}/{system}/{n}']['p50_ms']:.2f} / {results[f'{mode}/{system}/{n}']['p99_ms']:.2f}"
                        for n in counts
                    ],
                    *[results[f"{mode}/{system}/{n}"]["server_cpu_ms_per_call"] for n in counts],
                    *[results[f"{mode}/{system}/{n}"]["client_cpu_ms"] for n in counts],
                ]
                for system in systems
            ],
        )
        ratios = ratios_of(results, mode, counts)
        for name, value in ratios.items():
            print(f"  {name}: {value:.3f}")
        results[f"{mode}/ratios"] = ratios
    write_json(
        args.out,
        {
            "benchmark": "serving",
            "memories": args.memories,
            "k": K,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "chroma_ef_search": args.chroma_ef,
            "results": results,
        },
    )
    return 0


def summarize(paths: list[Path]) -> None:
    """The median over runs of each ratio (and each cell's calls/s and p50/p99), per mode."""
    runs = [json.loads(path.read_text())["results"] for path in paths]
    for key in sorted(k for k in runs[0] if k.endswith("/ratios")):
        print(f"\n{key.removesuffix('/ratios')}: median of {len(runs)} runs (each run's values)")
        for name in runs[0][key]:
            values = [run[key][name] for run in runs]
            print(f"  {name}: {np.median(values):.3f}  ({', '.join(f'{v:.3f}' for v in values)})")
    cells = sorted(k for k in runs[0] if not k.endswith("/ratios"))
    print_table(
        f"median of {len(runs)} runs",
        ["cell", "calls/s", "p50 ms", "p99 ms", "server CPU ms/call", "client CPU ms/call"],
        [
            [
                cell,
                *(
                    float(np.median([run[cell].get(m, float("nan")) for run in runs]))
                    for m in ("calls_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_call", "client_cpu_ms")
                ),
            ]
            for cell in cells
        ],
    )


def ratios_of(results: dict[str, Any], mode: str, counts: list[int]) -> dict[str, float]:
    """The targets' ratios, from one mode's cells."""
    lo, hi = min(counts), max(counts)
    out = {}

    def cell(system: str, n: int) -> dict[str, float] | None:
        return results.get(f"{mode}/{system}/{n}")

    for name in ("ours", "base"):
        ours_hi, ours_lo, chroma_hi, chroma_lo = (
            cell(f"{name}_recall", hi),
            cell(f"{name}_recall", lo),
            cell("chroma_query", hi),
            cell("chroma_query", lo),
        )
        if ours_hi and chroma_hi and ours_lo and chroma_lo:
            out[f"{name}: calls/s at {hi} / chroma's"] = ours_hi["calls_per_s"] / chroma_hi["calls_per_s"]
            out[f"{name}: calls/s at {hi} / at {lo}"] = ours_hi["calls_per_s"] / ours_lo["calls_per_s"]
            out[f"{name}: p99 at {hi} / chroma's"] = ours_hi["p99_ms"] / chroma_hi["p99_ms"]
            out[f"{name}: e2e p50 at {lo} / chroma's"] = ours_lo["p50_ms"] / chroma_lo["p50_ms"]
        ping, bare = cell(f"{name}_ping", lo), cell("bare_ping", lo)
        if ping and bare:
            out[f"{name}: ping p50 at {lo} / bare grpc.aio's"] = ping["p50_ms"] / bare["p50_ms"]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
