"""A Retain is one transaction: a failure at any step leaves none of its rows behind."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from mnemosyne.client import MemoryClient, ServerError
from tests.support import sql_row

STEPS = ["after_body", "after_facts", "after_triples", "after_embedding", "after_fts", "after_ledger"]


def _count(path: Path, sql: str) -> int:
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(sql_row(connection, sql)[0])
    finally:
        connection.close()


@pytest.mark.parametrize("step", STEPS)
def test_retain_failing_half_way_leaves_nothing(server_factory, step: str) -> None:
    # Bob's write fails after its last rows, the counters and the request id (marked in the id).
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": f"{step}:Alice,after_request:Bob"}).start()
    text = "Alice's ticket RF-1 is open. Alice's email is a@b.io"  # facts and triples at every step
    with MemoryClient(server.target, retries=0) as client:
        assert client.retain("acme", "an earlier memory").status == "created"  # the tenant exists
        path = server.tenant_file("acme")
        tables = ("memories", "facts", "triples", "embeddings", "ledger", "requests")
        before = {table: _count(path, f"SELECT count(*) FROM {table}") for table in tables}
        with pytest.raises(ServerError) as info:
            client.retain("acme", text)
        assert info.value.reason == "INTERNAL"
        with pytest.raises(ServerError):
            client.retain("acme", "Bob's ticket RF-2 is open", request_id="Bob-1")
        assert {table: _count(path, f"SELECT count(*) FROM {table}") for table in tables} == before
        assert _count(path, "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'alice OR bob'") == 0
        assert _count(path, "SELECT coalesce(sum(value), 0) FROM counters WHERE name = 'writes'") == 1
        assert client.recall("acme", "alice ticket") == []
        assert client.verify_integrity("acme").valid


@pytest.mark.parametrize("step", STEPS)
def test_a_new_tenant_s_first_retain_failing_half_way_leaves_no_file(server_factory, step: str) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": step}).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(ServerError):
            client.retain("acme", "Alice's ticket RF-1 is open")
        assert client.list_tenants().tenants == []
    assert sorted(p.name for p in (server.data_dir / "tenants").iterdir()) == []


def test_batch_item_failing_half_way_loses_only_that_item(server_factory) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "after_triples:POISON"}).start()
    with MemoryClient(server.target, retries=0) as client:
        results = client.retain_batch("acme", ["first item", "a POISON item is status: bad", "third item"])
        assert [r.status for r in results] == ["created", "invalid", "created"]
        assert results[1].error_reason == "ITEM_NOT_STORED"
        assert [m.text for m in client.list_memories("acme").memories] == ["first item", "third item"]
        assert client.recall("acme", "POISON", mode="text") == []
        assert client.verify_integrity("acme").valid
