"""Background threads yield the processor to request threads (mnemosyne/background.py): the
hot-path workers and store maintenance run under Linux's SCHED_IDLE policy, request threads keep
the normal one, and a background thread that falls behind competes as an equal until it has
caught up."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.runtime.background import URGENT_AFTER_SECONDS, become_background_thread, keep_up, request_thread
from mnemosyne.store.locks import LockManager
from tests.support import gauge, threads_at, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")


def _policies(pid: int) -> list[int]:
    policies = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            policies.append(os.sched_getscheduler(int(tid)))
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return policies


def test_a_background_thread_idles_and_competes_again_once_behind() -> None:
    seen: list[int] = []

    def background() -> None:
        become_background_thread()
        seen.append(os.sched_getscheduler(0))
        keep_up(URGENT_AFTER_SECONDS / 2)  # a little behind: stays idle
        seen.append(os.sched_getscheduler(0))
        keep_up(URGENT_AFTER_SECONDS * 2)  # far behind: normal policy until caught up
        seen.append(os.sched_getscheduler(0))
        keep_up(0.0)
        seen.append(os.sched_getscheduler(0))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_IDLE, os.SCHED_IDLE, os.SCHED_OTHER, os.SCHED_IDLE]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # only the calling thread changed


def test_a_background_thread_holding_a_tenant_lock_runs_at_normal_priority() -> None:
    """A request waiting for a tenant's write lock must never wait for an idle-priority holder
    that busy cores would not schedule (a priority ceiling)."""
    lock = LockManager().for_tenant("t")
    seen: list[int] = []

    def background() -> None:
        become_background_thread()
        with lock:
            seen.append(os.sched_getscheduler(0))
            with lock:  # re-entered (engine helpers nest): still normal, and after the inner exit
                seen.append(os.sched_getscheduler(0))
            seen.append(os.sched_getscheduler(0))
        seen.append(os.sched_getscheduler(0))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_OTHER, os.SCHED_OTHER, os.SCHED_OTHER, os.SCHED_IDLE]
    with lock:  # a request thread's use changes nothing
        assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_a_request_pool_started_by_a_background_thread_runs_at_normal_priority() -> None:
    """A new thread inherits its creator's policy: the engine's pools (near-duplicate search,
    model calls), started lazily by whichever thread first needs them, reset theirs."""
    seen: dict[str, int] = {}

    def background() -> None:
        become_background_thread()
        with futures.ThreadPoolExecutor(max_workers=1) as inherited:
            seen["without initializer"] = inherited.submit(os.sched_getscheduler, 0).result()
        with futures.ThreadPoolExecutor(max_workers=1, initializer=request_thread) as pool:
            seen["request_thread"] = pool.submit(os.sched_getscheduler, 0).result()

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == {"without initializer": os.SCHED_IDLE, "request_thread": os.SCHED_OTHER}


def test_a_servers_workers_and_maintenance_idle_while_its_request_threads_do_not(
    server_factory, tmp_path: Path
) -> None:
    server = server_factory().start()
    assert server.process is not None
    pid = server.pid
    with MemoryClient(server.target, timeout=60) as c:
        # Over 4 MB of writes: the WAL crosses its threshold and the maintenance thread starts.
        for batch in range(8):
            c.retain_batch("busy", [f"entry {batch}-{i} " + os.urandom(8000).hex() for i in range(40)])
        # Sampled until the maintenance pass has started and no background thread is inside a
        # transaction (where it runs at normal priority: the other test).
        deadline = time.monotonic() + 10
        policies = _policies(pid)
        while policies.count(os.SCHED_IDLE) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            policies = _policies(pid)
        assert c.recall("busy", "entry 7-7", k=1)  # still serving
    # Two hot-path workers and the maintenance thread; the main and gRPC threads stay normal.
    assert policies.count(os.SCHED_IDLE) == 3, policies
    assert policies.count(os.SCHED_OTHER) >= 2, policies


def test_the_worker_taking_a_write_a_read_waits_for_leaves_idle_priority(server_factory, tmp_path: Path) -> None:
    """The hot-path round of a write a token read (or Flush) waits for runs at the normal priority:
    a request waits for it. Before, it ran idle until the write was 2 s old, and busy cores starved
    it past a Flush's one second (a loaded run: HOT_PATH_DEADLINE_EXCEEDED)."""
    hold, backlog = tmp_path / "hold", tmp_path / "backlog"  # the round holds before its commit
    backlog.touch()  # the workers take only a write someone waits for: its round begins once the read waits
    env = {"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold), "MNEMOSYNE_TEST_HOLD_BACKLOG": str(backlog)}
    server = server_factory(env=env).start()
    with MemoryClient(server.target) as client:
        client.hot_path("t", "enable")
        hold.touch()
        client.retain("t", "The spare fuse is in cabinet F-2210", fast=True)
        idle = threads_at(server.pid, os.SCHED_IDLE)  # the hot path's workers among them
        with futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.recall, "t", "spare fuse cabinet", 1)  # waits for the write
            wait_until(lambda: "held at commit" in server.stderr_path.read_text(errors="replace"))
            running = idle & threads_at(server.pid, os.SCHED_OTHER)
            hold.unlink()
            assert [hit.memory.text for hit in waiting.result(timeout=60)] == ["The spare fuse is in cabinet F-2210"]
    assert running  # the worker holding the awaited round


@contextlib.contextmanager
def _a_read_waiting_for_a_held_round(server_factory, hold: Path, stage: str) -> Iterator[tuple[Any, set[int]]]:
    """A server whose worker took a fast write's round with no one waiting (at idle priority) and
    holds at ``stage``; a read then waits for that write. Yields (the server, the threads idle
    before the read: that worker among them); the round is let go and the read's answer checked."""
    hold.write_text(stage)
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, metrics=True).start()
    with MemoryClient(server.target) as client:
        client.hot_path("t", "enable")
        client.retain("t", "The spare fuse is in cabinet F-2210", fast=True)
        wait_until(lambda: f"held at {stage}" in server.stderr_path.read_text(errors="replace"))
        idle = threads_at(server.pid, os.SCHED_IDLE)
        with futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.recall, "t", "spare fuse cabinet", 1)  # waits for the write
            wait_until(lambda: gauge(server, "mnemosyne_waiting_calls") == 1)
            yield server, idle
            hold.unlink()
            assert [hit.memory.text for hit in waiting.result(timeout=60)] == ["The spare fuse is in cabinet F-2210"]


def test_a_round_taken_before_a_read_waits_for_its_write_leaves_idle_priority_once_it_does(
    server_factory, tmp_path: Path
) -> None:
    """A round taken at idle priority (no one waiting yet) whose write a read then waits for goes
    on at the normal priority. Before, the priority was decided once, when the round was taken: a
    read waiting from just after that waited for an idle thread's commit (a loaded run: the test
    above, its read registered between the take and the round's claim)."""
    hold = tmp_path / "hold"
    with _a_read_waiting_for_a_held_round(server_factory, hold, "inbox") as (server, idle):
        time.sleep(0.1)  # its writes named to the workers, a step after it is counted
        hold.write_text("commit")  # the round goes on, and holds again before its commit
        wait_until(lambda: "held at commit" in server.stderr_path.read_text(errors="replace"))
        running = idle & threads_at(server.pid, os.SCHED_OTHER)
    assert running  # the worker holding the awaited round


def test_a_round_that_claimed_its_writes_before_a_read_waits_for_them_is_hurried_by_the_read(
    server_factory, tmp_path: Path
) -> None:
    """A round that claimed its writes with no one waiting (its priority decided: idle) goes on at
    the normal priority once a read begins waiting for them. Before, it embedded and committed at
    idle priority: busy cores starved the read past its deadline until the write was 2 s old."""
    with _a_read_waiting_for_a_held_round(server_factory, tmp_path / "hold", "claimed") as (server, idle):
        wait_until(lambda: bool(idle & threads_at(server.pid, os.SCHED_OTHER)), seconds=5)
        assert "held at commit" not in server.stderr_path.read_text(errors="replace")  # still held
    # Done with the tenant, the worker idles again.
    wait_until(lambda: not idle & threads_at(server.pid, os.SCHED_OTHER), seconds=5)
