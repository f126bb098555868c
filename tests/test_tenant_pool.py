"""Open tenant files are bounded by the LRU size, however many tenants a process serves."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import apsw

from mnemosyne.client import MemoryClient
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import read_file


def _open_files(pid: int | str, under: Path) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(under)):
                count += 1
        except FileNotFoundError:
            pass
    return count


def test_server_keeps_at_most_max_open_tenants_files_open(server_factory) -> None:
    server = server_factory(args=["--max-open-tenants", "8"]).start()
    with MemoryClient(server.target) as client:
        for i in range(120):
            client.retain(f"tenant-{i}", f"memory of tenant {i}")
            client.recall(f"tenant-{i}", "memory")
        # Each open tenant holds a writer and a few readers, each with the db and WAL files open.
        open_now = _open_files(server.pid, server.data_dir / "tenants")
        assert 0 < open_now <= 8 * 5 * 2
        # Evicted tenants come back intact.
        assert [h.memory.text for h in client.recall("tenant-3", "memory", k=1)] == ["memory of tenant 3"]
        assert client.verify_integrity("tenant-3").valid


def test_open_close_loops_leak_no_files_or_threads(tmp_path: Path) -> None:
    baseline_threads = threading.active_count()
    for round_ in range(5):
        engine = Engine(EngineConfig(tmp_path, max_open_tenants=4))
        for i in range(12):
            engine.retain(f"t{i}", RetainItem(f"round {round_} item {i}"))
            engine.recall(f"t{i}", "item")
        assert _open_files("self", tmp_path / "tenants") > 0
        engine.close()
        assert _open_files("self", tmp_path) == 0
    assert threading.active_count() == baseline_threads


def test_a_glance_at_a_tenant_file_waits_out_a_writers_lock(tmp_path: Path) -> None:
    """read_file (a move's activation, aggregates) meets a writer holding the file for a moment:
    it waits, as every connection of ours does, instead of failing "database is locked"."""
    pool = TenantPool(tmp_path, max_open=4, synchronous="NORMAL")
    try:
        with pool.tenant("busy", create=True) as store:
            assert store is not None
            with store.write() as write:
                write.set_meta("note", "before")
        path = pool.path_for("busy")
    finally:
        pool.close()
    writer = apsw.Connection(str(path))
    writer.execute("PRAGMA locking_mode = EXCLUSIVE")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('note', 'after')")

    def release() -> None:
        writer.execute("COMMIT")
        writer.close()

    released = threading.Timer(0.5, release)
    released.start()
    try:
        with read_file(path) as txn:  # let in once the writer is gone
            assert txn.meta("note") == "after"
    finally:
        released.join()
