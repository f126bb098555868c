"""SQLite's page caches: a reader connection of a large tenant keeps its pages past SQLite's default
2 MiB (its recalls read them from memory, not from the OS), and the memory SQLite holds in a process
stays near ``--page-cache-mib`` (store/connections.py); the server exports it."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.client import MemoryClient
from mnemosyne.store.connections import READER_PAGE_CACHE_KIB, limit_page_caches, sqlite_memory
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn
from tests.support import ServerFactory

MIB = 2**20
TABLE_MIB = 24  # rows many times SQLite's default page cache, within the readers' 64 MiB


def _written(pool: TenantPool, tenant: str) -> None:
    """A tenant file holding a table of ``TABLE_MIB`` MiB besides its memories (written through the
    file's own writer: its readers see it as any other table)."""
    with pool.tenant(tenant, create=True):
        pass
    with pool.tenant(tenant, create=False) as store:
        assert store is not None
        with store.write() as txn:
            txn.connection.execute("CREATE TABLE filler(body BLOB)")
            txn.connection.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                "INSERT INTO filler SELECT randomblob(3000) FROM n",
                (TABLE_MIB * MIB // 3000,),
            )


@contextmanager
def _reading(pool: TenantPool, tenant: str) -> Iterator[ReadTxn]:
    """A read transaction on one of the tenant's pooled reader connections."""
    with pool.tenant(tenant, create=False) as store:
        assert store is not None
        with store.read() as txn:
            yield txn


def _read_whole_table(pool: TenantPool, tenant: str) -> int:
    """Every filler row read in one read transaction; the reader's page cache after it, bytes."""
    with _reading(pool, tenant) as txn:
        counted = txn.connection.execute("SELECT count(*) FROM filler WHERE length(body) = 3000").fetchone()
        assert counted == (TABLE_MIB * MIB // 3000,)
        used, _ = txn.connection.status(apsw.SQLITE_DBSTATUS_CACHE_USED)
    return int(used)


@pytest.fixture
def budget() -> Iterator[None]:
    """The process's budget restored after the test (SQLite's heap limit is process-wide)."""
    before = apsw.soft_heap_limit(-1)  # a negative value reads it
    yield
    apsw.soft_heap_limit(before)


def test_a_reader_keeps_a_large_tenants_pages_past_sqlites_default(tmp_path: Path, budget: None) -> None:
    limit_page_caches(256)
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        _written(pool, "large")
        assert _read_whole_table(pool, "large") > (TABLE_MIB - 2) * MIB  # SQLite's default: 2 MiB
        with _reading(pool, "large") as txn:
            assert txn.connection.pragma("cache_size") == -READER_PAGE_CACHE_KIB
    finally:
        pool.close()


def test_the_memory_sqlite_holds_stays_near_the_budget(tmp_path: Path, budget: None) -> None:
    limit = 8
    limit_page_caches(limit)
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        for tenant in ("first", "second", "third"):
            _written(pool, tenant)
            assert _read_whole_table(pool, tenant) < limit * MIB
            # A soft bound: the page caches stop growing at it; what is not a cache (schemas, open
            # statements) may pass it a little.
            assert sqlite_memory() < (limit + 2) * MIB, f"SQLite holds {sqlite_memory() / MIB:.1f} MiB"
    finally:
        pool.close()
    limit_page_caches(0)  # no bound: the same reads keep every page
    pool = TenantPool(tmp_path, max_open=8, synchronous="FULL")
    try:
        assert _read_whole_table(pool, "first") > (TABLE_MIB - 2) * MIB
    finally:
        pool.close()


def test_the_server_exports_the_memory_sqlite_holds(server_factory: ServerFactory) -> None:
    server = server_factory(metrics=True, args=["--page-cache-mib", "64"]).start()
    with MemoryClient(server.target) as client:
        client.retain("counted", "a memory whose file the server opens and reads")
        assert client.recall("counted", "memory file")
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    (held,) = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "mnemosyne_sqlite_memory_bytes"
    ]
    assert 0 < held < 64 * MIB
