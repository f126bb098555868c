"""The member link (transport/cluster/link.py): calls forwarded between members (unary, server and
client streams) over one plain TCP connection, carrying what a gRPC hop carries
(docs/scale-out.md#the-member-link).

Real member processes on loopback and the real client; what a member never sends (a wrong key,
broken frames, a reader that does not read) is sent by the module's own entry side and by raw
sockets.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.cli.server_process import LocalMembers, ServerProcess
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import (
    DeadlineExceededError,
    MnemosyneClientError,
    PermissionDeniedError,
    UnavailableError,
)
from mnemosyne.client.types import BackupChunk, TenantBackup
from mnemosyne.store.membership import owner_of
from mnemosyne.transport.cluster.link import MESSAGE, STREAM_WINDOW, LinkLost, MemberLink
from mnemosyne.v1 import events_pb2, memory_pb2
from tests.support import gauge, link_key, link_port, tokens_json

ADMIN, TOKEN_A = "admin-token", "token-a"
TENANTS = [f"tenant-{i:02d}" for i in range(40)]
LINKED, FORWARDED = "mnemosyne_forwarded_calls_linked", "mnemosyne_forwarded_calls"
RETAIN = "/mnemosyne.v1.MemoryService/Retain"
WATCH = "/mnemosyne.v1.EventsService/WatchEvents"
OPEN_STREAMS = "mnemosyne_open_streams"


def _theirs(members: LocalMembers, owner: str = "m1") -> list[str]:
    return [t for t in TENANTS if owner_of(t, members.ids) == owner]


def _until_linked(entry: ServerProcess, call: Callable[[], object]) -> None:
    """Make calls until one went over the link (the first hop is a gRPC call: it tells the port,
    and the link connects beside it)."""
    before = gauge(entry, LINKED)
    deadline = time.monotonic() + 15
    while gauge(entry, LINKED) == before:
        assert time.monotonic() < deadline, "no call went over the member link"
        call()
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMembers]:
    # m0 takes any tenant for token-a (an out-of-date tokens file), m1 only tenant-a: the owner
    # authenticates and authorises a linked call again.
    members = LocalMembers(
        tmp_path_factory.mktemp("link"),
        2,
        env_of=lambda i: {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], TOKEN_A: ["*"] if i == 0 else ["tenant-a"]})},
        metrics=True,
    ).start()
    yield members
    members.stop()


def _outcome(call: Callable[[], Any]) -> Any:
    """The call's result, or its refusal as (code, reason, message, metadata)."""
    try:
        return call()
    except MnemosyneClientError as exc:
        return (exc.code.name, exc.reason, str(exc), exc.metadata)


def test_forwarded_calls_take_the_link_and_answer_as_the_owner_does(pair: LocalMembers) -> None:
    m0, m1 = pair.processes
    tenant, other = _theirs(pair)[:2]
    with MemoryClient(m0.target, ADMIN) as via, MemoryClient(m1.target, ADMIN) as direct:
        via.retain(tenant, "Ada keeps her bicycle in the garden shed")
        _until_linked(m0, lambda: via.recall(tenant, "bicycle"))
        linked, forwarded = gauge(m0, LINKED), gauge(m0, FORWARDED)
        stored = via.retain(tenant, "The shed key hangs by the kitchen door")
        assert direct.get_memory(tenant, stored.memory_id).text == "The shed key hangs by the kitchen door"
        # The same answers as from the owner itself: hits, refusals with their reason and metadata.
        asks: list[Callable[[MemoryClient], Any]] = [
            lambda c: [
                (h.memory.id, h.memory.text, round(h.score, 6)) for h in c.recall(tenant, "where is the shed key")
            ],
            lambda c: c.get_memory(tenant, stored.memory_id).text,
            lambda c: c.call(
                c.memory.GetMemory, memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=987654), retry=False
            ),
            lambda c: c.call(c.memory.Recall, memory_pb2.RecallRequest(tenant=tenant, query=""), retry=False),
            lambda c: c.call(c.memory.Recall, memory_pb2.RecallRequest(tenant=tenant, query="x", k=-3), retry=False),
        ]
        for ask in asks:
            assert _outcome(lambda: ask(via)) == _outcome(lambda: ask(direct))
        assert gauge(m0, LINKED) - linked == gauge(m0, FORWARDED) - forwarded == len(asks) + 1
        # m0 lets token-a through; the owner refuses it, and nothing is written there.
        with MemoryClient(m0.target, TOKEN_A) as client, pytest.raises(PermissionDeniedError) as refused:
            client.retain(other, "not yours")
        assert refused.value.reason == "TENANT_FORBIDDEN"
        assert gauge(m0, LINKED) - linked == len(asks) + 2
        assert not m1.tenant_file(other).exists()


def test_members_with_a_link_open_stop_without_an_error_logged(tmp_path: Path) -> None:
    """SIGTERM while the link is connected: each member closes its ends and exits 0, its log free
    of tracebacks (Python 3.11's servers logged a connection ended by cancellation as unhandled)."""
    members = LocalMembers(tmp_path, 2, metrics=True).start()
    m0, _m1 = members.processes
    try:
        tenant = _theirs(members)[0]
        with MemoryClient(m0.target) as via:
            via.retain(tenant, "A note that crosses the link")
            _until_linked(m0, lambda: via.recall(tenant, "note"))
    finally:  # the owner first: its end of the link is still open
        codes = [process.terminate() for process in reversed(members.processes)]
    assert codes == [0, 0]
    for process in members.processes:
        log = process.stderr_path.read_text()
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def test_without_the_link_every_hop_is_a_grpc_call(tmp_path: Path) -> None:
    members = LocalMembers(tmp_path, 2, args_of=lambda i: ["--no-member-link"], metrics=True).start()
    try:
        tenant = _theirs(members)[0]
        with MemoryClient(members.processes[0].target) as client:
            for i in range(5):
                client.retain(tenant, f"note {i} about the garden")
                assert client.recall(tenant, "garden")
        assert gauge(members.processes[0], FORWARDED) == 10
        assert gauge(members.processes[0], LINKED) == 0
        assert "member link" not in members.processes[1].stderr_path.read_text()
    finally:
        members.stop()


def test_a_deadline_a_lost_owner_and_its_return(tmp_path: Path) -> None:
    park = tmp_path / "park"
    tenant = next(t for t in TENANTS if owner_of(t, ["m0", "m1"]) == "m1")
    members = LocalMembers(
        tmp_path / "members",
        2,
        env_of=lambda i: {"MNEMOSYNE_TEST_PARK_TENANT": tenant, "MNEMOSYNE_TEST_PARK_FILE": str(park)} if i else {},
        metrics=True,
    ).start()
    m0, m1 = members.processes
    try:
        with MemoryClient(m0.target, retries=0) as client:
            client.retain(tenant, "the first note, by a gRPC hop")
            _until_linked(m0, lambda: client.recall(tenant, "note"))
            # The owner holds the tenant's work: the caller's deadline ends the call at both ends.
            park.touch()
            started = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                client.call(
                    client.memory.Retain,
                    memory_pb2.RetainRequest(tenant=tenant, text="held past its deadline"),
                    retry=False,
                    timeout=1.0,
                )
            assert time.monotonic() - started < 5
            deadline = time.monotonic() + 10
            while _cancelled_retains(m1) < 1:
                assert time.monotonic() < deadline, "the owner did not cancel the call its entry gave up"
                time.sleep(0.1)
            park.unlink()
            # The owner killed: UNAVAILABLE naming it, never a hang, for a stream on the link too.
            _with_events(client, tenant, 1)
            linked = gauge(m0, LINKED)
            watching = client.watch_events(tenant, timeout=20)
            next(watching)
            assert gauge(m0, LINKED) == linked + 1
            m1.kill()
            with pytest.raises(UnavailableError) as lost:
                list(watching)
            assert lost.value.reason == "OWNER_UNAVAILABLE" and lost.value.metadata["owner"] == "m1"
            with pytest.raises(UnavailableError) as down:
                client.retain(tenant, "nobody home")
            assert down.value.reason == "OWNER_UNAVAILABLE" and down.value.metadata["owner"] == "m1"
            # Back on a new link port: a gRPC hop first, then the link again.
            m1.restart()
            deadline = time.monotonic() + 15
            while (hits := _outcome(lambda: client.recall(tenant, "the first note")))[:2] == (
                "UNAVAILABLE",
                "OWNER_UNAVAILABLE",
            ):
                assert time.monotonic() < deadline, "the entry did not reach the owner again"
                time.sleep(0.2)  # the entry's gRPC channel reconnects after its backoff
            assert hits and hits[0].memory.text == "the first note, by a gRPC hop"
            _until_linked(m0, lambda: client.recall(tenant, "note"))
    finally:
        park.unlink(missing_ok=True)
        members.stop()


def _cancelled_retains(process: ServerProcess) -> float:
    with urllib.request.urlopen(process.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = f'mnemosyne_rpc_duration_seconds_count{{code="CANCELLED",method="{RETAIN}"}} '
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(wanted)), 0.0)


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_the_link_admits_only_members_and_survives_broken_frames(pair: LocalMembers) -> None:
    m0, m1 = pair.processes
    port = link_port(m1)
    # A wrong key, and a frame far larger than a first frame may be: closed, not read.
    for first in (struct.pack("!IIB", 5, 0, 1) + b"guess", struct.pack("!IIB", 2**31, 0, 1)):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(first)
            assert _closed(sock)
    with pytest.raises(ConnectionError):
        asyncio.run(_linked_call(port, b"\x00" * 32, "/mnemosyne.v1.AdminService/Ping", b""))
    # A member's key with calls a member never sends: an unknown method is refused UNIMPLEMENTED;
    # fields that do not parse close the connection.
    key = link_key(m0)
    answer = asyncio.run(_linked_call(port, key, "/mnemosyne.v1.Nothing/Here", b""))
    refusal = answer.refusal()
    assert refusal is not None and refusal.code == 12
    for broken in (struct.pack("!I", 100) + b"abcd", b"\x00\x01"):  # a field, a length, cut short
        with pytest.raises(LinkLost):
            asyncio.run(_linked_call(port, key, "/mnemosyne.v1.MemoryService/Recall", b"", broken=broken))
    # An undecodable request through a member's key: the edge's refusal, as over gRPC.
    answer = asyncio.run(_linked_call(port, key, "/mnemosyne.v1.MemoryService/Recall", b"\xff\xff\xff", token=ADMIN))
    refusal = answer.refusal()
    assert refusal is not None and refusal.code == 3 and "could not be decoded" in refusal.message
    # The owner still serves, and so does the link.
    with MemoryClient(m0.target, ADMIN) as client:
        tenant = _theirs(pair)[2]
        client.retain(tenant, "still serving")
        _until_linked(m0, lambda: client.recall(tenant, "serving"))


async def _linked_call(
    port: int, key: bytes, method: str, request: bytes, *, broken: bytes = b"", token: str = ""
) -> Any:
    link = await MemberLink.connect("127.0.0.1", port, key, None)
    try:
        if broken:  # a CALL frame whose fields run past it
            link._writer.write(struct.pack("!IIB", len(broken), 1, 2) + broken)
        return await link.call(method, request, [("authorization", f"Bearer {token}")] if token else [], 5.0)
    finally:
        await link.close()


def _with_events(client: MemoryClient, tenant: str, writes: int) -> None:
    """``writes`` fast writes to ``tenant``, applied: at least two events each (pending, then done)."""
    client.hot_path(tenant, "enable")
    for n in range(writes):
        client.retain(tenant, f"fast note {n} about the harbour", fast=True)
    client.hot_path(tenant, "flush")


def _events(client: MemoryClient, tenant: str, count: int) -> list[tuple[int, str, int]]:
    return [(e.event_id, e.status, e.sequence) for e in itertools.islice(client.watch_events(tenant), count)]


def test_server_streams_take_the_link_and_answer_as_the_owner_does(pair: LocalMembers) -> None:
    m0, m1 = pair.processes
    tenant, missing = _theirs(pair)[3], _theirs(pair)[4]
    with MemoryClient(m0.target, ADMIN) as via, MemoryClient(m1.target, ADMIN) as direct:
        _with_events(via, tenant, 12)
        _until_linked(m0, lambda: via.recall(tenant, "harbour"))
        linked, forwarded = gauge(m0, LINKED), gauge(m0, FORWARDED)
        # Every event, replayed from the log: more than the owner may send ahead (its window).
        wanted = _events(direct, tenant, 24)
        assert len(wanted) == 24 > 2 * STREAM_WINDOW
        assert _events(via, tenant, 24) == wanted
        # An export, message by message as from the owner (its files' bytes and names).
        exported = list(via.export_tenant(tenant))
        assert [type(part).__name__ for part in exported] == [
            type(part).__name__ for part in direct.export_tenant(tenant)
        ]
        assert len(exported) >= 2 and sum(len(getattr(part, "data", b"")) for part in exported) > 0
        # The owner's refusal as it gave it: a tenant it does not have.
        assert _outcome(lambda: list(via.export_tenant(missing))) == _outcome(
            lambda: list(direct.export_tenant(missing))
        )
        assert gauge(m0, LINKED) - linked == gauge(m0, FORWARDED) - forwarded == 3


def test_an_entry_that_forwards_only_streams_links_too(tmp_path: Path) -> None:
    """The owner tells its link's port in an answer's initial metadata, which a stream its reader
    leaves after the first event still has (it has no trailers): an entry whose hops are all such
    streams connects the link and takes it, as one forwarding unary calls does."""
    members = LocalMembers(tmp_path, 2, metrics=True).start()
    try:
        m0, m1 = members.processes
        tenant = _theirs(members)[0]
        with MemoryClient(m1.target) as owner, MemoryClient(m0.target) as via:
            _with_events(owner, tenant, 2)
            wanted = _events(owner, tenant, 1)
            _until_linked(m0, lambda: _events(via, tenant, 1))
            linked = gauge(m0, LINKED)
            assert _events(via, tenant, 1) == wanted
            assert gauge(m0, LINKED) == linked + 1
    finally:
        members.stop()


def test_a_stream_left_by_its_reader_is_cancelled_at_the_owner(pair: LocalMembers) -> None:
    m0, m1 = pair.processes
    tenant = _theirs(pair)[5]
    with MemoryClient(m0.target, ADMIN) as via:
        _with_events(via, tenant, 2)
        _until_linked(m0, lambda: via.recall(tenant, "harbour"))
        linked, before = gauge(m0, LINKED), gauge(m1, OPEN_STREAMS)
        watching = via.watch_events(tenant)
        next(watching)
        assert gauge(m0, LINKED) == linked + 1
        _until(lambda: gauge(m1, OPEN_STREAMS) == before + 1, "the owner did not open the stream")
        watching.close()  # the client cancels its call: the entry tells the owner
        _until(lambda: gauge(m1, OPEN_STREAMS) == before, "the owner kept the stream its entry left")


def _until(condition: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.05)


def test_a_slow_reader_holds_back_only_its_own_stream(pair: LocalMembers) -> None:
    """The owner sends a stream's messages only as far as its entry granted (a window ahead of
    its reading), and the connection's other calls pass meanwhile."""
    m0, m1 = pair.processes
    tenant = _theirs(pair)[6]
    with MemoryClient(m1.target, ADMIN) as direct:
        _with_events(direct, tenant, 12)
        total = len(_events(direct, tenant, 24))

    async def read_slowly() -> tuple[int, int, list[bytes]]:
        link = await MemberLink.connect("127.0.0.1", link_port(m1), link_key(m0), None)
        try:
            request = events_pb2.WatchEventsRequest(tenant=tenant).SerializeToString()
            stream = await link.stream(WATCH, request, [("authorization", f"Bearer {ADMIN}")], None)
            await asyncio.sleep(1.0)  # not reading: the owner stops at the window
            ahead = sum(kind == MESSAGE for kind, _ in stream._frames)
            # Another call on the same connection is answered meanwhile.
            asked = memory_pb2.RecallRequest(tenant=tenant, query="harbour", k=3).SerializeToString()
            answer = await asyncio.wait_for(
                link.call("/mnemosyne.v1.MemoryService/Recall", asked, [("authorization", f"Bearer {ADMIN}")], 5.0), 5
            )
            assert answer.refusal() is None
            received = []
            async for message in stream.messages():
                received.append(message)
                if len(received) == total:
                    break
            link.end_stream(stream)
            return ahead, len(received), received
        finally:
            await link.close()

    ahead, read, messages = asyncio.run(read_slowly())
    assert ahead == STREAM_WINDOW and read == total == 24
    assert [events_pb2.Event.FromString(m).sequence for m in messages] == sorted(
        events_pb2.Event.FromString(m).sequence for m in messages
    )


def test_a_client_stream_takes_the_link_and_answers_as_the_owner_does(pair: LocalMembers) -> None:
    """An import through the entry: its chunks sent as the owner grants them (cut small here, so
    that they are many windows), the owner's answer and refusals as it gives them."""
    m0, m1 = pair.processes
    tenant, copy = _theirs(pair)[7:9]
    with MemoryClient(m0.target, ADMIN) as via, MemoryClient(m1.target, ADMIN) as direct:
        direct.retain_batch(tenant, [f"Crate {n} went to bay {n % 5}" for n in range(40)])
        _until_linked(m0, lambda: via.recall(tenant, "crate"))
        manifest, *parts = direct.export_tenant(tenant)
        assert isinstance(manifest, TenantBackup) and parts
        chunks = [
            BackupChunk(part.file, part.data[at : at + 4096])
            for part in parts
            if isinstance(part, BackupChunk)
            for at in range(0, len(part.data), 4096)
        ]
        assert len(chunks) > 4 * STREAM_WINDOW
        linked = gauge(m0, LINKED)
        installed = via.import_tenant(manifest, chunks, tenant=copy, timeout=60)  # a stall fails, not hangs
        assert (installed.tenant, installed.memories) == (copy, 40)
        assert [h.memory.text for h in direct.recall(copy, "crate 7", k=1)] == ["Crate 7 went to bay 2"]
        # Refused by the owner as it refuses it: the name is taken; the copy is cut short.
        for sent in (chunks, chunks[: len(chunks) // 2]):
            again = copy if sent is chunks else _theirs(pair)[9]
            assert _outcome(lambda: via.import_tenant(manifest, sent, tenant=again, timeout=60)) == _outcome(
                lambda: direct.import_tenant(manifest, sent, tenant=again)
            )
        assert gauge(m0, LINKED) - linked == 3
        assert not m1.tenant_file(_theirs(pair)[9]).exists()
