"""Session consistency by default (docs/hot-path.md "Read your own writes"): each client reads its
own fast write at once with a backlog queued before it — the Python client, ``MemoryHost``,
``MemoryBrain`` (on a server and in process), MCP over stdio (``mnemosyne mcp``) and over HTTP
(``/mcp``), and the official mem0 client with the helper (client/mem0.py); the Node client's
twin is client/node/test/consistency.test.js (tests/test_node_host.py runs it). Another client's
reads are answered while a read waits for its token (shown by order: they finish while the write
it waits for is held before its commit). Opting out, per client or per read, the read misses the
write. A token refused for good is dropped and raised as its typed error.

The server runs with the test seam MNEMOSYNE_TEST_HOLD_BACKLOG (the workers take only the writes
a read waits for), so the backlog stays queued and a read without the token cannot see the write;
where the order is shown, MNEMOSYNE_TEST_HOLD_WORKERS holds the waited-for write as well."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import grpc
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mnemosyne import MemoryBrain
from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import (
    BackupChunk,
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryClient,
    MemoryHost,
    MnemosyneClientError,
    RetainItem,
    TenantBackup,
    TimelineChangedError,
    TokenForeignError,
    TokenInvalidError,
)
from mnemosyne.client import mem0 as mem0_helper
from mnemosyne.host.consistency import MAX_TOKENS_PER_TENANT, SessionTokens
from mnemosyne.host.protocol import CONSISTENCY_TOKEN_KEY
from mnemosyne.transport.consistency import LEVEL_KEY
from mnemosyne.v1 import admin_pb2, hot_path_pb2, memory_pb2, types_pb2
from tests.http_support import call as http_call
from tests.mem0_support import Mem0Client

BACKLOG = 300  # fast writes queued before the one a read waits for


@pytest.fixture(scope="module")
def holds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(backlog hold: present all along, workers hold: present only where a test makes it)."""
    root = tmp_path_factory.mktemp("holds")
    backlog = root / "backlog"
    backlog.touch()
    return backlog, root / "workers"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, holds: tuple[Path, Path]) -> Iterator[ServerProcess]:
    backlog, workers = holds
    process = ServerProcess(
        tmp_path_factory.mktemp("session") / "data",
        http=True,
        env={"MNEMOSYNE_TEST_HOLD_BACKLOG": str(backlog), "MNEMOSYNE_TEST_HOLD_WORKERS": str(workers)},
    ).start()
    yield process
    process.stop()


def with_backlog(server: ServerProcess, tenant: str, count: int = BACKLOG) -> None:
    """Enable the tenant's hot path and queue ``count`` fast writes in its global scope, with
    duplicates and same-subject conflicts among them, from a client without a session."""
    with MemoryClient(server.target, session_consistency=False) as other:
        other.hot_path(tenant, "enable")
        items = [RetainItem(f"Crate C-{i % (count // 3):04d} sits on shelf {i % 7}") for i in range(count)]
        for start in range(0, count, 100):
            results = other.retain_batch(tenant, items[start : start + 100], fast=True)
            assert {r.status for r in results} == {"enqueued"}
        assert other.hot_path(tenant, "status").queue_depth >= count


def fast_write_behind_a_backlog(server: ServerProcess, client: MemoryClient, tenant: str, text: str) -> str:
    """The token of ``client``'s fast write of ``text`` behind a held backlog of 30 in ``tenant``."""
    with_backlog(server, tenant, 30)
    client.retain(tenant, text, fast=True)
    token = client.consistency_token(tenant)
    assert token
    return token


def texts(hits: Any) -> list[str]:
    return [hit.memory.text for hit in hits]


def _backup(parts: list[TenantBackup | BackupChunk]) -> tuple[TenantBackup, list[BackupChunk]]:
    """An export's manifest and chunks, as ``import_tenant`` takes them back."""
    manifest, chunks = parts[0], parts[1:]
    assert isinstance(manifest, TenantBackup)
    return manifest, [c for c in chunks if isinstance(c, BackupChunk)]


def test_the_python_client_reads_its_own_fast_write_and_the_opt_outs_may_miss_it(server: ServerProcess) -> None:
    tenant = "py-session"
    with_backlog(server, tenant)
    with MemoryClient(server.target) as client, MemoryClient(server.target, session_consistency=False) as plain:
        fact = "The loading dock key hangs in locker L-4417"
        assert client.retain(tenant, fact, fast=True).status == "enqueued"
        assert plain.recall(tenant, "loading dock key locker L-4417") == []  # queued behind the backlog
        assert client.recall(tenant, "loading dock key locker L-4417", consistency_token="") == []  # opted out
        assert texts(client.recall(tenant, "loading dock key locker L-4417", k=1)) == [fact]  # by default
        listed = client.list_memories(tenant, newest_first=True, page_size=1).memories
        assert [m.text for m in listed] == [fact]
        assert client.get_memory(tenant, listed[0].id).text == fact

        second = "The spare forklift battery charges in bay B-2209"
        client.retain(tenant, second, fast=True)
        token = client.consistency_token(tenant)
        assert token, "a fast write returns a consistency token, kept by the client"
        assert plain.recall(tenant, "spare forklift battery bay B-2209") == []
        # Handed to another client, the token makes its read wait for the write it names.
        assert texts(plain.recall(tenant, "spare forklift battery bay B-2209", k=1, consistency_token=token)) == [
            second
        ]
        assert plain.hot_path(tenant, "status").queue_depth >= BACKLOG  # still queued


def test_every_write_of_the_session_is_read_not_only_the_last(server: ServerProcess) -> None:
    """A write carries the session's token and returns one covering it: three fast writes in a
    row, then one read, finds all three (only the newest token is kept)."""
    tenant = "py-three"
    with_backlog(server, tenant)
    with MemoryClient(server.target) as client:
        facts = [f"Invoice INV-{n} was paid by wire transfer on day {n}" for n in (71, 72, 73)]
        for fact in facts:
            client.retain(tenant, fact, fast=True)
        client.retain_conversation(tenant, [("user", "Remember the vault code is 5521")], fast=True)
        found = texts(client.recall(tenant, "invoice paid by wire transfer", k=10))
        assert set(facts) <= set(found)
        assert texts(client.recall(tenant, "vault code", k=1))[0].endswith("the vault code is 5521")


def test_threads_sharing_one_client_each_read_their_own_write(server: ServerProcess) -> None:
    """Six threads write at once, then each reads its own write: the session kept every token
    that no other covers, and a read waits for all of them."""
    tenant = "py-threads"
    with_backlog(server, tenant)
    with MemoryClient(server.target) as client:
        barrier = threading.Barrier(6)

        def write_then_read(n: int) -> list[str]:
            fact = f"Worker thread {n} parked its van in space P-{n:03d}"
            barrier.wait()
            client.retain(tenant, fact, fast=True)  # the writes overlap: each carries the same token
            barrier.wait()
            return texts(client.recall(tenant, f"van parked in space P-{n:03d}", k=10, mode="text"))

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            for n, found in enumerate(pool.map(write_then_read, range(6))):
                assert f"Worker thread {n} parked its van in space P-{n:03d}" in found


def test_another_clients_reads_are_answered_while_a_token_read_waits(
    server: ServerProcess, holds: tuple[Path, Path]
) -> None:
    """The order, not the timing: while the write a read waits for is held before its commit,
    another client's reads of the same tenant and of another one are answered (the waiting read
    is still unanswered when they are); released, the waiting read answers with the write."""
    tenant, elsewhere = "py-order", "py-elsewhere"
    with_backlog(server, tenant)
    workers = holds[1]
    with MemoryClient(server.target) as writer, MemoryClient(server.target, session_consistency=False) as other:
        other.retain(elsewhere, "A synchronous note in another tenant")
        workers.touch()
        try:
            writer.retain(tenant, "The night shift starts at gate G-8841", fast=True)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(writer.recall, tenant, "night shift gate G-8841", 1)
                # The read is waiting once the server counts the write as awaited.
                for _ in range(600):
                    assert not waiting.done(), waiting.result()
                    if writer.hot_path(tenant, "status").awaited:
                        break
                    time.sleep(0.05)
                else:
                    raise AssertionError("the token read never waited for its write")
                for _ in range(20):
                    assert other.recall(tenant, "crate shelf", k=3) == []  # the backlog: held
                    assert texts(other.recall(elsewhere, "synchronous note", k=1)) == [
                        "A synchronous note in another tenant"
                    ]
                    assert other.list_memories(tenant, page_size=5).memories == []
                assert not waiting.done()  # the others were answered while it waited
                workers.unlink()
                assert texts(waiting.result(timeout=60)) == ["The night shift starts at gate G-8841"]
        finally:
            workers.unlink(missing_ok=True)


def test_memory_host_and_memory_brain_read_their_own_fast_write(server: ServerProcess) -> None:
    tenant = "py-host"
    with_backlog(server, tenant)
    with MemoryClient(server.target) as client:
        host = MemoryHost(client, tenant)
        agent: object = type("Agent", (), {})()  # an agent object a weak reference can name
        client.retain(tenant, "The tenant's escalation contact is Priya Raman", fast=True)
        assert "Priya Raman" not in host.assemble_context(
            agent, "main", query="escalation contact", consistency_token=""
        )
        assert "Priya Raman" in host.assemble_context(agent, "main", query="escalation contact", k=3)
    with MemoryBrain(server.target, tenant=tenant) as brain:
        brain.retain("The fire drill is on the first Monday", fast=True)
        assert texts(brain.recall("fire drill Monday", k=1)) == ["The fire drill is on the first Monday"]
    with MemoryBrain(server.target, tenant=tenant, session_consistency=False) as brain:
        brain.retain("The boiler inspection is due in March", fast=True)
        assert "The boiler inspection is due in March" not in texts(brain.recall("boiler inspection March", k=5))


def test_memory_brain_in_process_reads_its_own_fast_write(tmp_path: Path) -> None:
    """In process, the same: a fast write queued behind 2,000 others (written before, by a brain
    without a session; the queue outlives it) is read at once, ahead of the drain."""
    with MemoryBrain(tmp_path / "mem", tenant="local", session_consistency=False) as earlier:
        earlier.hot_path(action="enable")
        for start in range(0, 2000, 1000):
            earlier.retain_batch(
                [f"Pallet PL-{i:05d} weighs {i % 900} kg" for i in range(start, start + 1000)], fast=True
            )
    with MemoryBrain(tmp_path / "mem", tenant="local") as brain:
        brain.retain("The cold room thermostat is set to 4 degrees", fast=True)
        assert "The cold room thermostat is set to 4 degrees" not in texts(
            brain.recall("cold room thermostat", k=3, consistency_token="")
        )
        assert texts(brain.recall("cold room thermostat", k=1)) == ["The cold room thermostat is set to 4 degrees"]
        assert brain.hot_path(action="status").queue_depth > 0  # read ahead of the drain


def _stdio(server: ServerProcess, tenant: str, *flags: str) -> Client:
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=["-m", "mnemosyne.cli", "mcp", "--target", server.target, "--tenant", tenant, *flags],
            env=dict(os.environ),
        )
    )


def _http(server: ServerProcess, tenant: str) -> Client:
    url = f"{server.http_url}/mcp?tenant={tenant}"
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=60)))


def _text(result: Any) -> str:
    assert not result.is_error, result
    return "\n".join(getattr(part, "text", "") for part in result.content)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_mcp_session_reads_its_own_fast_write(server: ServerProcess, transport: str) -> None:
    tenant = f"mcp-{transport}"
    with_backlog(server, tenant)
    fact = f"The {transport} session's courier comes on Thursdays at 9"

    async def run() -> None:
        async with _http(server, tenant) if transport == "http" else _stdio(server, tenant) as session:
            assert "Queued" in _text(await session.call_tool("retain", {"text": fact, "fast": True}))
            assert fact in _text(await session.call_tool("recall", {"query": "courier Thursdays", "k": 3}))
            read = _text(await session.call_tool("read_memory", {"query": "courier Thursdays", "k": 3}))
            assert fact in read

    anyio.run(run)


def test_mnemosyne_mcp_without_session_consistency_may_miss_its_write(server: ServerProcess) -> None:
    tenant = "mcp-opted-out"
    with_backlog(server, tenant)

    async def run() -> None:
        async with _stdio(server, tenant, "--no-session-consistency") as session:
            await session.call_tool("retain", {"text": "The archive room opens at noon", "fast": True})
            assert "No memories found" in _text(await session.call_tool("recall", {"query": "archive room noon"}))

    anyio.run(run)


def test_the_official_mem0_client_with_the_helper_reads_its_own_add(server: ServerProcess, tmp_path: Path) -> None:
    tenant = "mem0-session"
    with_backlog(server, tenant)
    headers = {"Mnemosyne-Tenant": tenant}
    with (
        Mem0Client(server.http_url, "any-key", tmp_path, headers, helper=True) as helped,
        Mem0Client(server.http_url, "any-key", tmp_path, headers) as unhelped,
    ):
        added = helped.call("add", messages="Dana's badge number is 60417", user_id="dana")
        assert added["status"] == "PENDING"  # queued behind the backlog
        assert unhelped.call("search", query="Dana badge number", filters={"user_id": "dana"})["results"] == []
        found = helped.call("search", query="Dana badge number", filters={"user_id": "dana"})["results"]
        assert [r["memory"] for r in found] == ["Dana's badge number is 60417"]
        assert [m["memory"] for m in helped.call("get_all", filters={"user_id": "dana"})["results"]] == [
            "Dana's badge number is 60417"
        ]
        assert helped.call("get", memory_id=found[0]["id"])["memory"] == "Dana's badge number is 60417"
        # The event of an add is not waited for: it answers at once, as before.
        unhelped.call("add", messages="Eli's locker is 12", user_id="eli")
        assert unhelped.call("search", query="Eli locker", filters={"user_id": "eli"})["results"] == []


def test_the_mem0_helper_drops_a_token_the_server_refuses_for_good(server: ServerProcess, tmp_path: Path) -> None:
    """The tenant is replaced after the helper kept a token: the next search is refused once with
    TIMELINE_CHANGED (mem0's exception), the helper drops the token, and the search after it answers."""
    tenant = "mem0-replaced"
    with MemoryClient(server.target, session_consistency=False) as admin:
        admin.retain(tenant, "Written before the export")
        parts = list(admin.export_tenant(tenant))
    with Mem0Client(server.http_url, "any-key", tmp_path, {"Mnemosyne-Tenant": tenant}, helper=True) as helped:
        helped.call("add", messages="Fay's desk is by the window", user_id="fay")
        with MemoryClient(server.target, session_consistency=False) as admin:
            admin.import_tenant(*_backup(parts), tenant=tenant, replace=True)
        refused = helped.attempt("search", query="Fay desk", filters={"user_id": "fay"})
        assert refused.get("status") == 400 and "earlier timeline" in refused["message"], refused
        assert helped.call("search", query="Fay desk", filters={"user_id": "fay"})["results"] == []


def test_a_restored_tenant_refuses_the_session_token_once_then_reads_answer(server: ServerProcess) -> None:
    """TIMELINE_CHANGED: the tenant was replaced (by another client) since the write; the client
    drops its token, raises the reason, and its next read answers at once."""
    tenant = "py-restored"
    with MemoryClient(server.target) as client, MemoryClient(server.target, session_consistency=False) as other:
        client.retain(tenant, "Written before the export")
        parts = list(client.export_tenant(tenant))
        with_backlog(server, tenant, 30)
        client.retain(tenant, "Queued after the export, lost by the replacement", fast=True)
        assert client.consistency_token(tenant)
        other.import_tenant(*_backup(parts), tenant=tenant, replace=True)
        with pytest.raises(TimelineChangedError) as refused:
            client.recall(tenant, "queued after the export")
        assert isinstance(refused.value, FailedPreconditionError) and refused.value.reason == "TIMELINE_CHANGED"
        assert client.consistency_token(tenant) is None  # dropped
        assert texts(client.recall(tenant, "written before the export", k=1)) == ["Written before the export"]


def test_a_client_that_erased_or_replaced_a_tenant_reads_it_at_once(server: ServerProcess) -> None:
    """The client's own erasure or import over a tenant ends the writes its session's tokens name:
    it drops them, so its next read of the tenant answers instead of TIMELINE_CHANGED."""
    tenant = "py-self-replaced"
    with MemoryClient(server.target) as client:
        client.retain(tenant, "Written before the export")
        parts = list(client.export_tenant(tenant))
        for step in ("replace", "erase"):
            with_backlog(server, tenant, 30)
            client.retain(tenant, f"Queued before the {step}", fast=True)
            assert client.consistency_token(tenant)
            if step == "replace":
                client.import_tenant(*_backup(parts), tenant=tenant, replace=True)
            else:
                client.erase_tenant(tenant)
            assert client.consistency_token(tenant) is None
            expected = ["Written before the export"] if step == "replace" else []
            assert texts(client.recall(tenant, "written before the export", k=1)) == expected


def test_another_client_s_token_from_before_an_erasure_is_of_an_earlier_timeline(server: ServerProcess) -> None:
    """A client's tokens name writes that another client's erasure ended. Once the tenant was made
    again (a write after the erasure: a new file, a new secret), they were refused as forged,
    TOKEN_INVALID "not one this server issued", and so was the client's next write, which carries
    its session's token. Now they are of an earlier timeline, as before the tenant was made again:
    the write is made, a read given one says TIMELINE_CHANGED."""
    tenant = "py-erased-by-another"
    with MemoryClient(server.target) as writer, MemoryClient(server.target) as admin:
        with_backlog(server, tenant, 30)
        writer.retain(tenant, "Queued before the erasure", fast=True)
        before = writer.consistency_token(tenant)
        assert before
        admin.erase_tenant(tenant)
        admin.retain(tenant, "Written after the erasure")
        made = writer.retain(tenant, "Written again by the first client")  # carrying ``before``
        assert made.status == "created", made
        assert texts(writer.recall(tenant, "written again by the first client", k=1)) == [
            "Written again by the first client"
        ]
        with pytest.raises(TimelineChangedError):
            writer.recall(tenant, "written", consistency_token=before)
        writer.hot_path(tenant, "enable")
        writer.retain(tenant, "Queued after the erasure", fast=True)
        now = writer.consistency_token(tenant)
        assert now and now != before
        forged = now[:-4] + ("AAAA" if not now.endswith("AAAA") else "BBBB")
        with pytest.raises(TokenInvalidError):  # one forged on this timeline is still refused as such
            writer.recall(tenant, "written", consistency_token=forged)


def test_a_forged_or_foreign_token_is_its_typed_error(server: ServerProcess) -> None:
    with MemoryClient(server.target) as client:
        client.hot_path("py-mine", "enable")
        client.retain("py-mine", "A note of my own", fast=True)
        mine = client.consistency_token("py-mine")
        assert mine
        with pytest.raises(TokenForeignError) as foreign:
            client.recall("py-theirs", "note", consistency_token=mine)
        with pytest.raises(TokenInvalidError) as forged:
            client.recall("py-mine", "note", consistency_token=mine[:-4] + "AAAA")
        for error in (foreign.value, forged.value):
            assert isinstance(error, InvalidArgumentError)
        assert client.consistency_token("py-mine") == mine  # the caller's own token: the session keeps its


def test_flush_takes_its_token_in_the_metadata_or_header_as_every_read_does(server: ServerProcess) -> None:
    """A Flush given a token in the request metadata (an HTTP header) waits for that token's
    writes only, refuses a malformed one TOKEN_INVALID, and prefers the request field's when both
    are given, as Recall does. It read the field only: the metadata's token was ignored, so the
    Flush waited for the whole held backlog and ran out of time."""
    tenant = "py-flush-metadata"
    with MemoryClient(server.target) as client:
        token = fast_write_behind_a_backlog(server, client, tenant, "The night shift log sits in drawer D-5173")
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")

        def flush(field: str, given: str) -> hot_path_pb2.FlushResponse:
            # 10 s: the token's one write (taken ahead of the held backlog) took past 1 s under
            # load; a Flush waiting for the whole held backlog instead still runs out of time.
            request = hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=10, consistency_token=field)
            metadata = ((CONSISTENCY_TOKEN_KEY, given),) if given else ()
            flushed: hot_path_pb2.FlushResponse = client.call(
                client.hot_path_stub.Flush, request, retry=False, metadata=metadata
            )
            return flushed

        def recall(field: str, given: str) -> memory_pb2.RecallResponse:
            request = memory_pb2.RecallRequest(tenant=tenant, query="night shift log", consistency_token=field)
            metadata = ((CONSISTENCY_TOKEN_KEY, given),) if given else ()
            found: memory_pb2.RecallResponse = client.call(
                client.memory.Recall, request, retry=False, metadata=metadata, session=False
            )
            return found

        assert flush("", token).flushed == 1  # its write only (the backlog stays queued)
        assert texts(recall("", "").hits) == ["The night shift log sits in drawer D-5173"]
        for forged_field, forged_metadata in ((forged, ""), ("", forged), (forged, token)):
            for rpc in (flush, recall):
                with pytest.raises(TokenInvalidError):
                    rpc(forged_field, forged_metadata)
        assert flush(token, forged).failed == 0 and recall(token, forged).hits  # the field's token first

        client.retain(tenant, "The day shift log sits in drawer D-5174", fast=True)
        asked = hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=10)
        refused = http_call(server.http_port, "Flush", asked, {CONSISTENCY_TOKEN_KEY: forged})
        assert (refused.status, refused.reason) == (400, "TOKEN_INVALID")
        newest = client.consistency_token(tenant)
        assert newest
        flushed = http_call(server.http_port, "Flush", asked, {CONSISTENCY_TOKEN_KEY: newest})
        assert (flushed.status, int(flushed.json()["flushed"])) == (200, 1), flushed.body
        assert client.hot_path(tenant, "status").queue_depth >= 30  # the backlog stays queued


def test_flush_refuses_its_consistency_level_before_it_waits_with_a_token_or_without(server: ServerProcess) -> None:
    """A Flush's mnemosyne-consistency-level that is no level (CONSISTENCY_LEVEL_INVALID), or
    replicated on a server that does not replicate (REPLICATION_OFF), is refused at once, given
    a token (field, metadata, HTTP header) or not. Given a token it ignored the level (answered
    as if the sync held); without one it refused only after waiting for the whole queue (the held
    backlog: its deadline)."""
    tenant = "py-flush-level"
    with MemoryClient(server.target) as client:
        token = fast_write_behind_a_backlog(server, client, tenant, "The spare fuse sits in box F-88")
        for level, reason in (("someday", "CONSISTENCY_LEVEL_INVALID"), ("replicated", "REPLICATION_OFF")):
            for field, given in (("", ""), (token, ""), ("", token)):
                request = hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=1, consistency_token=field)
                metadata = ((LEVEL_KEY, level), *(((CONSISTENCY_TOKEN_KEY, given),) if given else ()))
                started = time.monotonic()
                with pytest.raises(MnemosyneClientError) as caught:
                    client.call(client.hot_path_stub.Flush, request, retry=False, metadata=metadata)
                assert (caught.value.reason, field or given or "no token") == (reason, field or given or "no token")
                assert time.monotonic() - started < 0.9  # before any wait
            asked = hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=1)
            reply = http_call(server.http_port, "Flush", asked, {LEVEL_KEY: level, CONSISTENCY_TOKEN_KEY: token})
            assert reply.reason == reason, reply.body
        assert client.hot_path(tenant, "status").queue_depth >= 30  # nothing was flushed


def test_every_call_refuses_a_consistency_level_that_is_none_and_two_request_ids(server: ServerProcess) -> None:
    """A read (Recall, ListMemories, a Ping naming no tenant) ignored a mnemosyne-consistency-level
    that is no level, which a write refuses; and of two x-request-id the first was taken, without
    a word. Each is refused on every call, over gRPC and HTTP; a level that is one stays harmless
    on a read."""
    tenant = "py-level-everywhere"
    recall = memory_pb2.RecallRequest(tenant=tenant, query="fuse")
    with MemoryClient(server.target, session_consistency=False) as client:
        client.retain(tenant, "The spare fuse sits in box F-89")
        calls = (
            (client.memory.Recall, recall),
            (client.memory.ListMemories, memory_pb2.ListMemoriesRequest(tenant=tenant)),
            (client.admin.Ping, admin_pb2.PingRequest()),
        )
        for metadata, reason in (
            (((LEVEL_KEY, "someday"),), "CONSISTENCY_LEVEL_INVALID"),
            ((("x-request-id", "r-1"), ("x-request-id", "r-2")), "REQUEST_ID_INVALID"),
        ):
            for rpc, request in calls:
                with pytest.raises(MnemosyneClientError) as caught:
                    client.call(rpc, request, retry=False, metadata=metadata)
                assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
        assert client.call(client.memory.Recall, recall, retry=False, metadata=((LEVEL_KEY, "replicated"),)).hits
    assert http_call(server.http_port, "Recall", recall, {LEVEL_KEY: "someday"}).reason == "CONSISTENCY_LEVEL_INVALID"
    twice = httpx2.post(
        f"http://127.0.0.1:{server.http_port}/v1/tenants/{tenant}/memories:recall",
        json={"query": "fuse"},
        headers=[("x-request-id", "r-1"), ("x-request-id", "r-2")],
    )
    assert twice.status_code == 400 and twice.json()["details"][0]["reason"] == "REQUEST_ID_INVALID", twice.text


def test_session_tokens_keep_the_newest_per_tenant_within_their_bounds() -> None:
    """The session's store itself: a write carries the newest token and its token replaces it (a
    synchronous one that carried none keeps nothing);
    overlapping writes are both kept, a read answers for all of them and drops them; the least
    recently used tenant goes first past the bound; a refusal for good drops what it was about,
    a deadline does not."""
    tokens = SessionTokens(tenants=2)
    retain, recall = memory_pb2.RetainRequest, memory_pb2.RecallRequest

    def wrote(tenant: str, sent: tuple[str, ...], token: str, status: int = types_pb2.RetainResult.ENQUEUED) -> None:
        result = types_pb2.RetainResult(status=status)  # type: ignore[arg-type]  # the enum's values are ints
        tokens.answered(retain(tenant=tenant), sent, memory_pb2.RetainResponse(result=result, consistency_token=token))

    wrote("a", (), "s1", types_pb2.RetainResult.CREATED)
    assert tokens.tokens("a") == ()  # a synchronous write carrying none: visible already, nothing kept
    wrote("a", (), "a1")
    assert tokens.outgoing(recall(tenant="a")) == ("a1",)
    assert tokens.outgoing(recall(tenant="a", consistency_token="x")) == ()  # the caller's own
    assert tokens.outgoing(memory_pb2.ListMemoryVersionsRequest(tenant="a")) == ()  # no wait there
    sent = tokens.outgoing(retain(tenant="a"))
    wrote("a", sent, "a2")  # two writes that carried the same token:
    wrote("a", sent, "a3")  # neither covers the other's write
    assert tokens.outgoing(retain(tenant="a")) == ("a3",)  # a write carries the newest
    assert tokens.outgoing(recall(tenant="a")) == ("a2", "a3")  # a read answers for both
    wrote("a", ("a3",), "a4")
    assert tokens.tokens("a") == ("a2", "a4")
    read = tokens.outgoing(recall(tenant="a"))
    wrote("a", ("a4",), "a5")  # a write answered while the read waits
    tokens.answered(recall(tenant="a"), read, memory_pb2.RecallResponse())
    assert tokens.tokens("a") == ("a5",)  # the read's are visible now; the later write's is not
    for n in range(MAX_TOKENS_PER_TENANT + 3):
        wrote("a", (), f"o{n}")
    assert len(tokens.tokens("a")) == MAX_TOKENS_PER_TENANT
    wrote("b", (), "b1")
    tokens.tokens("a")  # a is used again: b is now the least recently used
    wrote("c", (), "c1")
    assert (tokens.newest("b"), tokens.newest("c"), len(tokens)) == (None, "c1", 2)
    tokens.refused("c", ("c1",), "CONSISTENCY_DEADLINE_EXCEEDED")
    assert tokens.newest("c") == "c1"
    tokens.refused("c", ("c1",), "TIMELINE_CHANGED")
    assert tokens.newest("c") is None


@pytest.mark.parametrize(
    ("tenants", "error", "message"),
    [
        ("x", TypeError, "session_consistency: tenants is str 'x'; it takes a whole number (int)"),
        (["acme"], TypeError, "session_consistency: tenants is list ['acme']; it takes a whole number (int)"),
        (True, TypeError, "session_consistency: tenants is bool True; it takes a whole number (int)"),
        (0, ValueError, "session_consistency: tenants is 0; it takes 1 or more"),
    ],
)
def test_the_mem0_helper_refuses_a_tenant_count_that_is_none(
    tenants: Any, error: type[Exception], message: str
) -> None:
    """Before, a text failed in the client's first write (a TypeError inside httpx's hook) and 0
    kept no token at all, without a word."""
    with httpx2.Client() as http, pytest.raises(error) as refused:
        mem0_helper.session_consistency(http, tenants=tenants)
    assert str(refused.value) == message
    assert http.event_hooks == {"request": [], "response": []}  # nothing was plugged in


@pytest.mark.parametrize("client", ["x", None, 5, httpx2.Client])
def test_the_mem0_helper_refuses_what_is_no_client(client: Any) -> None:
    """Before, anything but a client failed with an AttributeError naming ``.client``, an attribute
    the caller never wrote; now the same TypeError as a wrong ``tenants``, naming what it takes."""
    with pytest.raises(TypeError) as refused:
        mem0_helper.session_consistency(client)
    assert str(refused.value).startswith(f"session_consistency: client is {type(client).__name__} ")
    assert str(refused.value).endswith(
        "; it takes mem0's MemoryClient or AsyncMemoryClient, or the httpx.Client or httpx.AsyncClient given to one"
    )
