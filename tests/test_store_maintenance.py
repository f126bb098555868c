"""Background store maintenance (store/maintenance.py): WAL checkpoints run on a background
thread, never inside a writer's COMMIT, and keep the WAL bounded; the full-text index's segments
are merged without changing any answer; relaxed (sync=False) transactions leave the store's
durability setting as it was."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.types import RetainItem
from mnemosyne.store.maintenance import CHECKPOINT_PAGES, WAL_LIMIT_PAGES, Maintainer, wal_limit_pages
from mnemosyne.store.pool import SEGMENTS_ON_OPEN, TenantPool
from mnemosyne.store.tenant_store import TenantStore
from tests.support import sql_row

PAGE = 4096


def _blob() -> str:
    """About 40 pages of WAL per transaction (fresh bytes: SQLite skips unchanged pages)."""
    return secrets.token_hex(20 * PAGE)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[TenantPool]:
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    yield pool
    pool.close()


def _wal_pages(path: Path) -> int:
    wal = Path(str(path) + "-wal")
    return wal.stat().st_size // PAGE if wal.exists() else 0


def test_a_commit_crossing_the_threshold_only_announces_it(tmp_path: Path) -> None:
    announced: list[int] = []
    store = TenantStore(tmp_path / "t.sqlite", write_lock=threading.RLock(), on_wal_growth=lambda: announced.append(1))
    try:
        for i in range(2 * CHECKPOINT_PAGES // 40 + 5):
            with store.write() as txn:
                txn.set_meta(f"blob-{i}", _blob())
        # SQLite's own checkpoint would have reset the WAL at 1000 pages inside a COMMIT; here
        # nothing checkpointed, and the growth was announced once per threshold crossed.
        assert _wal_pages(store.path) > 2 * CHECKPOINT_PAGES
        assert len(announced) == 2
        frames, done = store.checkpoint()
        assert frames > 2 * CHECKPOINT_PAGES and done == frames
    finally:
        store.close()


def test_background_checkpoints_keep_the_wal_bounded(pool: TenantPool) -> None:
    with pool.tenant("busy", create=True):
        pass  # a new tenant's first block runs on a file of its own until it ends (store/pool.py)
    with pool.tenant("busy", create=False) as store:
        assert store is not None
        for i in range(4 * CHECKPOINT_PAGES // 40):
            last = _blob()
            with store.write() as txn:
                txn.set_meta(f"blob-{i % 10}", last)
            assert pool.maintainer.wait_idle(timeout=30)
        # 4,000 pages were written; the WAL was restarted after each background checkpoint.
        assert pool.maintainer.completed >= 3
        assert _wal_pages(store.path) <= CHECKPOINT_PAGES + 2 * 40
        with store.read() as txn:
            assert txn.meta(f"blob-{i % 10}") == last


def test_a_writer_that_outruns_the_background_checkpoint_checkpoints_itself(tmp_path: Path) -> None:
    """A background pass that never keeps up (here: never runs): past ``wal_limit_pages`` the
    writer checkpoints under its write lock and the next write starts the WAL again, so the WAL
    stays near the limit (a 1M-memory load by batches had grown it to 22 GB)."""
    limit = 200
    store = TenantStore(
        tmp_path / "t.sqlite", write_lock=threading.RLock(), on_wal_growth=lambda: None, wal_limit_pages=limit
    )
    try:
        for i in range(30):  # ~1,200 pages in all
            last = _blob()
            with store.write() as txn:
                txn.set_meta(f"blob-{i % 10}", last)
            assert _wal_pages(store.path) <= limit + 2 * 45
        with store.read() as txn:
            assert txn.meta(f"blob-{i % 10}") == last
    finally:
        store.close()


def _write_blobs(store: TenantStore, transactions: int, wal_bound: int | None = None) -> None:
    """``transactions`` of ~40 pages each; the WAL no longer than ``wal_bound`` pages after each."""
    for i in range(transactions):
        with store.write() as txn:
            txn.set_meta(f"blob-{i % 10}", _blob())
        assert wal_bound is None or _wal_pages(store.path) <= wal_bound


def test_the_wal_file_is_cut_back_when_it_starts_again(tmp_path: Path) -> None:
    """The WAL's file kept the length of its longest run after the WAL started again (218 pages of
    a 200-page limit, 32,000 at the default, on every open tenant): it is cut back to one
    background pass's worth (SQLite's journal_size_limit) by the first commit after a restart."""
    store = TenantStore(
        tmp_path / "t.sqlite", write_lock=threading.RLock(), on_wal_growth=lambda: None, wal_limit_pages=1_200
    )
    try:
        _write_blobs(store, 35)  # past the limit: the writer's own checkpoint starts the WAL again
        assert _wal_pages(store.path) <= CHECKPOINT_PAGES + 45
    finally:
        store.close()


def test_a_tenant_held_to_a_byte_quota_keeps_a_wal_of_its_size(tmp_path: Path) -> None:
    """The byte quota counts the tenant file, not its WAL: a writer outrunning the background
    checkpoint (here it never runs) grew the WAL of a tenant held to 1 MB up to 32,000 pages
    (128 MB), on a volume every tenant shares. Past its quota in pages (at least one background
    pass's worth) its writer checkpoints itself."""
    assert wal_limit_pages(0) == WAL_LIMIT_PAGES and wal_limit_pages(10**12) == WAL_LIMIT_PAGES
    assert wal_limit_pages(1) == CHECKPOINT_PAGES and wal_limit_pages(8_000 * PAGE) == 8_000
    config = EngineConfig(data_dir=tmp_path, embedder="hashing", limits=Limits(max_tenant_bytes=1_000_000))
    engine = Engine(config)
    try:
        engine.pool.maintainer.stop()
        engine.retain("small", RetainItem(text="Carol prefers tea"))
        with engine.pool.tenant("small", create=False) as store:
            assert store is not None
            _write_blobs(store, 3 * CHECKPOINT_PAGES // 40, wal_bound=CHECKPOINT_PAGES + 45)
    finally:
        engine.close()


def test_an_unsynced_transaction_restores_the_durability_setting(tmp_path: Path) -> None:
    store = TenantStore(tmp_path / "t.sqlite", write_lock=threading.RLock(), synchronous="FULL")
    try:
        with store.write(sync=False) as txn:
            assert txn.connection.pragma("synchronous") == 1  # NORMAL for this one
            txn.set_meta("claim", "1")
        with store.write() as txn:
            assert txn.connection.pragma("synchronous") == 2  # FULL again
            assert txn.meta("claim") == "1"
    finally:
        store.close()


def _index_one_by_one(store: TenantStore, count: int) -> None:
    """One full-text row per transaction: each commit adds a segment to the FTS5 index."""
    for i in range(count):
        with store.write() as txn:
            txn.connection.execute(
                "INSERT INTO memories_fts(rowid, body) VALUES(?, ?)",
                (i + 1, f"note {i} about crate CR-{i % 37} and shelf {i % 11} " + "filler " * (i % 5)),
            )


def _answers(store: TenantStore) -> list[list[int]]:
    with store.read() as txn:
        return [
            [
                r[0]
                for r in txn.connection.execute(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts), rowid",
                    (query,),
                )
            ]
            for query in ('"crate" OR "cr 5"', '"shelf" AND "3"', '"filler"', '"note" OR "7"')
        ]


def test_merging_the_fulltext_index_changes_no_answer_and_finishes(tmp_path: Path) -> None:
    store = TenantStore(tmp_path / "t.sqlite", write_lock=threading.RLock())
    try:
        _index_one_by_one(store, 300)
        before = _answers(store)
        assert store.merge_fulltext() > 0  # 300 commits left segments to merge
        assert _answers(store) == before
        assert store.merge_fulltext() == 0  # nothing left
    finally:
        store.close()


def test_a_maintenance_pass_merges_the_fulltext_index(pool: TenantPool) -> None:
    with pool.tenant("busy", create=True):
        pass  # a new tenant's first block runs on a file of its own until it ends (store/pool.py)
    with pool.tenant("busy", create=False) as store:
        assert store is not None
        _index_one_by_one(store, 300)
        pool.maintainer.request("busy")
        assert pool.maintainer.wait_idle(timeout=30)
        assert store.merge_fulltext() == 0


def _segments(path: Path) -> int:
    """The full-text index's segments, counted in its index table, and as the store reads them."""
    store = TenantStore(path, write_lock=threading.RLock())
    try:
        with store.read() as txn:
            counted = int(sql_row(txn.connection, "SELECT count(DISTINCT segid) FROM memories_fts_idx")[0])
        assert store.fulltext_segments() == counted
        return counted
    finally:
        store.close()


def _written_then_closed(tmp_path: Path, commits: int, *, automerge: bool) -> Path:
    """A tenant file written one full-text row per commit outside a pool (so no maintenance pass
    ran) and closed. Without FTS5's own merges (as while a bulk load outruns every merge) each
    commit leaves a segment; the settings are FTS5's defaults again when the file is closed."""
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    with pool.tenant("bulk", create=True):
        pass
    pool.close()
    path = pool.path_for("bulk")
    store = TenantStore(path, write_lock=threading.RLock())

    def merges(automerge: int, crisismerge: int) -> None:
        with store.write() as txn:
            for name, value in (("automerge", automerge), ("crisismerge", crisismerge)):
                txn.connection.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES(?, ?)", (name, value))

    if not automerge:
        merges(0, 1000)
    _index_one_by_one(store, commits)
    merges(4, 16)  # FTS5's defaults
    store.close()
    return path


def test_opening_a_tenant_left_with_many_segments_merges_them_without_a_write(tmp_path: Path) -> None:
    path = _written_then_closed(tmp_path, 300, automerge=False)
    assert _segments(path) == 300
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("bulk", create=False) as store:  # a read: no write announces anything
            assert store is not None
            with store.read() as txn:
                txn.meta("schema")
        assert pool.maintainer.wait_idle(timeout=30)
    finally:
        pool.close()
    assert _segments(path) == 1


def test_opening_a_tenant_with_few_segments_runs_no_pass(tmp_path: Path) -> None:
    # A pass's checkpoint syncs the WAL: a tenant kept merged must not pay one for being opened.
    path = _written_then_closed(tmp_path, 300, automerge=True)
    assert 1 < _segments(path) <= SEGMENTS_ON_OPEN
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("bulk", create=False):
            pass
        assert pool.maintainer.wait_idle(timeout=30)
        assert pool.maintainer.completed == 0
    finally:
        pool.close()


def test_a_merge_stopped_at_its_bound_goes_on_in_later_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _written_then_closed(tmp_path, 300, automerge=False)
    # Two steps of one page each per pass: far from enough for these segments in one pass.
    monkeypatch.setattr("mnemosyne.store.tenant_store.FULLTEXT_MERGE_PAGES", 1)
    monkeypatch.setattr("mnemosyne.store.tenant_store.FULLTEXT_MERGE_MAX_STEPS", 2)
    monkeypatch.setattr("mnemosyne.store.pool.FULLTEXT_MERGE_MAX_STEPS", 2)
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        with pool.tenant("bulk", create=False):
            pass
        assert pool.maintainer.wait_idle(timeout=60)
        assert pool.maintainer.completed > 1
    finally:
        pool.close()
    assert _segments(path) == 1


def test_a_pass_the_shutdown_cuts_short_is_not_logged_as_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    """A pass still running when the store closes (a large tenant's merge outlasts stop's wait)
    fails on its closed connection: the shutdown's doing, logged as such, not as an error."""
    caplog.set_level(logging.INFO, logger="mnemosyne.store.maintenance")
    started, closed = threading.Event(), threading.Event()

    def maintain(tenant: str) -> None:
        started.set()
        closed.wait(10)
        raise apsw.ConnectionClosedError("The connection has been closed")

    maintainer = Maintainer(maintain)
    maintainer.request("big")
    assert started.wait(10)
    stopping = threading.Thread(target=maintainer.stop)
    stopping.start()
    while not maintainer._stopping:
        time.sleep(0.01)
    closed.set()  # the files close under the pass
    stopping.join(15)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert "ended by the shutdown" in caplog.text
