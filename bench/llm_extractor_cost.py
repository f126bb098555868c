"""Cost per write of the LLM extractor, against the local chat-completions server of the tests.

Starts two real servers (``--extractor rules`` and ``--extractor openai`` pointed at
tests/chat_server.py, which answers immediately), retains the same N distinct texts into each
and prints the median and p95 Retain latency, the model HTTP requests per write and
Stats.model_calls. The difference is the extractor's own overhead (HTTP round trip, JSON
encoding and strict parsing); a real model adds its generation time on top.

Then one RetainBatch of ``--batch`` items with the model answering after ``--model-latency``
seconds, at ``--llm-concurrency`` 1 and 8: the batch's wall time, one model call per item either
way, made one after the other or eight at a time.

    python bench/llm_extractor_cost.py --writes 200 [--batch 64 --model-latency 0.2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import MemoryClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' local chat-completions server
from tests.chat_server import ChatServer  # noqa: E402


def measure(target: str, texts: list[str]) -> tuple[list[float], int]:
    with MemoryClient(target) as client:
        client.retain("warmup", "warm up the connection and the tenant file")
        latencies = []
        for text in texts:
            start = time.perf_counter()
            assert client.retain("bench", text).status == "created"
            latencies.append(time.perf_counter() - start)
        return latencies, client.stats("bench").model_calls


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--model-latency", type=float, default=0.2)
    args = parser.parse_args()
    texts = [
        f"Ticket RF-{10000 + i} was opened by user{i}@example.com on 2024-03-{1 + i % 28:02d}. "
        f"The refund status: pending {i}."
        for i in range(args.writes)
    ]
    with tempfile.TemporaryDirectory() as tmp, ChatServer() as chat:
        results: dict[str, Any] = {}  # printed as JSON
        for name, extra in (
            ("rules", []),
            ("openai", ["--extractor", "openai", "--llm-base-url", chat.base_url, "--llm-model", "bench-model"]),
        ):
            process = ServerProcess(Path(tmp) / name, args=extra).start()
            try:
                before = chat.calls
                latencies, model_calls = measure(process.target, texts)
                results[name] = {
                    **summary(latencies),
                    "model_calls": model_calls,
                    "http_requests_per_write": (chat.calls - before - (1 if name == "openai" else 0)) / len(texts),
                }
            finally:
                process.stop()
        results["openai_overhead_median_ms"] = round(results["openai"]["median_ms"] - results["rules"]["median_ms"], 3)
        chat.delay = args.model_latency
        batch = [f"Batch item {i}: crate CR-{i:05d} holds {i % 40 + 1} units." for i in range(args.batch)]
        for concurrency in (1, 8):
            process = ServerProcess(
                Path(tmp) / f"batch{concurrency}",
                args=[
                    "--extractor",
                    "openai",
                    "--llm-base-url",
                    chat.base_url,
                    "--llm-model",
                    "bench-model",
                    "--llm-concurrency",
                    str(concurrency),
                ],
            ).start()
            try:
                with MemoryClient(process.target, timeout=600) as client:
                    start = time.perf_counter()
                    assert {r.status for r in client.retain_batch("batch", batch)} == {"created"}
                    results[
                        f"retain_batch_{args.batch}_items_{args.model_latency:g}s_model_concurrency_{concurrency}_s"
                    ] = round(time.perf_counter() - start, 2)
            finally:
                process.stop()
        print(json.dumps({"writes": args.writes, **results}, indent=2))


if __name__ == "__main__":
    main()
