"""A reply lost after the commit: the retry with the same request_id returns the first result."""

from __future__ import annotations

import pytest

from mnemosyne.client import MemoryClient, RetainItem, UnavailableError


@pytest.mark.parametrize("method", ["retain", "retain_batch"])
def test_retry_after_reply_lost_post_commit_returns_first_result(server_factory, method: str) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": method}).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(UnavailableError):  # the server died between commit and reply
            if method == "retain":
                client.retain("acme", "Ticket RF-88213 awaits finance review", request_id="lost-reply-1")
            else:
                client.retain_batch(
                    "acme", [RetainItem("batch one"), RetainItem("batch two")], request_id="lost-reply-1"
                )
    assert server.wait_exit() != 0
    server.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    server.restart()
    with MemoryClient(server.target) as client:
        if method == "retain":
            retry = client.retain("acme", "Ticket RF-88213 awaits finance review", request_id="lost-reply-1")
            assert retry.status == "created" and retry.memory_id == 1
            expected = 1
        else:
            retry = client.retain_batch(
                "acme", [RetainItem("batch one"), RetainItem("batch two")], request_id="lost-reply-1"
            )
            assert [(r.status, r.memory_id) for r in retry] == [("created", 1), ("created", 2)]
            expected = 2
        stats = client.stats("acme")
        assert stats.memories == expected and stats.writes == expected and stats.duplicates == 0
        assert stats.ledger_entries == expected
        assert client.verify_integrity("acme").valid


def test_request_ids_are_per_tenant(client: MemoryClient, tenant: str) -> None:
    a = client.retain(tenant, "same key, tenant a", request_id="shared-key")
    b = client.retain(tenant + "b", "same key, tenant b", request_id="shared-key")
    assert a.status == b.status == "created"
