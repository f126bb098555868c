"""The paraphrase cases (tests/data/paraphrase_cases.json): for each embedder and recall mode, the
share of questions whose meant memory comes first, in process (MemoryBrain), each case in a
tenant of its own. ``--cases held-out``: the second set (paraphrase_cases_heldout.json), written
after the recall settings were tuned and never used to choose one.

    python -m bench.paraphrases [--embedder minilm --embedder hashing] [--mode hybrid --mode vector]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from mnemosyne import MemoryBrain

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
CASES = {"tuning": DATA / "paraphrase_cases.json", "held-out": DATA / "paraphrase_cases_heldout.json"}


def first_hits(embedder: str, mode: str, cases_file: Path = CASES["tuning"]) -> list[tuple[str, bool]]:
    """Each question, and whether its meant memory came first."""
    cases = json.loads(cases_file.read_text(encoding="utf-8"))
    os.environ["MNEMOSYNE_EMBEDDER"] = embedder
    outcome = []
    with tempfile.TemporaryDirectory(prefix="paraphrases-") as tmp, MemoryBrain(Path(tmp)) as brain:
        for number, case in enumerate(cases):
            brain.tenant = f"case{number}"
            ids = [brain.retain(text).memory_id for text in case["memories"]]
            for question in case["questions"]:
                hits = brain.recall(question, k=1, mode=mode)
                outcome.append((question, bool(hits) and hits[0].memory.id == ids[case["meant"]]))
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", action="append", choices=["minilm", "hashing"])
    parser.add_argument("--mode", action="append", choices=["hybrid", "vector", "text"])
    parser.add_argument("--cases", choices=list(CASES), default="tuning", help="which set of cases")
    parser.add_argument("--misses", action="store_true", help="name the questions missed")
    args = parser.parse_args()
    for embedder in args.embedder or ["minilm", "hashing"]:
        for mode in args.mode or ["hybrid"]:
            outcome = first_hits(embedder, mode, CASES[args.cases])
            right = sum(first for _, first in outcome)
            print(f"{embedder:8} {mode:7} meant memory first: {right}/{len(outcome)} ({right / len(outcome):.3f})")
            if args.misses:
                for question, first in outcome:
                    if not first:
                        print(f"    missed: {question}")


if __name__ == "__main__":
    main()
