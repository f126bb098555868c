"""Crash safety of the hot path: SIGKILL at random points of a backlog, many times, never loses
an accepted write, never duplicates one, never breaks the audit chain, and never bills twice; an
event is never reported succeeded before both recall paths can find its memory."""

from __future__ import annotations

import collections
import random
import secrets
import threading
import time
from pathlib import Path

from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.store.oplog_inspect import inspect_oplog
from tests.support import ServerProcess
from tests.test_erasure import _all_memories, texts_left


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
        client = _next_round(server, "crashy", round_number, held=hold if round_number % 4 == 0 else None)
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
        hold.unlink(missing_ok=True)
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


def test_fast_writes_forgotten_as_they_are_written_through_sigkills_never_come_back(server_factory, tmp_path) -> None:
    """Fast writes, each of its own secret and key, and forgets of them (by filter while queued,
    or by id once applied), while the server is SIGKILLed at random moments and started again;
    some rounds with the workers held mid-round. Afterwards, on a server whose workers take nothing
    unless a read waits: a read given a token kept before a kill answers at once, with its write
    or, for one forgotten, without it; no forgotten secret is in any file, nor comes back once the
    queue drains; every acknowledged write not forgotten is stored exactly once."""
    rng = random.Random(20261208)
    held_round, backlog = tmp_path / "hold-workers", tmp_path / "hold-backlog"
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(held_round)}, args=["--hot-path-batch", "8"])
    written: dict[str, tuple[str, str]] = {}  # key -> its secret and the token its write answered
    forgetting: set[str] = set()  # keys a forget was sent for
    forgotten: set[str] = set()  # ... and acknowledged
    for round_number in range(6):
        # Every third round the workers hold before their commit: the kill finds work in flight.
        client = _next_round(server, "forgetful", round_number, held=held_round if round_number % 3 == 0 else None)
        stop = threading.Event()

        def write_and_forget(draw: random.Random, client: MemoryClient = client, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                key, secret = f"k{len(written)}-{draw.randrange(10**9)}", secrets.token_hex(12)
                try:
                    client.retain("forgetful", f"Locker {key} opens with {secret}", metadata={"key": key}, fast=True)
                    written[key] = (secret, client.consistency_token("forgetful") or "")
                    victim = draw.choice([key, draw.choice(sorted(written))])
                    if draw.random() < 0.5 or victim in forgetting:
                        continue
                    forgetting.add(victim)
                    # By id a third of the time, once applied: a read carrying the session's token
                    # applies this round's writes first (an earlier round's may be queued still).
                    by_id = draw.random() < 0.3
                    applied = (
                        client.list_memories("forgetful", metadata_equals={"key": victim}).memories if by_id else []
                    )
                    if applied:
                        client.forget("forgetful", applied[0].id)
                    else:  # by filter, queued or applied
                        client.forget_memories("forgetful", {"key": victim})
                    forgotten.add(victim)
                except MnemosyneClientError:
                    return  # the server died under this call: its fate is unknown, not promised

        writer = threading.Thread(target=write_and_forget, args=(random.Random(round_number),))
        writer.start()
        time.sleep(rng.uniform(0.1, 1.0))
        server.kill()
        stop.set()
        writer.join(timeout=30)
        client.close()
        held_round.unlink(missing_ok=True)
    assert len(forgotten) > 20, "the drill forgot too little to mean anything"
    backlog.touch()
    server.env["MNEMOSYNE_TEST_HOLD_BACKLOG"] = str(backlog)
    server.restart()
    secrets_forgotten = [written[key][0] for key in forgotten]
    assert texts_left(server.data_dir, secrets_forgotten) == {}
    with MemoryClient(server.target, timeout=60, session_consistency=False) as client:
        for key in rng.sample(sorted(written), 30):
            started = time.monotonic()
            found = client.list_memories(
                "forgetful", metadata_equals={"key": key}, consistency_token=written[key][1]
            ).memories
            assert time.monotonic() - started < 10
            if key in forgotten:
                assert found == [], key
            elif key not in forgetting:
                assert len(found) == 1, key
        backlog.unlink()
        client.hot_path("forgetful", "flush", timeout_seconds=60)
        stored = collections.Counter(m.metadata["key"] for m in _all_memories(client, "forgetful"))
        assert not forgotten & set(stored), "a forgotten write came back"
        lost = [key for key in written if key not in forgetting and stored[key] != 1]
        assert not lost, f"{len(lost)} acknowledged writes not stored once: {lost[:3]}"
        assert client.verify_integrity("forgetful").valid
    assert texts_left(server.data_dir, secrets_forgotten) == {}


def _next_round(server: ServerProcess, tenant: str, round_number: int, *, held: Path | None) -> MemoryClient:
    """The server started (the first round, which also enables the tenant's hot path) or started
    again after its kill, its workers holding before their commit while ``held`` exists (the test
    seam the server was given), and a client of the round that tries each call once."""
    if held is not None:
        held.touch()
    server.start() if round_number == 0 else server.restart()
    client = MemoryClient(server.target, timeout=10, retries=0)
    if round_number == 0:
        client.hot_path(tenant, "enable")
    return client
