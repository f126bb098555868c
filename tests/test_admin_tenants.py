"""Cross-tenant administration: ListTenants (paged) and AggregateStats (streamed, not a
snapshot), for admin tokens only."""

from __future__ import annotations

import grpc
import pytest

from mnemosyne.cli.rebalance import _held
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.v1 import admin_pb2
from tests.support import ServerFactory, ServerProcess, tokens_json

ADMIN = "admin-token-4c0ffee"
USER = "user-token-b3e77"
CAP = 3  # the server's --max-page-size


@pytest.fixture
def admin_server(server_factory: ServerFactory, tenant: str) -> ServerProcess:
    """A server whose pages hold at most 3 (--max-page-size): fewer than the tenants listed."""
    tokens = tokens_json({ADMIN: ["*"], USER: [tenant]})
    return server_factory(env={"MNEMOSYNE_TOKENS": tokens}, args=["--max-page-size", str(CAP)]).start()


def test_admin_calls_need_an_admin_token(admin_server: ServerProcess, tenant: str) -> None:
    with MemoryClient(admin_server.target, USER, retries=0) as user:
        assert user.retain(tenant, "a user may write its own tenant").status == "created"
        for call in (user.list_tenants, user.aggregate_stats):
            with pytest.raises(MnemosyneClientError) as exc:
                call()
            assert (exc.value.code, exc.value.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ADMIN_REQUIRED")
    with MemoryClient(admin_server.target, retries=0) as anonymous:
        with pytest.raises(MnemosyneClientError) as exc:
            anonymous.list_tenants()
        assert exc.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_list_tenants_pages_and_aggregate_streams(admin_server: ServerProcess, tenant: str) -> None:
    tenants = sorted(f"{tenant}-{n}" for n in range(7))
    with MemoryClient(admin_server.target, ADMIN, retries=0) as admin:
        for n, t in enumerate(tenants):
            admin.retain_batch(t, [f"memory {i} of tenant number {n}" for i in range(n + 1)])
        admin.retain(tenants[0], "memory 0 of tenant number 0")  # one duplicate

        listed, token, pages = [], "", 0
        while True:
            page = admin.list_tenants(page_size=3, page_token=token)
            assert len(page.tenants) <= 3
            listed += page.tenants
            pages += 1
            token = page.next_page_token
            if not token:
                break
        assert listed == tenants and pages == 3

        for bad in ({"page_token": "not-a-token"}, {"page_size": 10_001}, {"page_size": -1}):
            with pytest.raises(MnemosyneClientError) as exc:
                admin.list_tenants(**bad)
            assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
        # ListTenants keeps to --max-page-size as every list does (it had a cap of 10,000 of its
        # own): a larger page is refused naming the cap, none asked is a page at the cap, and
        # `mnemosyne rebalance` (which asked 10,000) lists a member's every tenant at its pages.
        with pytest.raises(MnemosyneClientError) as exc:
            admin.list_tenants(page_size=CAP + 1)
        assert (exc.value.reason, exc.value.metadata["limit"]) == ("PAGE_SIZE_OUT_OF_RANGE", str(CAP))
        assert admin.list_tenants().tenants == tenants[:CAP]
        assert list(_held(admin, "m0")) == tenants

        # The stream: several chunks, each flagged as not a snapshot; the total in the last one.
        chunks = list(
            admin.admin.AggregateStats(
                admin_pb2.AggregateStatsRequest(chunk_size=2), metadata=admin.call_metadata, timeout=30
            )
        )
        assert len(chunks) == 4
        assert all(c.not_a_snapshot for c in chunks)
        assert [c.HasField("total") for c in chunks] == [False, False, False, True]
        assert [r.tenant for c in chunks for r in c.tenants] == tenants

        aggregate = admin.aggregate_stats(chunk_size=2)
        assert aggregate.not_a_snapshot
        assert aggregate.files_read == 7
        assert "7 tenant files read in 7 separate transactions" in aggregate.consistency
        assert {t: s.memories for t, s in aggregate.tenants.items()} == {t: n + 1 for n, t in enumerate(tenants)}
        assert aggregate.total.memories == sum(range(1, 8)) == sum(s.memories for s in aggregate.tenants.values())
        assert aggregate.total.writes == 28 and aggregate.total.duplicates == 1
        assert aggregate.total.file_bytes == sum(s.file_bytes for s in aggregate.tenants.values())
        for t in tenants:  # (file sizes may move with WAL checkpoints, so they are left out here)
            one = admin.stats(t)
            assert (aggregate.tenants[t].memories, aggregate.tenants[t].writes) == (one.memories, one.writes)
