"""Recall's server-side latency against a baseline, interleaved in one run.

    python -m bench.latency_baseline --baseline-python ../main/.venv/bin/python --out results/vs-main.json
    python -m bench.latency_baseline --embedder minilm --baseline-off window --out results/window.json

Two servers hold the same tenant: this installation's, and the baseline, which is another
installation's (``--baseline-python``, e.g. main's virtual environment) or this one with recall
steps switched off (``--baseline-off``, the MNEMOSYNE_TEST_RECALL_OFF seam: the cost of those
steps). The tenant is ``--memories`` synthetic memories (bench/corpus.py) in threads of
``--thread-length`` turns with an ``occurred_at`` each, as a conversation's turns are retained (a
baseline that does not know the fields ignores them). Recall (hybrid, k = 10) is timed inside the
handler (the ``mnemosyne-server-time-us`` trailer); the two servers take turns in ``--rounds``
rounds over the same queries, so a drift of a shared machine's speed reaches both alike.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path

from bench.common import percentiles, print_table, running_server, write_json
from bench.corpus import Corpus
from bench.latency import timed_server_calls
from mnemosyne.engine.recall import SWITCHABLE
from mnemosyne.engine.recall.steps import switched_off

TENANT = "bench-latency"
K = 10
START = 1_700_000_000.0  # the first memory's occurred_at (unix seconds); one minute apart


def _steps(value: str) -> str:
    """A comma-separated list of recall steps that can be switched off, as given."""
    try:
        switched_off(filter(None, value.split(",")))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--thread-length", type=int, default=20, help="turns per thread (0: no threads, no times)")
    parser.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    parser.add_argument("--baseline-python", help="the baseline is this interpreter's installation")
    parser.add_argument(
        "--baseline-off",
        default="",
        type=_steps,
        help=f"the baseline is this installation without these recall steps (comma-separated: {', '.join(SWITCHABLE)})",
    )
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if bool(args.baseline_python) == bool(args.baseline_off):
        parser.error("give exactly one of --baseline-python and --baseline-off")

    from mnemosyne.client import MemoryClient, RetainItem, ThreadRef
    from mnemosyne.v1 import memory_pb2

    corpus = Corpus()
    queries = corpus.queries(args.memories, args.queries)
    baseline = f"python {args.baseline_python}" if args.baseline_python else f"without {args.baseline_off}"
    with ExitStack() as stack:
        clients = {}
        for name, python, env in (
            ("this", None, None),
            (
                "baseline",
                args.baseline_python,
                {"MNEMOSYNE_TEST_RECALL_OFF": args.baseline_off} if args.baseline_off else None,
            ),
        ):
            server = stack.enter_context(running_server(embedder=args.embedder, python=python, env=env))
            clients[name] = stack.enter_context(MemoryClient(server.target, timeout=600))
        for start in range(0, args.memories, 1000):
            texts = corpus.memories(start, min(1000, args.memories - start))
            items = [
                RetainItem(
                    text,
                    occurred_at=START + 60 * (start + i) if args.thread_length else None,
                    thread=ThreadRef(f"t{(start + i) // args.thread_length}", (start + i) % args.thread_length)
                    if args.thread_length
                    else None,
                )
                for i, text in enumerate(texts)
            ]
            for client in clients.values():
                client.retain_batch(TENANT, items)
        print(f"{args.memories} memories loaded in each server", flush=True)
        for client in clients.values():
            for q in queries[:20]:  # warm-up: the first recall loads the vector cache
                client.recall(TENANT, q, k=K)
        samples: dict[str, list[float]] = {name: [] for name in clients}
        for turn in range(args.rounds):
            requests = [
                memory_pb2.RecallRequest(tenant=TENANT, query=q, k=K, mode=memory_pb2.RECALL_MODE_HYBRID)
                for q in queries[turn :: args.rounds]
            ]
            order = list(clients) if turn % 2 == 0 else list(clients)[::-1]
            for name in order:
                client = clients[name]
                samples[name] += timed_server_calls(client.memory.Recall, requests, client.call_metadata)[0]
    result = {name: percentiles(values) for name, values in samples.items()}
    ratio = result["this"]["p50_ms"] / result["baseline"]["p50_ms"]
    print_table(
        f"Recall server-side latency, k=10, {args.memories} memories, {args.embedder}, interleaved (baseline: {baseline})",
        ["server", "p50 ms", "p99 ms", "mean ms"],
        [[name, r["p50_ms"], r["p99_ms"], r["mean_ms"]] for name, r in result.items()],
    )
    print(
        f"p50 this / baseline: {ratio:.3f}; difference {result['this']['p50_ms'] - result['baseline']['p50_ms']:+.3f} ms"
    )
    write_json(
        args.out,
        {
            "benchmark": "recall-latency-vs-baseline",
            "memories": args.memories,
            "embedder": args.embedder,
            "thread_length": args.thread_length,
            "baseline": baseline,
            "results": result,
            "p50_ratio": ratio,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
