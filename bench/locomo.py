"""Recall quality on LoCoMo (Maharana et al., ACL 2024, arXiv 2402.17753): evidence recall@5/@10.

    python -m bench.locomo --data locomo10.json --embedder hashing --out results/locomo-hashing.json
    python -m bench.locomo --data ... --embedder minilm --out ...
    python -m bench.locomo --data ... --embedder chroma-minilm --out ...   # the plain dense baseline

Each conversation goes into its own tenant through a real server and the real client
(RetainBatch); every turn is exactly one memory: ``"<speaker> (<session date>): <text>"``, plus
``" [shares a photo: <blip_caption>]"`` when the turn shared an image (the caption is what a
reader of the conversation would see in place of the image; the image search ``query`` field of
the data set is not used), and metadata ``dia_id``; its ``occurred_at`` is the session's date and
time, its ``thread`` the session, at the turn's position in it, and its ``speaker`` the turn's
(the speaker is in the text too, as it always was; only this file reads
``dia_id`` or the data set's date format). Each question of categories 1-4 with evidence
is recalled once with k = 10; recall@k counts the distinct ``dia_id``s among the first k hits that
are evidence, over the number of evidence turns, averaged over questions.

``chroma-minilm`` puts the same turn texts, embedded by the same MiniLM embedder, into an embedded
Chroma collection (cosine HNSW) and queries it with the question's embedding: dense search alone.
The data file is evaluation data only: never commit or ship it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import print_table, running_server, write_json
from mnemosyne.engine.recall import SWITCHABLE

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5  # no answer in the conversation: only in the all-questions figure
KS = (5, 10)
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


@dataclass
class Turn:
    dia_id: str
    text: str
    occurred_at: float | None  # the session's date and time (unix seconds, read as UTC)
    thread: str  # "<sample_id>/session-<n>": a session is a thread
    position: int  # the turn's order in its session, from 0
    speaker: str = ""  # who said it (LoCoMo's ``speaker``)


@dataclass
class Question:
    text: str
    evidence: frozenset[str]
    category: int
    corrected: frozenset[str]  # the evidence after the fixes file (the same when it has no fix)
    qa_index: int = 0


Conversation = tuple[str, list[Turn], list[Question]]  # (sample id, its turns, its questions)
Ranked = list[tuple[Question, list[str]]]  # each question with the dia_ids of its hits, best first


def normalise_evidence(raw: list[str]) -> frozenset[str]:
    """``"D8:6; D9:17"``, ``"D:11:26"``, ``"D30:05"`` -> {"D8:6", "D9:17"}, {"D11:26"}, {"D30:5"}."""
    out = set()
    for item in raw:
        for part in re.split(r"[;\s]+", str(item)):
            m = _EVIDENCE.fullmatch(part.strip())
            if m:
                out.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return frozenset(out)


def turn_text(turn: dict[str, Any], date: str) -> str:
    text = f"{turn['speaker']} ({date}): {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def session_time(text: str) -> float | None:
    """LoCoMo's ``"1:56 pm on 8 May, 2023"`` as unix seconds (read as UTC), None if unreadable."""
    try:
        when = datetime.datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None
    return when.replace(tzinfo=datetime.UTC).timestamp()


def load_fixes(path: Path | None) -> dict[tuple[str, int], tuple[str, frozenset[str]]]:
    """(sample_id, qa_index) -> (question, corrected evidence) from a fixes file (a JSON list of
    ``{sample_id, qa_index, question, correct_evidence}``, e.g. from dial481/locomo-audit)."""
    if path is None:
        return {}
    return {
        (f["sample_id"], int(f["qa_index"])): (f["question"], normalise_evidence(f["correct_evidence"]))
        for f in json.loads(path.read_text())
    }


def load(path: Path, fixes_path: Path | None = None) -> list[Conversation]:
    """Every conversation: its turns and its questions with evidence (category 5 included: it is
    scored only in the all-questions figure)."""
    fixes = load_fixes(fixes_path)
    applied = 0
    conversations = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
        turns = []
        for n in sessions:
            date = conv.get(f"session_{n}_date_time", "")
            for position, turn in enumerate(conv[f"session_{n}"]):
                m = _EVIDENCE.fullmatch(turn["dia_id"])
                dia_id = f"D{int(m.group(1))}:{int(m.group(2))}" if m else turn["dia_id"]
                thread = f"{sample['sample_id']}/session-{n}"
                turns.append(
                    Turn(dia_id, turn_text(turn, date), session_time(date), thread, position, turn.get("speaker", ""))
                )
        questions = []
        for index, q in enumerate(sample["qa"]):
            evidence = normalise_evidence(q.get("evidence") or [])
            corrected = evidence
            fix = fixes.get((sample["sample_id"], index))
            if fix is not None:
                assert fix[0] == q["question"], f"the fix of {sample['sample_id']} qa[{index}] names another question"
                corrected, applied = fix[1], applied + 1
            if evidence and int(q.get("category", 0)) in (*CATEGORIES, ADVERSARIAL):
                questions.append(Question(q["question"], evidence, int(q["category"]), corrected, index))
        conversations.append((sample["sample_id"], turns, questions))
    if fixes:
        print(f"evidence fixes: {applied} of {len(fixes)} applied")
    return conversations


def score(evidence: frozenset[str], ranked_dia_ids: list[str], k: int) -> float:
    return len(evidence & set(ranked_dia_ids[:k])) / len(evidence)


def run_mnemosyne(
    conversations: list[Conversation],
    embedder: str,
    mode: str,
    server_args: list[str],
    *,
    python: str | None = None,
    off: list[str] | None = None,
) -> tuple[Ranked, dict[str, float]]:
    from mnemosyne.client import MemoryClient
    from mnemosyne.client.types import RetainItem, ThreadRef

    results = []
    timing = {"ingest_s": 0.0, "recall_s": 0.0}
    with (
        running_server(
            embedder=embedder,
            args=server_args,
            python=python,
            env={"MNEMOSYNE_TEST_RECALL_OFF": ",".join(off)} if off else None,
        ) as server,
        MemoryClient(server.target, timeout=600) as client,
    ):
        for sample_id, turns, questions in conversations:
            tenant = f"locomo-{sample_id}"
            t0 = time.perf_counter()
            for start in range(0, len(turns), 500):
                chunk = turns[start : start + 500]
                items = [
                    RetainItem(
                        t.text,
                        "global",
                        {"dia_id": t.dia_id},
                        t.occurred_at,
                        ThreadRef(t.thread, t.position),
                        t.speaker,
                    )
                    for t in chunk
                ]
                outcomes = client.retain_batch(tenant, items)
                assert all(o.status == "created" for o in outcomes), [o for o in outcomes if o.status != "created"][:3]
            timing["ingest_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            for q in questions:
                hits = client.recall(tenant, q.text, k=max(KS), mode=mode)
                results.append((q, [h.memory.metadata.get("dia_id", "") for h in hits]))
            timing["recall_s"] += time.perf_counter() - t0
    return results, timing


def run_chroma(conversations: list[Conversation]) -> tuple[Ranked, dict[str, float]]:
    import chromadb

    from mnemosyne.engine.sentence_embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    results = []
    timing = {"ingest_s": 0.0, "recall_s": 0.0}
    with tempfile.TemporaryDirectory(prefix="chroma-locomo-") as tmp:
        chroma = chromadb.PersistentClient(path=tmp, settings=chromadb.Settings(anonymized_telemetry=False))
        for sample_id, turns, questions in conversations:
            t0 = time.perf_counter()
            collection = chroma.create_collection(f"locomo-{sample_id}", metadata={"hnsw:space": "cosine"})
            vectors = embedder.embed([t.text for t in turns])
            collection.add(ids=[t.dia_id for t in turns], embeddings=vectors, documents=[t.text for t in turns])
            timing["ingest_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            query_vectors = embedder.embed([q.text for q in questions])
            for q, qv in zip(questions, query_vectors):
                answer = collection.query(query_embeddings=[qv], n_results=max(KS))
                results.append((q, list(answer["ids"][0])))
            timing["recall_s"] += time.perf_counter() - t0
    return results, timing


def summarise(results: Ranked, *, corrected: bool = False) -> dict[str, Any]:
    """recall@5/@10 over the questions of categories 1-4, overall and per category, on the
    original (or ``corrected``) evidence; ``all_questions_recall@10`` over every question with
    evidence, category 5 included (as some published systems report it)."""
    by_cat: dict[int, list[list[float]]] = defaultdict(list)
    for q, ranked in results:
        # Distinct dia_ids among the first k hits only (a hit list never repeats a memory).
        by_cat[q.category].append([score(q.corrected if corrected else q.evidence, ranked, k) for k in KS])
    everything = [s for c, scores in by_cat.items() if c in CATEGORIES for s in scores]
    all_questions = [s for scores in by_cat.values() for s in scores]

    def mean(rows: list[list[float]], i: int) -> float:
        return sum(r[i] for r in rows) / len(rows) if rows else 0.0

    summary: dict[str, Any] = {"questions": len(everything)}
    for i, k in enumerate(KS):
        summary[f"recall@{k}"] = mean(everything, i)
    summary["all_questions"] = len(all_questions)
    summary["all_questions_recall@10"] = mean(all_questions, KS.index(10))
    summary["by_category"] = {
        f"{c} {CATEGORIES[c]}": {
            "questions": len(by_cat[c]),
            **{f"recall@{k}": mean(by_cat[c], i) for i, k in enumerate(KS)},
        }
        for c in sorted(by_cat)
        if c in CATEGORIES
    }
    return summary


def print_summary(title: str, summary: dict[str, Any]) -> None:
    rows = [["all (1-4)", summary["questions"], summary["recall@5"], summary["recall@10"]]]
    for name, cat in summary["by_category"].items():
        rows.append([name, cat["questions"], cat["recall@5"], cat["recall@10"]])
    rows.append(["all with 5", summary["all_questions"], "", summary["all_questions_recall@10"]])
    print_table(title, ["category", "questions", "recall@5", "recall@10"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a LoCoMo-format JSON file (e.g. locomo10.json)")
    parser.add_argument("--embedder", default="minilm", choices=["minilm", "hashing", "chroma-minilm"])
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "text"], help="Mnemosyne recall mode")
    parser.add_argument("--server-arg", action="append", default=[], help="extra flag for mnemosyne serve")
    parser.add_argument("--out", required=True, type=Path, help="JSON result file")
    parser.add_argument(
        "--evidence-fixes",
        type=Path,
        help="a JSON list of corrected citations ({sample_id, qa_index, question, correct_evidence}): "
        "also score on the corrected evidence (evaluation data: never commit it)",
    )
    parser.add_argument(
        "--off",
        action="append",
        default=[],
        choices=SWITCHABLE,
        help="switch one recall step off (the ablation; the server's MNEMOSYNE_TEST_RECALL_OFF seam; "
        "the steps: docs/recall-quality.md)",
    )
    parser.add_argument(
        "--server-python",
        help="serve with this interpreter's installation (e.g. main's .venv/bin/python): a baseline in the same run",
    )
    args = parser.parse_args(argv)

    conversations = load(args.data, args.evidence_fixes)
    if args.embedder == "chroma-minilm":
        results, timing = run_chroma(conversations)
        system = "chroma (PersistentClient, cosine HNSW) + all-MiniLM-L6-v2"
    else:
        results, timing = run_mnemosyne(
            conversations, args.embedder, args.mode, args.server_arg, python=args.server_python, off=args.off
        )
        system = f"mnemosyne --embedder {args.embedder}, recall mode {args.mode}"
        if args.server_python:
            system += f", served by {args.server_python}"
        if args.off:
            system += f", without {', '.join(args.off)}"
    summary = summarise(results)
    print_summary(f"LoCoMo evidence recall: {system} ({args.data.name})", summary)
    if args.evidence_fixes:
        summary["corrected"] = summarise(results, corrected=True)
        print_summary(f"... on the corrected evidence ({args.evidence_fixes.name})", summary["corrected"])
    print(f"ingest {timing['ingest_s']:.1f} s, recall {timing['recall_s']:.1f} s")
    write_json(
        args.out,
        {
            "benchmark": "locomo-evidence-recall",
            "data": args.data.name,
            "conversations": [c[0] for c in conversations],
            "turns": sum(len(c[1]) for c in conversations),
            "system": system,
            "embedder": args.embedder,
            "mode": args.mode,
            "off": args.off,
            "timing": timing,
            **summary,
            # Each question's ranked turns, for analysis offline.
            "ranked": [
                {"category": q.category, "qa_index": q.qa_index, "question": q.text, "ranked": ranked}
                for q, ranked in results
            ],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
