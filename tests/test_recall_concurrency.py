"""Recall under many callers, through a real server and real client threads: concurrent recalls all
complete with a single caller's hits, a memory committed before a recall began is a candidate of
both paths, and a forget that returned before a recall began is never in its hits."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mnemosyne.client import MemoryClient, RetainItem, ThreadRef

WORDS = [f"w{n}" for n in range(300)]


def _corpus(seed: int, count: int) -> list[RetainItem]:
    rng = random.Random(seed)
    return [
        RetainItem(
            " ".join(rng.choice(WORDS) for _ in range(8)),
            scope="workspace/a" if i % 3 == 0 else "global",
            thread=ThreadRef(f"t{i // 10}", i % 10),
        )
        for i in range(count)
    ]


def _load(client: MemoryClient, items: list[RetainItem]) -> None:
    for start in range(0, len(items), 500):
        client.retain_batch("t", items[start : start + 500])


def _queries(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def _hits(client: MemoryClient, tenant: str, query: str, **kwargs: Any) -> list[tuple[int, float]]:
    return [(h.memory.id, round(h.score, 9)) for h in client.recall(tenant, query, k=10, **kwargs)]


def test_many_concurrent_recalls_all_complete_with_the_same_hits(server_factory) -> None:
    server = server_factory()
    server.start()
    queries = _queries(3, 12)
    with MemoryClient(server.target) as client:
        _load(client, _corpus(4, 2000))
        expected = {q: _hits(client, "t", q) for q in queries}

        def caller(n: int) -> int:
            for q in queries[n % 3 :: 3] * 4:
                assert _hits(client, "t", q) == expected[q]
            return n

        started = time.monotonic()
        with ThreadPoolExecutor(24) as callers:
            assert sorted(callers.map(caller, range(24))) == list(range(24))
        assert time.monotonic() - started < 120


def test_a_write_before_a_recall_is_a_candidate_and_a_forget_before_it_never_returns(server_factory) -> None:
    server = server_factory()
    server.start()
    with MemoryClient(server.target) as client:
        _load(client, _corpus(5, 2000))  # enough rows that the vector scan takes a while
        stop = threading.Event()
        forgotten_at: dict[int, float] = {}  # memory id -> when its forget returned
        violations: list[str] = []
        recalls = [0]

        def recaller() -> None:
            while not stop.is_set():
                began = time.monotonic()
                for hit in client.recall("t", "zebra quartz", k=10):
                    done = forgotten_at.get(hit.memory.id)
                    if done is not None and done < began:
                        violations.append(f"memory {hit.memory.id} forgotten before the recall began")
                recalls[0] += 1

        threads = [threading.Thread(target=recaller) for _ in range(6)]
        for thread in threads:
            thread.start()
        try:
            for n in range(40):
                # Committed before the recall begins: a candidate, found by both paths.
                memory_id = client.retain("t", f"zebra quartz marker{n}").memory_id
                assert memory_id in [h.memory.id for h in client.recall("t", f"zebra quartz marker{n}", k=10)]
                assert memory_id in [h.memory.id for h in client.recall("t", f"marker{n}", k=10, mode="vector")]
                assert client.forget("t", memory_id)
                forgotten_at[memory_id] = time.monotonic()
                assert memory_id not in [h.memory.id for h in client.recall("t", f"zebra quartz marker{n}", k=10)]
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert violations == []
        assert recalls[0] > 40  # the recallers did race the forgets
