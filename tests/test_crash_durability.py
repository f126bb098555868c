"""Committed writes survive SIGKILL (the specification's §9.6, first drill, synchronous half)."""

from __future__ import annotations

from mnemosyne.client import MemoryClient


def test_100_sync_retains_survive_sigkill_and_the_chain_is_valid(server_factory) -> None:
    server = server_factory().start()
    texts = [f"Durable memory number {i}: customer C-{1000 + i} prefers channel {i % 7}" for i in range(100)]
    with MemoryClient(server.target) as client:
        ids = [client.retain("acme", text).memory_id for text in texts]
    server.kill()  # immediately after the last Retain returned
    server.restart()
    with MemoryClient(server.target) as client:
        stored = []
        token = ""
        while True:
            page = client.list_memories("acme", page_size=1000, page_token=token)
            stored += page.memories
            token = page.next_page_token
            if not token:
                break
        assert [m.id for m in stored] == ids
        assert [m.text for m in stored] == texts
        # Each one is recallable, through both paths.
        for i in (0, 37, 99):
            assert client.recall("acme", f"customer C-{1000 + i}", k=1)[0].memory.id == ids[i]
        report = client.verify_integrity("acme")
        assert report.valid and report.first_broken_at == 0 and report.checked == 100
        assert client.stats("acme").writes == 100
