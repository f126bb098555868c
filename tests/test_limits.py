"""Per-server limits and per-tenant quotas give clear statuses naming the limit; a full disk
gives RESOURCE_EXHAUSTED, keeps what was committed, and reads go on."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import apsw
import grpc
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mnemosyne.brain import MemoryBrain
from mnemosyne.client import MemoryClient, MemoryHost, RecordChange
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.engine.config import EngineConfig, HotPathConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.limits import MAX_RECALL_SCOPES, Limits
from mnemosyne.engine.types import RetainItem as EngineItem
from mnemosyne.engine.types import RetainStatus
from mnemosyne.errors import Conflict, ResourceExhausted
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.tenantless_requests import KEPT_PER_TENANT
from tests.support import ServerFactory, ServerProcess

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def _refused(call, code: grpc.StatusCode, reason: str, names: str) -> MnemosyneClientError:
    with pytest.raises(MnemosyneClientError) as exc:
        call()
    assert (exc.value.code, exc.value.reason) == (code, reason), exc.value
    assert names in str(exc.value)
    # A caller cannot act on a configuration field's name: the limit is said in words, and named by
    # the serve flag an operator raises.
    assert not re.search(r"\bmax_[a-z_]+", exc.value.message), exc.value.message
    return exc.value


class _Agent:
    """An agent of MemoryHost (a live object it can observe)."""


async def _mcp_defaults(http_url: str, tenant: str) -> list[int]:
    """The memories recalled by the MCP tools, prompt and events listing that name no k or page size."""
    client = Client(
        streamable_http_client(f"{http_url}/mcp?tenant={tenant}", http_client=httpx2.AsyncClient(timeout=30))
    )
    async with client:
        recalled = await client.call_tool("recall", {"query": "thing"})
        read = await client.call_tool("read_memory", {"query": "thing"})
        prompt = await client.get_prompt("memory_context", {"query": "thing"})
        events = await client.call_tool("list_events", {})
    texts = [recalled.content[0].text, read.content[0].text, prompt.messages[0].content.text]  # type: ignore[union-attr]  # each is text
    assert not recalled.is_error and not read.is_error and not events.is_error, (texts, events)
    return [("\n" + text).count("\n- ") for text in texts]


@pytest.fixture
def limited(server_factory: ServerFactory) -> ServerProcess:
    return server_factory(
        args=[
            "--max-text-chars",
            "100",
            "--max-batch-items",
            "3",
            "--max-metadata-pairs",
            "2",
            "--max-metadata-value-chars",
            "10",
            "--max-query-chars",
            "20",
            "--max-page-size",
            "5",
        ],
        env={"MNEMOSYNE_MAX_K": "4"},  # the environment configures limits too
        http=True,
    ).start()


def test_each_request_limit_names_itself(limited: ServerProcess, tenant: str) -> None:
    with MemoryClient(limited.target, retries=0) as c:
        _refused(
            lambda: c.retain(tenant, "x" * 101),
            INVALID,
            "TEXT_TOO_LONG",
            "the limit is 100 characters (the server's --max-text-chars)",
        )
        _refused(
            lambda: c.retain_batch(tenant, ["a", "b", "c", "d"]),
            INVALID,
            "BATCH_TOO_LARGE",
            "the server's --max-batch-items",
        )
        _refused(
            lambda: c.retain(tenant, "ok", metadata={"a": "1", "b": "2", "c": "3"}),
            INVALID,
            "METADATA_TOO_LARGE",
            "the limit is 2 pairs (the server's --max-metadata-pairs)",
        )
        _refused(
            lambda: c.retain(tenant, "ok", metadata={"a": "x" * 11}),
            INVALID,
            "METADATA_INVALID",
            "the server's --max-metadata-value-chars",
        )
        _refused(lambda: c.recall(tenant, "q" * 21), INVALID, "QUERY_TOO_LONG", "the server's --max-query-chars")
        _refused(
            lambda: c.recall(tenant, "refund", k=5), INVALID, "K_OUT_OF_RANGE", "between 1 and 4 (the server's --max-k)"
        )
        _refused(
            lambda: c.list_memories(tenant, page_size=6),
            INVALID,
            "PAGE_SIZE_OUT_OF_RANGE",
            "5 (the server's --max-page-size)",
        )
        # Within every limit the same calls work.
        assert c.retain(tenant, "x" * 100, metadata={"a": "x" * 10, "b": "y"}).status == "created"
        assert [r.status for r in c.retain_batch(tenant, ["one thing", "another thing", "third thing"])] == [
            "created"
        ] * 3
        assert len(c.recall(tenant, "thing", k=4)) >= 3  # k=4 accepted (the xxx memory may not match)
        # A call that names no k or page size gets the default within the operator's lower limit,
        # on every surface, never a refusal of a number it did not give.
        c.retain_batch(tenant, ["fourth thing", "fifth thing", "sixth thing"])
        assert len(c.recall(tenant, "thing", k=0)) == 4
        first = c.list_memories(tenant, page_size=0)
        assert len(first.memories) == 5 and first.next_page_token
        assert len(c.list_memories(tenant).memories) == 5
        # The defaults of each client surface are the server's (0), not numbers of their own.
        assert len(c.recall(tenant, "thing")) == 4
        assert len(c.assemble_context(tenant, "main", "thing").memories) == 4
        assert MemoryHost(c, tenant).assemble_context(_Agent(), "main", "thing").count("\n- ") == 4
    with MemoryBrain(limited.target, tenant=tenant) as brain:
        assert len(brain.recall("thing")) == 4
        assert brain.list_events().events == []
    assert anyio.run(_mcp_defaults, limited.http_url, tenant) == [4, 4, 4]
    searched = requests.post(
        f"{limited.http_url}/v3/memories/search/",
        json={"query": "thing"},
        headers={"Mnemosyne-Tenant": tenant},
        timeout=10,
    )
    assert searched.status_code == 200 and len(searched.json()["results"]) == 4, searched.text
    listed = requests.post(
        f"{limited.http_url}/v3/memories/", json={}, headers={"Mnemosyne-Tenant": tenant}, timeout=10
    )
    assert listed.status_code == 200 and len(listed.json()["results"]) == 5, listed.text


def test_memory_quota(server_factory, tenant: str) -> None:
    server = server_factory(args=["--max-tenant-memories", "3"]).start()
    with MemoryClient(server.target, retries=0) as c:
        ids = [c.retain(tenant, f"fact number {n} about the quota").memory_id for n in range(3)]
        error = _refused(lambda: c.retain(tenant, "one too many"), EXHAUSTED, "QUOTA_MEMORIES", "--max-tenant-memories")
        assert error.metadata.get("quota") == "max_tenant_memories"
        # A batch that would cross the quota is refused whole; a duplicate adds nothing and passes.
        _refused(
            lambda: c.retain_batch(tenant, ["new a", "new b"]), EXHAUSTED, "QUOTA_MEMORIES", "--max-tenant-memories"
        )
        assert c.retain(tenant, "fact number 0 about the quota").status == "duplicate"
        assert c.stats(tenant).memories == 3
        # Forgetting frees room.
        assert c.forget(tenant, ids[0])
        assert c.retain(tenant, "room again").status == "created"
        # Another tenant has its own quota.
        assert c.retain(tenant + "-other", "unrelated").status == "created"


def test_bytes_quota(server_factory, tenant: str) -> None:
    server = server_factory(args=["--max-tenant-bytes", "340000"]).start()
    stored = []
    with MemoryClient(server.target, retries=0) as c:
        generation = c.edit_records(tenant, "global", [RecordChange("put", "small", "kept")], 0)
        for n in range(40):
            text = f"document {n} " + " ".join(f"word{n}x{i}" for i in range(3000))
            try:
                stored.append(c.retain(tenant, text[:32_000]).memory_id)
            except MnemosyneClientError as exc:
                assert (exc.code, exc.reason) == (EXHAUSTED, "QUOTA_BYTES"), exc
                assert "(the server's --max-tenant-bytes)" in exc.message and "max_tenant" not in exc.message
                break
        else:
            pytest.fail("the byte quota never refused a write")
        assert stored, "the first write should fit in 340 kB"
        assert c.stats(tenant).memories == len(stored)
        assert all(c.get_memory(tenant, i).text.startswith("document") for i in stored)
        assert c.verify_integrity(tenant).valid
        # Records are held to the same quota: they took any room (3.5 MB of records passed a quota
        # of 400 kB), so one tenant could fill the volume every tenant writes to. A put that grows
        # the tenant is refused whole; a delete, which frees room, passes.
        big = [RecordChange("put", f"big{n}", f"record {n} " * 20_000) for n in range(2)]
        error = _refused(
            lambda: c.edit_records(tenant, "global", big, generation), EXHAUSTED, "QUOTA_BYTES", "--max-tenant-bytes"
        )
        assert "delete records" in error.message
        assert [r.key for r in c.list_records(tenant, "global").records] == ["small"]
        assert c.edit_records(tenant, "global", [RecordChange("delete", "small")], generation) == generation + 1
        _expiry_updates_are_held_to_the_bytes_quota(c, tenant, stored[0])


def _expiry_updates_are_held_to_the_bytes_quota(c: MemoryClient, tenant: str, memory_id: int) -> None:
    """An update of a memory's expiry alone was never checked against the byte quota, yet each adds
    a ledger entry: 3,000 of them (two expiries in turn) grew a tenant at its 400 kB quota to
    1.16 MB, without bound. One that grows the tenant past its quota is refused, whichever way the
    expiry moves (earlier too: it could move earlier without end); the memory keeps its expiry."""
    soon = time.time() + 86_400
    for n in range(2_000):
        try:
            c.update_memory(tenant, memory_id, expires_at=soon + n)
        except MnemosyneClientError as exc:
            assert (exc.code, exc.reason) == (EXHAUSTED, "QUOTA_BYTES"), exc
            break
    else:
        pytest.fail("2,000 expiry updates of a tenant at its byte quota were never refused")
    assert c.get_memory(tenant, memory_id).expires_at == pytest.approx(soon + n - 1)
    _refused(
        lambda: c.update_memory(tenant, memory_id, expires_at=soon), EXHAUSTED, "QUOTA_BYTES", "--max-tenant-bytes"
    )


def test_a_bytes_quota_of_many_gib_is_a_setting() -> None:
    """--max-tenant-bytes is bytes: 10 GiB was refused ("a whole number from 0 to 2147483647", the
    bound of a count), so no quota above 2 GiB could be set; past SQLite's largest database it is."""
    from mnemosyne.cli.commands import build_parser

    assert build_parser().parse_args(["serve", "--max-tenant-bytes", str(10 * 2**30)]).max_tenant_bytes == 10 * 2**30
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-tenant-bytes", str(2**48 + 1)])


@pytest.mark.parametrize("batch", [False, True])
def test_disk_full_keeps_committed_and_serves_reads(server_factory, tenant: str, batch: bool) -> None:
    # SQLite's own SQLITE_FULL, raised when the file would grow past 72 pages (test seam): a new
    # tenant's file takes 63 (its tables and indexes, one page each at least).
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "max_page_count=72"}).start()
    committed: dict[int, str] = {}
    with MemoryClient(server.target, retries=0) as c:
        for n in range(200):
            texts = [
                f"note {n}.{j}: " + " ".join(f"tok{n}q{j}q{i}" for i in range(150)) for j in range(3 if batch else 1)
            ]
            try:
                if batch:
                    results = c.retain_batch(tenant, texts)
                else:
                    results = [c.retain(tenant, texts[0])]
            except MnemosyneClientError as exc:
                assert (exc.code, exc.reason) == (EXHAUSTED, "DISK_FULL"), exc
                failed_texts = texts
                break
            assert [r.status for r in results] == ["created"] * len(texts)
            committed.update({r.memory_id: t for r, t in zip(results, texts)})
        else:
            pytest.fail("the disk never filled")
        assert committed
        # Reads keep working and everything committed is intact.
        assert {i: c.get_memory(tenant, i).text for i in committed} == committed
        assert c.recall(tenant, "note", k=3)
        assert c.stats(tenant).memories == len(committed)
        assert c.verify_integrity(tenant).valid
        # The server keeps answering the next write with the same clear status.
        # Repeating the write that did not fit fails the same way.
        if batch:
            _refused(lambda: c.retain_batch(tenant, failed_texts), EXHAUSTED, "DISK_FULL", "disk")
        else:
            _refused(lambda: c.retain(tenant, failed_texts[0]), EXHAUSTED, "DISK_FULL", "disk")
    # After a restart without the seam (space freed), the data is all there and writes resume.
    server.stop()
    server.env.pop("MNEMOSYNE_TEST_FAULTS")
    server.restart()
    with MemoryClient(server.target, retries=0) as c:
        assert {i: c.get_memory(tenant, i).text for i in committed} == committed
        assert c.verify_integrity(tenant).valid
        assert c.retain(tenant, "space again").status == "created"


@pytest.mark.parametrize("mode", ["hybrid", "text", "vector"])
def test_a_recall_naming_more_scopes_than_its_limit_is_refused_not_an_internal_error(
    client: MemoryClient, tenant: str, mode: str
) -> None:
    """Each scope a recall names is one value of its statements, and SQLite takes at most 32,766:
    a recall naming 40,000 failed with INTERNAL. More than MAX_RECALL_SCOPES distinct scopes are
    refused (SCOPES_TOO_MANY, naming the limit); the same scope named again is one scope."""
    client.retain(tenant, "the ticket is in workspace w7", scope="workspace/w7")
    many = [f"workspace/w{i}" for i in range(40_000)]
    _refused(lambda: client.recall(tenant, "ticket", scopes=many, mode=mode), INVALID, "SCOPES_TOO_MANY", "1000")
    within = many[:MAX_RECALL_SCOPES] * 3
    assert [h.memory.text for h in client.recall(tenant, "ticket", scopes=within, mode=mode)] == [
        "the ticket is in workspace w7"
    ]


def test_request_ids_of_calls_no_quota_refuses_are_bounded_past_the_bytes_quota(tmp_path: Path) -> None:
    """A forget is never refused by the byte quota (forgetting frees room), nor a call that changes
    nothing, but each kept its request id's row: 3,000 no-op ForgetMemories grew a tenant at its
    400 kB quota to 1.46 MB. Past its quota a tenant keeps only its latest request ids; a forget
    still passes and the latest ids are still retries."""
    data_dir = tmp_path / "data"
    engine = Engine(EngineConfig(data_dir=data_dir, embedder="hashing", synchronous="NORMAL"))
    try:  # the tenant's file made without a quota, then held to one it is past already
        engine.retain("over", EngineItem(text="Carol prefers tea", metadata={"user": "carol"}))
    finally:
        engine.close()
    over_quota = Limits(max_tenant_bytes=1)
    engine = Engine(EngineConfig(data_dir=data_dir, embedder="hashing", synchronous="NORMAL", limits=over_quota))
    try:
        for number in range(KEPT_PER_TENANT + 20):
            assert (
                engine.updates.forget_matching("over", metadata_equals={"user": "dave"}, request_id=f"n{number}") == 0
            )
        with apsw.Connection(str(data_dir / "tenants" / "over.sqlite")) as kept:
            assert kept.execute("SELECT count(*) FROM requests").fetchall() == [(KEPT_PER_TENANT,)]
        with pytest.raises(Conflict):  # the latest id is still a retry: another filter with it is refused
            engine.updates.forget_matching(
                "over", metadata_equals={"user": "erin"}, request_id=f"n{KEPT_PER_TENANT + 19}"
            )
        assert engine.updates.forget_matching("over", metadata_equals={"user": "carol"}, request_id="last") == 1
    finally:
        engine.close()


def test_fast_writes_are_held_to_the_bytes_quota_and_never_wedge_the_queue(tmp_path: Path) -> None:
    """Fast writes were never checked against the byte quota when accepted, and one that took the
    tenant past it when applied failed its worker's whole round, retried without end: 3,000 fast
    writes to a tenant past its 300 kB quota stayed pending for good while its file grew to 3.3 MB
    and its WAL and inbox by 110 MB. One applied past the quota now fails with QUOTA_BYTES; past the
    quota a fast write is refused when sent, and a retry of one accepted before still answered."""
    data_dir = tmp_path / "data"
    engine = Engine(EngineConfig(data_dir=data_dir, embedder="hashing", synchronous="NORMAL"))
    try:
        engine.retain("over", EngineItem(text="Carol prefers tea", metadata={"user": "carol"}))
        engine.hot_path.set_enabled("over", True)
        with engine.pool.tenant("over", create=False) as store:
            assert store is not None
            with store.read() as txn:
                used = txn.used_bytes()
    finally:
        engine.close()
    hot_path = HotPathConfig(max_failures=1, retry_seconds=0.01)
    text = " ".join(f"word{n}" for n in range(3_000))  # pages more than the room left
    with _engine(data_dir, hot_path, Limits(max_tenant_bytes=used + 4096)) as engine:
        accepted = engine.retain("over", EngineItem(text=text), request_id="big", fast=True)
        assert accepted.status is RetainStatus.ENQUEUED
        outcome = engine.hot_path.flush("over", timeout=10)
        assert (outcome.succeeded, outcome.failed) == (0, 1)
        assert engine.hot_path.get_event("over", accepted.event_id).error_reason == "QUOTA_BYTES"
    with _engine(data_dir, hot_path, Limits(max_tenant_bytes=1)) as engine:
        with pytest.raises(ResourceExhausted) as refused:
            engine.retain("over", EngineItem(text="Dave prefers coffee"), request_id="next", fast=True)
        assert refused.value.reason == "QUOTA_BYTES"
        assert engine.retain("over", EngineItem(text=text), request_id="big", fast=True) == accepted


@contextmanager
def _engine(data_dir: Path, hot_path: HotPathConfig, limits: Limits) -> Iterator[Engine]:
    engine = Engine(
        EngineConfig(data_dir=data_dir, embedder="hashing", synchronous="NORMAL", hot_path=hot_path, limits=limits)
    )
    try:
        yield engine
    finally:
        engine.close()


def test_a_fast_write_past_the_memory_quota_fails_and_never_wedges_the_queue(tmp_path: Path) -> None:
    """The memory-count quota failed a worker's whole round as the byte quota did, retried without
    end (a Flush gave up with the write still pending); the write now fails with QUOTA_MEMORIES."""
    hot_path = HotPathConfig(max_failures=1, retry_seconds=0.01)
    with _engine(tmp_path / "data", hot_path, Limits(max_tenant_memories=1)) as engine:
        engine.retain("full", EngineItem(text="Carol prefers tea"))
        engine.hot_path.set_enabled("full", True)
        accepted = engine.retain("full", EngineItem(text="Dave prefers coffee"), fast=True)
        outcome = engine.hot_path.flush("full", timeout=10)
        assert (outcome.succeeded, outcome.failed) == (0, 1)
        assert engine.hot_path.get_event("full", accepted.event_id).error_reason == "QUOTA_MEMORIES"


def test_of_fast_writes_applied_in_one_round_those_within_the_quota_are_kept(tmp_path: Path) -> None:
    """A worker's round of four fast writes, two of which fit the memory quota: the two first are
    kept and the two after fail with QUOTA_MEMORIES. Before, the whole round failed together, so
    writes within the quota were lost with the one past it."""
    hold = tmp_path / "hold-workers"
    hold.write_text("the workers hold before their commit")
    hot_path = HotPathConfig(max_failures=1, retry_seconds=0.01)
    engine = Engine(
        EngineConfig(
            data_dir=tmp_path / "data",
            embedder="hashing",
            synchronous="NORMAL",
            hot_path=hot_path,
            limits=Limits(max_tenant_memories=3),
        ),
        seams=Seams(hold_workers_file=hold),
    )
    try:
        engine.retain("near", EngineItem(text="Carol prefers tea"))
        engine.hot_path.set_enabled("near", True)
        texts = ["Dave prefers coffee", "Erin walks to work", "Frank plays the cello", "Gina grows tomatoes"]
        events = [engine.retain("near", EngineItem(text=t), fast=True).event_id for t in texts]
        hold.unlink()
        outcome = engine.hot_path.flush("near", timeout=10)
        assert (outcome.succeeded, outcome.failed) == (2, 2)
        reasons = [engine.hot_path.get_event("near", e).error_reason for e in events]
        assert reasons == ["", "", "QUOTA_MEMORIES", "QUOTA_MEMORIES"]
        kept = sorted(m.text for m in engine.memories.page("near", page_size=10).memories)
        assert kept == ["Carol prefers tea", "Dave prefers coffee", "Erin walks to work"]
    finally:
        engine.close()


def test_a_tenant_s_backlog_of_fast_writes_is_bounded_and_its_callers_told_when_to_retry(tmp_path: Path) -> None:
    """Fast writes accepted faster than the workers apply them grew the tenant's inbox without
    bound (no byte quota counts it). Past ``--max-tenant-backlog`` open operations a fast write is
    refused RESOURCE_EXHAUSTED BACKLOG_FULL with a retry delay; a retry of one accepted before is
    still answered its first result, and once the workers caught up writes are accepted again."""
    hold = tmp_path / "hold-workers"
    hold.write_text("the workers hold before their commit")
    engine = Engine(
        EngineConfig(data_dir=tmp_path / "data", embedder="hashing", limits=Limits(max_tenant_backlog=3)),
        seams=Seams(hold_workers_file=hold),
    )
    try:
        engine.hot_path.set_enabled("busy", True)
        first = engine.retain_batch("busy", [EngineItem(text=f"note {i}") for i in range(2)], request_id="a", fast=True)
        engine.retain("busy", EngineItem(text="note 2"), fast=True)
        for items in ([EngineItem(text="note 3")], [EngineItem(text="note 3"), EngineItem(text="note 4")]):
            with pytest.raises(ResourceExhausted) as refused:
                engine.retain_batch("busy", items, request_id="b", fast=True)
            assert (refused.value.reason, refused.value.retry_after_seconds) == ("BACKLOG_FULL", 1.0)
            assert refused.value.metadata == {"limit": "3", "backlog": "3"}
            assert "--max-tenant-backlog" in refused.value.message
        assert (
            engine.retain_batch("busy", [EngineItem(text=f"note {i}") for i in range(2)], request_id="a", fast=True)
            == first
        )
        hold.unlink()
        assert engine.hot_path.flush("busy", timeout=10).succeeded == 3
        assert (
            engine.retain("busy", EngineItem(text="note 3"), request_id="b", fast=True).status is RetainStatus.ENQUEUED
        )
    finally:
        engine.close()
