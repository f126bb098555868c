"""Read your own writes, per write (issue 40, docs/hot-path.md "Read your own writes"): every write
returns a consistency token; a read given it answers once that write is visible or failed, the
workers taking it ahead of the backlog, holding no server thread, bounded by its deadline.

Real server processes, the hashing embedder; backlogs are made by holding them through the test
seams (MNEMOSYNE_TEST_HOLD_BACKLOG: the workers take only what a read waits for;
MNEMOSYNE_TEST_HOLD_WORKERS: nothing is committed), never by load."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import error_info
from mnemosyne.client.types import BackupChunk, TenantBackup
from mnemosyne.transport.admission import Admission
from mnemosyne.transport.call import Call
from mnemosyne.transport.consistency import deadline as consistency_deadline
from mnemosyne.v1 import (
    events_pb2,
    events_pb2_grpc,
    hot_path_pb2,
    hot_path_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from tests.http_support import call as http_call
from tests.http_support import request
from tests.support import ServerProcess, altered_mac, respelt_end

TOKEN_KEY = "mnemosyne-consistency-token"


class Stubs:
    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self.memory = memory_pb2_grpc.MemoryServiceStub(self.channel)
        self.hot = hot_path_pb2_grpc.HotPathServiceStub(self.channel)
        self.events = events_pb2_grpc.EventsServiceStub(self.channel)
        self.workspace = workspace_pb2_grpc.WorkspaceServiceStub(self.channel)

    def fast(self, tenant: str, text: str, **fields: object) -> memory_pb2.RetainResponse:
        response: memory_pb2.RetainResponse = self.memory.Retain(
            memory_pb2.RetainRequest(tenant=tenant, text=text, fast=True, **fields)  # type: ignore[arg-type]  # the test's own fields, checked by the server
        )
        return response

    def recall(self, tenant: str, query: str, token: str = "", timeout: float = 30) -> memory_pb2.RecallResponse:
        response: memory_pb2.RecallResponse = self.memory.Recall(
            memory_pb2.RecallRequest(tenant=tenant, query=query, k=3, consistency_token=token), timeout=timeout
        )
        return response

    def backlog(self, tenant: str, count: int) -> None:
        """``count`` fast writes in the same scope, with exact duplicates and same-subject conflicts."""
        self.hot.Enable(hot_path_pb2.HotPathRequest(tenant=tenant))
        for start in range(0, count, 500):
            items = [
                memory_pb2.RetainItem(text=f"Ticket RF-{i % 40} status: {('open', 'refunded', 'closed')[i % 3]}.")
                if i % 2
                else memory_pb2.RetainItem(text=f"Shelf SH-{i % 700} holds {i % 13} boxes")
                for i in range(start, min(count, start + 500))
            ]
            self.memory.RetainBatch(memory_pb2.RetainBatchRequest(tenant=tenant, items=items, fast=True))

    def depth(self, tenant: str) -> int:
        return int(self.hot.Status(hot_path_pb2.HotPathRequest(tenant=tenant)).queue_depth)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def held(server_factory, tmp_path: Path) -> Iterator[tuple[ServerProcess, Stubs, Path]]:
    hold = tmp_path / "hold-backlog"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}, http=True).start()
    stubs = Stubs(server.target)
    yield server, stubs, hold
    stubs.close()


def _reason(error: grpc.RpcError) -> str:
    info = error_info(error)
    return info.reason if info is not None else ""


def test_a_token_read_finds_its_write_behind_a_5000_write_backlog(held: tuple[ServerProcess, Stubs, Path]) -> None:
    server, stubs, _hold = held
    stubs.backlog("busy", 5000)
    written, call = stubs.memory.Retain.with_call(
        memory_pb2.RetainRequest(tenant="busy", text="Locker L-9 holds the code 4411", fast=True)
    )
    token = written.consistency_token
    assert token and (TOKEN_KEY, token) in tuple(call.trailing_metadata())
    # Without the token the write may not be visible yet: here it is not (the backlog is held).
    assert stubs.recall("busy", "locker L-9 code 4411").hits == []
    assert stubs.events.GetEvent(
        events_pb2.GetEventRequest(tenant="busy", event_id=written.result.event_id)
    ).status in (
        events_pb2.PENDING,
        events_pb2.RUNNING,
    )
    # With it, the read finds it: its write was taken ahead of the 5,000 others, still queued.
    found = stubs.recall("busy", "locker L-9 code 4411", token)
    assert found.hits[0].memory.text == "Locker L-9 holds the code 4411"
    assert found.HasField("consistency") and list(found.consistency.failed_event_ids) == []
    assert stubs.depth("busy") == 5000
    memory_id = found.hits[0].memory.id
    # The other reads take the token too: a field, or the metadata of fixed schemas.
    got = stubs.memory.GetMemory(
        memory_pb2.GetMemoryRequest(tenant="busy", memory_id=memory_id), metadata=((TOKEN_KEY, token),)
    )
    assert got.memory.id == memory_id and got.HasField("consistency")
    listed = stubs.memory.ListMemories(memory_pb2.ListMemoriesRequest(tenant="busy", consistency_token=token))
    assert [m.id for m in listed.memories] == [memory_id]
    assembled = stubs.workspace.AssembleContext(
        workspace_pb2.AssembleContextRequest(tenant="busy", workspace="w", query="locker L-9", consistency_token=token)
    )
    assert assembled.memories[0].memory.id == memory_id
    # Over HTTP/JSON: the token in the body field, or the header; the write answers it in a header.
    reply = http_call(
        server.http_port, "Recall", memory_pb2.RecallRequest(tenant="busy", query="locker L-9", consistency_token=token)
    )
    assert reply.status == 200 and reply.json()["hits"][0]["memory"]["id"] == str(memory_id)
    second = http_call(
        server.http_port, "Retain", memory_pb2.RetainRequest(tenant="busy", text="Bay B-2 is free", fast=True)
    )
    assert second.status == 200 and second.headers[TOKEN_KEY] == second.json()["consistencyToken"]
    headed = http_call(
        server.http_port,
        "Recall",
        memory_pb2.RecallRequest(tenant="busy", query="bay B-2 free"),
        headers={"Mnemosyne-Consistency-Token": second.headers[TOKEN_KEY]},
    )
    assert headed.json()["hits"][0]["memory"]["text"] == "Bay B-2 is free"
    # A Flush given a token waits for its writes only: the backlog stays.
    third = stubs.fast("busy", "Crate C-5 left on Friday")
    flushed = stubs.hot.Flush(hot_path_pb2.FlushRequest(tenant="busy", consistency_token=third.consistency_token))
    assert (flushed.flushed, flushed.succeeded, flushed.failed) == (1, 1, 0)
    assert stubs.depth("busy") == 5000


def test_a_write_carrying_the_session_token_returns_one_covering_both(held: tuple[ServerProcess, Stubs, Path]) -> None:
    _server, stubs, _hold = held
    stubs.backlog("session", 1000)
    first = stubs.fast("session", "Pallet P-1 goes to dock 3")
    second = stubs.memory.Retain(
        memory_pb2.RetainRequest(tenant="session", text="Pallet P-2 goes to dock 4", fast=True),
        metadata=((TOKEN_KEY, first.consistency_token),),
    )
    found = stubs.recall("session", "pallet dock", second.consistency_token)
    assert {h.memory.text for h in found.hits} == {"Pallet P-1 goes to dock 3", "Pallet P-2 goes to dock 4"}
    assert stubs.depth("session") == 1000


def test_tokens_of_another_tenant_or_forged_are_refused(held: tuple[ServerProcess, Stubs, Path]) -> None:
    _server, stubs, _hold = held
    mine = stubs.fast("alpha", "Alpha's note").consistency_token
    theirs = stubs.fast("beta", "Beta's note").consistency_token
    body, mac = mine.split(".")
    decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    as_beta = base64.urlsafe_b64encode(decoded.replace(b"|alpha|", b"|beta|")).decode().rstrip("=")
    moved = decoded.rsplit(b"|", 1)[0] + b"|999999"
    cases = {
        mine: "TOKEN_FOREIGN",  # alpha's token on beta
        f"{as_beta}.{mac}": "TOKEN_INVALID",  # rewritten to name beta: its MAC is alpha's body's
        f"{base64.urlsafe_b64encode(moved).decode().rstrip('=')}.{mac}": "TOKEN_FOREIGN",  # another position
        "not-a-token": "TOKEN_INVALID",
        altered_mac(mine): "TOKEN_FOREIGN",
        respelt_end(mine): "TOKEN_INVALID",  # the same bytes, spelt otherwise than issued
    }
    for token, reason in cases.items():
        with pytest.raises(grpc.RpcError) as caught:
            stubs.recall("beta", "note", token)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and _reason(caught.value) == reason, token
    forged_mac = altered_mac(mine)
    position_moved = f"{base64.urlsafe_b64encode(moved).decode().rstrip('=')}.{mac}"
    for token in (forged_mac, position_moved):
        with pytest.raises(grpc.RpcError) as caught:
            stubs.recall("alpha", "note", token)
        assert _reason(caught.value) == "TOKEN_INVALID"
    # Two tokens in the metadata: the second, here another tenant's, was ignored without a word.
    with pytest.raises(grpc.RpcError) as caught:
        stubs.memory.Recall(
            memory_pb2.RecallRequest(tenant="beta", query="note"), metadata=((TOKEN_KEY, theirs), (TOKEN_KEY, mine))
        )
    assert _reason(caught.value) == "TOKEN_INVALID" and "given 2 times" in (caught.value.details() or "")


def test_a_write_carrying_a_bad_token_or_level_is_refused_and_writes_nothing(
    held: tuple[ServerProcess, Stubs, Path],
) -> None:
    """The carried token and the asked level are checked before the write, on every write and
    surface: refused (TOKEN_FOREIGN, TOKEN_INVALID, REPLICATION_OFF on a server without
    replication), nothing of it is written, and the same write without them then succeeds."""
    server, stubs, _hold = held
    mine = stubs.fast("alpha", "Alpha's note").consistency_token
    kept = stubs.memory.Retain(memory_pb2.RetainRequest(tenant="beta", text="Beta keeps this note")).result.memory_id
    theirs = stubs.fast("beta", "Beta's first note").consistency_token
    bad = [
        ("TOKEN_FOREIGN", ((TOKEN_KEY, mine),)),
        ("TOKEN_INVALID", ((TOKEN_KEY, "not-a-token"),)),
        ("TOKEN_INVALID", ((TOKEN_KEY, theirs), (TOKEN_KEY, mine))),  # two: the second was ignored
        ("REPLICATION_OFF", (("mnemosyne-consistency-level", "replicated"),)),
    ]

    def memories() -> list[str]:
        listed = stubs.memory.ListMemories(memory_pb2.ListMemoriesRequest(tenant="beta", page_size=100))
        return sorted(m.text for m in listed.memories)

    def global_content() -> str:
        context = stubs.workspace.AssembleContext(workspace_pb2.AssembleContextRequest(tenant="beta", workspace="main"))
        return repr([(r.key, r.content) for r in context.global_records])

    writes: dict[str, Callable[[tuple[tuple[str, str], ...]], object]] = {
        "sync retain": lambda md: stubs.memory.Retain(
            memory_pb2.RetainRequest(tenant="beta", text="never written, sync"), metadata=md
        ),
        "fast retain": lambda md: stubs.memory.Retain(
            memory_pb2.RetainRequest(tenant="beta", text="never written, fast", fast=True), metadata=md
        ),
        "batch": lambda md: stubs.memory.RetainBatch(
            memory_pb2.RetainBatchRequest(tenant="beta", items=[memory_pb2.RetainItem(text="never written, batch")]),
            metadata=md,
        ),
        "forget": lambda md: stubs.memory.ForgetMemory(
            memory_pb2.ForgetMemoryRequest(tenant="beta", memory_id=kept), metadata=md
        ),
        "update": lambda md: stubs.memory.UpdateMemory(
            memory_pb2.UpdateMemoryRequest(tenant="beta", memory_id=kept, text="never written, update"), metadata=md
        ),
        "global": lambda md: stubs.workspace.UpdateGlobal(
            workspace_pb2.UpdateGlobalRequest(tenant="beta", content="never written, global"), metadata=md
        ),
    }
    before, global_before = memories(), global_content()
    for name, write in writes.items():
        for reason, metadata in bad:
            with pytest.raises(grpc.RpcError) as caught:
                write(metadata)
            assert _reason(caught.value) == reason, (name, reason)
            assert (memories(), global_content()) == (before, global_before), (name, reason)
            assert stubs.depth("beta") == 0, (name, reason)  # nor queued (the backlog is held)
    reply = http_call(
        server.http_port,
        "Retain",
        memory_pb2.RetainRequest(tenant="beta", text="never written, over HTTP"),
        headers={TOKEN_KEY: mine},
    )
    assert (reply.status, reply.reason) == (400, "TOKEN_FOREIGN")
    assert [t for t in memories() if "never written" in t] == []
    stubs.memory.Retain(memory_pb2.RetainRequest(tenant="beta", text="written without the token"))
    assert "written without the token" in memories()


def test_a_token_is_honoured_across_a_restart_in_the_middle_of_the_backlog(
    held: tuple[ServerProcess, Stubs, Path],
) -> None:
    server, stubs, _hold = held
    stubs.backlog("restart", 2000)
    token = stubs.fast("restart", "Van V-12 is parked in row 7").consistency_token
    stubs.close()
    server.kill()  # SIGKILL with 2,001 writes queued
    server.start()
    again = Stubs(server.target)
    try:
        found = again.recall("restart", "van V-12 parked", token)
        assert found.hits[0].memory.text == "Van V-12 is parked in row 7"
        assert again.depth("restart") == 2000
    finally:
        again.close()


def test_a_token_of_an_earlier_timeline_is_answered_at_once_after_a_restore(
    held: tuple[ServerProcess, Stubs, Path],
) -> None:
    server, stubs, hold = held
    stubs.fast("restored", "Before the export")
    with MemoryClient(server.target) as client:
        parts = list(client.export_tenant("restored"))
        manifest = parts[0]
        assert isinstance(manifest, TenantBackup)
        chunks = [p for p in parts[1:] if isinstance(p, BackupChunk)]
        stubs.backlog("restored", 200)
        token = stubs.fast("restored", "After the export").consistency_token
        client.import_tenant(manifest, chunks, replace=True)  # the restore: an earlier content
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        stubs.recall("restored", "after the export", token, timeout=20)
    assert time.monotonic() - started < 5  # at once, never left to wait for its deadline
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(caught.value) == "TIMELINE_CHANGED"
    assert "earlier timeline" in (caught.value.details() or "")
    assert stubs.fast("restored", "after the restore").consistency_token  # a new token works
    fresh = stubs.fast("restored", "Crane K-1 is idle").consistency_token
    assert stubs.recall("restored", "crane K-1 idle", fresh).hits[0].memory.text == "Crane K-1 is idle"


def test_a_token_read_ends_at_its_deadline_holding_no_thread(server_factory, tmp_path: Path) -> None:
    """A write that cannot be applied (the workers hold before every commit): reads given its
    token end with DEADLINE_EXCEEDED / CONSISTENCY_DEADLINE_EXCEEDED naming the open write, answered
    just before their deadline (so the answer, not the client's own deadline, ends the call: at
    most a quarter of a second early); while twelve of them wait (more than the server has threads
    for reads), another read is answered."""
    hold = tmp_path / "hold-workers"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, http=True).start()
    stubs = Stubs(server.target)
    try:
        stubs.hot.Enable(hot_path_pb2.HotPathRequest(tenant="stuck"))
        token = stubs.fast("stuck", "Never applied while held").consistency_token
        stubs.memory.Retain(memory_pb2.RetainRequest(tenant="other", text="Another tenant's note"))
        outcomes: list[tuple[float, grpc.StatusCode, str]] = []
        order: list[str] = []

        def wait(deadline: float) -> None:
            started = time.monotonic()
            try:
                stubs.recall("stuck", "never applied", token, timeout=deadline)
                outcomes.append((time.monotonic() - started - deadline, grpc.StatusCode.OK, ""))
            except grpc.RpcError as exc:
                outcomes.append((time.monotonic() - started - deadline, exc.code(), _reason(exc)))
            order.append("token read")

        waiters = [threading.Thread(target=wait, args=(3.0,)) for _ in range(12)]
        for thread in waiters:
            thread.start()
        time.sleep(0.5)
        assert [h.memory.text for h in stubs.recall("other", "another note").hits] == ["Another tenant's note"]
        assert stubs.recall("stuck", "never applied").hits == []  # a read without the token answers now
        order.append("plain reads")
        for thread in waiters:
            thread.join()
        assert order[0] == "plain reads" and len(order) == 13
        assert all(
            (code, reason) == (grpc.StatusCode.DEADLINE_EXCEEDED, "CONSISTENCY_DEADLINE_EXCEEDED")
            for _, code, reason in outcomes
        ), outcomes
        assert all(-0.3 <= late <= 1.0 for late, _, _ in outcomes), outcomes
        # Over HTTP (no gRPC deadline) the timeout header bounds the wait; the answer names why.
        started = time.monotonic()
        reply = http_call(
            server.http_port,
            "Recall",
            memory_pb2.RecallRequest(tenant="stuck", query="never applied", consistency_token=token),
            headers={"Mnemosyne-Timeout-Seconds": "2"},
        )
        took = time.monotonic() - started
        assert reply.status == 504 and reply.reason == "CONSISTENCY_DEADLINE_EXCEEDED"
        assert 2.0 <= took <= 3.0
        hold.unlink()
        assert stubs.recall("stuck", "never applied", token).hits[0].memory.text == "Never applied while held"
    finally:
        stubs.close()


def test_a_malformed_timeout_header_is_refused_whether_or_not_the_read_waits(server_factory) -> None:
    """A read with a token whose writes were all applied never waited, so its timeout header was
    never read: "abc" was refused only when the tenant's queue was behind (under load)."""
    server = server_factory(http=True).start()
    stubs = Stubs(server.target)
    try:
        token = stubs.memory.Retain(
            memory_pb2.RetainRequest(tenant="timed", text="Bay 4 holds the ladder")
        ).consistency_token
        read = memory_pb2.RecallRequest(tenant="timed", query="ladder", consistency_token=token)
        assert http_call(server.http_port, "Recall", read, headers={"Mnemosyne-Timeout-Seconds": "5"}).status == 200
        for header in ("abc", "0", "-1", "NaN", "inf", ""):
            reply = http_call(server.http_port, "Recall", read, headers={"Mnemosyne-Timeout-Seconds": header})
            assert (reply.status, reply.reason) == (400, "TIMEOUT_INVALID"), (header, reply.body[:300])
            mem0 = request(
                server.http_port,
                "POST",
                "/v3/memories/search/",
                json_body={"query": "ladder"},
                headers={
                    "Mnemosyne-Tenant": "timed",
                    "Mnemosyne-Consistency-Token": token,
                    "Mnemosyne-Timeout-Seconds": header,
                },
            )
            assert (mem0.status, mem0.reason) == (400, "TIMEOUT_INVALID"), (header, mem0.body[:300])
        # Without a token nothing waits, and the header is not read.
        plain = memory_pb2.RecallRequest(tenant="timed", query="ladder")
        assert http_call(server.http_port, "Recall", plain, headers={"Mnemosyne-Timeout-Seconds": "abc"}).status == 200
    finally:
        stubs.close()


def test_a_failed_write_does_not_block_a_token_read_and_is_named(server_factory, tmp_path: Path) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_POISON_MARKER": "POISON"}, args=["--hot-path-batch", "4"]).start()
    stubs = Stubs(server.target)
    try:
        stubs.hot.Enable(hot_path_pb2.HotPathRequest(tenant="poisoned"))
        bad = stubs.fast("poisoned", "POISON in this text")
        good = stubs.memory.Retain(
            memory_pb2.RetainRequest(tenant="poisoned", text="A good note", fast=True),
            metadata=((TOKEN_KEY, bad.consistency_token),),
        )
        found, call = stubs.memory.Recall.with_call(
            memory_pb2.RecallRequest(tenant="poisoned", query="good note", consistency_token=good.consistency_token),
            timeout=30,
        )
        assert found.hits[0].memory.text == "A good note"
        assert list(found.consistency.failed_event_ids) == [bad.result.event_id]
        assert ("mnemosyne-consistency-failed", str(bad.result.event_id)) in tuple(call.trailing_metadata())
    finally:
        stubs.close()


def test_a_token_is_honoured_after_its_tenant_moved(tmp_path: Path) -> None:
    """A tenant moved to another member (a move drains its queue first): the token of a write made
    before the move is honoured by the new owner (the file, its secret and its timeline moved), and
    the new owner's tokens are taken ahead of a backlog held there."""
    from mnemosyne.cli.rebalance import rebalance
    from tests.test_moves import ADMIN, Deployment, tenants_moving

    deployment = Deployment(tmp_path, 2)
    hold = tmp_path / "hold-backlog"
    try:
        old, new = ["m0"], ["m0", "m1"]
        deployment.run(old)
        (tenant,) = tenants_moving(old, new, 1)
        with deployment.client(old) as client:
            client.hot_path(tenant, "enable")
            client.retain_batch(tenant, [f"crate {i} waits in hall H-{i % 9}" for i in range(300)], fast=True)
            before = client.call(
                client.memory.Retain,
                memory_pb2.RetainRequest(tenant=tenant, text="Forklift F-3 is charging", fast=True),
                retry=True,
            ).consistency_token
        hold.touch()  # on the new owner, from its start: only what a read waits for is applied
        deployment.run(new, previous=old, env={"m1": {"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}})
        with open(tmp_path / "rebalance.out", "w") as out:
            assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=out) == 0
        with deployment.client(new) as client:

            def recall(query: str, token: str) -> memory_pb2.RecallResponse:
                request = memory_pb2.RecallRequest(tenant=tenant, query=query, k=1, consistency_token=token)
                found: memory_pb2.RecallResponse = client.call(client.memory.Recall, request, retry=True)
                return found

            assert recall("forklift F-3 charging", before).hits[0].memory.text == "Forklift F-3 is charging"
            client.retain_batch(tenant, [f"box {i} is in aisle A-{i % 7}" for i in range(300)], fast=True)
            after = client.call(
                client.memory.Retain,
                memory_pb2.RetainRequest(tenant=tenant, text="Ladder L-2 is in aisle 9", fast=True),
                metadata=((TOKEN_KEY, before),),
                retry=True,
            ).consistency_token
            assert recall("ladder L-2 aisle", after).hits[0].memory.text == "Ladder L-2 is in aisle 9"
            assert client.hot_path(tenant, "status").queue_depth == 300
    finally:
        deployment.stop()


def test_token_reads_count_as_waiting_calls_only_while_they_wait(server_factory, tmp_path: Path) -> None:
    """A read whose writes are open waits as a waiting call, within --waiting-calls-per-tenant
    (past it: RESOURCE_EXHAUSTED with a retry delay, as a Flush); a read whose writes are visible
    never waits and never counts, so it is answered however many reads wait."""
    hold = tmp_path / "hold-workers"
    hold.touch()
    server = server_factory(
        env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, args=["--waiting-calls-per-tenant", "2"]
    ).start()
    stubs = Stubs(server.target)
    try:
        visible = stubs.memory.Retain(
            memory_pb2.RetainRequest(tenant="limited", text="Visible already")
        ).consistency_token
        stubs.hot.Enable(hot_path_pb2.HotPathRequest(tenant="limited"))
        held_token = stubs.fast("limited", "Held by the workers").consistency_token
        futures = [
            stubs.memory.Recall.future(
                memory_pb2.RecallRequest(tenant="limited", query="held", consistency_token=held_token), timeout=20
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 10
        while stubs.hot.Status(hot_path_pb2.HotPathRequest(tenant="limited")).awaited == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # both are waiting now
        with pytest.raises(grpc.RpcError) as refused:
            stubs.recall("limited", "held", held_token)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _reason(refused.value) == "WAITING_CALLS_PER_TENANT_REACHED"
        for _ in range(5):  # the limit is full, and these read at once
            assert stubs.recall("limited", "visible already", visible).hits[0].memory.text == "Visible already"
        hold.unlink()
        assert all(f.result().hits[0].memory.text == "Held by the workers" for f in futures)
    finally:
        stubs.close()


@pytest.mark.parametrize(
    ("header", "deadline", "waits"),
    [
        (None, None, 30.0),  # no deadline, no header: 30 s
        ("2", None, 2.0),  # the header gives fewer
        ("45", None, 30.0),  # and never more
        ("1e308", None, 30.0),
        ("45", 10.0, 9.75),  # a deadline bounds it, with time left to answer before it
        (None, 1.0, 0.75),
    ],
)
def test_a_token_read_waits_at_most_30_s_or_less_as_the_call_says(
    header: str | None, deadline: float | None, waits: float
) -> None:
    """docs/hot-path.md: a read given a token waits for its writes at most 30 s, or the
    `Mnemosyne-Timeout-Seconds` header's seconds when it gives fewer; with a gRPC deadline, until
    just before it (its answer, CONSISTENCY_DEADLINE_EXCEEDED, must reach the client first)."""
    admission = Admission()
    try:
        now = time.monotonic()
        metadata = [("mnemosyne-timeout-seconds", header)] if header is not None else []
        call = Call(metadata, tenant="t", admission=admission, deadline=None if deadline is None else now + deadline)
        assert consistency_deadline(call) - now == pytest.approx(waits, abs=0.05)
    finally:
        admission.stop()
