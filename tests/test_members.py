"""Scale out, part 1 (docs/scale-out.md): tenants owned by one of many members, any member an entry point.

Real server processes on loopback (service/cli/server_process.py LocalMembers), the real Python and
Node clients, and Debian's HAProxy as an HTTP/2 proxy routing at random in front of them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
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
from google.rpc.error_details_pb2 import ErrorInfo
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mnemosyne.cli.server_process import LocalMembers, ServerProcess
from mnemosyne.client import MemoryClient, MemoryHost
from mnemosyne.client.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnavailableError,
)
from mnemosyne.client.routing import MemberListError, RoutingChannel, first_member
from mnemosyne.client.routing import member_list_text as client_member_list_text
from mnemosyne.client.routing import owner_of as client_owner_of
from mnemosyne.client.routing import parse_members as client_parse_members
from mnemosyne.client.routing import weight as client_weight
from mnemosyne.client.types import BackupChunk, TenantBackup
from mnemosyne.engine.targets import check_member_addresses
from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.store.membership import Membership, member_list_text, owner_of, parse_members, weight
from mnemosyne.store.ownership import EPOCH_KEY, HOLDER_KEY
from mnemosyne.store.pool import TenantPool
from mnemosyne.v1 import events_pb2, memory_pb2
from tests import http_support
from tests.mem0_support import Mem0Client
from tests.node_support import node_package
from tests.support import RefusingServer, gauge, haproxy, status_details, tokens_json

ROOT = Path(__file__).resolve().parents[1]
VECTORS = json.loads((ROOT / "docs" / "scale-out-vectors.json").read_text())
ADMIN, TOKEN_A, TOKEN_B = "admin-token", "token-a", "token-b"
TENANTS = [f"tenant-{i:02d}" for i in range(60)]
FORWARDED, RECEIVED = "mnemosyne_forwarded_calls", "mnemosyne_forwarded_calls_received"


def _forwarded(members: LocalMembers) -> list[float]:
    return [gauge(process, FORWARDED) for process in members.processes]


def _holders(members: LocalMembers, tenant: str) -> list[str]:
    return [m for m, p in zip(members.ids, members.processes) if p.tenant_file(tenant).exists()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMembers]:
    members = LocalMembers(
        tmp_path_factory.mktemp("members"),
        3,
        env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], TOKEN_A: ["tenant-a"], TOKEN_B: ["tenant-b"]})},
        metrics=True,
        http=True,
    ).start()
    yield members
    members.stop()


@pytest.fixture(scope="module")
def written(cluster: LocalMembers) -> LocalMembers:
    """60 tenants written through member 0 only, a client that knows no member list."""
    with MemoryClient(cluster.processes[0].target, ADMIN) as client:
        for tenant in TENANTS:
            client.retain(tenant, f"{tenant} keeps its notes in Lisbon")
    return cluster


# -- the hash -------------------------------------------------------------------------------------


def test_the_hash_test_vectors_hold_on_the_server_and_in_the_python_client() -> None:
    for vector in VECTORS["weights"]:
        for weigh in (weight, client_weight):
            assert f"{weigh(vector['tenant'], vector['member']):016x}" == vector["weight"]
    for vector in VECTORS["owners"]:
        for owner in (owner_of, client_owner_of):
            assert owner(vector["tenant"], vector["members"]) == vector["owner"]
            assert owner(vector["tenant"], list(reversed(vector["members"]))) == vector["owner"]


def _as_file(vector: dict[str, Any], directory: Path) -> str:
    """``@PATH`` of a file holding a ``member_files`` vector's ``file`` (UTF-8 text) or
    ``file_hex`` (bytes); no file at PATH for ``"file": null``, a FIFO for ``"fifo": true``."""
    path = directory / "members.txt"
    if "file_hex" in vector:
        path.write_bytes(bytes.fromhex(vector["file_hex"]))
    elif vector.get("fifo"):
        os.mkfifo(path)
    elif vector["file"] is not None:
        path.write_bytes(vector["file"].encode())
    return f"@{path}"


def test_the_member_list_vectors_hold_on_the_server_and_in_the_python_client(tmp_path: Path) -> None:
    """The member list's format, one rule (docs/scale-out.md#the-member-list): what parses, as
    what, and why the rest is refused, the same for ``serve --members`` and the Python client
    (the Node client: the next test)."""
    for vector in VECTORS["member_lists"]:
        listed, members = vector["list"], dict(vector["members"])  # [id, address] in the list's order
        assert list(parse_members(listed).items()) == list(client_parse_members(listed).items()), listed
        assert list(parse_members(listed).items()) == list(members.items()), listed
        assert client_parse_members(members) == members  # the same members given as a mapping
        assert Membership.parse(vector["first"], listed, previous=listed).addresses == members
        assert first_member(client_parse_members(listed)) == vector["first"]
        if "address_problem" in vector:  # the list's rule takes it; no member list to dial does
            with pytest.raises(MemberListError) as in_client:
                RoutingChannel(listed, grpc.insecure_channel)
            assert in_client.value.problem == vector["address_problem"], listed
            continue
        with RoutingChannel(listed, grpc.insecure_channel) as routing:  # a call naming no tenant goes there
            assert routing.address_of("") == members[vector["first"]]
    for vector in VECTORS["refused_member_lists"]:
        listed, problem = vector["list"], vector["problem"]
        with pytest.raises(InvalidArgument) as on_server:
            parse_members(listed)
        assert (on_server.value.reason, on_server.value.metadata["problem"]) == ("CONFIG_INVALID", problem), listed
        with pytest.raises(MemberListError) as in_client:
            client_parse_members(listed)
        assert in_client.value.problem == problem, listed
        if listed.strip():  # a blank previous list is none
            with pytest.raises(InvalidArgument) as as_previous:
                Membership.parse("m0", "m0=127.0.0.1:1", previous=listed)
            assert as_previous.value.metadata["problem"] == problem
    for number, vector in enumerate(VECTORS["member_files"]):
        (tmp_path / str(number)).mkdir()
        value = _as_file(vector, tmp_path / str(number))
        if "members" in vector:
            members = dict(vector["members"])
            assert parse_members(member_list_text(value, "--members")) == members
            assert client_parse_members(client_member_list_text(value)) == members
            with RoutingChannel(value, grpc.insecure_channel) as routing:
                assert routing.members == members
            continue
        with pytest.raises(InvalidArgument) as on_server:
            parse_members(member_list_text(value, "--members"))
        assert on_server.value.metadata["problem"] == vector["problem"], vector
        with pytest.raises(MemberListError) as in_client:
            RoutingChannel(value, grpc.insecure_channel)
        assert in_client.value.problem == vector["problem"], vector


def test_a_client_refuses_a_member_address_the_server_would_refuse() -> None:
    """MemoryClient(members=...) took any printable address (``m0=host``, ``m0=h:0``, a URL, a
    socket path no socket takes): each call sent there failed UNAVAILABLE with the resolver's text.
    The client is refused when it is made, by the server's own check and reason (the vectors'
    member_addresses; the Node client: routing.test.js)."""
    for address in VECTORS["member_addresses"]["accepted"]:
        check_member_addresses({"m0": address}, "--members")
        with MemoryClient("", members={"m0": address}) as client:
            assert client.channel.members == {"m0": address}  # type: ignore[attr-defined]  # a RoutingChannel
    for address in VECTORS["member_addresses"]["refused"]:
        with pytest.raises(InvalidArgument) as on_server:
            check_member_addresses({"m0": address}, "members")
        assert on_server.value.metadata == {"problem": "MEMBER_ADDRESS_INVALID"}, address
        with pytest.raises(MemberListError) as in_client:
            MemoryClient("127.0.0.1:1", members={"m1": "127.0.0.1:2", "m0": address})  # a list: no commas
        assert (in_client.value.problem, str(in_client.value)) == ("MEMBER_ADDRESS_INVALID", on_server.value.message)


def test_the_hash_test_vectors_hold_in_the_node_client() -> None:
    package = node_package()
    result = subprocess.run(
        ["node", "--test", "test/routing.test.js"], cwd=package, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- the store's open -----------------------------------------------------------------------------


def test_the_store_opens_only_what_this_member_holds(tmp_path: Path) -> None:
    ids = ["m0", "m1"]
    mine = next(t for t in TENANTS if owner_of(t, ids) == "m0")
    theirs = next(t for t in TENANTS if owner_of(t, ids) == "m1")
    # Files written by a single server (no holder): adopted by the member the hash names.
    single = TenantPool(tmp_path, max_open=8, synchronous="NORMAL")
    for tenant in (mine, theirs):
        with single.tenant(tenant, create=True) as store:
            assert store is not None
            with store.write() as txn:
                txn.set_meta("note", tenant)
    single.close()
    m0 = Membership.parse("m0", "m0=127.0.0.1:1,m1=127.0.0.1:2")
    pool = TenantPool(tmp_path, max_open=8, synchronous="NORMAL", membership=m0)
    try:
        with pool.tenant(mine, create=False) as store:
            assert store is not None
            with store.read() as txn:
                assert (txn.meta(HOLDER_KEY), txn.meta(EPOCH_KEY)) == ("m0", "1")
        # A tenant the hash gives to m1 is refused, file or no file, and none is created.
        with pytest.raises(FailedPrecondition) as refused:
            with pool.tenant(theirs, create=False):
                pass
        assert refused.value.reason == "NOT_OWNER" and refused.value.metadata["owner"] == "m1"
        fresh = next(t for t in (f"fresh-{i}" for i in range(100)) if owner_of(t, ids) == "m1")
        with pytest.raises(Exception, match="owned by member m1"):
            with pool.tenant(fresh, create=True):
                pass
        assert not pool.exists(fresh)
        # A new tenant is stamped at creation.
        new = next(t for t in (f"new-{i}" for i in range(100)) if owner_of(t, ids) == "m0")
        with pool.tenant(new, create=True) as store:
            assert store is not None
        with pool.tenant(new, create=False) as store:
            assert store is not None
            with store.read() as txn:
                assert txn.meta(HOLDER_KEY) == "m0"
    finally:
        pool.close()
    # A file naming another holder (copied from another member's volume), or a newer epoch: refused.
    for key, value, reason in [(HOLDER_KEY, "m1", "TENANT_HELD_ELSEWHERE"), (EPOCH_KEY, "2", "OWNERSHIP_EPOCH_NEWER")]:
        pool = TenantPool(tmp_path, max_open=8, synchronous="NORMAL")
        with pool.tenant(mine, create=False) as store:
            assert store is not None
            with store.write() as txn:
                txn.set_meta(HOLDER_KEY, "m0")
                txn.set_meta(key, value)
        pool.close()
        pool = TenantPool(tmp_path, max_open=8, synchronous="NORMAL", membership=m0)
        try:
            with pytest.raises(FailedPrecondition) as refused:
                with pool.tenant(mine, create=False):
                    pass
            assert refused.value.reason == reason
        finally:
            pool.close()


# -- three members, any of them an entry point ------------------------------------------------------


def test_each_tenant_lives_on_exactly_the_member_the_hash_names(written: LocalMembers) -> None:
    for tenant in TENANTS:
        assert _holders(written, tenant) == [owner_of(tenant, written.ids)], tenant
    owners = {owner_of(t, written.ids) for t in TENANTS}
    assert owners == set(written.ids)  # 60 tenants spread over all three


def test_every_call_kind_works_through_every_member(written: LocalMembers) -> None:
    sample = [next(t for t in TENANTS if owner_of(t, written.ids) == m) for m in written.ids]
    for process in written.processes:
        with MemoryClient(process.target, ADMIN) as client:
            for tenant in sample:
                hits = client.recall(tenant, "Lisbon notes")  # unary
                assert hits and tenant in hits[0].memory.text
                # Workspace compare-and-set: the generation travels in metadata both ways.
                context = client.assemble_context(tenant, "main")
                generation = client.update_global(tenant, f"# {process.port}", context.global_generation)
                assert generation > context.global_generation
                with pytest.raises(Exception) as stale:
                    client.update_global(tenant, "# stale", context.global_generation)
                assert getattr(stale.value, "code", None) == grpc.StatusCode.ABORTED
                # The hot path and its events, and WatchEvents (a server stream).
                client.hot_path(tenant, "enable")
                accepted = client.retain(tenant, f"a fast note through {process.port}", fast=True)
                client.hot_path(tenant, "flush")
                assert client.get_event(tenant, accepted.event_id).status == "succeeded"
                watched = client.watch_events(tenant, timeout=10)
                assert _watch_until(watched, accepted.event_id)
    for tenant in sample:
        assert _holders(written, tenant) == [owner_of(tenant, written.ids)]


class _Agent:
    """An agent object of the host (weakly referenced)."""


def _watch_until(events: Iterator[Any], event_id: int) -> bool:
    """Whether the watch shows ``event_id`` succeeded before its deadline."""
    try:
        for event in events:
            if event.event_id == event_id and event.status == "succeeded":
                return True
    except Exception as exc:  # the watch's deadline
        if getattr(exc, "code", None) != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
    return False


def test_http_sse_and_mcp_are_forwarded_too(written: LocalMembers) -> None:
    auth = {"authorization": f"Bearer {ADMIN}"}
    for process in written.processes:
        for tenant in TENANTS[:6]:
            reply = http_support.call(
                process.http_port, "Recall", memory_pb2.RecallRequest(tenant=tenant, query="Lisbon"), auth
            )
            assert reply.status == 200, reply.body
            assert tenant in reply.json()["hits"][0]["memory"]["text"]
    tenant = next(t for t in TENANTS if owner_of(t, written.ids) != "m0")
    # The recalls above connected m0's member links: the event stream takes one (its messages
    # decoded for JSON at the entry).
    linked = gauge(written.processes[0], "mnemosyne_forwarded_calls_linked")
    events = http_support.server_sent_events(
        written.processes[0].http_port, f"/v1/tenants/{tenant}/events:watch", auth, timeout=10
    )
    first = next(events)
    events.close()
    assert json.loads(first["data"])["sequence"]
    assert gauge(written.processes[0], "mnemosyne_forwarded_calls_linked") == linked + 1

    async def mcp() -> str:
        transport = streamable_http_client(
            f"{written.processes[0].http_url}/mcp?tenant={tenant}",
            http_client=httpx2.AsyncClient(headers=auth, timeout=30),
        )
        async with Client(transport) as session:
            result = await session.call_tool("recall", {"query": "Lisbon notes", "k": 3})
            return "\n".join(getattr(part, "text", "") for part in result.content)

    assert tenant in anyio.run(mcp)
    assert _holders(written, tenant) == [owner_of(tenant, written.ids)]


def test_clients_with_the_member_list_never_take_the_hop(written: LocalMembers) -> None:
    before = _forwarded(written)
    with MemoryClient("", ADMIN, members=written.members) as client:
        for tenant in TENANTS:
            client.retain(tenant, f"{tenant} routed straight to its owner")
            assert client.recall(tenant, "routed owner")
            client.assemble_context(tenant, "main")
        # MemoryHost (the host-owned generations) over the routed client.
        host, agent = MemoryHost(client, TENANTS[3]), _Agent()
        assert "Global" in host.assemble_context(agent, "main")
        assert host.call_tool(agent, "memory_update", {"content": "# routed host"})["ok"]
        client.hot_path(TENANTS[0], "enable")
        accepted = client.retain(TENANTS[0], "a fast note, routed", fast=True)
        client.hot_path(TENANTS[0], "flush")
        assert _watch_until(client.watch_events(TENANTS[0], timeout=10), accepted.event_id)
    script = """
const { MemoryClient } = require('./src');
(async () => {
  const client = new MemoryClient('', { token: process.env.TOKEN, members: process.env.MEMBERS });
  for (const tenant of JSON.parse(process.env.TENANTS)) {
    await client.retain(tenant, `${tenant} from Node`);
    if ((await client.recall(tenant, 'Node')).length === 0) throw new Error(`no hit for ${tenant}`);
  }
  for await (const e of client.watchEvents(JSON.parse(process.env.TENANTS)[0], { timeoutMs: 10000 })) break;
  client.close();
  // A stale list (m2 missing): refused NOT_OWNER by the member reached, corrected, sent to the owner.
  const stale = new MemoryClient('', { token: process.env.TOKEN, members: process.env.STALE });
  if ((await stale.recall(process.env.MOVED, 'Node')).length === 0) throw new Error('no hit after the correction');
  if (stale.members.size !== 3) throw new Error(`not corrected: ${[...stale.members.keys()]}`);
  stale.close();
  // A server stream refused before its first message takes the list and is sent to the owner,
  // as a unary call is (it was thrown, the list kept stale): a watch, an export.
  const right = new MemoryClient('', { token: process.env.TOKEN, members: process.env.MEMBERS });
  await right.hotPath(process.env.MOVED, 'enable');
  await right.retain(process.env.MOVED, 'a fast note from Node', { fast: true });
  right.close();
  for (const open of [
    (c) => c.watchEvents(process.env.MOVED, { timeoutMs: 10000 }),
    (c) => c.exportTenant(process.env.MOVED),
  ]) {
    const streamed = new MemoryClient('', { token: process.env.TOKEN, members: process.env.STALE });
    for await (const message of open(streamed)) {
      if (!(message.eventId || message.manifest)) throw new Error(JSON.stringify(message));
      break;
    }
    if (streamed.members.size !== 3) throw new Error(`stream not corrected: ${[...streamed.members.keys()]}`);
    streamed.close();
  }
  // An import named by its manifest alone goes to that tenant's owner (it went to the first member).
  const mover = new MemoryClient('', { token: process.env.TOKEN, members: process.env.MEMBERS });
  await mover.retain(process.env.NODE_COPY, 'a note to copy, from Node');
  const parts = [];
  for await (const part of mover.exportTenant(process.env.NODE_COPY)) parts.push(part);
  const chunks = parts.slice(1).map((part) => part.chunk);
  const imported = await mover.importTenant(parts[0].manifest, chunks, { replace: true });
  if (imported.tenant !== process.env.NODE_COPY || !imported.replaced) throw new Error(JSON.stringify(imported));
  mover.close();
})().catch((err) => { console.error(err); process.exit(1); });
"""
    result = subprocess.run(
        ["node", "-e", script],
        cwd=node_package(),
        env={
            **os.environ,
            "TOKEN": ADMIN,
            "MEMBERS": written.members,
            "TENANTS": json.dumps(TENANTS),
            "STALE": ",".join(written.members.split(",")[:2]),
            "MOVED": next(t for t in TENANTS if owner_of(t, written.ids) == "m2"),
            "NODE_COPY": next(f"node-copy-{i}" for i in range(100) if owner_of(f"node-copy-{i}", written.ids) == "m2"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _forwarded(written) == before
    for tenant in TENANTS:
        assert _holders(written, tenant) == [owner_of(tenant, written.ids)]


def test_a_client_with_a_stale_member_list_is_corrected_and_never_served_wrong(written: LocalMembers) -> None:
    stale = ",".join(f"{m}=127.0.0.1:{p}" for m, p in zip(written.ids[:2], written.ports[:2]))
    # Tenants the stale list gives to m0 or m1 but the deployment to m2.
    moved = [t for t in TENANTS if owner_of(t, written.ids) == "m2"]
    before = _forwarded(written)
    with MemoryClient("", ADMIN, members=stale) as client:
        assert client.recall(moved[0], "Lisbon")  # refused NOT_OWNER by the member reached, then sent to m2
        assert isinstance(client.channel, RoutingChannel)
        assert client.channel.members == dict(zip(written.ids, (f"127.0.0.1:{p}" for p in written.ports)))
        for tenant in moved[1:]:
            assert client.recall(tenant, "Lisbon")
    _streams_follow_or_take_the_list(written, stale, moved)
    assert _forwarded(written) == before
    # Routed by a stale list to the wrong member, a call is refused, never answered there.
    with MemoryClient(written.processes[0].target, ADMIN) as plain:
        with pytest.raises(FailedPreconditionError) as refused:
            plain.call(
                plain.memory.Recall,
                memory_pb2.RecallRequest(tenant=moved[0], query="x"),
                retry=False,
                metadata=[("x-mnemosyne-route", "m0")],
            )
    assert refused.value.reason == "NOT_OWNER" and refused.value.metadata["owner"] == "m2"
    assert refused.value.metadata["owner_address"] == f"127.0.0.1:{written.ports[2]}"
    assert refused.value.message.endswith(
        "(not sent to member m2, the owner it names: this client has no member list to follow it by "
        "(MemoryClient(members=...)))"
    )


def _streams_follow_or_take_the_list(written: LocalMembers, stale: str, moved: list[str]) -> None:
    """A stream refused NOT_OWNER by a stale list raised the refusal, and the list stayed stale:
    a client that only watched was refused at every watch. A server stream (WatchEvents,
    ExportTenant) refused before its first message is sent once more, to the owner, as a unary call
    is; a client stream (ImportTenant), whose chunks are not kept, is not, but takes the list, so
    the same import again reaches the owner."""
    full = dict(zip(written.ids, (f"127.0.0.1:{p}" for p in written.ports)))
    with MemoryClient("", ADMIN, members=written.members) as right:
        right.hot_path(moved[-1], "enable")
        accepted = right.retain(moved[-1], "a fast note kept on m2", fast=True)
        right.hot_path(moved[-1], "flush")
    with MemoryClient("", ADMIN, members=stale) as client:
        assert _watch_until(client.watch_events(moved[-1], timeout=10), accepted.event_id)
        assert client.channel.members == full  # type: ignore[attr-defined]  # a RoutingChannel
    with MemoryClient("", ADMIN, members=stale) as client:
        manifest, *parts = client.export_tenant(moved[-1])
        assert client.channel.members == full  # type: ignore[attr-defined]  # a RoutingChannel
    chunks = [part for part in parts if isinstance(part, BackupChunk)]
    assert isinstance(manifest, TenantBackup) and chunks and len(chunks) == len(parts)
    copy = next(f"copy-{i}" for i in range(100) if owner_of(f"copy-{i}", written.ids) == "m2")
    with MemoryClient("", ADMIN, members=stale) as client:
        with pytest.raises(FailedPreconditionError) as refused:
            client.import_tenant(manifest, chunks, tenant=copy)
        assert refused.value.reason == "NOT_OWNER", refused.value
        assert "the member list the refusal carries is taken" in refused.value.message, refused.value.message
        assert client.channel.members == full  # type: ignore[attr-defined]  # a RoutingChannel
        assert client.import_tenant(manifest, chunks, tenant=copy).tenant == copy
    assert _holders(written, copy) == ["m2"]
    # Named by its manifest alone, an import goes to that tenant's owner, not to the first member.
    before = _forwarded(written)
    with MemoryClient("", ADMIN, members=written.members) as right:
        copied, *parts = right.export_tenant(copy)
        assert isinstance(copied, TenantBackup)
        chunks = [part for part in parts if isinstance(part, BackupChunk)]
        replaced = right.import_tenant(copied, chunks, replace=True)
    assert (replaced.tenant, replaced.replaced, _forwarded(written)) == (copy, True, before)


def test_a_redirect_with_a_member_list_the_client_cannot_use_is_the_servers_refusal() -> None:
    """A NOT_OWNER refusal whose member list cannot be used (a broken member's) raised the
    client's MemberListError, a ValueError, as if the caller's own list were wrong (the Node client
    INVALID_ARGUMENT). It is as a refusal without a list: the refusal itself, the client's list kept
    (the Node client: routing.test.js)."""
    server = RefusingServer()
    try:
        with MemoryClient("", members=f"m0={server.address},m1={server.address}", retries=0) as client:
            kept = dict(client.channel.members)  # type: ignore[attr-defined]  # a RoutingChannel
            lists = ["", "no list", "m0=127.0.0.1:1,m0=127.0.0.1:2", "m0=127.0.0.1:0", "m-=x", "=127.0.0.1:1"]
            for members in lists:
                server.message, calls = "tenant acme is owned by member m1, not m0", server.calls
                info = ErrorInfo(
                    reason="NOT_OWNER", domain="mnemosyne.v1", metadata={"owner": "m1", "members": members}
                )
                server.details = status_details(server.code, server.message, info)
                with pytest.raises(FailedPreconditionError) as refused:
                    client.recall("acme", "x")
                assert (refused.value.reason, refused.value.metadata.get("members", "")) == ("NOT_OWNER", members)
                # Said why it was not followed (before, the server's message alone).
                why = "carries no member list" if not members else "the member list the refusal carries cannot be used"
                assert refused.value.message.startswith(
                    f"{server.message} (not sent to member m1, the owner it names: "
                )
                assert why in refused.value.message, refused.value.message
                assert server.calls == calls + 1  # not sent again
                assert client.channel.members == kept  # type: ignore[attr-defined]  # a RoutingChannel
    finally:
        server.stop()


def test_member_internal_metadata_from_a_client_is_ignored(written: LocalMembers) -> None:
    tenant = next(t for t in TENANTS if owner_of(t, written.ids) == "m2")
    owner = written.processes[2]
    spoofed = [("x-mnemosyne-forwarded-by", "m1"), ("x-mnemosyne-member-key", "0" * 64)]
    received = gauge(owner, RECEIVED)
    with MemoryClient(owner.target, ADMIN) as client:
        client.call(
            client.memory.Recall, memory_pb2.RecallRequest(tenant=tenant, query="x"), retry=False, metadata=spoofed
        )
    assert gauge(owner, RECEIVED) == received  # not taken for a hop
    # Through another member the call is forwarded as any other (the spoofed keys dropped), once.
    before = _forwarded(written)
    with MemoryClient(written.processes[0].target, ADMIN) as client:
        hits = client.call(
            client.memory.Recall, memory_pb2.RecallRequest(tenant=tenant, query="Lisbon"), retry=False, metadata=spoofed
        )
    assert hits.hits
    assert _forwarded(written) == [before[0] + 1, before[1], before[2]]
    assert gauge(owner, RECEIVED) == received + 1


def test_the_admin_fan_outs_cover_every_member(written: LocalMembers) -> None:
    for process in written.processes:
        with MemoryClient(process.target, ADMIN) as client:
            listed, token = [], ""
            while True:
                page = client.list_tenants(page_size=25, page_token=token)
                listed += page.tenants
                if not (token := page.next_page_token):
                    break
            assert set(TENANTS) <= set(listed) and listed == sorted(listed)
            stats = client.aggregate_stats(chunk_size=10)
            assert set(stats.tenants) >= set(TENANTS)
            assert stats.total.memories == sum(row.memories for row in stats.tenants.values())
            # The figures across tenants: every member's, merged, each list in its order.
            figures = client.list_tenant_figures(limit=100)
            assert figures.tenants == len(stats.tenants) and not figures.unanswered_members
            assert {r.tenant for r in figures.largest} == set(stats.tenants)
            assert figures.largest == sorted(figures.largest, key=lambda r: (-r.file_bytes, r.tenant))
            assert set(TENANTS) <= {r.tenant for r in figures.busiest}
            assert len(client.list_tenant_figures(limit=5).largest) == 5
    # A next page asked of another member (a proxy routing at random) continues the same listing.
    with (
        MemoryClient(written.processes[0].target, ADMIN) as first,
        MemoryClient(written.processes[2].target, ADMIN) as other,
    ):
        page = first.list_tenants(page_size=10)
        following = other.list_tenants(page_size=10, page_token=page.next_page_token)
        assert following.tenants[0] > page.tenants[-1]
    # A tenant's own token is no admin: refused before any member is asked.
    with MemoryClient(written.processes[0].target, TOKEN_A) as client, pytest.raises(PermissionDeniedError):
        client.list_tenants()


@pytest.mark.parametrize("complete", [False, True])
def test_a_change_to_a_member_list_with_an_address_that_is_none_is_refused(
    cluster: LocalMembers, complete: bool
) -> None:
    """ChangeMembers took any printable address (no port, port 0 or 65536, a URL, a socket path
    no socket takes): every member would have dialled it for good. It is refused as serve's and
    rebalance's member lists are, naming the member, and no change is begun."""
    listed = ",".join(f"{m}={p.target}" for m, p in zip(cluster.ids[:-1], cluster.processes, strict=False))
    last = cluster.ids[-1]
    with MemoryClient(cluster.processes[0].target, ADMIN) as client:
        for address in ("host", "host:0", "host:65536", "http://host:1", "h" * 254 + ":1", "unix:/" + "s" * 107):
            with pytest.raises(InvalidArgumentError) as refused:
                client.change_members(f"{listed},{last}={address}", complete=complete)
            assert (refused.value.reason, refused.value.metadata) == (
                "CONFIG_INVALID",
                {"problem": "MEMBER_ADDRESS_INVALID"},
            )
            assert refused.value.message.startswith(
                f"the member list to change to: member {last}'s address {address[:200]!r} is not a server address"
            )


# -- a real L7 proxy in front -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proxy(written: LocalMembers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    grpc = {m: p.port for m, p in zip(written.ids, written.processes)}
    http = {m: p.http_port for m, p in zip(written.ids, written.processes)}
    with haproxy(tmp_path_factory.mktemp("haproxy"), grpc, http) as ports:
        yield ports


def test_behind_haproxy_routing_at_random_every_call_lands_on_the_owner(
    written: LocalMembers, proxy: tuple[int, int]
) -> None:
    grpc_port, http_port = proxy
    before = _forwarded(written)
    with MemoryClient(f"127.0.0.1:{grpc_port}", ADMIN) as client:
        for tenant in TENANTS:
            client.retain(tenant, f"{tenant} through the proxy")
            hits = client.recall(tenant, "through the proxy")
            assert hits and tenant in hits[0].memory.text
        assert set(TENANTS) <= set(client.list_tenants().tenants)  # a page of 1,000, the default cap
    auth = {"authorization": f"Bearer {ADMIN}"}
    for tenant in TENANTS[:20]:
        reply = http_support.call(http_port, "Recall", memory_pb2.RecallRequest(tenant=tenant, query="proxy"), auth)
        assert reply.status == 200 and tenant in reply.body.decode()
    for tenant in TENANTS:
        assert _holders(written, tenant) == [owner_of(tenant, written.ids)]
    # Random routing: about two calls in three reached a member that did not own the tenant.
    assert sum(_forwarded(written)) - sum(before) > 40


def test_the_official_mem0_client_behind_haproxy_reaches_every_tenant(
    written: LocalMembers, proxy: tuple[int, int], tmp_path: Path
) -> None:
    """mem0's paths are forwarded to the owner like every other route (over the member-internal
    relay): through the proxy, routing at random, the official mem0 client adds, searches, lists,
    gets, updates and deletes for tenants of every member; events answer through any member too."""
    _, http_port = proxy
    tenants = [f"mem0-{i:02d}" for i in range(12)]
    assert {owner_of(tenant, written.ids) for tenant in tenants} == set(written.ids)
    before = sum(_forwarded(written))
    with Mem0Client(f"http://127.0.0.1:{http_port}", ADMIN, tmp_path) as mem0:
        assert mem0.construction == {"ok": "ready"}, mem0.construction
        for tenant in tenants:
            mem0.call("set_headers", **{"Mnemosyne-Tenant": tenant})
            added = mem0.call("add", messages=f"{tenant} parks by the north gate", user_id="ada")
            assert added["status"] == "SUCCEEDED", added
            found = mem0.call("search", query="where does it park? north gate", filters={"user_id": "ada"})
            (hit,) = found["results"]
            assert hit["memory"] == f"{tenant} parks by the north gate" and hit["user_id"] == "ada"
            assert [m["id"] for m in mem0.call("get_all", filters={"user_id": "ada"})["results"]] == [hit["id"]]
            assert mem0.call("get", memory_id=hit["id"])["memory"] == hit["memory"]
            assert mem0.call("update", memory_id=hit["id"], text=f"{tenant} parks by the south gate")["id"] == hit["id"]
            assert [h["event"] for h in mem0.call("history", memory_id=hit["id"])] == ["ADD", "UPDATE"]
            headers = {"authorization": f"Token {ADMIN}", "mnemosyne-tenant": tenant}
            event = http_support.request(http_port, "GET", f"/v1/event/{added['event_id']}/", headers=headers)
            assert event.status == 200 and event.json()["results"][0]["id"] == hit["id"], event.body
            events = http_support.request(http_port, "GET", "/v1/events/?page_size=5", headers=headers)
            assert events.status == 200, events.body
            assert "deleted" in mem0.call("delete", memory_id=hit["id"])["message"]
            assert mem0.attempt("get", memory_id=hit["id"])["error"] == "MemoryNotFoundError"
    for tenant in tenants:
        assert _holders(written, tenant) == [owner_of(tenant, written.ids)]
    # Random routing: about two requests in three reached a member that did not own the tenant.
    assert sum(_forwarded(written)) - before > 40


# -- refusals: an owner down, forwarding off, another tenant's token --------------------------------


def test_owner_down_forwarding_off_and_a_token_the_owner_refuses(tmp_path: Path) -> None:
    # m0 takes any tenant for token-a (an out-of-date tokens file); m1 only tenant-a.
    members = LocalMembers(
        tmp_path / "pair",
        2,
        env_of=lambda i: {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], TOKEN_A: ["*"] if i == 0 else ["tenant-a"]})},
        metrics=True,
    ).start()
    closed = LocalMembers(tmp_path / "closed", 2, args_of=lambda i: ["--no-forwarding"] if i == 0 else [])
    closed.processes[1].args[closed.processes[1].args.index("--members") + 1] += ",m2=127.0.0.1:1"  # lists differ
    closed.start()
    try:
        theirs = [t for t in TENANTS if owner_of(t, members.ids) == "m1"]
        m0, m1 = members.processes
        # The owner authenticates the forwarded token again, and refuses what it does not grant.
        with MemoryClient(m0.target, TOKEN_A) as client, pytest.raises(PermissionDeniedError):
            client.retain(theirs[0], "not yours")
        assert gauge(m0, FORWARDED) == 1
        assert not m1.tenant_file(theirs[0]).exists()
        # Forwarding off: refused NOT_OWNER with the owner's id, nothing created anywhere.
        with MemoryClient(closed.processes[0].target) as client, pytest.raises(FailedPreconditionError) as refused:
            client.retain(theirs[1], "refused")
        assert refused.value.reason == "NOT_OWNER" and refused.value.metadata["owner"] == "m1"
        assert not any(p.tenant_file(theirs[1]).exists() for p in closed.processes)
        _not_followed_says_why_in_both_clients(closed)
        # The owner down: UNAVAILABLE naming it, no file created, and the fan-outs name it.
        m1.kill()
        with MemoryClient(m0.target, ADMIN, retries=0) as client:
            with pytest.raises(UnavailableError) as down:
                client.retain(theirs[2], "nobody home")
            assert down.value.reason == "OWNER_UNAVAILABLE" and down.value.metadata["owner"] == "m1"
            assert not m0.tenant_file(theirs[2]).exists() and not m1.tenant_file(theirs[2]).exists()
            assert client.list_tenants().unanswered_members == ["m1"]
            assert client.list_tenant_figures().unanswered_members == ["m1"]
            aggregate = client.aggregate_stats()
            assert aggregate.unanswered_members == ["m1"] and "m1 did not answer" in aggregate.consistency
        # Counted by the member that was not answered (the alert MnemosyneMemberNotAnswering).
        assert gauge(m0, "mnemosyne_fanout_unanswered", member="m1") == 2
    finally:
        members.stop()
        closed.stop()


def _not_followed_says_why_in_both_clients(pair: LocalMembers) -> None:
    """A NOT_OWNER refusal a client does not follow was raised with the server's message alone,
    saying neither that the client did not follow it nor why. Two real members whose lists differ
    (m1 also lists an m2): a call follows one redirect (m0 to m1), and m1's, naming m2, is raised
    saying so; a client without a member list says it has none (m0 does not forward)."""
    tenant = next(t for t in TENANTS if owner_of(t, ["m0", "m1"]) == "m1" and owner_of(t, ["m0", "m1", "m2"]) == "m2")
    stale = f"m0=127.0.0.1:{pair.ports[0]}"
    limit = "it was sent to member m1 after member m0 refused it, and a call follows one redirect"
    no_list = "(not sent to member m1, the owner it names: this client has no member list to follow it by"
    with MemoryClient("", members=stale, retries=0) as client, pytest.raises(FailedPreconditionError) as refused:
        client.recall(tenant, "x")
    assert refused.value.metadata["owner"] == "m2"
    assert f"(not sent to member m2, the owner it names: {limit}" in refused.value.message, refused.value.message
    with (
        MemoryClient(pair.processes[0].target, retries=0) as plain,
        pytest.raises(FailedPreconditionError) as refused,
    ):
        plain.recall(tenant, "x")
    assert f"{no_list} (MemoryClient(members=...)))" in refused.value.message, refused.value.message
    script = """
const { MemoryClient } = require('./src');
(async () => {
  for (const [target, options] of [['', { members: process.env.STALE }], [process.env.M0, {}]]) {
    const client = new MemoryClient(target, { ...options, retries: 0 });
    await client.recall(process.env.TENANT, 'x').then(() => { throw new Error('served'); }, (err) => console.log(err.message));
    client.close();
  }
})().catch((err) => { console.error(err); process.exit(1); });
"""
    env = {**os.environ, "STALE": stale, "M0": pair.processes[0].target, "TENANT": tenant}
    result = subprocess.run(
        ["node", "-e", script], cwd=node_package(), env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    routed, plain_node = result.stdout.splitlines()
    assert f"(not sent to member m2, the owner it names: {limit}" in routed, routed
    assert f"{no_list} (members))" in plain_node, plain_node


def test_a_forwarded_call_is_cancelled_with_its_caller(written: LocalMembers) -> None:
    """A watch forwarded to its owner ends on the owner when its client leaves."""
    tenant = next(t for t in TENANTS if owner_of(t, written.ids) == "m1")
    owner = written.processes[1]
    with MemoryClient(written.processes[0].target, ADMIN) as client:
        baseline = gauge(owner, "mnemosyne_open_streams")
        stream = client.events.WatchEvents(
            events_pb2.WatchEventsRequest(tenant=tenant),
            metadata=client.call_metadata,
        )
        threading.Thread(target=lambda: list(_drain(stream)), daemon=True).start()
        deadline = time.monotonic() + 10
        while gauge(owner, "mnemosyne_open_streams") <= baseline:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stream.cancel()
        while gauge(owner, "mnemosyne_open_streams") > baseline:
            assert time.monotonic() < deadline, "the owner kept the forwarded stream open"
            time.sleep(0.05)


def _drain(stream: Iterator[object]) -> Iterator[object]:
    try:
        yield from stream
    except grpc.RpcError:
        return


def test_one_server_without_members_is_unchanged(tmp_path: Path) -> None:
    """No --members: no holder is written, nothing is forwarded."""
    server = ServerProcess(tmp_path / "single", metrics=True).start()
    try:
        with MemoryClient(server.target) as client:
            client.retain("solo", "one server holds every tenant")
        assert gauge(server, FORWARDED) == 0
    finally:
        server.stop()
    pool = TenantPool(tmp_path / "single", max_open=4, synchronous="NORMAL")
    try:
        with pool.tenant("solo", create=False) as store:
            assert store is not None
            with store.read() as txn:
                assert txn.meta(HOLDER_KEY) is None
    finally:
        pool.close()


def _free_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(50):
        base = _free_port()
        if base + count < 65536:
            try:
                for port in range(base, base + count):
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", port))
                return base
            except OSError:
                continue
    raise AssertionError("no run of free ports")


def test_the_documented_command_runs_three_members_on_one_machine(tmp_path: Path) -> None:
    """docs/scale-out.md's `mnemosyne members --count 3` (ports moved off the defaults for the test)."""
    base = _free_run(3)
    command = [
        *(sys.executable, "-m", "mnemosyne.cli", "members", "--count", "3", "--data-dir", str(tmp_path / "members")),
        *("--port", str(base), "--http-port", "0", "--metrics-port", "0"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        members = json.loads(process.stdout.readline())["members"]
        assert members == ",".join(f"m{i}=127.0.0.1:{base + i}" for i in range(3))
        with MemoryClient("", members=members) as routed, MemoryClient(f"127.0.0.1:{base}") as entry:
            for tenant in TENANTS[:9]:
                routed.retain(tenant, "three members on one machine")
                assert entry.recall(tenant, "three members")
        for tenant in TENANTS[:9]:
            held = [
                m for m in ("m0", "m1", "m2") if (tmp_path / "members" / m / "tenants" / f"{tenant}.sqlite").exists()
            ]
            assert held == [owner_of(tenant, ["m0", "m1", "m2"])]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_the_docs_show_the_test_vectors() -> None:
    text = (ROOT / "docs" / "scale-out.md").read_text()
    for vector in VECTORS["weights"]:
        assert f"| `{vector['tenant']}` | `{vector['member']}` | `{vector['weight']}` |" in text
    for vector in VECTORS["owners"]:
        assert f"| `{vector['tenant']}` | `{','.join(vector['members'])}` | `{vector['owner']}` |" in text
    # The Python of the page is the rule itself.
    assert client_owner_of("alpha", ["m0", "m1", "m2"]) == "m2"
