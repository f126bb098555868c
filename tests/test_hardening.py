"""What a hostile or careless client can send, and what the server does with it: a clear status
with a reason, never INTERNAL, never a stray file, never lost or half-written data.

Each test names the case of the hardening issue it covers (numbers as there); the tokens file
(case 1) is in tests/test_tokens_file.py, and every RPC against generated hostile input in
tests/test_hostile_inputs.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import apsw
import grpc
import pytest
from google.protobuf import timestamp_pb2

from mnemosyne.client import (
    ArgumentTypeError,
    BackupChunk,
    DataLossError,
    InvalidArgumentError,
    MemoryClient,
    MnemosyneClientError,
    RecordChange,
    ResourceExhaustedError,
    TenantBackup,
)
from mnemosyne.client.errors import error_info, from_rpc_error
from mnemosyne.engine import dedup
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem
from mnemosyne.v1 import admin_pb2, events_pb2, hot_path_pb2, memory_pb2, workspace_pb2
from tests.support import ServerProcess, altered_mac, health_check, respelt_end

FOUR_BYTES = "\U0001f600"  # one character, four bytes of UTF-8


def _refusal(call) -> MnemosyneClientError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    error = from_rpc_error(info.value)
    assert error.code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), error
    assert error_info(info.value) is not None, f"{error.code.name} without an ErrorInfo: {error.message}"
    return error


def _files(data_dir: Path) -> list[str]:
    return sorted(
        str(p.relative_to(data_dir))
        for d in ("tenants", "inbox")
        if (data_dir / d).exists()
        for p in (data_dir / d).iterdir()
    )


# -- 2. every wait is finite and bounded ---------------------------------------------------------


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, 1e300, -1.0, 3600.5])
def test_flush_and_disable_refuse_a_timeout_that_is_not_a_bounded_number(
    client: MemoryClient, tenant: str, seconds: float
) -> None:
    client.hot_path(tenant, "enable")
    for call in (
        lambda: client.hot_path_stub.Flush(
            hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=seconds), timeout=10
        ),
        lambda: client.hot_path_stub.Disable(
            hot_path_pb2.HotPathRequest(tenant=tenant, timeout_seconds=seconds), timeout=10
        ),
    ):
        error = _refusal(call)
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TIMEOUT_INVALID")
        assert "3600" in error.message
    assert client.hot_path(tenant, "status").enabled  # the refused Disable changed nothing
    assert client.hot_path(tenant, "flush", 3600).flushed == 0  # the maximum itself is accepted


# -- 3. batch work is linear in the batch ----------------------------------------------------------


def test_near_duplicate_atoms_are_read_once_per_item_however_many_look_alike(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    real = dedup.atoms

    def counted(text: str) -> frozenset[str]:
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(dedup, "atoms", counted)
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing"))
    try:
        body = "The refund for ticket RF-88213 was approved on 8 May 2023 by the finance team. " * 40
        for n in (25, 50, 100):
            calls.clear()
            items = [RetainItem(f"{body} Note {i:03d}.") for i in range(n)]  # look-alikes, same atoms but the note
            engine.retain_batch(f"t{n}", items)
            # Each item's atoms once (as a new item and as a candidate of the others), never per pair.
            assert len(calls) <= n, (n, len(calls))
        calls.clear()
        again = [RetainItem(f"{body} Later note {i:03d}.") for i in range(100)]
        outcomes = engine.retain_batch("t100", again)  # each near 100 stored look-alikes and 99 new ones
        assert len(calls) <= 100 + 100, len(calls)  # the new items once, the stored candidates once
        assert all(len(o.near_duplicate_of) <= 2 * dedup.MAX_NAMED for o in outcomes)
    finally:
        engine.close()


# -- 4 and 5. files only when a write succeeds ---------------------------------------------------------


def test_a_new_tenant_on_a_full_disk_is_disk_full_and_leaves_no_file(server_factory) -> None:
    # SQLite's real disk-full error: no file may grow past 20 pages, and a tenant's schema needs 32.
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "max_page_count=20"}).start()
    with MemoryClient(server.target, retries=0) as client:
        for call in (
            lambda: client.retain("fresh", "the first memory of a new tenant"),
            lambda: client.retain_batch("fresh", ["one", "two"]),
            lambda: client.hot_path("fresh", "enable"),
            lambda: client.update_global("fresh", "# MEMORY", 0),
        ):
            with pytest.raises(ResourceExhaustedError) as info:
                call()
            assert info.value.reason == "DISK_FULL"
        assert client.list_tenants().tenants == []
        assert client.stats("fresh").memories == 0
    assert _files(server.data_dir) == []


def test_a_first_write_that_does_not_fit_leaves_no_file_and_a_later_one_that_fits_works(server_factory) -> None:
    # The schema and a small memory fit (63 pages) but not a first memory of 128 KB of text.
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "max_page_count=72"}).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(ResourceExhaustedError) as info:
            client.retain("fresh", FOUR_BYTES * 32_768)
        assert info.value.reason == "DISK_FULL"
        assert _files(server.data_dir) == []
        assert client.retain("fresh", "a small one").status == "created"
        assert client.list_tenants().tenants == ["fresh"] and client.verify_integrity("fresh").valid
    assert [f for f in _files(server.data_dir) if f.endswith(".sqlite")] == ["tenants/fresh.sqlite"]


def test_calls_that_only_read_or_fail_never_create_a_tenant_file(server_factory) -> None:
    server = server_factory().start()
    t = "nobody"
    with MemoryClient(server.target, retries=0) as client:
        reads: list[Callable[[], object]] = [
            lambda: client.recall(t, "anything"),
            lambda: client.list_memories(t),
            lambda: client.verify_integrity(t),
            lambda: client.stats(t),
            lambda: client.dedup(t),
            lambda: client.dedup(t, merge=True),
            lambda: client.hot_path(t, "status"),
            lambda: client.hot_path(t, "flush"),
            lambda: client.hot_path(t, "disable"),
            lambda: client.list_events(t),
            lambda: client.assemble_context(t, "w", query="anything"),
            lambda: client.list_records(t, "global"),
            lambda: list(client.watch_events(t, timeout=0.5)),
        ]
        failing: list[Callable[[], object]] = [  # writes that fail on a tenant without a file
            lambda: client.get_memory(t, 1),
            lambda: client.forget(t, 1),
            lambda: client.get_event(t, 1),
            lambda: client.get_record(t, "global", "MEMORY.md"),
            lambda: client.update_global(t, "stale", 7),  # generation 7 never existed
            lambda: client.update_workspace(t, "w", [RecordChange("delete", "missing.md")], 0),
            lambda: client.edit_records(t, "global", [RecordChange("put", "a.md", "x")], expected_generation=3),
            lambda: client.consolidate(t, "global", [RecordChange("put", "a.md", "x")], 5, "receipt-1"),
            lambda: client.retain(t, "x" * 40_000),
        ]
        for call in reads:
            try:
                call()
            except MnemosyneClientError as exc:  # a short watch ends at its deadline
                assert exc.code == grpc.StatusCode.DEADLINE_EXCEEDED, exc
        for call in failing:
            with pytest.raises(MnemosyneClientError) as info:
                call()
            assert info.value.code != grpc.StatusCode.INTERNAL
        assert {r.status for r in client.retain_batch(t, ["", " "])} == {"invalid"}  # nothing to write
        assert client.list_tenants().tenants == []
    assert _files(server.data_dir) == []


# -- 6. the open-file limit ---------------------------------------------------------------------------


def _open_file_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file limit in /proc")


def test_with_a_low_open_file_limit_hundreds_of_tenants_work(server_factory) -> None:
    server: ServerProcess = server_factory(open_files=(256, 256)).start()
    assert _open_file_limit(server.pid) == (256, 256)
    errors: list[BaseException] = []

    def work(start: int) -> None:
        try:
            with MemoryClient(server.target, retries=0) as client:
                for i in range(start, 200, 4):
                    tenant = f"tenant-{i}"
                    client.retain(tenant, f"memory of tenant {i}")
                    assert [h.memory.text for h in client.recall(tenant, "memory", k=1)] == [f"memory of tenant {i}"]
                    client.hot_path(tenant, "enable")
                    client.retain(tenant, f"fast memory of tenant {i}", fast=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with MemoryClient(server.target) as client:
        for i in range(0, 200, 37):
            client.hot_path(f"tenant-{i}", "flush")
            assert client.stats(f"tenant-{i}").memories == 2
    log = server.stderr_path.read_text()
    assert "open-tenant cache: 16 tenant files (asked 1024; open-file limit 256" in log


def test_out_of_descriptors_the_server_closes_idle_tenants_and_every_call_succeeds(server_factory) -> None:
    """Connected clients take the descriptors the open-tenant cache left for everything else, so
    opening tenant files runs the process out of descriptors (EMFILE) long before the cache is
    full: idle tenants are closed and the open tried again, for first writes, reopened tenants,
    readers and hot-path inboxes alike."""
    limit = 192  # an open-tenant cache of (192 - 128) // 8 = 8 tenants
    # Connections past the default's quarter of the limit (48), as an operator may allow.
    server: ServerProcess = server_factory(open_files=(limit, limit), args=["--grpc-max-connections", "1000"]).start()
    pid = server.pid

    def free() -> int:
        return limit - len(os.listdir(f"/proc/{pid}/fd"))

    # Each channel its own connection (not the process-wide shared one): one descriptor in the
    # server each, until 36 are left: two tenants in use at their most (writer, shared memory,
    # four readers, inbox: 14 descriptors) fit, the cache's eight tenants (8 each) do not.
    channels: list[grpc.Channel] = []
    try:
        while free() > 36:
            channel = grpc.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)])
            channels.append(channel)
            health_check(channel, timeout=10)
        tenants = [f"emfile-{i}" for i in range(24)]
        with MemoryClient(server.target, retries=0) as client:
            for i, tenant in enumerate(tenants):  # first writes, reads, inboxes
                assert client.retain(tenant, f"memory of tenant {i}").status == "created"
                assert [h.memory.text for h in client.recall(tenant, "memory", k=1)] == [f"memory of tenant {i}"]
                client.hot_path(tenant, "enable")
                assert client.retain(tenant, f"fast memory of tenant {i}", fast=True).status == "enqueued"
            for tenant in tenants:  # every one closed and opened again since
                client.hot_path(tenant, "flush")
                assert client.stats(tenant).memories == 2
                assert len(client.recall(tenant, "memory", k=5)) == 2
            aggregate = client.aggregate_stats()  # a glance at each tenant, open or not
            assert (sorted(aggregate.tenants), aggregate.damaged) == (sorted(tenants), {})
            assert aggregate.total.memories == 2 * len(tenants)
        assert free() <= 36
    finally:
        for channel in channels:
            channel.close()
    log = server.stderr_path.read_text()
    assert "out of file descriptors: closed" in log
    assert "Traceback" not in log and " ERROR " not in log


def test_a_tenant_whose_file_another_connection_holds_a_moment_opens_once_it_lets_go(
    server_factory, tenant: str
) -> None:
    """A tenant opening while another connection holds its file's lock for a moment (a glance at
    a tenant not open, closed as the file's last connection, takes it to try a checkpoint;
    store/pool.py ``glance``): the open's first statements (APSW's recommended settings:
    ``journal_mode=wal``) ran under APSW's busy timeout of 100 ms, set before ours, and the
    call that opened the tenant ended INTERNAL "database is locked". They wait as every other
    statement does now."""
    server = server_factory().start()
    with MemoryClient(server.target, retries=0) as client:
        client.retain(tenant, "the pump in hall 4 is blue")
    server.stop()
    server.start()  # the tenant is not open
    holder = apsw.Connection(str(server.tenant_file(tenant)))
    holder.pragma("locking_mode", "EXCLUSIVE")  # held from its first read to its close
    holder.execute("BEGIN EXCLUSIVE; COMMIT").fetchall()
    letting_go = threading.Timer(0.5, holder.close)
    letting_go.start()
    try:
        with MemoryClient(server.target, retries=0) as client:
            assert [h.memory.text for h in client.recall(tenant, "pump", k=1)] == ["the pump in hall 4 is blue"]
    finally:
        letting_go.join()
    assert " ERROR " not in server.stderr_path.read_text()


def test_the_server_raises_its_soft_open_file_limit_to_the_hard_one(server_factory) -> None:
    server: ServerProcess = server_factory(open_files=(512, 4096)).start()
    assert _open_file_limit(server.pid) == (4096, 4096)
    assert "open-file limit: 4096 (hard limit 4096)" in server.stderr_path.read_text()


# -- 7. requests and responses that always fit ------------------------------------------------------


def test_a_workspace_of_large_records_is_read_back_whole_in_pages_that_fit(client: MemoryClient, tenant: str) -> None:
    record = FOUR_BYTES * (262_144 // 4)  # the largest record: 262,144 bytes of four-byte characters
    generation = 0
    for start in range(0, 75, 25):  # 25 records a request (6.5 MB, within max_request_bytes)
        changes = [RecordChange("put", f"notes/{i:03d}.md", record) for i in range(start, start + 25)]
        generation = client.update_workspace(tenant, "big", changes, generation)
    client.update_global(tenant, record, 0)
    # Raw gRPC: each page and the assembled context stay under 4 MiB and say what they left out.
    request = workspace_pb2.ListRecordsRequest(tenant=tenant, scope="workspace/big", page_size=1000)
    pages, token = 0, ""
    while True:
        request.page_token = token
        response = client.workspace.ListRecords(request, timeout=30)
        assert response.ByteSize() < 4 * 1024 * 1024 and response.generation == generation
        pages, token = pages + 1, response.next_page_token
        if not token:
            break
    assert pages >= 6
    assembled = client.workspace.AssembleContext(
        workspace_pb2.AssembleContextRequest(tenant=tenant, workspace="big"), timeout=30
    )
    assert assembled.ByteSize() < 4 * 1024 * 1024
    assert {r.key for r in assembled.omitted_records} | {r.key for r in assembled.workspace_records} == {
        f"notes/{i:03d}.md" for i in range(75)
    }
    assert [r.key for r in assembled.global_records] == ["MEMORY.md"]  # the Global record comes first
    # The client reads everything back, with the generations of one snapshot.
    listed = client.list_records(tenant, "workspace/big")
    assert len(listed.records) == 75 and all(r.content == record for r in listed.records)
    context = client.assemble_context(tenant, "big")
    assert [r.key for r in context.workspace_records] == [f"notes/{i:03d}.md" for i in range(75)]
    assert context.workspace_generation == generation and context.global_records[0].content == record


def test_a_later_page_after_the_records_changed_is_refused(client: MemoryClient, tenant: str) -> None:
    client.edit_records(tenant, "global", [RecordChange("put", f"k{i}", "x") for i in range(5)], expected_generation=0)
    first = client.workspace.ListRecords(
        workspace_pb2.ListRecordsRequest(tenant=tenant, scope="global", page_size=2), timeout=10
    )
    client.edit_records(tenant, "global", [RecordChange("put", "k9", "y")], expected_generation=1)
    error = _refusal(
        lambda: client.workspace.ListRecords(
            workspace_pb2.ListRecordsRequest(
                tenant=tenant, scope="global", page_size=2, page_token=first.next_page_token
            ),
            timeout=10,
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.ABORTED, "RECORDS_CHANGED")
    assert [r.key for r in client.list_records(tenant, "global").records] == ["k0", "k1", "k2", "k3", "k4", "k9"]


def test_memories_of_the_largest_size_are_listed_and_recalled_within_the_response_limit(
    client: MemoryClient, tenant: str
) -> None:
    text = "recallable " + FOUR_BYTES * 32_000  # near max_text_chars, four bytes each
    metadata = {f"{i:02d}" + "k" * 126: FOUR_BYTES * 1024 for i in range(32)}  # the metadata limits, four-byte values
    for batch in range(4):  # 10 memories of ~0.26 MB a request
        results = client.retain_batch(tenant, [RetainItem_(f"{text} {batch}-{i}", metadata) for i in range(10)])
        assert {r.status for r in results} == {"created"}, results
    seen, token, pages = [], "", 0
    while True:
        response = client.memory.ListMemories(
            memory_pb2.ListMemoriesRequest(tenant=tenant, page_size=1000, page_token=token), timeout=30
        )
        assert response.ByteSize() < 4 * 1024 * 1024
        seen += [m.id for m in response.memories]
        pages, token = pages + 1, response.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == 40 and pages >= 3
    recalled = client.memory.Recall(memory_pb2.RecallRequest(tenant=tenant, query="recallable", k=40), timeout=30)
    assert recalled.ByteSize() < 4 * 1024 * 1024 and recalled.omitted_memory_ids
    assert len(recalled.hits) + len(recalled.omitted_memory_ids) == 40
    assert len({h.memory.id for h in recalled.hits} | set(recalled.omitted_memory_ids)) == 40


def RetainItem_(text: str, metadata: dict[str, str]):
    from mnemosyne.client import RetainItem

    return RetainItem(text, "global", metadata)


def test_a_request_above_the_limit_is_refused_with_its_reason(client: MemoryClient, tenant: str) -> None:
    huge = [FOUR_BYTES * 32_768] * 1_000  # within max_batch_items and max_text_chars: 131 MB
    with pytest.raises(InvalidArgumentError) as info:
        client.retain_batch(tenant, huge)  # refused by the client before sending
    assert info.value.reason == "REQUEST_TOO_LARGE"
    # The limit it applied is the client's own, and it says how to raise it (it named the server's flag).
    assert "MemoryClient(max_request_bytes=" in info.value.message and info.value.metadata["limit"] == "16777216"
    with pytest.raises(ValueError, match="max_request_bytes"):
        MemoryClient(client.target, max_request_bytes=0)
    with MemoryClient(client.target, max_request_bytes=64 * 1024 * 1024) as raised:  # the server's is not
        with pytest.raises(InvalidArgumentError) as refused:
            raised.retain_batch(tenant, ["x" * 32_768] * 600)  # sent: the server refuses it, saying how to raise
    assert refused.value.reason == "REQUEST_TOO_LARGE" and "raise --max-request-bytes" in refused.value.message
    # Sent anyway (raw gRPC): the server refuses what is above its limit and within the transport's.
    request = memory_pb2.RetainBatchRequest(tenant=tenant, items=[memory_pb2.RetainItem(text="x" * 32_768)] * 600)
    assert 16 * 1024 * 1024 < request.ByteSize() < 32 * 1024 * 1024
    error = _refusal(lambda: client.memory.RetainBatch(request, timeout=30))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_TOO_LARGE")
    # Over twice the limit, gRPC core refuses it before any code of ours runs: core's status, no
    # ErrorInfo (docs/operations.md, "What gRPC refuses itself, without ErrorInfo").
    beyond = memory_pb2.RetainBatchRequest(tenant=tenant, items=[memory_pb2.RetainItem(text="x" * 32_768)] * 1_100)
    assert beyond.ByteSize() > 32 * 1024 * 1024
    with grpc.insecure_channel(client.target, options=[("grpc.max_send_message_length", -1)]) as channel:
        retain_batch = channel.unary_unary(
            "/mnemosyne.v1.MemoryService/RetainBatch",
            request_serializer=memory_pb2.RetainBatchRequest.SerializeToString,
            response_deserializer=memory_pb2.RetainBatchResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as core:
            retain_batch(beyond, timeout=30)
    assert core.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_info(core.value) is None
    assert "larger than max" in (core.value.details() or "")
    assert client.stats(tenant).memories == 0


def test_each_message_a_stream_sends_is_refused_over_the_clients_limit(
    client: MemoryClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Only a unary call's request was measured: an import's manifest and chunks and a server
    # stream's request went at any size, one over twice the server's --max-request-bytes getting
    # gRPC core's RESOURCE_EXHAUSTED without ErrorInfo. A client of a 4 KiB limit stands in for one of 16 MiB.
    client.retain(tenant, "exported")
    manifest, *chunks = client.export_tenant(tenant)
    assert isinstance(manifest, TenantBackup) and max(len(c.data) for c in chunks) > 4096  # type: ignore[union-attr]  # the chunks follow the manifest
    copy = f"{tenant}-copy"
    with MemoryClient(client.target, max_request_bytes=4096) as limited:
        refusals: list[Callable[[], object]] = [
            # The manifest is taken; the first chunk is refused here and the import cancelled.
            lambda: limited.import_tenant(manifest, chunks, tenant=copy),  # type: ignore[arg-type]  # as above
            lambda: limited.import_tenant(dataclasses.replace(manifest, head_hash="a" * 8192), [], tenant=copy),
            lambda: list(limited.backup([tenant] * 500)),
            lambda: list(limited.export_tenant("t" * 8192)),
            lambda: list(limited.watch_events("t" * 8192, timeout=5)),
        ]
        for refusal in refusals:
            with pytest.raises(InvalidArgumentError) as info:
                refusal()
            assert info.value.reason == "REQUEST_TOO_LARGE" and info.value.metadata["limit"] == "4096"
            assert info.value.message.startswith("the request has ") and "limit is 4096" in info.value.message
    with pytest.raises(MnemosyneClientError) as absent:  # nothing installed
        list(client.export_tenant(copy))
    assert absent.value.reason == "TENANT_NOT_FOUND"
    assert "Exception iterating requests" not in caplog.text  # the refusal was not raised inside gRPC


def test_an_import_chunk_that_is_no_bytes_is_refused_naming_it(
    client: MemoryClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A chunk's data of another type (a text, None from a caller's generator) failed in gRPC's
    # request iterator: logged "Exception iterating requests" and answered UNKNOWN.
    client.retain(tenant, "exported")
    manifest, *chunks = client.export_tenant(tenant)
    assert isinstance(manifest, TenantBackup)
    chunk = cast(BackupChunk, chunks[0])
    copy = f"{tenant}-typed"
    for bad, named in [
        (BackupChunk(chunk.file, "text"), "chunk 2's data is str 'text'; it takes bytes"),  # type: ignore[arg-type]  # the fault
        (BackupChunk(chunk.file, None), "chunk 2's data is NoneType None; it takes bytes"),  # type: ignore[arg-type]  # the fault
        ("a text", "chunk 2 is str 'a text'; it takes a BackupChunk"),
    ]:
        with pytest.raises(ArgumentTypeError) as info:
            client.import_tenant(manifest, (c for c in [chunk, bad]), tenant=copy)  # type: ignore[misc]  # a text among the chunks
        assert info.value.reason == "REQUEST_UNDECODABLE" and named in info.value.message, info.value.message
    with pytest.raises(MnemosyneClientError) as absent:  # nothing installed
        list(client.export_tenant(copy))
    assert absent.value.reason == "TENANT_NOT_FOUND"
    assert "Exception iterating requests" not in caplog.text  # the refusal was not raised inside gRPC


# -- 8. damaged tenants stay contained ---------------------------------------------------------------


def test_damaged_tenant_files_fail_alone_and_never_stop_an_aggregate(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        for i in range(200):
            client.retain(f"ok-{i:03d}", f"memory {i}")
    tenants = server.data_dir / "tenants"
    (tenants / "garbage.sqlite").write_bytes(os.urandom(8192))
    other = apsw.Connection(str(tenants / "other-app.sqlite"))  # another program's database
    other.execute("CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices VALUES(1, 9.5)")
    other.close()
    ours = apsw.Connection(str(tenants / "half.sqlite"))  # our mark, but not our schema
    ours.pragma("application_id", 0x4D4E454D)
    ours.pragma("user_version", 5)
    ours.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    ours.close()
    damaged = ["garbage", "half", "other-app"]
    with MemoryClient(server.target, retries=0) as client:
        for tenant in damaged:
            for call in (
                lambda: client.recall(tenant, "x"),
                lambda: client.retain(tenant, "x"),
                lambda: client.stats(tenant),
                lambda: client.verify_integrity(tenant),
            ):
                with pytest.raises(DataLossError) as info:
                    call()
                assert info.value.reason == "TENANT_CORRUPT"
        listed = client.admin.ListTenants(admin_pb2.ListTenantsRequest(), timeout=10)
        assert sorted(listed.damaged) == damaged and len(listed.tenants) == 203
        chunks = list(client.admin.AggregateStats(admin_pb2.AggregateStatsRequest(chunk_size=50), timeout=30))
        rows = {row.tenant: row for chunk in chunks for row in chunk.tenants}
        assert len(rows) == 203
        assert {t: rows[t].error_reason for t in damaged} == dict.fromkeys(damaged, "TENANT_CORRUPT")
        assert chunks[-1].total.memories == 200 and "3 could not be read" in chunks[-1].consistency
        # The client's view says the same.
        page = client.list_tenants(page_size=1000)
        assert sorted(page.damaged) == damaged and len(page.tenants) == 203
        aggregate = client.aggregate_stats(chunk_size=50)
        assert aggregate.damaged == dict.fromkeys(damaged, "TENANT_CORRUPT")
        assert len(aggregate.tenants) == 200 and aggregate.total.memories == 200
        assert [h.memory.text for h in client.recall("ok-007", "memory")] == ["memory 7"]
    # The other program's database was not touched.
    other = apsw.Connection(str(tenants / "other-app.sqlite"))
    assert other.execute("SELECT name FROM sqlite_master").fetchall() == [("invoices",)]
    other.close()


# -- 9 and 10. tokens, timestamps, enums and undecodable requests ----------------------------------------


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_page_tokens_are_only_those_this_server_issued_for_this_tenant_and_query(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target, retries=0) as client:
        client.retain_batch("a", [f"memory {i}" for i in range(5)])
        client.retain_batch("b", [f"memory {i}" for i in range(5)])
        client.retain("a", "in a workspace", scope="workspace/w")
        token = client.list_memories("a", page_size=2).next_page_token
        assert token and client.list_memories("a", page_size=2, page_token=token).memories[0].text == "memory 2"
        forged = [
            _token("after:99999999999999999999999"),
            _token("after:-1"),
            "not base64 !!",
            altered_mac(token),
            respelt_end(token),
            token + "A" * 600,
            _token("2") + "." + _token("x" * 16),
        ]
        for bad in forged:
            with pytest.raises(InvalidArgumentError) as info:
                client.list_memories("a", page_token=bad)
            assert info.value.reason == "PAGE_TOKEN_INVALID"
        for other in (
            lambda: client.list_memories("b", page_token=token),  # another tenant
            lambda: client.list_memories("a", scope="workspace/w", page_token=token),  # another query
            lambda: client.list_memories("a", include_forgotten=True, page_token=token),
            lambda: client.list_memories("nobody", page_token=token),  # a tenant without a file
            lambda: client.list_events("a", page_token=token),  # another list
            lambda: client.list_tenants(page_token=token),
        ):
            with pytest.raises(InvalidArgumentError) as info:
                other()
            assert info.value.reason == "PAGE_TOKEN_INVALID"
        tenants_token = client.list_tenants(page_size=1).next_page_token
    server.stop()
    server.restart()
    with MemoryClient(server.target, retries=0) as client:  # tokens survive a restart
        assert [m.text for m in client.list_memories("a", page_size=2, page_token=token).memories] == [
            "memory 2",
            "memory 3",
        ]
        assert client.list_tenants(page_size=1, page_token=tenants_token).tenants == ["b"]


@pytest.mark.parametrize(
    "seconds, nanos", [(-62_135_596_801, 0), (253_402_300_800, 0), (0, -1), (0, 1_000_000_000), (2**62, 0)]
)
def test_a_timestamp_outside_its_range_is_invalid(client: MemoryClient, tenant: str, seconds: int, nanos: int) -> None:
    client.hot_path(tenant, "enable")
    stamp = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    error = _refusal(
        lambda: client.events.ListEvents(events_pb2.ListEventsRequest(tenant=tenant, accepted_after=stamp), timeout=10)
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TIMESTAMP_INVALID")


def test_unknown_enum_values_are_invalid_not_ignored(client: MemoryClient, tenant: str) -> None:
    client.retain(tenant, "one memory")
    client.hot_path(tenant, "enable")
    for value in (5, 99, -1, 2**31 - 1):
        error = _refusal(
            lambda: client.events.ListEvents(
                events_pb2.ListEventsRequest(tenant=tenant, status=cast(events_pb2.EventStatus, value)), timeout=10
            )
        )
        assert error.reason == "EVENT_STATUS_INVALID"
    for value in (4, 99, -1):
        error = _refusal(
            lambda: client.memory.Recall(
                memory_pb2.RecallRequest(tenant=tenant, query="memory", mode=cast(memory_pb2.RecallMode, value)),
                timeout=10,
            )
        )
        assert error.reason == "RECALL_MODE_INVALID"
    change = workspace_pb2.RecordChange(op=cast(workspace_pb2.RecordChange.Op, 7), key="a.md", content="x")
    error = _refusal(
        lambda: client.workspace.EditRecords(
            workspace_pb2.EditRecordsRequest(tenant=tenant, scope="global", changes=[change]), timeout=10
        )
    )
    assert error.reason == "CHANGE_OP_INVALID"


def _raw(client: MemoryClient, method: str):
    return client.channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x0a\x02\xff\xfe",  # tenant (field 1) holding invalid UTF-8
        b"\x0a\x05acme",  # truncated: five bytes announced, four sent
        b"\x0a\x04acme\x12\xff\xff\xff\xff\x0f",  # a length far beyond the message
        b"\xff\xff\xff\xff",  # not a message at all
    ],
)
def test_a_request_that_cannot_be_decoded_is_invalid_argument(client: MemoryClient, payload: bytes) -> None:
    for method in (
        "/mnemosyne.v1.MemoryService/Recall",
        "/mnemosyne.v1.AdminService/Stats",
        "/mnemosyne.v1.WorkspaceService/ListRecords",
    ):
        error = _refusal(lambda: _raw(client, method)(payload, timeout=10))
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_UNDECODABLE")
    stream = client.channel.unary_stream(
        "/mnemosyne.v1.EventsService/WatchEvents", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    error = _refusal(lambda: list(stream(payload, timeout=10)))
    assert error.reason == "REQUEST_UNDECODABLE"


def test_an_undecodable_request_with_a_bad_token_is_unauthenticated_first(server_factory) -> None:
    from tests.support import tokens_json

    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({"good": ["acme"]})}).start()
    with MemoryClient(server.target, token="bad", retries=0) as client:
        with pytest.raises(grpc.RpcError) as info:
            _raw(client, "/mnemosyne.v1.MemoryService/Recall")(
                b"\x0a\x02\xff\xfe", timeout=10, metadata=client.call_metadata
            )
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


# -- 12. logs ----------------------------------------------------------------------------------------------


def test_access_records_of_failed_calls_carry_the_reason(server_factory, tenant: str) -> None:
    server = server_factory(env={"MNEMOSYNE_LOG_FORMAT": "json"}).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(MnemosyneClientError):
            client.get_memory(tenant, 12345)
        with pytest.raises(MnemosyneClientError):
            client.recall(tenant, "")
    server.stop()
    records = [json.loads(line) for line in server.stderr_path.read_text().splitlines() if line.strip()]
    failed = {r["method"].rsplit("/", 1)[1]: (r["code"], r.get("reason")) for r in records if r.get("event") == "rpc"}
    assert failed["GetMemory"] == ("NOT_FOUND", "MEMORY_NOT_FOUND")
    assert failed["Recall"] == ("INVALID_ARGUMENT", "QUERY_EMPTY")


def test_json_logs_hold_only_json_lines_even_from_grpc_core(server_factory, tmp_path: Path) -> None:
    # Plaintext clients against a TLS port make gRPC core log handshake failures from C++.
    from tests.test_tls import _issue

    ca_cert, ca_key, _ca = _issue(tmp_path, "ca", issuer=None, ca=True)
    _c, _k, certificate = _issue(tmp_path, "server", issuer=(ca_cert, ca_key), server=True)
    credentials = grpc.ssl_channel_credentials(root_certificates=_ca.cert.read_bytes())
    server = server_factory(
        env={
            "MNEMOSYNE_LOG_FORMAT": "json",
            "MNEMOSYNE_LOG_LEVEL": "DEBUG",
            "GRPC_VERBOSITY": "DEBUG",
            "MNEMOSYNE_TLS_CERT": str(certificate.cert),
            "MNEMOSYNE_TLS_KEY": str(certificate.key),
        },
        health_credentials=credentials,
    ).start()
    for _ in range(3):
        with MemoryClient(server.target, retries=0, timeout=2) as plain:
            with pytest.raises(MnemosyneClientError):
                plain.ping()
    time.sleep(0.5)
    server.stop()
    lines = [line for line in server.stderr_path.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    assert any(r["logger"] == "mnemosyne.native" for r in records), "gRPC core logged nothing at DEBUG?"
