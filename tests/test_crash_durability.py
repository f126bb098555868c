"""Committed writes survive SIGKILL (the specification's §9.6, first drill, synchronous half)."""

from __future__ import annotations

import time

import pytest

from mnemosyne.client import MemoryClient, UnavailableError


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


def test_a_client_is_answered_by_a_restarted_server_at_once_after_a_long_outage(server_factory) -> None:
    """gRPC waits longer and longer between attempts to connect to a server that is down (1 s,
    then 1.6 times more each time, up to 2 minutes by default), and every client of the process
    shares that wait. The client keeps it short (README.md's promises): a client kept through the
    outage, and one made after it, are answered as soon as the server serves again (tried for 1 s:
    the client's default window, 15 s, would ride out gRPC's wait)."""
    server = server_factory().start()
    with MemoryClient(server.target, retry_window=1.0) as kept:
        kept.ping()
        server.kill()
        outage_ends = time.monotonic() + 5.0  # long enough for gRPC's default wait to pass 4 s
        while time.monotonic() < outage_ends:
            with pytest.raises(UnavailableError):
                kept.ping()
        server.restart()
        kept.ping()
        with MemoryClient(server.target, retry_window=1.0) as fresh:
            fresh.ping()
