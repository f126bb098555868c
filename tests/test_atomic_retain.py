"""A Retain is one transaction: a failure at any step leaves none of its rows behind."""

from __future__ import annotations

import apsw
import pytest

from mnemosyne.client import MemoryClient, ServerError

STEPS = ["after_body", "after_facts", "after_triples", "after_embedding", "after_fts", "after_ledger"]


def _count(path, sql: str) -> int:
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return connection.execute(sql).fetchone()[0]
    finally:
        connection.close()


@pytest.mark.parametrize("step", STEPS)
def test_retain_failing_half_way_leaves_nothing(server_factory, step: str) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": step}).start()
    text = "Alice's ticket RF-1 is open. Alice's email is a@b.io"  # facts and triples at every step
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(ServerError) as info:
            client.retain("acme", text)
        assert info.value.reason == "INTERNAL"
        path = server.tenant_file("acme")
        for table in ("memories", "facts", "triples", "embeddings", "ledger", "requests"):
            assert _count(path, f"SELECT count(*) FROM {table}") == 0, table
        assert _count(path, "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'alice'") == 0
        assert _count(path, "SELECT coalesce(sum(value), 0) FROM counters WHERE name = 'writes'") == 0
        assert client.recall("acme", "alice ticket") == []
        assert client.verify_integrity("acme").valid


def test_batch_item_failing_half_way_loses_only_that_item(server_factory) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "after_triples:POISON"}).start()
    with MemoryClient(server.target, retries=0) as client:
        results = client.retain_batch("acme", ["first item", "a POISON item is status: bad", "third item"])
        assert [r.status for r in results] == ["created", "invalid", "created"]
        assert results[1].error_reason == "ITEM_NOT_STORED"
        assert [m.text for m in client.list_memories("acme").memories] == ["first item", "third item"]
        assert client.recall("acme", "POISON", mode="text") == []
        assert client.verify_integrity("acme").valid
