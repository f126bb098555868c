"""The read gate an erasure's WAL truncation closes (store/read_gate.py), driven directly: the
timings of real truncations beside reads are in tests/test_erasure.py."""

from __future__ import annotations

import asyncio
import threading
import time

from mnemosyne.store.read_gate import ReadGate


def _closed_while_a_read_is_under_way(gate: ReadGate) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """The gate closed by another thread, held closed by a read under way until ``release``."""
    inside, closing, release = threading.Event(), threading.Event(), threading.Event()

    def reader() -> None:
        with gate.reading():
            inside.set()
            release.wait(10)

    def closer() -> None:
        inside.wait(10)
        closing.set()
        with gate.closed(10):
            pass

    threads = [threading.Thread(target=reader), threading.Thread(target=closer)]
    for thread in threads:
        thread.start()
    closing.wait(10)
    time.sleep(0.05)  # the closer is waiting for the read under way
    return release, closing, threads[1]


def test_a_new_read_waits_while_the_gate_is_closed_and_goes_on_once_it_opens() -> None:
    gate = ReadGate()
    release, _, closer = _closed_while_a_read_is_under_way(gate)
    entered = threading.Event()

    def late_reader() -> None:
        with gate.reading():
            entered.set()

    late = threading.Thread(target=late_reader)
    late.start()
    assert not entered.wait(0.2)  # held at the closed gate
    release.set()
    assert entered.wait(5)
    late.join(5)
    closer.join(5)


def test_a_read_on_an_event_loop_never_waits_at_the_gate() -> None:
    """A lone short read runs on the server's event loop: held at the gate, it would hold up every
    tenant's calls for the truncation's length."""
    gate = ReadGate()
    release, _, closer = _closed_while_a_read_is_under_way(gate)

    async def read_on_the_loop() -> float:
        began = time.monotonic()
        with gate.reading():
            return time.monotonic() - began

    try:
        assert asyncio.run(read_on_the_loop()) < 0.1
    finally:
        release.set()
        closer.join(5)
