"""Recall of five kinds of query in process: plain, filtered by a mem0 user or app or by a key of
the caller's own, holding an identifier.

    python -m bench.recall_kinds [--memories 10000] [--rounds 3] [--embedder hashing|minilm]
    python -m bench.recall_kinds --memories 100000 --exact   # and each kind's top 10 vs an exact scan
    <another version's venv>/bin/python bench/recall_kinds.py   # the same, that version's engine

One engine in this process (the server's interpreter settings), one tenant of ``--memories``
memories of bench/corpus.py, each kept with a ``mem0.user_id`` of one of 20 users and a
``mem0.app_id`` of one of 2 apps (as the mem0 surface keeps them) and a ``topic`` of one of 20,
the hashing embedder (or ``--embedder``), k = 10. Each round recalls 200 plain queries, the same
filtered by one user (``metadata_equals``: a twentieth of the memories), by one app (half of
them) and by one topic (a twentieth, by a key of no index of its own), and the corpus's
queries holding an identifier such as ``rf-12345`` (about 3% of them); prints each kind's p50 and
mean over the rounds. Run by another
version's interpreter (its checkout's ``mnemosyne``), it measures that version: the kinds' costs
before and after a change, alternated (docs/performance.md#identifiers-and-filtered-recalls-from-the-postings).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/ when run as a file

from bench.corpus import Corpus  # noqa: E402
from mnemosyne.runtime.interpreter import tune_interpreter  # noqa: E402

USERS = [f"user-{n}" for n in range(20)]
APPS = ["app-0", "app-1"]
TOPICS = [f"topic-{n}" for n in range(20)]
IDENTIFIER = re.compile(r"\w+-\d+")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", default="hashing")
    parser.add_argument(
        "--exact", action="store_true", help="then each kind's top 10 against an exact scan's (the index off)"
    )
    args = parser.parse_args(argv)
    tune_interpreter()  # the server's interpreter settings, before numpy loads
    from mnemosyne.engine.ann import DEFAULT_THRESHOLD as SPARSE_ANN_THRESHOLD
    from mnemosyne.engine.ann import FIGURES
    from mnemosyne.engine.config import EngineConfig
    from mnemosyne.engine.engine import Engine
    from mnemosyne.engine.recall.settings import DENSE_ANN_THRESHOLD
    from mnemosyne.engine.types import RetainItem

    threshold = SPARSE_ANN_THRESHOLD if args.embedder == "hashing" else DENSE_ANN_THRESHOLD

    corpus, rng = Corpus(), random.Random(3)
    with tempfile.TemporaryDirectory(prefix="recall-kinds-") as tmp:
        engine = Engine(EngineConfig(data_dir=Path(tmp), embedder=args.embedder))
        try:
            for start in range(0, args.memories, 1000):
                texts = corpus.memories(start, min(1000, args.memories - start))
                engine.retain_batch(
                    "t",
                    [
                        RetainItem(
                            text,
                            metadata={
                                "mem0.user_id": rng.choice(USERS),
                                "mem0.app_id": rng.choice(APPS),
                                "topic": rng.choice(TOPICS),
                            },
                        )
                        for text in texts
                    ],
                )
            queries = corpus.queries(args.memories, 600)
            identifiers = [q for q in queries if IDENTIFIER.search(q)]
            plain = [q for q in queries if not IDENTIFIER.search(q)][:200]
            for query in queries[:20]:  # warm-up: the first recall loads the caches
                engine.recall("t", query, k=10)
            if args.memories >= threshold:  # a large tenant: its graph is made in the background
                deadline = time.monotonic() + 1800
                while FIGURES.rows() < args.memories and time.monotonic() < deadline:
                    time.sleep(0.5)
                    engine.recall("t", queries[0], k=10)
            filters = {
                "filtered by a user": ("mem0.user_id", USERS),
                "filtered by an app": ("mem0.app_id", APPS),
                "filtered by a topic": ("topic", TOPICS),
            }
            took: dict[str, list[float]] = {kind: [] for kind in ("plain", *filters, "holding an identifier")}
            found: dict[str, list[tuple[str, dict[str, str] | None, set[int]]]] = {kind: [] for kind in took}
            for _ in range(args.rounds):
                for kind in took:
                    for query in identifiers if kind == "holding an identifier" else plain:
                        key, values = filters.get(kind, ("", []))
                        only = {key: rng.choice(values)} if values else None
                        started = time.perf_counter()
                        hits = engine.recall("t", query, k=10, metadata_equals=only).hits
                        took[kind].append(time.perf_counter() - started)
                        found[kind].append((query, only, {h.memory.id for h in hits}))
        finally:
            engine.close()
        legs: dict[str, int] = getattr(FIGURES, "sources", dict)()  # (a version before this count has none)
        if args.exact:  # the same recalls with the approximate index off: every row scored
            exact = Engine(EngineConfig(data_dir=Path(tmp), embedder=args.embedder, ann_threshold=1 << 62))
            try:
                for kind, recalls in found.items():
                    shared = wanted = 0
                    for query, only, ids in recalls:
                        best = {h.memory.id for h in exact.recall("t", query, k=10, metadata_equals=only).hits}
                        shared, wanted = shared + len(ids & best), wanted + len(best)
                    print(f"{kind}: top 10 {shared / max(wanted, 1):.4f} of the exact scan's")
            finally:
                exact.close()
    print("vector legs by source (the warm-up's too):", legs)
    for kind, seconds in took.items():
        print(
            f"{kind}: {len(seconds)} recalls, p50 {statistics.median(seconds) * 1e3:.3f} ms, "
            f"mean {statistics.mean(seconds) * 1e3:.3f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
