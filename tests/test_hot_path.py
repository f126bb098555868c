"""The hot path (the specification's §9.1–9.2, docs/seed-mapping.md): per-tenant asynchronous writes, the flush barrier, Disable,
Status, poison operations and the recovery index — against real server processes."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import (
    AbortedError,
    DeadlineExceededError,
    MemoryClient,
    MnemosyneClientError,
    NotFoundError,
    RetainItem,
)
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem as EngineRetainItem
from mnemosyne.errors import DeadlineExceeded
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.pending_index import INDEX_FILE_NAME
from tests.support import ServerFactory, ServerProcess, wait_until


def _indexed_tenants(data_dir: Path) -> set[str]:
    with sqlite3.connect(f"file:{data_dir / INDEX_FILE_NAME}?mode=ro", uri=True) as db:
        return {row[0] for row in db.execute("SELECT tenant FROM pending")}


def _held_workers(
    server_factory: ServerFactory, tmp_path: Path, env: dict[str, str] | None = None, **options: Any
) -> tuple[ServerProcess, Path]:
    """A started server whose hot-path workers hold before committing while the returned file
    exists (it does until the test removes it)."""
    hold = tmp_path / "hold"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold), **(env or {})}, **options).start()
    return server, hold


def test_unmarked_retain_on_an_enabled_tenant_is_readable_on_return(client: MemoryClient, tenant: str) -> None:
    assert client.hot_path(tenant, "enable").enabled
    result = client.retain(tenant, "Synchronous write on an enabled tenant: locker L-4471")
    assert result.status == "created" and result.memory_id > 0
    hits = client.recall(tenant, "locker L-4471", k=3)
    assert [h.memory.id for h in hits][:1] == [result.memory_id]
    assert client.hot_path(tenant, "status").accepted == 0  # nothing went through the log


def test_fast_retain_enqueues_and_flush_makes_it_readable(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    result = client.retain(tenant, "Fast write: the courier code is CX-9921", fast=True)
    assert result.status == "enqueued" and result.event_id > 0 and result.memory_id == 0
    flushed = client.hot_path(tenant, "flush")
    assert flushed.failed == 0 and flushed.failed_event_ids == []
    event = client.get_event(tenant, result.event_id)
    assert event.status == "succeeded" and len(event.created_memory_ids) == 1 and event.extracted
    assert event.finished_at is not None and event.latency_ms >= 0
    hits = client.recall(tenant, "courier code CX-9921", k=3)
    assert hits and hits[0].memory.id == event.created_memory_ids[0]
    status = client.hot_path(tenant, "status")
    assert (status.accepted, status.succeeded, status.failed, status.queue_depth) == (1, 1, 0, 0)
    assert status.writes == 1 and status.model_calls == 1


def test_fast_is_synchronous_while_the_hot_path_is_disabled(client: MemoryClient, tenant: str) -> None:
    result = client.retain(tenant, "Fast flag on a tenant without hot path", fast=True)
    assert result.status == "created"
    assert client.recall(tenant, "fast flag tenant without hot path", k=1)[0].memory.id == result.memory_id


def test_enqueue_is_idempotent_by_request_id(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    first = client.retain(tenant, "Idempotent enqueue of parcel PX-1", request_id="enqueue-1", fast=True)
    again = client.retain(tenant, "Idempotent enqueue of parcel PX-1", request_id="enqueue-1", fast=True)
    assert again == first and first.status == "enqueued"
    with pytest.raises(AbortedError) as caught:
        client.retain(tenant, "another text", request_id="enqueue-1", fast=True)
    assert caught.value.reason == "IDEMPOTENCY_KEY_REUSED"
    client.hot_path(tenant, "flush")
    assert client.hot_path(tenant, "status").accepted == 1
    assert len(client.list_memories(tenant).memories) == 1


def test_fast_batch_items_are_independent_events(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    results = client.retain_batch(
        tenant, ["batch item one", "", RetainItem("batch item two", scope="bad scope")], fast=True
    )
    assert [r.status for r in results] == ["enqueued", "invalid", "invalid"]
    assert results[1].error_reason and results[2].error_reason
    # Flush counts only what was still open when it was called (a worker may have been faster),
    # so the outcome is read from the event itself.
    assert client.hot_path(tenant, "flush").failed == 0
    assert client.get_event(tenant, results[0].event_id).status == "succeeded"
    assert [m.text for m in client.list_memories(tenant).memories] == ["batch item one"]


def test_get_event_of_unknown_id_is_not_found(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    with pytest.raises(NotFoundError) as caught:
        client.get_event(tenant, 424242)
    assert caught.value.reason == "EVENT_NOT_FOUND"


def test_a_fast_write_is_not_readable_before_it_is_processed(server_factory, tmp_path: Path) -> None:
    """The promise the hot path does NOT make (seed §9.2) without a consistency token: a read that
    carries none (here opted out of the client's session) does not see a fast write still queued."""
    server, hold = _held_workers(server_factory, tmp_path)
    with MemoryClient(server.target) as c:
        c.hot_path("stale", "enable")
        event_id = c.retain("stale", "Refund ticket RF-88213 awaits finance review", fast=True).event_id
        assert c.recall("stale", "refund ticket RF-88213", k=3, consistency_token="") == []  # accepted, not on disk
        assert c.get_event("stale", event_id).status in ("pending", "running")
        hold.unlink()
        c.hot_path("stale", "flush", timeout_seconds=60)  # the barrier
        assert c.recall("stale", "refund ticket RF-88213", k=3)[0].memory.text.startswith("Refund ticket RF-88213")


def test_enabled_flag_survives_a_restart(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as c:
        c.hot_path("flagged", "enable")
    server.kill()
    server.restart()
    with MemoryClient(server.target) as c:
        assert c.hot_path("flagged", "status").enabled
        assert c.retain("flagged", "after restart the fast path still queues", fast=True).status == "enqueued"
        c.hot_path("flagged", "disable")
    server.terminate()
    server.restart()
    with MemoryClient(server.target) as c:
        assert not c.hot_path("flagged", "status").enabled


def test_flush_under_a_5000_write_backlog_returns_only_when_all_are_readable(server_factory, tmp_path: Path) -> None:
    server, hold = _held_workers(server_factory, tmp_path, args=["--synchronous", "normal"])
    texts = [f"Backlog entry {i}: shelf SH-{i:05d} holds {i % 97} boxes" for i in range(5000)]
    # 600 s: the 5,000 writes took 68-83 s on a loaded machine, once past 120 s; no promise of speed.
    with MemoryClient(server.target, timeout=600) as c:
        c.hot_path("backlog", "enable")
        for start in range(0, 5000, 1000):
            results = c.retain_batch("backlog", texts[start : start + 1000], fast=True)
            assert {r.status for r in results} == {"enqueued"}
        status = c.hot_path("backlog", "status")
        assert status.queue_depth == 5000 and status.accepted == 5000 and status.oldest_pending_seconds > 0
        # Held workers: the barrier gives up at its deadline, naming what remains; never hangs.
        with pytest.raises(DeadlineExceededError) as caught:
            c.hot_path("backlog", "flush", timeout_seconds=0.5)
        assert int(caught.value.metadata["remaining_depth"]) > 0
        assert "still pending or running" in caught.value.message
        hold.unlink()
        flushed = c.hot_path("backlog", "flush", timeout_seconds=600)
        # Flush counts what was still open when it was called; released workers may already have
        # finished some of the 5000 by then, so the count is at most the backlog, and none failed.
        assert 0 < flushed.flushed <= 5000 and (flushed.succeeded, flushed.failed) == (flushed.flushed, 0)
    # Readable the moment flush returned: every memory is stored, and a sample is recalled. Read by
    # a client without the writer's consistency token, whose reads would wait for the writes.
    with MemoryClient(server.target, timeout=120, session_consistency=False) as c:
        assert c.hot_path("backlog", "status").queue_depth == 0
        token, stored = "", 0
        while True:
            page = c.list_memories("backlog", page_size=1000, page_token=token)
            stored += len(page.memories)
            token = page.next_page_token
            if not token:
                break
        assert stored == 5000
        for i in (0, 1234, 4999):
            assert c.recall("backlog", f"shelf SH-{i:05d}", k=1)[0].memory.text == texts[i]
        status = c.hot_path("backlog", "status")
        assert (status.queue_depth, status.succeeded, status.writes, status.model_calls) == (0, 5000, 5000, 5000)
    # A finished operation keeps its event, not a second copy of its memory's vector.
    with sqlite3.connect(f"file:{server.tenant_file('backlog')}?mode=ro", uri=True) as db:
        assert db.execute("SELECT count(*), count(embedding) FROM oplog").fetchone() == (5000, 0)


def test_a_store_fault_in_the_workers_backs_off_and_loses_nothing(server_factory, tmp_path: Path) -> None:
    # The tenant file may not grow past 80 pages (SQLite's own SQLITE_FULL): fill it with queued
    # writes while the workers are held, so applying them cannot fit.
    server, hold = _held_workers(server_factory, tmp_path, env={"MNEMOSYNE_TEST_FAULTS": "max_page_count=80"})
    accepted = 0
    with MemoryClient(server.target, retries=0) as c:
        c.hot_path("cramped", "enable")
        for n in range(400):
            try:
                c.retain("cramped", f"queued {n}: " + " ".join(f"word{n}x{i}" for i in range(120)), fast=True)
            except MnemosyneClientError as exc:
                assert exc.reason == "DISK_FULL"
                break
            accepted += 1
        else:
            pytest.fail("the file never filled")
        hold.unlink()
        # Each failed round is retried after a doubling delay, never in a tight loop.
        deadline = time.monotonic() + 60
        delays: list[str] = []
        while len(delays) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
            delays = re.findall(r"retrying in ([0-9.]+)s", server.stderr_path.read_text())
        assert delays[:3] == ["0.5", "1.0", "2.0"]
        status = c.hot_path("cramped", "status")
        # Nothing failed for good or went missing (a first write may have fit in the last pages).
        assert status.queue_depth > 0 and status.failed == 0
        assert status.queue_depth + status.succeeded == accepted
    # Space freed (restarted without the limit): every accepted write is applied.
    server.stop()
    server.env.pop("MNEMOSYNE_TEST_FAULTS")
    server.restart()
    with MemoryClient(server.target) as c:
        flushed = c.hot_path("cramped", "flush", timeout_seconds=60)
        assert c.hot_path("cramped", "status").succeeded == accepted
        assert flushed.failed == 0
        assert len(c.list_memories("cramped", page_size=1000).memories) == accepted


def test_poison_operation_ends_failed_and_never_blocks_the_others(server_factory) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_POISON_MARKER": "POISON"}).start()
    with MemoryClient(server.target) as c:
        c.hot_path("poisoned", "enable")
        before = c.retain("poisoned", "good write before the poison", fast=True).event_id
        poison = c.retain("poisoned", "this one is POISON for the model", fast=True).event_id
        wait_until(lambda: c.get_event("poisoned", poison).attempts >= 1)  # failed once: in its backoff
        after = c.retain("poisoned", "good write after the poison", fast=True).event_id
        # Accepted behind the poison while it backs off (0.5 s, then 1 s): applied before the poison's
        # end, never after it (checked below, by when each finished: no race with the backoff).
        # Failed attempts back off (0.5 s, then 1 s) before the third and last, so the poison is
        # still open when the barrier is called; the barrier covers it and names it.
        flushed = c.hot_path("poisoned", "flush", timeout_seconds=60)
        assert (flushed.failed, flushed.failed_event_ids) == (1, [poison])
        assert flushed.succeeded == flushed.flushed - 1
        failed = c.get_event("poisoned", poison)
        assert failed.status == "failed" and failed.error_reason == "EXTRACTION_FAILED"
        assert failed.attempts == 3 and "3 failed attempts" in failed.error_message
        assert {c.get_event("poisoned", e).status for e in (before, after)} == {"succeeded"}
        finished_after = c.get_event("poisoned", after).finished_at
        assert finished_after is not None and failed.finished_at is not None
        assert finished_after < failed.finished_at, "the write behind the poison waited for its end"
        assert [e.event_id for e in c.list_events("poisoned", status="failed").events] == [poison]
        status = c.hot_path("poisoned", "status")
        assert (status.failed, status.succeeded, status.queue_depth) == (1, 2, 0)
        # ("after" and "before" are stop words, so both good writes match the query equally.)
        recalled = {h.memory.text for h in c.recall("poisoned", "good write after the poison", k=2)}
        assert recalled == {"good write before the poison", "good write after the poison"}


def test_disable_stops_queueing_and_drains(server_factory, tmp_path: Path) -> None:
    server, hold = _held_workers(server_factory, tmp_path)
    with MemoryClient(server.target) as c:
        c.hot_path("draining", "enable")
        c.retain_batch("draining", [f"queued before disable {i}" for i in range(10)], fast=True)
        with pytest.raises(DeadlineExceededError) as caught:
            c.hot_path("draining", "disable", timeout_seconds=0.3)
        assert int(caught.value.metadata["remaining_depth"]) == 10
        # Disabled already: a fast write is now synchronous and readable on return.
        assert c.retain("draining", "written after disable", fast=True).status == "created"
        hold.unlink()
        status = c.hot_path("draining", "disable", timeout_seconds=60)
        assert not status.enabled and status.queue_depth == 0 and status.succeeded == 10


def test_recovery_index_names_exactly_the_tenants_with_open_operations(server_factory, tmp_path: Path) -> None:
    server, hold = _held_workers(server_factory, tmp_path)
    with MemoryClient(server.target) as c:
        c.hot_path("busy", "enable")
        c.hot_path("idle", "enable")
        c.retain("idle", "a synchronous write leaves no open operation")
        c.retain_batch("busy", [f"pending at the crash {i}" for i in range(5)], fast=True)
    server.kill()
    assert _indexed_tenants(server.data_dir) == {"busy"}
    hold.unlink()
    server.restart()  # recovery resumes "busy" without being asked
    with MemoryClient(server.target) as c:
        # No flush here (a flush would schedule the tenant itself): only Status, which never does.
        deadline = time.monotonic() + 60
        while c.hot_path("busy", "status").queue_depth and time.monotonic() < deadline:
            time.sleep(0.05)
        status = c.hot_path("busy", "status")
        assert (status.queue_depth, status.succeeded) == (0, 5)
        assert len(c.list_memories("busy").memories) == 5
    server.terminate()
    assert _indexed_tenants(server.data_dir) == set()


def test_workers_take_tenants_round_robin() -> None:
    from mnemosyne.engine.hot_path.scheduler import Scheduler

    scheduler = Scheduler()
    for name in ("busy", "quiet", "busy"):
        scheduler.notify(name)
    order = []
    for _ in range(4):
        tenant = scheduler.take()
        assert tenant is not None
        order.append(tenant)
        scheduler.done(tenant, more=tenant == "busy")  # "busy" always has more work
    # A tenant with a long backlog goes to the back after each round: the quiet one is not starved.
    assert order == ["busy", "quiet", "busy", "busy"]
    scheduler.notify("busy")  # already queued or busy: never twice in the queue
    scheduler.stop()
    assert scheduler.take() is None


def test_a_backed_off_tenant_is_taken_when_its_retry_time_comes() -> None:
    from mnemosyne.engine.hot_path.scheduler import Scheduler

    scheduler = Scheduler()
    scheduler.notify_at("retrying", time.time() - 1)  # its backoff already ended
    scheduler.notify("fresh")
    assert {scheduler.take(), scheduler.take()} == {"retrying", "fresh"}
    scheduler.stop()


def _says_disabled_with(message: str, queued: int) -> None:
    """A Disable past its deadline says the state it leaves, not only that it gave up."""
    assert "the hot path is disabled (new fast writes are written synchronously)" in message, message
    assert f"{queued} operations queued before it are still pending or running" in message, message
    assert "call Disable again to wait for them" in message, message


def test_a_disable_past_its_deadline_leaves_the_hot_path_disabled_and_says_so(server_factory, tmp_path: Path) -> None:
    """Not undone at its deadline: disabled (Status, a synchronous fast write), the queue still
    applied; a second Disable past its deadline says the same; once the queue drains one returns.
    Over gRPC (the server waits on its event loop) and in process (the blocking barrier)."""
    server, hold = _held_workers(server_factory, tmp_path)
    with MemoryClient(server.target) as c:
        c.hot_path("held", "enable")
        c.retain_batch("held", [f"queued before the disable {i}" for i in range(3)], fast=True)
        for timeout in (0.3, 1.0):  # the first Disable, then a second one with the queue still held
            with pytest.raises(DeadlineExceededError) as caught:
                c.hot_path("held", "disable", timeout_seconds=timeout)
            assert (caught.value.reason, caught.value.metadata["remaining_depth"]) == (
                "HOT_PATH_DEADLINE_EXCEEDED",
                "3",
            )
            _says_disabled_with(caught.value.message, 3)
            assert not c.hot_path("held", "status").enabled
            assert c.retain("held", f"written after a disable of {timeout}s", fast=True).status == "created"
        hold.unlink()
        status = c.hot_path("held", "disable", timeout_seconds=60)
        assert not status.enabled and status.queue_depth == 0 and status.succeeded == 3

    held = tmp_path / "held-in-process"
    held.touch()
    engine = Engine(EngineConfig(data_dir=tmp_path / "in-process"), seams=Seams(hold_workers_file=held))
    try:
        engine.hot_path.set_enabled("held", True)
        engine.retain_batch("held", [EngineRetainItem(text=f"queued in process {i}") for i in range(2)], fast=True)
        with pytest.raises(DeadlineExceeded) as refused:
            engine.hot_path.disable("held", 0.3)
        assert refused.value.reason == "HOT_PATH_DEADLINE_EXCEEDED"
        _says_disabled_with(refused.value.message, 2)
        assert not engine.hot_path.status("held").enabled
        assert (
            engine.retain("held", EngineRetainItem(text="written in process after it"), fast=True).status == "created"
        )
        held.unlink()
        assert engine.hot_path.disable("held", 60).queue_depth == 0
    finally:
        engine.close()
