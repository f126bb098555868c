"""Crash safety of the hot path: SIGKILL at random points of a backlog, many times, never loses
an accepted write, never duplicates one, never breaks the audit chain, and never bills twice; an
event is never reported succeeded before both recall paths can find its memory."""

from __future__ import annotations

import collections
import random
import threading
import time

from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.store.oplog_inspect import inspect_oplog


def test_sigkill_at_random_points_during_a_backlog_loses_and_duplicates_nothing(server_factory, tmp_path) -> None:
    rng = random.Random(20261130)
    hold = tmp_path / "hold"
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, args=["--hot-path-batch", "8"])
    accepted: dict[int, str] = {}  # event id -> text, for every enqueue whose reply arrived
    sent: set[str] = set()
    rounds = 20
    open_at_kills: list[int] = []  # operations pending or running in the file at each kill
    for round_number in range(rounds):
        # Every fourth round the workers are held (claimed and extracted, not committed), so some
        # kills surely find work in flight whatever the machine's speed; the others die anywhere.
        if round_number % 4 == 0:
            hold.touch()
        else:
            hold.unlink(missing_ok=True)
        server.start() if round_number == 0 else server.restart()
        client = MemoryClient(server.target, timeout=10, retries=0)
        if round_number == 0:
            client.hot_path("crashy", "enable")
        stop = threading.Event()

        def produce(
            round_number: int = round_number, client: MemoryClient = client, stop: threading.Event = stop
        ) -> None:
            for i in range(10_000):
                if stop.is_set():
                    return
                texts = [f"round {round_number} write {i}-{j}: crate CR-{round_number:02d}{i:03d}{j}" for j in range(3)]
                sent.update(texts)
                try:
                    results = client.retain_batch("crashy", texts, fast=True)
                except MnemosyneClientError:
                    return  # the server died under this call: its fate is unknown, not promised
                for text, result in zip(texts, results):
                    assert result.status == "enqueued"
                    accepted[result.event_id] = text

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(rng.uniform(0.02, 0.25))  # a random point: enqueues and workers both mid-way
        server.kill()
        stop.set()
        writer.join(timeout=30)
        client.close()
        if server.tenant_file("crashy").exists():
            open_at_kills.append(len(inspect_oplog(server.data_dir, "crashy")["open"]))
    hold.unlink(missing_ok=True)
    server.restart()
    with MemoryClient(server.target, timeout=120) as client:
        client.hot_path("crashy", "flush", timeout_seconds=120)
        stored: list[str] = []
        token = ""
        while True:
            page = client.list_memories("crashy", page_size=1000, page_token=token)
            stored.extend(m.text for m in page.memories)
            token = page.next_page_token
            if not token:
                break
        counts = collections.Counter(stored)
        assert len(accepted) > rounds, "the drill accepted too little work to mean anything"
        assert sum(1 for n in open_at_kills if n) >= rounds // 4, (
            f"too few kills caught work in flight: {open_at_kills}"
        )
        missing = [t for t in accepted.values() if counts[t] != 1]
        assert not missing, f"{len(missing)} accepted writes lost: {missing[:3]}"
        assert max(counts.values()) == 1, "a write was stored twice"
        assert set(stored) <= sent
        for event_id in rng.sample(sorted(accepted), 20):
            event = client.get_event("crashy", event_id)
            assert event.status == "succeeded" and len(event.created_memory_ids) == 1
        report = client.verify_integrity("crashy")
        assert report.valid and report.first_broken_at == 0
        status = client.hot_path("crashy", "status")
        assert status.queue_depth == 0 and status.failed == 0
        # Extraction is persisted with its counter: calls never exceed accepted operations.
        assert status.model_calls <= status.accepted and status.writes == len(stored)


def test_succeeded_is_never_reported_before_the_memory_is_recallable(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    total = 150
    texts = {}

    def produce() -> None:
        for n in range(total // 10):
            batch = [f"visibility probe {n}x{i} token zq{n}v{i}k" for i in range(10)]
            for text, result in zip(batch, client.retain_batch(tenant, batch, fast=True)):
                texts[result.event_id] = text
            time.sleep(0.005)

    writer = threading.Thread(target=produce)
    writer.start()
    checked = 0
    try:
        for event in client.watch_events(tenant, timeout=120):
            if event.status != "succeeded":
                continue
            memory_id = event.created_memory_ids[0]
            text = client.get_memory(tenant, memory_id).text
            # The vector path alone (no full-text help) ...
            vector_hits = client.recall(tenant, text, k=5, mode="vector")
            assert memory_id in [h.memory.id for h in vector_hits], f"event {event.event_id} not vector-recallable"
            # ... and the full-text path alone, on a word only this memory has.
            unique_word = text.split()[-1]
            text_hits = client.recall(tenant, unique_word, k=5, mode="text")
            assert memory_id in [h.memory.id for h in text_hits], f"event {event.event_id} not text-recallable"
            checked += 1
            if checked == total:
                break
    finally:
        writer.join()
    assert checked == total
