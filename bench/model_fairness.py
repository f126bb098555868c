"""A core for the reads: another tenant's recalls while a tenant's batches of long texts reach the
default embedder's model (docs/fairness.md#a-core-for-the-reads).

    python -m bench.model_fairness --out results/model-fairness.json [--old-python PATH]
                                   [--rounds 2] [--memories 2000] [--seconds 10]

Each round starts a server on the default embedder (this Python's installation, and with
``--old-python`` that interpreter's, alternately) and gives tenant B ``--memories`` memories. B
then recalls at 50 calls a second, open loop (a call starts on schedule whatever the previous
one did), for 6 s alone ("quiet"), then for ``--seconds`` while tenant A sends RetainBatch calls
of 100 look-alike 32 KB texts from two threads ("A writing", measured from 2 s after A starts, when
its first texts reach the model). The figures are B's recall p50 and p99 in ms, per round.
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bench.common import percentiles, print_table, running_server, write_json
from bench.corpus import Corpus
from mnemosyne.client import MemoryClient

RATE = 50.0
QUIET_SECONDS = 6.0
LOOKALIKE_ITEMS = 100
LOOKALIKE_CHARS = 32_000


def recalls(client: MemoryClient, queries: list[str], seconds: float) -> dict[str, float]:
    """B's recalls at RATE a second for ``seconds``, open loop: their p50 and p99 in ms."""
    took: list[Future[float]] = []

    def one(query: str) -> float:
        began = time.perf_counter()
        client.recall("b", query, k=10, consistency_token="")
        return time.perf_counter() - began

    with ThreadPoolExecutor(64) as pool:
        start = time.perf_counter()
        n = 0
        while (due := start + n / RATE) < start + seconds:
            time.sleep(max(0.0, due - time.perf_counter()))
            took.append(pool.submit(one, queries[n % len(queries)]))
            n += 1
    figures = percentiles([f.result() for f in took])
    return {"p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"]}


def one_round(python: str | None, memories: int, seconds: float) -> dict[str, Any]:
    corpus = Corpus()
    texts = corpus.memories(0, memories)
    base = " ".join(corpus.memories(memories, 1200))[:LOOKALIKE_CHARS]
    with running_server(embedder="minilm", python=python) as server, MemoryClient(server.target, timeout=120) as b:
        for start in range(0, len(texts), 500):
            b.retain_batch("b", texts[start : start + 500])
        # A exists before its batches, as in the runs of docs/fairness.md (the version before
        # did a tenant's first write under its opening lock: its first batches took turns).
        b.retain("a", "a first memory of tenant A")
        queries = [text[:60] for text in texts[:200]]
        quiet = recalls(b, queries, QUIET_SECONDS)
        stop = threading.Event()
        batches = [0]

        def write(thread: int) -> None:
            with MemoryClient(server.target, timeout=600, retries=0) as a:
                n = 0
                while not stop.is_set():
                    items = [f"look-alike {thread}-{n}-{j}: {base}"[:LOOKALIKE_CHARS] for j in range(LOOKALIKE_ITEMS)]
                    a.retain_batch("a", items)
                    batches[0] += 1
                    n += 1

        writers = [threading.Thread(target=write, args=(t,), daemon=True) for t in range(2)]
        for writer in writers:
            writer.start()
        time.sleep(2.0)
        writing = recalls(b, queries, seconds)
        stop.set()
    return {"quiet": quiet, "a_writing": writing, "a_batches_done": batches[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-python", help="a Python whose installed mnemosyne is the version before")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    servers: list[tuple[str, str | None]] = [("this", None)]
    if args.old_python:
        servers.insert(0, ("before", args.old_python))
    rows = []
    for round_number in range(1, args.rounds + 1):
        for name, python in servers:
            result = one_round(python, args.memories, args.seconds)
            rows.append({"round": round_number, "server": name, **result})
    print_table(
        "B's recall p50 / p99 ms",
        ["round", "server", "quiet", "A writing"],
        [
            [
                row["round"],
                row["server"],
                f"{row['quiet']['p50_ms']:.1f} / {row['quiet']['p99_ms']:.1f}",
                f"{row['a_writing']['p50_ms']:.1f} / {row['a_writing']['p99_ms']:.1f}",
            ]
            for row in rows
        ],
    )
    write_json(args.out, {"rounds": rows})


if __name__ == "__main__":
    main()
