"""Reads before bulk work (mnemosyne/read_priority.py): long writes' stretches of Python take turns
step by step, and their steps wait while reads run — never for long, never in a short stretch, on
a thread that runs reads, or when nothing is read.

The module itself is driven from threads of this process (the moments of a wait cannot be timed
from a client); admission's part in-process on an event loop, and the whole through a real server:
a tenant's recall parked on a reader thread (the test seam) while another tenant writes two
batches of long look-alike texts at once, read from ``/metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.runtime import read_priority
from mnemosyne.transport.admission import Admission, AdmissionLimits, Lane
from tests.support import ServerProcess, gauge, parked_recall


def _steps() -> int:
    return read_priority.given_way()[0]


def test_a_write_step_with_no_read_running_goes_on_at_once() -> None:
    before = _steps()
    for _ in range(1000):
        read_priority.give_way()
    assert _steps() == before


def test_a_write_step_waits_for_the_running_read_and_goes_on_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_priority, "WAIT_SECONDS", 30.0)  # only the read's end can release it
    waited: list[float] = []

    def write_step() -> None:
        started = time.monotonic()
        read_priority.give_way()
        waited.append(time.monotonic() - started)

    before = _steps()
    with read_priority.read_running():
        writer = threading.Thread(target=write_step)
        writer.start()
        time.sleep(0.2)
        assert writer.is_alive()  # still giving way
    writer.join(timeout=10)
    assert not writer.is_alive() and 0.2 <= waited[0] < 10
    assert _steps() == before + 1


def test_a_write_step_never_waits_longer_than_its_bound_nor_twice_in_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_priority, "WAIT_SECONDS", 0.05)
    monkeypatch.setattr(read_priority, "RUN_SECONDS", 60.0)
    results: list[tuple[float, int]] = []

    def write_steps() -> None:
        started = time.monotonic()
        read_priority.give_way()  # waits its bound: the read outlasts it
        first = _steps()
        for _ in range(100):
            read_priority.give_way()  # within RUN_SECONDS of the last wait: runs on
        results.append((time.monotonic() - started, _steps() - first))

    before = _steps()
    with read_priority.read_running():
        writer = threading.Thread(target=write_steps)
        writer.start()
        writer.join(timeout=10)
    elapsed, later_waits = results[0]
    assert 0.05 <= elapsed < 5 and later_waits == 0
    assert _steps() == before + 1


def test_a_short_stretch_of_bulk_work_never_waits_for_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_priority, "WAIT_SECONDS", 30.0)
    monkeypatch.setattr(read_priority, "RUN_SECONDS", 60.0)  # every stretch here is "short"
    before = _steps()
    with read_priority.read_running(), read_priority.bulk_work():
        for _ in range(100):
            read_priority.give_way()  # a small write's items: none waits for the read
    assert _steps() == before


def test_a_thread_that_runs_reads_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_priority, "WAIT_SECONDS", 30.0)
    done = threading.Event()

    def reader_thread() -> None:
        read_priority.never_give_way()
        read_priority.give_way()
        done.set()

    before = _steps()
    with read_priority.read_running():
        thread = threading.Thread(target=reader_thread)
        thread.start()
        assert done.wait(5)
    thread.join()
    assert _steps() == before


def test_admission_counts_a_read_from_its_admission_to_its_answer_and_a_worker_call_not_at_all() -> None:
    async def scenario() -> None:
        admission = Admission(AdmissionLimits(worker_threads=2, calls_per_tenant=2, reader_threads=2, reader_share=1))
        gate = threading.Event()
        seen: list[int] = []
        try:
            write = asyncio.ensure_future(admission.run("writer", gate.wait, 10))
            await asyncio.sleep(0.05)
            assert _running() == 0  # a worker call is no read
            first = asyncio.ensure_future(admission.run("reader", gate.wait, 10, lane=Lane.READERS))
            queued = asyncio.ensure_future(admission.run("reader", gate.wait, 10, lane=Lane.LOOP))
            await asyncio.sleep(0.05)
            seen.append(_running())  # one running on a reader thread, one queued behind it (the share)
            gate.set()
            assert all(await asyncio.gather(write, first, queued))
            seen.append(_running())
            assert await admission.run("reader", lambda: "inline", lane=Lane.LOOP) == "inline"
            seen.append(_running())
        finally:
            gate.set()
            admission.stop()
        assert seen == [2, 0, 0]

    asyncio.run(scenario())


def _running() -> int:
    return read_priority._reads_running


def test_stretches_of_bulk_work_take_turns_step_by_step_and_a_nested_one_is_one() -> None:
    inside: list[str] = []
    overlaps: list[int] = []
    steps: list[str] = []
    start = threading.Barrier(3)

    def stretch(name: str) -> None:
        start.wait(timeout=10)
        with read_priority.bulk_work():
            with read_priority.bulk_work():  # nested: the same turn
                for _ in range(50):
                    inside.append(name)
                    overlaps.append(len(inside))
                    steps.append(name)
                    sum(range(20_000))  # a step of Python
                    inside.remove(name)
                    read_priority.give_way()

    threads = [threading.Thread(target=stretch, args=(name,)) for name in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert max(overlaps) == 1  # never two stretches' steps at once
    assert sorted(steps) == sorted("abc" * 50)
    # Turns pass at every step while others wait: no stretch ran all its steps in one go.
    runs = [len(list(run)) for _, run in itertools.groupby(steps)]
    assert max(runs) < 50


def test_two_batches_of_long_look_alike_texts_take_turns_give_way_to_another_tenant_s_read_and_end(
    server_factory, tmp_path: Path
) -> None:
    park = tmp_path / "park"
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_PARK_TENANT": "reader", "MNEMOSYNE_TEST_PARK_FILE": str(park)}, metrics=True
    ).start()
    long_note = "ticket RF-88213 opened on 8 May 2023, " + "words of a long note " * 400

    def note(n: int) -> str:  # told apart by letters, not digits: the same atoms
        return f"note {''.join(chr(97 + int(digit)) for digit in str(n))}: {long_note}"

    def batch(first: int) -> list[str]:
        return [note(n) for n in range(first, first + 20)]

    with MemoryClient(server.target) as client:
        client.retain("reader", "a memory of the reading tenant")
        client.retain_batch("writer", batch(0))
        assert gauge(server, "mnemosyne_write_steps_given_way") == 0  # nothing was being read
        with parked_recall(server, park, "reader") as parked:
            # The read never ends while the batches run: they take turns (their near-duplicate
            # checks on helper threads too), give way at their steps for a bounded time each,
            # and end.
            with MemoryClient(server.target, timeout=60, retries=0) as writer, ThreadPoolExecutor(2) as pool:
                batches = [pool.submit(writer.retain_batch, "writer", batch(first)) for first in (100, 200)]
                for done in batches:
                    assert [o.status for o in done.result(timeout=90)] == ["created"] * 20
            assert gauge(server, "mnemosyne_write_steps_given_way") > 0
            assert gauge(server, "mnemosyne_write_seconds_given_way") > 0
        assert parked.result(timeout=30).hits[0].memory.text == "a memory of the reading tenant"
        near = client.retain_batch("writer", [note(300)])[0]
        assert near.status == "created" and near.near_duplicate_of  # the atoms were read: same ticket, same date
