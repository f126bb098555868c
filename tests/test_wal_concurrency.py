"""Readers never wait for the writer (WAL): a recall completes while another connection holds a
write transaction open on the same tenant file; and the writer never waits for a reader: a retain
commits while another connection holds a read transaction open on it."""

from __future__ import annotations

import threading

import apsw

from mnemosyne.client import MemoryClient


def test_recall_completes_while_a_write_transaction_is_open(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target, timeout=10) as client:
        memory_id = client.retain("acme", "The customer requested a refund, ticket number RF-88213").memory_id
        writer = apsw.Connection(str(server.tenant_file("acme")))
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO meta(key, value) VALUES('held', 'by another connection')")
        try:
            # A 10 s deadline: were readers blocked, this would fail with DEADLINE_EXCEEDED.
            hits = client.recall("acme", "refund ticket", k=1)
            assert [h.memory.id for h in hits] == [memory_id]
            assert client.get_memory("acme", memory_id).id == memory_id
            assert client.stats("acme").memories == 1
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        reader = apsw.Connection(str(server.tenant_file("acme")))
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM memories").fetchall() == [(1,)]  # a read snapshot, held
        try:
            # Were writers blocked by readers, this would fail with DEADLINE_EXCEEDED (or BUSY).
            written = client.retain("acme", "A second note, written while a reader holds its snapshot")
            assert written.status == "created"
            assert client.get_memory("acme", written.memory_id).id == written.memory_id
            assert reader.execute("SELECT count(*) FROM memories").fetchall() == [(1,)]  # its snapshot unchanged
        finally:
            reader.execute("ROLLBACK")
            reader.close()


def test_concurrent_writers_and_readers_of_one_tenant(client: MemoryClient, tenant: str) -> None:
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(25):
                client.retain(tenant, f"writer {n} memory {i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(25):
                client.recall(tenant, "writer memory", k=5)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)] + [
        threading.Thread(target=read) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert client.stats(tenant).memories == 100
    assert client.verify_integrity(tenant).valid
