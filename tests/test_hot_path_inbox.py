"""The tenant's inbox (store/inbox.py): fast writes wait in a file of their own until a worker
adopts them into the tenant's log. While there they are still events (GetEvent, ListEvents,
Status, the offline ``mnemosyne oplog`` view) and still answer a retried request id; a move
repeated after a crash applies nothing twice; event ids never go back."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

from mnemosyne.client import MemoryClient, RetainItem
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.hot_path.state import HOT_PATH_META
from mnemosyne.store.connections import configure
from mnemosyne.store.inbox import CHECKPOINT_PAGES, WAL_LIMIT_PAGES, Inbox
from mnemosyne.store.oplog_inspect import inspect_oplog
from mnemosyne.store.pool import TenantPool


def _inbox_ids(data_dir: Path, tenant: str) -> list[int]:
    import sqlite3

    with sqlite3.connect(f"file:{data_dir / 'inbox' / f'{tenant}.inbox.sqlite'}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT event_id FROM ops ORDER BY event_id")]


def test_writes_waiting_in_the_inbox_are_events_and_answer_their_request_id(server_factory, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.write_text("inbox")  # workers stop before taking anything from the inbox
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    with MemoryClient(server.target) as c:
        c.hot_path("waiting", "enable")
        first = c.retain_batch(
            "waiting", [RetainItem(f"inbox item {i}: shelf SH-{i}") for i in range(3)], fast=True, request_id="batch-1"
        )
        ids = [r.event_id for r in first]
        assert [r.status for r in first] == ["enqueued"] * 3 and ids == sorted(ids)
        time.sleep(0.3)  # a worker had the time to take them, were it not held
        assert _inbox_ids(server.data_dir, "waiting") == ids

        assert c.get_event("waiting", ids[1]).status == "pending"
        assert [e.event_id for e in c.list_events("waiting").events] == ids
        assert [e.event_id for e in c.list_events("waiting", status="pending").events] == ids
        assert c.list_events("waiting", status="succeeded").events == []
        status = c.hot_path("waiting", "status")
        assert (status.queue_depth, status.accepted, status.succeeded) == (3, 3, 0)
        offline = inspect_oplog(server.data_dir, "waiting")
        assert [o["event_id"] for o in offline["open"]] == ids and offline["accepted"] == ids
        # The tenant's size on disk counts its inbox too.
        tenant_files = sum(p.stat().st_size for p in (server.data_dir / "tenants").glob("waiting.sqlite*"))
        inbox_files = sum(p.stat().st_size for p in (server.data_dir / "inbox").glob("waiting.inbox.sqlite*"))
        assert inbox_files > 0 and c.stats("waiting").file_bytes == tenant_files + inbox_files

        # A retry finds its first answer in the inbox, on either path; a reused key is refused.
        again = c.retain_batch(
            "waiting", [RetainItem(f"inbox item {i}: shelf SH-{i}") for i in range(3)], fast=True, request_id="batch-1"
        )
        assert [r.event_id for r in again] == ids
        slow_retry = c.retain_batch(
            "waiting", [RetainItem(f"inbox item {i}: shelf SH-{i}") for i in range(3)], request_id="batch-1"
        )
        assert [r.event_id for r in slow_retry] == ids and all(r.memory_id == 0 for r in slow_retry)

        hold.unlink()
        flushed = c.hot_path("waiting", "flush", timeout_seconds=30)
        # The workers may take the three before the flush arrives: it counts only what it waited for.
        assert flushed.failed == 0 and flushed.flushed == flushed.succeeded <= 3
        assert _inbox_ids(server.data_dir, "waiting") == []
        assert [e.status for e in c.list_events("waiting").events] == ["succeeded"] * 3  # each once
        assert [
            r.event_id
            for r in c.retain_batch(
                "waiting",
                [RetainItem(f"inbox item {i}: shelf SH-{i}") for i in range(3)],
                fast=True,
                request_id="batch-1",
            )
        ] == ids  # the key moved to the tenant file with its operations
        assert len(c.list_memories("waiting", page_size=10).memories) == 3


def test_a_move_repeated_after_a_crash_applies_nothing_twice(tmp_path: Path) -> None:
    """A crash between the adoption (tenant file) and the removal (inbox) leaves the same
    operations in both files: built here with the store's own calls, on real files."""
    data = tmp_path / "data"
    pool = TenantPool(data, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("moved", create=True) as store:
            assert store is not None
            with store.write() as txn:
                txn.set_meta(HOT_PATH_META, "on")
            inbox = store.inbox(create=True)
            assert inbox is not None
            with inbox.write(sync=True) as itxn:
                for i in range(4):
                    itxn.append(
                        store.acceptances.take(),
                        "retain",
                        f'{{"metadata":{{}},"scope":"global","text":"moved twice {i}: bay MB-{i}"}}',
                        None,
                        None,
                        time.time(),
                    )
            with inbox.read() as itxn:
                ops = itxn.ops()
            with store.write() as txn:  # adopted, and then the process "dies" before the removal
                assert txn.oplog_adopt(ops, []) == 4
    finally:
        pool.close()
    assert len(_inbox_ids(data, "moved")) == 4

    engine = Engine(EngineConfig(data_dir=data, embedder="hashing"))
    try:
        # Before any round: each operation counted once, though it is in both files.
        status = engine.hot_path.status("moved")
        assert (status.queue_depth, status.accepted) == (4, 4)
        assert [e.event_id for e in engine.hot_path.list_events("moved", page_size=100).events] == [
            op.event_id for op in ops
        ]
        outcome = engine.hot_path.flush("moved", timeout=30)
        assert (outcome.flushed, outcome.succeeded, outcome.failed) == (4, 4, 0)
        assert engine.hot_path.status("moved").accepted == 4
        events = engine.hot_path.list_events("moved", page_size=100).events
        assert [e.status for e in events] == ["succeeded"] * 4
        assert len({e.created_memory_ids for e in events}) == 4
        assert _inbox_ids(data, "moved") == []
    finally:
        engine.close()


def test_an_inbox_first_opened_while_a_write_holds_its_lock_opens_for_both(tmp_path: Path) -> None:
    """A tenant whose inbox file exists but is not open in this process (after a restart, or a
    move's install): a write with a request id holds the inbox lock and then asks for the inbox
    (engine/requests.py ``keyed_write``) while a hot-path worker opens it. Each waits its turn; the
    opening took a lock of its own first, then the inbox lock, and the two deadlocked for good."""
    data = tmp_path / "data"
    pool = TenantPool(data, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("opened", create=True) as store:
            assert store is not None and store.inbox(create=True) is not None
    finally:
        pool.close()
    pool = TenantPool(data, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("opened", create=False) as store:
            assert store is not None
            holding, opened = threading.Event(), []

            def writer() -> None:  # as keyed_write: the inbox lock first, the inbox asked for inside it
                with store.inbox_lock:
                    holding.set()
                    time.sleep(0.3)  # the worker's opening begins meanwhile
                    opened.append(store.inbox(create=False))

            def worker() -> None:
                holding.wait(5)
                opened.append(store.inbox(create=False))

            threads = [threading.Thread(target=writer, daemon=True), threading.Thread(target=worker, daemon=True)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            assert not any(thread.is_alive() for thread in threads), "the inbox's opening deadlocked"
            assert len(opened) == 2 and opened[0] is opened[1] is not None
    finally:
        pool.close()


def test_event_ids_never_go_back_even_if_the_inbox_file_is_lost(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as c:
        c.hot_path("ids", "enable")
        before = [r.event_id for r in c.retain_batch("ids", [f"id check {i}" for i in range(5)], fast=True)]
        c.hot_path("ids", "flush", timeout_seconds=30)
    server.stop()
    for suffix in ("", "-wal", "-shm"):  # e.g. a power cut took its unsynced tail
        (server.data_dir / "inbox" / f"ids.inbox.sqlite{suffix}").unlink(missing_ok=True)
    server.restart()
    with MemoryClient(server.target) as c:
        after = c.retain("ids", "id check after the loss", fast=True).event_id
        assert after > max(before)
        assert c.hot_path("ids", "flush", timeout_seconds=30).failed == 0
        assert c.get_event("ids", after).status == "succeeded"
        assert c.get_event("ids", before[0]).status == "succeeded"


def test_one_request_id_sent_fast_and_slow_at_once_is_applied_once(client: MemoryClient, tenant: str) -> None:
    """The same key from several threads at the same moment, half of them fast: every call gets
    the same answer and the content is stored once (the synchronous path checks the inbox under
    its lock, through its commit)."""
    import threading

    client.hot_path(tenant, "enable")
    client.retain(tenant, "opens the inbox", fast=True)
    keys = [f"race-{n}" for n in range(20)]
    answers: dict[str, list[tuple[str, int, int]]] = {k: [] for k in keys}
    errors: list[BaseException] = []
    for key in keys:
        barrier = threading.Barrier(6)

        def send(fast: bool, key: str = key, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait(timeout=10)
                r = client.retain(tenant, f"raced content for {key}: crate RC-{key}", fast=fast, request_id=key)
                answers[key].append((r.status, r.event_id, r.memory_id))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(i % 2 == 0,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    for key in keys:
        assert len(answers[key]) == 6 and len(set(answers[key])) == 1, answers[key]
    client.hot_path(tenant, "flush", timeout_seconds=30)
    texts = [m.text for m in client.list_memories(tenant, page_size=100).memories]
    assert sorted(t for t in texts if t.startswith("raced")) == sorted(
        f"raced content for {k}: crate RC-{k}" for k in keys
    )


def test_an_enqueue_does_not_wait_for_the_tenant_file_s_writer(server_factory) -> None:
    """While another connection holds the tenant file's write lock (as a worker's commit does),
    fast writes are still accepted: they only write to the inbox."""
    import sqlite3

    server = server_factory().start()
    with MemoryClient(server.target, timeout=30) as c:
        c.hot_path("busy", "enable")
        c.retain("busy", "first fast write: tray T-0", fast=True, request_id="busy-0")
        c.hot_path("busy", "flush", timeout_seconds=30)
        # Taking the lock may wait for the server's own last write after the flush (a worker's
        # bookkeeping, a checkpoint); once taken it is held for every enqueue below.
        writer = sqlite3.connect(server.tenant_file("busy"), isolation_level=None, timeout=10)
        writer.execute("BEGIN IMMEDIATE")  # the tenant file's one writer, held
        try:
            accepted = [
                c.retain("busy", f"fast write {i}: tray T-{i}", fast=True, request_id=f"busy-{i}").status
                for i in range(1, 6)
            ]
            still_held = writer.in_transaction
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert accepted == ["enqueued"] * 5 and still_held
        flushed = c.hot_path("busy", "flush", timeout_seconds=60)
        assert (flushed.flushed, flushed.failed) == (5, 0)
        assert len(c.list_memories("busy", page_size=10).memories) == 6


def test_the_inbox_wal_file_is_cut_back_when_it_starts_again(tmp_path: Path) -> None:
    """A burst of fast writes left the inbox's WAL file at its longest (~50 MB after a few seconds
    of them) for as long as the tenant stayed open: once a checkpoint has copied it and the WAL
    starts again, the next commit cuts the file back to one checkpoint's worth of pages."""
    inbox = Inbox(
        tmp_path / "t.inbox.sqlite", lock=threading.RLock(), synchronous="NORMAL", floor=0, configure=configure
    )
    wal = tmp_path / "t.inbox.sqlite-wal"
    try:
        for event_id in range(1, 61):  # ~20 pages each
            with inbox.write(sync=False) as txn:
                txn.append(event_id, "retain", secrets.token_hex(40_000), None, None, time.time())
        assert wal.stat().st_size > (CHECKPOINT_PAGES + 100) * 4096
        inbox.checkpoint_if_grown()
        with inbox.write(sync=False) as txn:
            txn.append(61, "retain", "after the checkpoint", None, None, time.time())
        assert wal.stat().st_size <= (CHECKPOINT_PAGES + 1) * 4096
    finally:
        inbox.close()


def test_the_inbox_wal_stays_bounded_under_steady_fast_writes(server_factory) -> None:
    """Under fast writes without pause, the worker's checkpoint of the inbox, beside the enqueues,
    never found a moment without one committing: the WAL never started again and its file grew by
    every enqueue (119 MB after 20 s of one writer). Past WAL_LIMIT_PAGES the worker checkpoints it
    under the inbox lock, so the file stays near that many pages; every write is applied."""
    server = server_factory().start()
    wal = server.data_dir / "inbox" / "steady.inbox.sqlite-wal"
    sent: list[str] = []
    peak = 0
    with MemoryClient(server.target, timeout=30) as c:
        c.hot_path("steady", "enable")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            text = f"steady fast write {len(sent)}: " + secrets.token_hex(100)
            c.retain("steady", text, fast=True)
            sent.append(text)
            peak = max(peak, wal.stat().st_size if wal.exists() else 0)
        flushed = c.hot_path("steady", "flush", timeout_seconds=60)
        assert flushed.failed == 0
        stored: set[str] = set()
        token = ""
        while True:
            page = c.list_memories("steady", page_size=1000, page_token=token)
            stored |= {m.text for m in page.memories}
            token = page.next_page_token
            if not token:
                break
    assert len(sent) > 500  # enough writes to have grown the WAL past its limit several times over
    assert peak <= 3 * WAL_LIMIT_PAGES * 4096, f"the inbox WAL reached {peak / 1e6:.1f} MB after {len(sent)} writes"
    assert stored == set(sent)
