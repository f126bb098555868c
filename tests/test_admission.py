"""Admission's accounting under cancellation: whatever moment a caller is cancelled at (queued,
just given its place, running), every place and every queue slot comes back.

The gRPC-level behaviour (limits, refusals, fairness between tenants) is in
tests/test_fair_serving.py; this drives the module itself with thousands of races that a real
client cannot time as precisely.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.errors import InvalidArgument
from mnemosyne.transport.admission import INLINE_READ_SECONDS, Admission, AdmissionLimits, Lane


def test_cancelled_callers_give_back_every_place_and_slot() -> None:
    async def scenario() -> None:
        admission = Admission(
            AdmissionLimits(
                worker_threads=4, calls_per_tenant=2, reader_threads=2, reader_share=1, queued_calls_per_tenant=1000
            )
        )
        rng = random.Random(7)
        release = threading.Event()
        finished = 0

        def work(seconds: float) -> None:
            nonlocal finished
            time.sleep(seconds)
            finished += 1

        try:
            for _round in range(20):
                tasks = [
                    asyncio.ensure_future(
                        admission.run(f"t{rng.randrange(5)}", work, rng.random() / 500, lane=rng.choice(list(Lane)))
                    )
                    for _ in range(60)
                ]
                # Cancel a random third of them at random moments: queued, just dispatched, running.
                for _ in range(20):
                    await asyncio.sleep(rng.random() / 1000)
                    rng.choice(tasks).cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for _ in range(200):  # jobs of cancelled callers finish on their threads
                    if admission.running == admission.reading == 0:
                        break
                    await asyncio.sleep(0.01)
                assert (admission.running, admission.reading, admission.queued) == (0, 0, 0)
            assert finished > 0
        finally:
            release.set()
            admission.stop()

    asyncio.run(scenario())


def test_a_tenant_at_its_share_lets_another_tenant_in_at_the_next_free_worker() -> None:
    async def scenario() -> None:
        admission = Admission(AdmissionLimits(worker_threads=3, calls_per_tenant=2))
        gate = threading.Event()
        order: list[str] = []

        def blocked(name: str) -> None:
            gate.wait(10)
            order.append(name)

        try:
            noisy = [asyncio.ensure_future(admission.run("noisy", blocked, f"noisy-{i}")) for i in range(6)]
            await asyncio.sleep(0.05)
            assert (admission.running, admission.queued) == (2, 4)  # its share of the 3 threads
            quiet = await asyncio.wait_for(admission.run("quiet", lambda: "answered"), 5)
            assert quiet == "answered"  # the third thread, while noisy waits for its own
            gate.set()
            await asyncio.gather(*noisy)
            assert sorted(order) == sorted(f"noisy-{i}" for i in range(6))
        finally:
            gate.set()
            admission.stop()

    asyncio.run(scenario())


def test_a_queued_caller_cancelled_as_a_worker_frees_up_takes_no_place() -> None:
    """The race that leaked a place: the caller is cancelled (its turn cancelled at once, its
    code resuming later) and, before it resumes, a finishing job hands the free worker on."""

    async def scenario() -> None:
        admission = Admission(AdmissionLimits(worker_threads=1, calls_per_tenant=1))
        gate, returned = threading.Event(), threading.Event()

        def first() -> None:
            gate.wait(10)
            returned.set()

        try:
            running = asyncio.ensure_future(admission.run("t", first))
            queued = asyncio.ensure_future(admission.run("t", lambda: None))
            await asyncio.sleep(0.05)
            assert (admission.running, admission.queued) == (1, 1)
            gate.set()
            assert returned.wait(5)
            time.sleep(0.05)  # the worker has handed its finish to the loop (not run yet)
            queued.cancel()  # now, before the loop runs that finish
            await asyncio.wait_for(asyncio.gather(running, queued, return_exceptions=True), 5)
            assert queued.cancelled()
            assert (admission.running, admission.queued) == (0, 0)
            assert await asyncio.wait_for(admission.run("t", lambda: "next"), 5) == "next"
        finally:
            gate.set()
            admission.stop()

    asyncio.run(scenario())


def test_slow_calls_on_every_worker_thread_never_hold_a_read_and_reads_keep_to_their_share() -> None:
    async def scenario() -> None:
        admission = Admission(AdmissionLimits(worker_threads=2, calls_per_tenant=2, reader_threads=2, reader_share=1))
        gate = threading.Event()
        try:
            slow = [asyncio.ensure_future(admission.run("noisy", gate.wait, 10)) for _ in range(3)]
            reads = [asyncio.ensure_future(admission.run("noisy", gate.wait, 10, lane=Lane.READERS)) for _ in range(3)]
            await asyncio.sleep(0.05)
            # Every worker thread is held; of the two reader threads the tenant holds its share.
            assert (admission.running, admission.reading, admission.queued) == (2, 1, 1 + 2)
            answered = admission.run("quiet", lambda: "read", lane=Lane.READERS)
            assert await asyncio.wait_for(answered, 5) == "read"  # the other reader thread
            gate.set()
            assert all(await asyncio.gather(*slow, *reads))
            assert (admission.running, admission.reading, admission.queued) == (0, 0, 0)
        finally:
            gate.set()
            admission.stop()

    asyncio.run(scenario())


def test_a_read_share_above_the_reader_threads_is_refused_at_start() -> None:
    with pytest.raises(InvalidArgument) as refused:
        AdmissionLimits(reader_threads=2, reader_share=3)
    assert refused.value.reason == "CONFIG_INVALID" and "--reader-share" in refused.value.message


def _thread_of_a_read(admission: Admission, tenant: str, seconds: float = 0.0) -> Any:
    """The thread a read of ``tenant`` taking ``seconds`` of CPU ran on (a coroutine)."""

    def read() -> threading.Thread:
        until = time.thread_time() + seconds  # CPU time: what admission measures a read by
        while time.thread_time() < until:
            pass
        return threading.current_thread()

    return admission.run(tenant, read, lane=Lane.LOOP)


def _admitted(admission: Admission, coroutine: Any) -> Any:
    """``coroutine`` as a call the edge admitted (entered, and left when it ends)."""

    async def call() -> Any:
        admission.enter()
        try:
            return await coroutine
        finally:
            admission.leave()

    return call()


def test_a_lone_quick_snapshot_read_runs_on_the_event_loop_and_a_slow_tenant_s_on_a_reader_thread() -> None:
    async def scenario() -> None:
        admission = Admission()
        loop_thread = threading.current_thread()
        try:
            # A tenant not measured yet: a reader thread first; quick since, so the loop.
            assert await _admitted(admission, _thread_of_a_read(admission, "quick")) is not loop_thread
            assert await _admitted(admission, _thread_of_a_read(admission, "quick")) is loop_thread
            # A read slower than the bound sends the tenant's next reads to a thread, alone or not.
            slow = _thread_of_a_read(admission, "quick", INLINE_READ_SECONDS * 3)
            assert await _admitted(admission, slow) is loop_thread
            assert await _admitted(admission, _thread_of_a_read(admission, "quick")) is not loop_thread
            slow = _thread_of_a_read(admission, "slow", INLINE_READ_SECONDS * 3)
            assert await _admitted(admission, slow) is not loop_thread
            assert await _admitted(admission, _thread_of_a_read(admission, "slow")) is not loop_thread
            # Writes, and reads that may wait for another thread's lock (READERS), never run on the loop.
            for lane in (Lane.WORKERS, Lane.READERS):
                await _admitted(admission, admission.run("quick", threading.current_thread, lane=lane))
                ran_on = await _admitted(admission, admission.run("quick", threading.current_thread, lane=lane))
                assert ran_on is not loop_thread
            assert (admission.running, admission.reading, admission.queued) == (0, 0, 0)
            assert admission.reads == {"event_loop": 2, "reader_thread": 4}
        finally:
            admission.stop()

    asyncio.run(scenario())


def test_a_snapshot_read_beside_another_call_runs_on_a_reader_thread() -> None:
    async def scenario() -> None:
        admission = Admission()
        loop_thread = threading.current_thread()
        gate = threading.Event()
        try:
            await _admitted(admission, _thread_of_a_read(admission, "quiet"))  # measured: quick
            assert await _admitted(admission, _thread_of_a_read(admission, "quiet")) is loop_thread
            # Another call admitted and running on a thread (a write of another tenant, a read).
            for lane in (Lane.WORKERS, Lane.READERS):
                other = asyncio.ensure_future(_admitted(admission, admission.run("noisy", gate.wait, 10, lane=lane)))
                await asyncio.sleep(0.05)
                assert await _admitted(admission, _thread_of_a_read(admission, "quiet")) is not loop_thread
                gate.set()
                assert await other
                gate.clear()
            # Another call admitted, still on the loop (being authorised, forwarded): a thread too.
            admission.enter()
            assert await _admitted(admission, _thread_of_a_read(admission, "quiet")) is not loop_thread
            admission.leave()
            # An open stream waits on the loop and holds no thread: a lone read still runs there.
            admission.enter()
            with admission.stream("watcher"):
                assert await _admitted(admission, _thread_of_a_read(admission, "quiet")) is loop_thread
            admission.leave()
        finally:
            gate.set()
            admission.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("flag", "value", "most"),
    [
        ("--worker-threads", "50000000", "1024"),
        ("--reader-threads", "1025", "1024"),
        ("--queued-calls", "1000000000", "1000000"),
        ("--mcp-session-idle-seconds", "0", "1000000"),
        ("--streams-per-tenant", "2000000", "1000000"),
    ],
)
def test_a_limit_out_of_its_range_is_refused_at_start_in_one_line(
    tmp_path: Path, flag: str, value: str, most: str
) -> None:
    """Threads are made up front: a number past any machine's must be refused, not stall the start."""
    data = tmp_path / "data"
    ports = ["--port", "0", "--http-port", "0", "--metrics-port", "0"]
    command = [sys.executable, "-m", "mnemosyne.cli", "serve", "--data-dir", str(data), *ports, flag, value]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"mnemosyne serve: error: argument {flag}: the value is '{value}'; it must be a whole number from 1 to {most}"
    )
    assert "Traceback" not in refused.stderr and not data.exists()
