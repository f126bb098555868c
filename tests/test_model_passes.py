"""A core for the reads (mnemosyne/runtime/model_passes.py): while reads are served, a model's
passes over writes' texts run at most all cores but one at once, in arrival order; a small pass,
a pass on a thread that runs reads, and every pass when nothing is read run at once.

The gate is driven from threads of this process; the whole through a real server on the default
embedder, started on two cores: a tenant's recall parked on a reader thread (the test seam) while
another tenant writes two batches of long texts at once, read from ``/metrics``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.engine.sentence_embedder import BATCH, _passes
from mnemosyne.runtime import model_passes, read_priority
from tests.support import ServerProcess, gauge, parked_recall, wait_until

BIG = model_passes.SMALL_PASS_WORD_PIECES + 1


@pytest.mark.parametrize(
    "lengths",
    [[3] * 100, [256] * 20, [5, 9, 40, 100, 200, 256, 256, 256], [2000, 3000], list(range(2, 258, 3))],
)
def test_a_model_s_passes_hold_at_most_their_texts_and_word_pieces_and_every_text_once(lengths: list[int]) -> None:
    order = list(range(len(lengths)))  # sorted by length already
    passes = list(_passes(lengths, order))
    assert [i for rows in passes for i in rows] == order
    for rows in passes:
        padded = len(rows) * max(lengths[i] for i in rows)
        assert len(rows) <= BATCH
        assert padded <= model_passes.PASS_WORD_PIECES or len(rows) == 1


class Passes:
    """Threads each entering ``bulk_pass`` and holding it until released: who is inside, at most."""

    def __init__(self) -> None:
        self.inside: list[str] = []
        self.entered: list[str] = []
        self.most = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def start(self, name: str, word_pieces: int = BIG, reader: bool = False) -> None:
        def run() -> None:
            if reader:
                read_priority.never_give_way()
            with model_passes.bulk_pass(word_pieces):
                with self.lock:
                    self.inside.append(name)
                    self.entered.append(name)
                    self.most = max(self.most, len(self.inside))
                self.release.wait(30)
                with self.lock:
                    self.inside.remove(name)

        thread = threading.Thread(target=run)
        self.threads.append(thread)
        thread.start()
        time.sleep(0.05)  # in this order

    def end(self) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self.threads)


@contextmanager
def cores(monkeypatch: pytest.MonkeyPatch, n: int) -> Iterator[None]:
    monkeypatch.setattr(model_passes, "available_cores", lambda: n)
    yield


def test_while_a_read_runs_all_cores_but_one_run_passes_in_arrival_order(monkeypatch: pytest.MonkeyPatch) -> None:
    before = model_passes.waited()[0]
    passes = Passes()
    with cores(monkeypatch, 3), read_priority.read_running():
        for name in "abcde":
            passes.start(name)
        wait_until(lambda: len(passes.inside) == 2)
        time.sleep(0.2)
        assert passes.inside == ["a", "b"]  # c, d and e wait for a core
        passes.release.set()
        passes.end()
    assert passes.most == 2 and passes.entered == list("abcde")
    assert model_passes.waited()[0] == before + 3


def test_on_one_or_two_cores_a_read_leaves_one_pass_running(monkeypatch: pytest.MonkeyPatch) -> None:
    for n in (1, 2):
        passes = Passes()
        with cores(monkeypatch, n), read_priority.read_running():
            for name in "abc":
                passes.start(name)
            time.sleep(0.2)
            assert passes.inside == ["a"]
            passes.end()
        assert passes.most == 1 and passes.entered == list("abc")


def test_small_passes_and_passes_on_reader_threads_never_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    passes = Passes()
    with cores(monkeypatch, 2), read_priority.read_running():
        passes.start("big")
        passes.start("waits")
        passes.start("small", word_pieces=model_passes.SMALL_PASS_WORD_PIECES)
        passes.start("reader", reader=True)
        wait_until(lambda: len(passes.inside) == 3)
        assert passes.inside == ["big", "small", "reader"]
        passes.end()
    assert passes.entered[-1] == "waits"


def test_with_nothing_read_recently_passes_are_not_held_and_waiting_ones_go_when_reads_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_passes, "READS_RECENT_SECONDS", 0.3)
    time.sleep(0.3)
    passes = Passes()
    with cores(monkeypatch, 2):
        for name in "abcd":
            passes.start(name)
        wait_until(lambda: len(passes.inside) == 4)  # no read: every pass at once
        passes.end()
        held = Passes()
        with read_priority.read_running():
            for name in "xy":
                held.start(name)
            time.sleep(0.1)
            assert held.inside == ["x"]
        # The read ended: y runs once it is no longer recent, while x still runs.
        wait_until(lambda: held.inside == ["x", "y"], seconds=5)
        held.end()


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 1),
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),
    ],
)
def test_the_cores_are_the_affinity_or_a_cgroup_s_quota_whichever_is_fewer(
    tmp_path: Path, files: dict[str, str], cores: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    mine = len(os.sched_getaffinity(0))
    assert model_passes.available_cores(tmp_path) == (mine if cores is None else min(mine, cores))


def _on_two_cores(server: ServerProcess) -> ServerProcess:
    """Start ``server`` on two of this machine's cores (one where it has one): the process and
    its threads inherit the affinity of the thread that starts it."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(mine)[:2])
    try:
        return server.start(timeout=120)
    finally:
        os.sched_setaffinity(0, mine)


def test_a_tenant_s_batches_of_long_texts_leave_a_core_to_another_tenant_s_read_and_end(
    server_factory, tmp_path: Path
) -> None:
    park = tmp_path / "park"
    server: ServerProcess = _on_two_cores(
        server_factory(
            args=["--embedder", "minilm"],
            env={"MNEMOSYNE_TEST_PARK_TENANT": "reader", "MNEMOSYNE_TEST_PARK_FILE": str(park)},
            metrics=True,
        )
    )
    long_note = "a long note about the harbour, its boats and their crews " * 300  # past 256 word pieces

    def batch(first: int) -> list[str]:  # 10 texts: passes of 8 and 2 long texts, both past the small size
        return [f"{first + n} {long_note}" for n in range(10)]

    def two_batches(writer: MemoryClient, firsts: tuple[int, int]) -> None:
        with ThreadPoolExecutor(2) as pool:
            batches = [pool.submit(writer.retain_batch, "writer", batch(first)) for first in firsts]
            for done in batches:
                assert [o.status for o in done.result(timeout=300)] == ["created"] * 10

    with MemoryClient(server.target, timeout=300, retries=0) as client:
        client.retain("reader", "a memory of the reading tenant")
        time.sleep(model_passes.READS_RECENT_SECONDS)
        two_batches(client, (0, 100))  # nothing read: the passes are not held
        assert gauge(server, "mnemosyne_model_passes_given_way") == 0
        with parked_recall(server, park, "reader", timeout=300) as parked:
            two_batches(client, (200, 300))  # a read runs throughout: one pass at a time
            assert gauge(server, "mnemosyne_model_passes_given_way") > 0
            assert gauge(server, "mnemosyne_model_seconds_given_way") > 0
        assert parked.result(timeout=60).hits[0].memory.text == "a memory of the reading tenant"
        assert client.stats("writer").memories == 40
