"""Scale out, part 2 (docs/scale-out.md, "Moving tenants"): tenants moved between members when
the member list changes, losing nothing at any step.

Real server processes on loopback whose member list changes by a restart (as a Kubernetes
upgrade does), the real Python client, `mnemosyne rebalance` as a child process where it is
killed, and SIGKILL of the source, the destination and the rebalancer at each step of a move
(the MNEMOSYNE_TEST_MOVE_HOLD_AFTER seam holds the move there).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import apsw
import grpc
import pytest

from mnemosyne.cli.rebalance import rebalance
from mnemosyne.cli.server_process import ServerProcess, _free_port
from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.client.errors import FailedPreconditionError, UnavailableError
from mnemosyne.client.types import RecordChange, TenantBackup
from mnemosyne.errors import DataLoss, FailedPrecondition, Unavailable
from mnemosyne.store.membership import Membership, owner_of
from mnemosyne.store.ownership import (
    EPOCH_KEY,
    HOLDER_KEY,
    MOVE_HEAD_KEY,
    MOVE_PEER_KEY,
    MOVE_RECLAIMED_KEY,
    MOVE_STEP_KEY,
    Placement,
)
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import read_file
from mnemosyne.v1 import admin_pb2, memory_pb2
from tests.support import haproxy, tokens_json, wait_until
from tests.test_erasure import _traces, _windows

T = TypeVar("T")
ADMIN = "admin-token"
SECRET = "Zq4Wm8Rt2Xv6Nb3Kp9Ly5Hd7"  # one long word, whose bytes a reclaimed tombstone must not keep
ENV = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
ROUTE = "x-mnemosyne-route"


class Deployment:
    """Members m0..m<n-1> on fixed loopback ports, each restarted with the member list it is given
    (``run``), as an upgrade of a StatefulSet restarts its pods with the new list."""

    def __init__(self, root: Path, most: int) -> None:
        self.ports = {f"m{i}": _free_port() for i in range(most)}
        self.processes = {member: ServerProcess(root / member) for member in self.ports}
        self.running: list[str] = []

    def members(self, ids: list[str]) -> str:
        return ",".join(f"{member}=127.0.0.1:{self.ports[member]}" for member in ids)

    def run(
        self,
        ids: list[str],
        *,
        previous: list[str] | None = None,
        env: dict[str, dict[str, str]] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        """Stop every member, then start ``ids`` with that list (and ``previous``: the list before;
        ``env``: a member's extra environment; ``extra``: every member's extra flags)."""
        for member in self.running:
            self.processes[member].stop()
        for member in ids:
            self.start(member, ids, previous=previous, env=(env or {}).get(member, {}), extra=extra or [])
        self.running = list(ids)

    def start(
        self, member: str, ids: list[str], *, previous: list[str] | None = None, env: dict[str, str], extra: list[str]
    ) -> None:
        process = self.processes[member]
        process.args = ["--member", member, "--members", self.members(ids), *extra]
        if previous:
            process.args += ["--previous-members", self.members(previous)]
        process.env = {**ENV, **env}
        process.start(60, port=self.ports[member])

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()

    def client(self, ids: list[str], retries: int = 30) -> MemoryClient:
        # Tried for up to 2 minutes, as its 30 retries of waits up to 5 s were before the window:
        # a write waits out a move's fence on a loaded machine.
        return MemoryClient("", ADMIN, members=self.members(ids), retries=retries, retry_window=120.0)

    def at(self, member: str) -> MemoryClient:
        return MemoryClient(f"127.0.0.1:{self.ports[member]}", ADMIN, retries=0)


def record(process: ServerProcess, tenant: str) -> dict[str, str | None]:
    """What the tenant's file on that member records (read without its server's help)."""
    keys = (HOLDER_KEY, EPOCH_KEY, MOVE_STEP_KEY, MOVE_PEER_KEY, MOVE_HEAD_KEY, MOVE_RECLAIMED_KEY)
    for _attempt in range(50):
        if not process.tenant_file(tenant).exists():
            return {}
        try:
            with read_file(process.tenant_file(tenant)) as txn:
                return {key: txn.meta(key) for key in keys}
        except apsw.BusyError:  # the server is closing the file (its last connection checkpoints)
            time.sleep(0.05)
    raise AssertionError(f"{tenant}'s file stayed locked")


def head_of(process: ServerProcess, tenant: str) -> str:
    with read_file(process.tenant_file(tenant)) as txn:
        return txn.ledger_head()[1]


def live_copies(deployment: Deployment, members: list[str], tenant: str) -> list[str]:
    """The members whose file of the tenant is a live copy (served, or fenced by a move under
    way): not a move's tombstone, nor its copy not active yet."""
    return [
        m
        for m in members
        if (held := record(deployment.processes[m], tenant))
        and held.get(MOVE_STEP_KEY) not in ("tombstoned", "inactive")
    ]


def listed_by(deployment: Deployment, member: str) -> list[str]:
    """The tenants ``member`` lists as its own part of ListTenants."""
    with deployment.at(member) as client:
        page = client.call(
            client.admin.ListTenants,
            admin_pb2.ListTenantsRequest(page_size=1000),
            retry=True,
            metadata=((ROUTE, member),),
        )
    return list(page.tenants)


def reclaimed(deployment: Deployment, member: str, tenant: str, needles: set[bytes]) -> None:
    """The tombstone of ``tenant`` on ``member`` keeps only what redirects: no byte of its
    memories is left in any file of the member's data directory, and it is not listed."""
    assert record(deployment.processes[member], tenant)[MOVE_RECLAIMED_KEY] == "1"
    assert _traces(deployment.processes[member].data_dir, needles) == []
    assert tenant not in listed_by(deployment, member)


def served_by(deployment: Deployment, member: str, tenant: str) -> bool:
    """Whether ``member`` itself answers a read of ``tenant`` routed to it (no hop: forwarding off)."""
    with deployment.at(member) as client:
        try:
            client.call(
                client.memory.Recall,
                memory_pb2.RecallRequest(tenant=tenant, query="Lisbon"),
                retry=False,
                metadata=((ROUTE, member),),
            )
        except (FailedPreconditionError, UnavailableError):
            return False
    return True


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    deployed = Deployment(tmp_path, 4)
    yield deployed
    deployed.stop()


def tenants_moving(before: list[str], after: list[str], count: int, prefix: str = "t") -> list[str]:
    """``count`` tenant ids whose owner changes from ``before`` to ``after``."""
    found = []
    for i in range(10_000):
        tenant = f"{prefix}-{i}"
        if owner_of(tenant, before) != owner_of(tenant, after):
            found.append(tenant)
            if len(found) == count:
                return found
    raise AssertionError("not enough tenants")


def test_a_move_by_rebalance_keeps_everything_and_redirects(deployment: Deployment) -> None:
    old, new = ["m0", "m1"], ["m0", "m1", "m2"]
    deployment.run(old)
    tenants = tenants_moving(old, new, 3)
    events = {}
    with deployment.client(old) as client:
        for tenant in tenants:
            # A forget by filter before the tenant's first write: nothing to forget, no file made;
            # its retry after the move must answer that, never forget what was written since.
            assert client.forget_memories(tenant, {"topic": "notes"}, request_id=f"{tenant}-forget") == 0
            client.retain(
                tenant,
                f"{tenant} keeps its notes in Lisbon {SECRET}",
                metadata={"topic": "notes"},
                request_id=f"{tenant}-first",
            )
            client.hot_path(tenant, "enable")
            events[tenant] = client.retain(tenant, f"{tenant} ships on Tuesdays", fast=True).event_id
            generation = client.update_workspace(tenant, "w", [RecordChange("put", "k", "v1")], 0)
            assert generation == 1 and events[tenant]
    deployment.run(new, previous=old)
    out = Path(deployment.processes["m0"].data_dir.parent / "rebalance.out")
    with open(out, "w") as written:
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=written) == 0
    text = out.read_text()
    assert "3 of 3 tenants moved" in text, text
    for tenant in tenants:
        source, destination = owner_of(tenant, old), owner_of(tenant, new)
        assert record(deployment.processes[source], tenant)[MOVE_STEP_KEY] == "tombstoned"
        assert record(deployment.processes[destination], tenant)[MOVE_STEP_KEY] == "active"
        assert record(deployment.processes[destination], tenant)[EPOCH_KEY] == "2"
        assert served_by(deployment, destination, tenant) and not served_by(deployment, source, tenant)
    # The tombstones are reclaimed: no byte of the tenants' memories is left on their sources,
    # which list them no more; each keeps the head hash it exported.
    heads = {}
    for tenant in tenants:
        source = owner_of(tenant, old)
        reclaimed(deployment, source, tenant, _windows(SECRET.encode()))
        heads[tenant] = record(deployment.processes[source], tenant)[MOVE_HEAD_KEY]
        assert heads[tenant] == head_of(deployment.processes[owner_of(tenant, new)], tenant)
    # A stale client (the old list) is redirected; the new list goes straight to the owner.
    for ids in (old, new):
        with deployment.client(ids) as client:
            for tenant in tenants:
                report = client.verify_integrity(tenant)
                assert report.valid and report.head_hash == heads[tenant]
                assert client.get_event(tenant, events[tenant]).status == "succeeded"
                assert len(client.recall(tenant, "Lisbon Tuesdays")) == 2
    with deployment.client(old) as client:
        for tenant in tenants:
            # The generation observed before the move lets the agent write after it.
            assert client.update_workspace(tenant, "w", [RecordChange("put", "k", "v2")], 1) == 2
            # The request id still answers: the same result, not a second memory.
            again = client.retain(
                tenant,
                f"{tenant} keeps its notes in Lisbon {SECRET}",
                metadata={"topic": "notes"},
                request_id=f"{tenant}-first",
            )
            assert again.memory_id and len(client.recall(tenant, "Lisbon Tuesdays")) == 2
            assert client.forget_memories(tenant, {"topic": "notes"}, request_id=f"{tenant}-forget") == 0
            assert len(client.recall(tenant, "Lisbon Tuesdays")) == 2
    # A stale proxy (no list, sending to the old owner, or to any member: one whose home for the
    # tenant is still the old owner during the rebalance) is served through the hops to the new
    # owner; a call routed to the old owner is refused NOT_OWNER naming it, never served there.
    for tenant in tenants:
        source, destination = owner_of(tenant, old), owner_of(tenant, new)
        for member in new:
            with deployment.at(member) as proxy:
                assert len(proxy.recall(tenant, "Lisbon Tuesdays")) == 2, (tenant, member)
        with deployment.at(source) as proxy:
            with pytest.raises(FailedPreconditionError) as refused:
                proxy.call(
                    proxy.memory.Recall,
                    memory_pb2.RecallRequest(tenant=tenant, query="Lisbon"),
                    retry=False,
                    metadata=((ROUTE, source),),
                )
            assert refused.value.reason == "NOT_OWNER" and refused.value.metadata["owner"] == destination
    # Each member's backup holds the tenants it serves: every tenant once, none from a tombstone.
    backed_up = []
    for member in new:
        with deployment.at(member) as client:
            backed_up += [p.tenant for p in client.backup() if isinstance(p, TenantBackup)]
    assert sorted(backed_up) == sorted(tenants)
    with deployment.client(new) as client:
        assert client.aggregate_stats().total.memories == 2 * len(tenants)
    # Run again: nothing to do (a completed move's reclaimed tombstone is not listed).
    with open(out, "w") as written:
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=written) == 0
    assert "0 tenants held elsewhere" in out.read_text()
    # A source restarted with an out-of-date list (the old one, without the destination) is asked
    # for a tenant it moved away: its tombstone names a member it does not know, so the call is not
    # forwarded (it failed INTERNAL) but refused UNAVAILABLE naming the destination.
    source, destination = owner_of(tenants[0], old), owner_of(tenants[0], new)
    deployment.processes[source].stop()
    deployment.start(source, old, env={}, extra=[])
    with deployment.at(source) as proxy, pytest.raises(UnavailableError) as stale:
        proxy.recall(tenants[0], "Lisbon")
    assert stale.value.reason == "OWNER_UNAVAILABLE" and stale.value.metadata["owner"] == destination
    assert "out of date" in str(stale.value)
    assert "Traceback" not in deployment.processes[source].stderr_path.read_text(errors="replace")


def texts_of(client: MemoryClient, tenant: str) -> list[str]:
    texts, token = [], ""
    while True:
        page = client.list_memories(tenant, page_size=500, page_token=token)
        texts += [m.text for m in page.memories]
        if not page.next_page_token:
            return texts
        token = page.next_page_token


STEPS = ["fenced", "flushed", "exported", "imported", "tombstoned", "activated"]


@pytest.mark.parametrize("step", STEPS)
def test_killing_the_source_the_destination_and_the_rebalancer_at_each_step(
    deployment: Deployment, step: str, tmp_path: Path
) -> None:
    old, new = ["m0", "m1"], ["m0", "m1", "m2"]
    tenant = next(t for t in (f"k-{i}" for i in range(1000)) if owner_of(t, new) == "m2")
    source, destination = owner_of(tenant, old), "m2"
    deployment.run(old)
    acknowledged = []
    with deployment.client(old) as client:
        client.hot_path(tenant, "enable")
        for i in range(6):
            text = f"note {i} of {tenant}: the depot in Porto opens at {i} o'clock"
            client.retain(tenant, text, fast=i % 2 == 1)
            acknowledged.append(text)
        client.update_workspace(tenant, "w", [RecordChange("put", "k", "v1")], 0)
    # Without the hop, so that a member answering a call routed to it is the member serving it.
    seam = {source: {"MNEMOSYNE_TEST_MOVE_HOLD_AFTER": step}}
    deployment.run(new, previous=old, env=seam, extra=["--no-forwarding"])
    env = {**os.environ, "MNEMOSYNE_TOKEN": ADMIN}
    command = [sys.executable, "-m", "mnemosyne.cli", "rebalance", "--from", deployment.members(old), "--to"]
    rebalancer = subprocess.Popen([*command, deployment.members(new)], env=env, stdout=subprocess.DEVNULL)
    try:
        if step == "activated":
            wait_until(lambda: record(deployment.processes[destination], tenant).get(MOVE_STEP_KEY) == "active", 60)
        else:
            wait_until(lambda: record(deployment.processes[source], tenant).get(MOVE_STEP_KEY) == step, 60)
        time.sleep(0.2)
    finally:
        rebalancer.send_signal(signal.SIGKILL)
        rebalancer.wait(10)
    for member in (destination, source):  # each killed, and started again without the seam
        process = deployment.processes[member]
        process.kill()
        process.env = dict(ENV)
        process.start(60, port=deployment.ports[member])
    fenced = step in ("fenced", "flushed", "exported", "imported")
    # Killed after the tombstone and before the activation, the move finishes itself: the first
    # call reaching the destination's copy finds the source's tombstone at its epoch and
    # activates it (no rebalance run meanwhile).
    if step == "tombstoned":
        assert record(deployment.processes[destination], tenant)[MOVE_STEP_KEY] == "inactive"
    serving = [m for m in (source, destination) if served_by(deployment, m, tenant)]
    assert serving == ([source] if fenced else [destination])
    if not fenced:  # served there, reads and writes, by a client with either list
        for ids in (old, new):
            with deployment.client(ids) as client:
                text = f"after the restarts, {tenant} is served by the new list and the old ({ids[-1]})"
                client.retain(tenant, text)
                acknowledged.append(text)
                assert text in texts_of(client, tenant)
        assert record(deployment.processes[destination], tenant)[MOVE_STEP_KEY] == "active"
    if fenced:  # a fenced source stays fenced after its restart: reads served, writes refused
        with deployment.at(source) as client:
            with pytest.raises(UnavailableError) as refused:
                client.call(
                    client.memory.Retain,
                    memory_pb2.RetainRequest(tenant=tenant, text="late", request_id=uuid.uuid4().hex),
                    retry=False,
                    metadata=((ROUTE, source),),
                )
            assert refused.value.reason == "TENANT_MOVING"
        # A client with the new list is refused too, and its destination makes no tenant of it.
        with deployment.client(new, retries=0) as client:
            with pytest.raises(UnavailableError) as refused:
                client.retain(tenant, "late, through the new list", request_id=uuid.uuid4().hex)
            assert refused.value.reason == "TENANT_MOVING"
        assert record(deployment.processes[destination], tenant).get(MOVE_STEP_KEY) in (None, "inactive")
        assert live_copies(deployment, new, tenant) == [source]
    # Running rebalance again finishes the move (or finds it done): one member serves it, with
    # everything it had.
    with open(tmp_path / "again.out", "w") as out:
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=out) == 0
    assert "1 of 1 tenants moved" in (tmp_path / "again.out").read_text()
    assert [m for m in (source, destination) if served_by(deployment, m, tenant)] == [destination]
    assert record(deployment.processes[source], tenant)[MOVE_STEP_KEY] == "tombstoned"
    reclaimed(deployment, source, tenant, _windows(b"the depot in Porto opens at"))
    with deployment.client(new) as client:
        assert sorted(texts_of(client, tenant)) == sorted(acknowledged)
        assert client.verify_integrity(tenant).valid
        assert client.update_workspace(tenant, "w", [RecordChange("put", "k", "v2")], 1) == 2
    # Kills, restarts and a copy not active yet are states a move expects: logged as such (the
    # destination's hot path, restarted with the copy in its recovery index, waits once, quietly),
    # never as faults with a traceback.
    for member in (source, destination):
        log = deployment.processes[member].stderr_path.read_text(errors="replace")
        assert "Traceback" not in log, member
        assert log.count(f"tenant {tenant}: its hot path waits") <= 1, member


@pytest.mark.parametrize("point", ["reclaim_linked", "reclaim_replaced"])
def test_a_kill_while_the_tombstone_is_reclaimed_leaves_a_tombstone_that_redirects(
    deployment: Deployment, point: str, tmp_path: Path
) -> None:
    old, new = ["m0", "m1"], ["m0", "m1", "m2"]
    tenant = tenants_moving(old, new, 1, prefix="r")[0]
    source, destination = owner_of(tenant, old), owner_of(tenant, new)
    deployment.run(old)
    with deployment.client(old) as client:
        client.retain(tenant, f"the vault code is {SECRET}")
    deployment.run(
        new, previous=old, env={source: {"MNEMOSYNE_TEST_FAULTS": f"kill@{point}"}}, extra=["--no-forwarding"]
    )
    with open(tmp_path / "first.out", "w") as out:  # the source dies in the middle of the reclaim
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=out) == 1
    process = deployment.processes[source]
    wait_until(lambda: process.process is not None and process.process.poll() is not None, 30)
    needles = _windows(SECRET.encode())
    assert _traces(process.data_dir, needles)  # the old data is still there: in the file, or beside it
    # Killed before the replacement, the old tombstone (with its data) is left; after it, the
    # reclaimed one, and the old data is overwritten at the start. Either way the source
    # redirects, the destination serves, nothing is lost.
    process.env = dict(ENV)
    process.start(60, port=deployment.ports[source])
    assert bool(_traces(process.data_dir, needles)) == (point == "reclaim_linked")
    assert record(process, tenant)[MOVE_STEP_KEY] == "tombstoned"
    assert [m for m in (source, destination) if served_by(deployment, m, tenant)] == [destination]
    with deployment.client(old) as client:
        assert texts_of(client, tenant) == [f"the vault code is {SECRET}"]
    with open(tmp_path / "again.out", "w") as out:
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=out) == 0
    reclaimed(deployment, source, tenant, needles)
    assert served_by(deployment, destination, tenant) and not served_by(deployment, source, tenant)


def test_the_placements_a_member_remembers_are_bounded(tmp_path: Path) -> None:
    """The placement of each tenant a member has a file of is remembered (read once, not on
    every call), the most recently asked ones only: a forgotten one is read from its file again."""
    membership = Membership.parse("m0", "m0=127.0.0.1:1,m1=127.0.0.1:2")
    pool = TenantPool(tmp_path, max_open=4, synchronous="NORMAL", membership=membership, placements_remembered=3)
    try:
        tenants = [t for t in (f"p-{i}" for i in range(200)) if membership.owner(t) == "m0"][:8]
        for tenant in tenants:
            with pool.tenant(tenant, create=True):
                pass
        moved, arriving = tenants[0], tenants[1]
        pool.record_move(moved, timeout=5, **{MOVE_STEP_KEY: "tombstoned", MOVE_PEER_KEY: "m1", EPOCH_KEY: "2"})
        pool.record_move(arriving, timeout=5, **{MOVE_STEP_KEY: "inactive", MOVE_PEER_KEY: "m1", EPOCH_KEY: "3"})
        for _ in range(2):  # the second time round, every one of them was forgotten and is read again
            assert pool.placement(moved) == Placement("m1", moved_epoch=2)
            assert pool.placement(arriving) == Placement("m0", pending_from="m1", pending_epoch=3)
            for tenant in tenants[2:]:
                assert pool.placement(tenant) == Placement("m0")
                assert pool.placements_remembered <= 3
        assert pool.placement("p-none") == Placement(membership.home("p-none"))  # no file: not remembered
        assert pool.placements_remembered == 3
    finally:
        pool.close()


def _creating(deployment: Deployment, ids: list[str], stop: threading.Event, acked: list[str]) -> None:
    """New tenants, one retain each, through a client with the list ``ids``, each repeated with its
    request id while refused UNAVAILABLE (as a client's retries would), until ``stop``."""
    with deployment.client(ids, retries=0) as client:
        n = 0
        while not stop.is_set():
            n += 1
            tenant = f"fresh-{n}"
            while not stop.is_set():
                try:
                    client.retain(tenant, f"{tenant} keeps its boat at pier {n}", request_id=f"{tenant}-r")
                except UnavailableError:
                    time.sleep(0.05)
                    continue
                acked.append(tenant)
                break


def test_a_tenant_created_while_a_member_is_drained_is_kept(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scaling down: from the rebalance's first step, no member creates a tenant another member owns
    by the new list (the leaving member refuses them MEMBERS_CHANGING, durably), so a tenant created
    while it runs or after it, until the members restart, is created at its new owner then; every
    acknowledged one is served once the members run the new list."""
    four, three = ["m0", "m1", "m2", "m3"], ["m0", "m1", "m2"]
    deployment.run(four)
    leaving = [t for t in (f"l-{i}" for i in range(200)) if owner_of(t, four) == "m3"]
    with deployment.client(four) as client:
        client.retain(leaving[0], "an old tenant of the leaving member: it moves")
    stop, acked = threading.Event(), list[str]()
    creator = threading.Thread(target=_creating, args=(deployment, four, stop, acked), daemon=True)
    creator.start()
    time.sleep(0.5)
    with open(deployment.processes["m0"].data_dir.parent / "rebalance.out", "w") as out:
        assert rebalance(deployment.members(four), deployment.members(three), token=ADMIN, out=out) == 0
    time.sleep(0.5)  # creations after the drain, while the members still run the list of four
    stop.set()
    creator.join(30)
    assert acked and any(owner_of(t, four) == "m3" for t in acked)
    waits: list[float] = []  # the client's waits between its retries: the server's delay (1 s)
    monkeypatch.setattr("mnemosyne.client.memory_client.time.sleep", waits.append)
    with deployment.client(four, retries=2) as client:
        with pytest.raises(UnavailableError) as refused:
            client.retain(leaving[1], "a new tenant the leaving member would own")
    monkeypatch.undo()
    assert waits == [1.0, 1.0]
    assert refused.value.reason == "MEMBERS_CHANGING" and refused.value.metadata["owner"] == owner_of(leaving[1], three)
    assert not deployment.processes["m3"].tenant_file(leaving[1]).exists()
    with deployment.client(four, retries=0) as client:  # an import makes no tenant there either
        manifest, *chunks = client.export_tenant(acked[0])
        assert isinstance(manifest, TenantBackup)
        with pytest.raises(UnavailableError) as refused:
            client.import_tenant(manifest, chunks, tenant=leaving[3])  # type: ignore[arg-type]  # the chunks follow the manifest
    assert refused.value.reason == "MEMBERS_CHANGING"
    assert not deployment.processes["m3"].tenant_file(leaving[3]).exists()
    # Durable: the leaving member restarted with the old list still refuses.
    deployment.processes["m3"].stop()
    deployment.start("m3", four, env={}, extra=[])
    with deployment.client(four, retries=0) as client, pytest.raises(UnavailableError):
        client.retain(leaving[2], "another new tenant the leaving member would own")
    deployment.run(three)
    with deployment.client(three) as client:
        for tenant in [*acked, leaving[0]]:
            assert len(client.list_memories(tenant).memories) == 1, tenant
        client.retain(leaving[1], "created at its new owner")
    assert deployment.processes[owner_of(leaving[1], three)].tenant_file(leaving[1]).exists()


def test_a_completed_scale_up_creates_new_tenants_at_their_new_owners_for_good(deployment: Deployment) -> None:
    """Scaling up: members restarted with the new list and the previous one create a tenant with no
    file at its owner by the previous list; the rebalance that moved everything completes the
    change, so that a tenant created after it is created at its owner by the new list, also after
    a restart that still gives the previous list — never left at a member that is not its owner."""
    three, four = ["m0", "m1", "m2"], ["m0", "m1", "m2", "m3"]
    deployment.run(three)
    early, late, later = tenants_moving(three, four, 3, prefix="up")
    deployment.run(four, previous=three)
    with deployment.client(four) as client:
        client.retain(early, "created before the rebalance: at its previous owner, then moved")
    assert deployment.processes[owner_of(early, three)].tenant_file(early).exists()
    # A run to a list with a member that does not answer (a slip of the hand) begins the change on
    # the others and cannot complete it: it says what that holds back and how to give it up.
    slip, said = f"{deployment.members(four)},m9=127.0.0.1:{_free_port()}", io.StringIO()
    assert rebalance(deployment.members(three), slip, token=ADMIN, out=io.StringIO(), err=said) == 1
    lines = said.getvalue().splitlines()
    assert lines[-1].endswith("run it again to finish"), lines
    assert lines[-2].startswith("rebalance: m0, m1, m2, m3 began the change: until a run completes it"), lines
    assert "run mnemosyne rebalance with the list the members run as both --from and --to" in lines[-2], lines
    out = deployment.processes["m0"].data_dir.parent / "rebalance.out"
    with open(out, "w") as written:
        assert rebalance(deployment.members(three), deployment.members(four), token=ADMIN, out=written) == 0
    for tenant, restart in ((late, False), (later, True)):
        if restart:
            deployment.run(four, previous=three)  # the chart keeps the previous list until its next upgrade
        with deployment.client(three) as stale:  # a client with the old list: routed to the previous owner
            stale.retain(tenant, "created after the rebalance")
        assert deployment.processes[owner_of(tenant, four)].tenant_file(tenant).exists()
        assert not deployment.processes[owner_of(tenant, three)].tenant_file(tenant).exists()
    assert "previous member list done with on m0, m1, m2, m3" in out.read_text()
    with deployment.client(four) as client:
        for tenant in (early, late, later):
            assert len(client.list_memories(tenant).memories) == 1, tenant


def test_a_change_of_the_member_list_waits_for_the_creations_under_way(tmp_path: Path) -> None:
    """The begin of a change answers only once the creations of tenants under way have ended (so
    the listing after it sees them); from it, a tenant another member owns by the new list is
    refused and no file made; the mark survives a restart; completing a change not begun is
    refused, and a damaged mark stops the start with a line that says what to do."""
    membership = Membership.parse("m0", "m0=127.0.0.1:1,m1=127.0.0.1:2,m2=127.0.0.1:3")
    two = ("m0", "m1", "m3")  # m2 leaves, m3 comes: some of m0's tenants go to m3
    mine = [t for t in (f"c-{i}" for i in range(400)) if membership.owner(t) == "m0"]
    kept = next(t for t in mine if owner_of(t, two) == "m0")
    going, refused = [t for t in mine if owner_of(t, two) != "m0"][:2]

    def opened() -> TenantPool:
        return TenantPool(tmp_path, max_open=4, synchronous="NORMAL", membership=membership)

    pool, inside, release, begun = opened(), threading.Event(), threading.Event(), []
    ownership = pool.ownership
    assert ownership is not None

    def create() -> None:
        with pool.tenant(going, create=True):
            inside.set()
            release.wait(10)

    try:
        creation = threading.Thread(target=create)
        creation.start()
        assert inside.wait(10)
        beginning = threading.Thread(target=lambda: begun.append(ownership.begin_change(two)))
        beginning.start()
        time.sleep(0.3)
        assert not begun  # it waits for the creation under way
        release.set()
        creation.join(10)
        beginning.join(10)
        assert begun == [1] and going in pool.tenant_ids()  # in place before the begin answered
        with pytest.raises(Unavailable) as refusal, pool.tenant(refused, create=True):
            pass
        assert refusal.value.reason == "MEMBERS_CHANGING" and refusal.value.metadata == {"owner": "m3"}
        with pool.tenant(kept, create=True) as store:
            assert store is not None  # its owner stays this member
        with pytest.raises(FailedPrecondition) as not_begun:
            ownership.complete_change(("m0", "m2"))
        assert not_begun.value.reason == "MEMBER_CHANGE_NOT_BEGUN"
        assert ownership.complete_change(two) is False  # this member runs another list: it keeps refusing
    finally:
        pool.close()
    pool = opened()
    try:
        with pytest.raises(Unavailable), pool.tenant(refused, create=True):
            pass
        assert sorted(pool.tenant_ids()) == sorted([going, kept])
    finally:
        pool.close()
    (tmp_path / "tenants" / "member-change.json").write_text('{"to": "m0"}')
    with pytest.raises(DataLoss) as damaged:
        opened()
    # What to do, which the member refusing to start leaves to a person: a rebalance cannot reach it.
    assert damaged.value.reason == "MEMBER_CHANGE_DAMAGED"
    assert "remove it, start the member and run mnemosyne rebalance again" in str(damaged.value)


class Writers:
    """Writers of every kind, each call repeated with its request id until acknowledged (so a
    refusal while a tenant moves, or a redirect, is taken as a client would): sync and fast
    retains, and workspace compare-and-set updates at the generation each writer observed."""

    def __init__(self, deployment: Deployment, lists: list[list[str] | str], tenants: list[str]) -> None:
        self.deployment, self.lists, self.tenants = deployment, lists, tenants
        self.acked: list[tuple[str, str, str, int]] = []  # tenant, text, request id, memory id (0: fast)
        self.events: list[tuple[str, int]] = []
        self.generations: dict[tuple[str, str], int] = {}  # (tenant, workspace) -> generation acknowledged
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def _repeat(self, attempt: Callable[[], T]) -> T:
        deadline = time.monotonic() + 60
        while True:
            try:
                return attempt()
            except MnemosyneClientError as exc:
                if time.monotonic() > deadline:
                    raise
                if exc.code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION):
                    raise
                time.sleep(0.1)

    def _write(self, number: int, ids: list[str] | str) -> None:
        """Writer ``number`` through a client with the member list ``ids`` (or to the address ``ids``)."""
        workspace = f"agent-{number}"
        try:
            with (
                MemoryClient(ids, ADMIN, retries=3) if isinstance(ids, str) else self.deployment.client(ids, retries=3)
            ) as client:
                n = 0
                while not self._stop.is_set():
                    tenant = self.tenants[n % len(self.tenants)]
                    n += 1
                    kind = n % 3
                    request_id = uuid.uuid4().hex
                    if kind in (0, 1):
                        text = f"writer {number} note {request_id[:10]} for {tenant}: the ferry leaves pier {n}"
                        result = self._repeat(
                            lambda: client.retain(tenant, text, request_id=request_id, fast=kind == 1)
                        )
                        with self._lock:
                            self.acked.append((tenant, text, request_id, result.memory_id))
                            if kind == 1 and result.event_id:
                                self.events.append((tenant, result.event_id))
                    else:
                        observed = self.generations.get((tenant, workspace), 0)
                        change = [RecordChange("put", f"k{n}", f"v{n}")]
                        generation = self._repeat(
                            lambda: client.update_workspace(tenant, workspace, change, observed, request_id)
                        )
                        assert generation == observed + 1, (tenant, workspace, observed, generation)
                        with self._lock:
                            self.generations[(tenant, workspace)] = generation
        except BaseException as exc:  # noqa: BLE001  # reported by stop()
            self.failures.append(repr(exc))

    def start(self) -> None:
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._write, args=(i, ids), daemon=True) for i, ids in enumerate(self.lists)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)
        assert not self.failures, self.failures


def test_rebalance_from_three_to_four_members_and_back_under_a_write_load(
    deployment: Deployment, tmp_path: Path
) -> None:
    three, four = ["m0", "m1", "m2"], ["m0", "m1", "m2", "m3"]
    deployment.run(three)
    tenants = [f"w-{i}" for i in range(16)]
    with deployment.client(three) as client:
        for tenant in tenants:
            client.hot_path(tenant, "enable")
    # Scale up: every member restarted with the new list (and the old one), then rebalance.
    deployment.run(four, previous=three)
    writers = Writers(deployment, [four, four, three], tenants)  # the third with a stale list
    writers.start()
    time.sleep(1.0)
    log = tmp_path / "rebalance.out"
    with open(log, "w") as out:
        assert rebalance(deployment.members(three), deployment.members(four), token=ADMIN, out=out, parallel=3) == 0
    up = [t for t in tenants if owner_of(t, three) != owner_of(t, four)]
    assert up and f"{len(up)} of {len(up)} tenants moved" in log.read_text(), log.read_text()
    time.sleep(1.0)
    writers.stop()
    # Scale down: the member that goes is drained first (the members still run the list of four).
    writers.lists = [four, three, four]
    writers.start()
    time.sleep(1.0)
    with open(log, "w") as out:
        assert rebalance(deployment.members(four), deployment.members(three), token=ADMIN, out=out, parallel=3) == 0
    time.sleep(1.0)
    writers.stop()
    deployment.run(three)
    with deployment.client(three) as client:
        acknowledged_once(client, writers)
        for tenant, text, request_id, memory_id in writers.acked[:: max(1, len(writers.acked) // 20)]:
            again = client.retain(tenant, text, request_id=request_id)
            assert memory_id == 0 or again.memory_id == memory_id  # the request id still answers
        for (tenant, workspace), generation in writers.generations.items():
            # The generation an agent observed before the moves lets it write after them.
            assert (
                client.update_workspace(tenant, workspace, [RecordChange("put", "z", "z")], generation)
                == generation + 1
            )
    for tenant in tenants:
        owner = owner_of(tenant, three)
        assert record(deployment.processes[owner], tenant).get(HOLDER_KEY) == owner
    assert len(writers.acked) > 50 and writers.generations


def acknowledged_once(client: MemoryClient, writers: Writers) -> None:
    """Every write the writers had acknowledged is there, once; chains valid; events answer."""
    for tenant in writers.tenants:
        client.hot_path(tenant, "flush", 30)
        texts = texts_of(client, tenant)
        mine = [text for t, text, _, _ in writers.acked if t == tenant]
        assert sorted(text for text in texts if text in set(mine)) == sorted(mine), tenant  # once each
        assert client.verify_integrity(tenant).valid, tenant
    for tenant, event_id in writers.events:
        assert client.get_event(tenant, event_id).status == "succeeded"


def test_a_stale_proxy_during_and_after_a_move_is_forwarded_never_served_by_the_old_owner(
    deployment: Deployment, tmp_path: Path
) -> None:
    old, new = ["m0", "m1"], ["m0", "m1", "m2"]
    deployment.run(old)
    tenants = tenants_moving(old, new, 4, prefix="h")
    with deployment.client(old) as client:
        for tenant in tenants:
            client.hot_path(tenant, "enable")
    deployment.run(new, previous=old)
    # HAProxy configured before the move: it knows the old members only, routes at random.
    with haproxy(tmp_path, {m: deployment.ports[m] for m in old}) as (port, _http):
        proxied = f"127.0.0.1:{port}"
        writers = Writers(deployment, [proxied, proxied], tenants)
        writers.start()
        time.sleep(1.0)
        with open(tmp_path / "rebalance.out", "w") as out:
            assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=out) == 0
        time.sleep(1.0)
        wait_until(lambda: len(writers.acked) > 20, 60)  # a loaded machine wrote 12 in those seconds
        writers.stop()
        with MemoryClient(proxied, ADMIN) as client:
            acknowledged_once(client, writers)
    # What was acknowledged is on the destination: the old owner, tombstoned (and reclaimed: no
    # data left), served none of it after its step 5.
    with deployment.client(new) as client:
        acknowledged_once(client, writers)
    for tenant in tenants:
        source, destination = owner_of(tenant, old), owner_of(tenant, new)
        assert record(deployment.processes[destination], tenant)[MOVE_STEP_KEY] == "active"
        assert record(deployment.processes[source], tenant)[MOVE_RECLAIMED_KEY] == "1"
        assert served_by(deployment, destination, tenant) and not served_by(deployment, source, tenant)
    assert len(writers.acked) > 20


# -- a move interrupted in its import: one live copy, never a tenant made anew ---------------

TWO, THREE = ["m0", "m1"], ["m0", "m1", "m2"]
INSTALL_SEAMS = ["import_received", "install_begun", "install_staged", "install_committed"]
# When the move is interrupted: its client (the rebalancer) leaves as soon as the destination
# received every byte (its install about to begin, or begun: "ended"), or while the destination
# holds at a seam of its import (engine/tenant_import.py, store/pool.py ``install``); or the
# destination is SIGKILLed there.
BACK = ["ended", *INSTALL_SEAMS, *(f"kill@{seam}" for seam in INSTALL_SEAMS[2:])]
# A member's hot path comes back to an idle tenant when its finished events expire: soon here.
RETENTION_SECONDS = 2.0
RETENTION = ["--event-retention-seconds", str(RETENTION_SECONDS)]


class BackAndForth:
    """Members m0..m2 running the list of three with the list of two as the previous one (a
    change of members under way, as during the 3 -> 4 -> 3 test), each with the install's seams
    armed by files. Each case's tenant is created on its owner by the list of two (its home), moved
    to m2 (its owner by three; the first owner keeps a reclaimed tombstone), then moved back, and
    that move is interrupted."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.deployment = Deployment(root, 3)
        self.holds = {(m, seam): root / f"hold-{m}-{seam}" for m in THREE for seam in INSTALL_SEAMS}
        self.env = {
            m: {
                "MNEMOSYNE_TEST_FAULTS": ",".join(f"hold@{s}={self.holds[(m, s)]}" for s in INSTALL_SEAMS),
                "MNEMOSYNE_LOG_LEVEL": "DEBUG",  # a call its client left is logged (CANCELLED)
            }
            for m in THREE
        }
        self.deployment.run(THREE, previous=TWO, env=self.env, extra=RETENTION)

    def restart(self, member: str) -> None:
        self.deployment.start(member, THREE, previous=TWO, env=self.env[member], extra=RETENTION)

    def log(self, member: str) -> str:
        return self.deployment.processes[member].stderr_path.read_text(errors="replace")

    def settled(self, member: str) -> bool:
        data = self.deployment.processes[member].data_dir
        return not any((data / ".backup-scratch").glob("*")) and not any((data / "tenants").glob(".install-*"))


@pytest.fixture(scope="module")
def back_and_forth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackAndForth]:
    made = BackAndForth(tmp_path_factory.mktemp("back-and-forth"))
    yield made
    made.deployment.stop()


def _moved_there_and_back(made: BackAndForth, number: int) -> tuple[str, str, list[str]]:
    """A tenant created on its owner by the list of two, with sync and fast writes, moved to m2
    (complete): (tenant, its first owner, its memories)."""
    deployment = made.deployment
    tenant = next(
        t
        for t in (f"back-{number}-{i}" for i in range(1000))
        if owner_of(t, TWO) != "m2" and owner_of(t, THREE) == "m2"
    )
    first = owner_of(tenant, TWO)
    texts = [f"note {i} of {tenant}: the warehouse in Gdansk opens at {i}" for i in range(40)]
    with deployment.client(TWO) as client:
        client.retain_batch(tenant, texts[:-1])
        client.hot_path(tenant, "enable")
        client.retain(tenant, texts[-1], fast=True)
        client.hot_path(tenant, "flush", 30)
    assert record(deployment.processes[first], tenant)[HOLDER_KEY] == first
    with MemoryClient(deployment.processes[first].target, ADMIN) as client:
        assert client.move_tenant(tenant, "m2", member=first).steps[-1] == "reclaimed"
    return tenant, first, texts


def _interrupt_the_move_back(made: BackAndForth, tenant: str, first: str, moment: str) -> None:
    deployment = made.deployment
    seam = moment.removeprefix("kill@")
    hold = made.holds.get((first, seam))
    if hold is not None:
        hold.touch()
    held = made.log(first).count(f"held at {seam} ")
    left = made.log(first).count("ImportTenant CANCELLED")
    scratch = deployment.processes[first].data_dir / ".backup-scratch"
    with MemoryClient(deployment.processes["m2"].target, ADMIN) as client:
        move = client.admin.MoveTenant.future(
            admin_pb2.MoveTenantRequest(tenant=tenant, destination=first),
            timeout=120,
            metadata=(*client.call_metadata, (ROUTE, "m2")),
        )
        try:
            if hold is not None:
                wait_until(lambda: made.log(first).count(f"held at {seam} ") > held, 60)
            else:  # every byte received: the inbox is the export's last file (or the move ended)
                wait_until(lambda: any(scratch.glob("*/inbox")) or move.done(), 60)
            if moment.startswith("kill@"):
                deployment.processes[first].kill()
            else:
                move.cancel()
                if hold is not None:  # the destination saw the move leave while its import is held there
                    wait_until(lambda: made.log(first).count("ImportTenant CANCELLED") > left, 30)
        finally:
            if hold is not None:
                hold.unlink()
    if moment.startswith("kill@"):
        made.restart(first)
    wait_until(lambda: made.settled(first), 60)


@pytest.mark.parametrize("moment", BACK)
def test_a_move_interrupted_in_its_import_leaves_one_live_copy_and_never_a_new_tenant(
    back_and_forth: BackAndForth, moment: str, tmp_path: Path
) -> None:
    made, deployment = back_and_forth, back_and_forth.deployment
    tenant, first, texts = _moved_there_and_back(made, BACK.index(moment))
    _interrupt_the_move_back(made, tenant, first, moment)
    # The destination holds the tombstone of the first move, or the copy of this one (inactive),
    # or, when the move ended before its client could leave, the tenant, active: never nothing.
    step = record(deployment.processes[first], tenant).get(MOVE_STEP_KEY)
    assert step in ("tombstoned", "inactive") or (moment == "ended" and step == "active"), step
    if step != "active":  # the source is fenced: the one live copy
        assert live_copies(deployment, THREE, tenant) == ["m2"]
        # A client with the new list (whose owner is the destination, its home too) cannot write:
        # the source is fenced, the destination serves nothing of it; no tenant is made anew there.
        with deployment.client(TWO, retries=0) as client:
            with pytest.raises(UnavailableError) as refused:
                client.retain(tenant, f"written to {tenant} while its move is stopped", request_id=uuid.uuid4().hex)
            assert refused.value.reason == "TENANT_MOVING"
        assert record(deployment.processes[first], tenant).get(MOVE_STEP_KEY) == step
    # Running rebalance again finishes the move: one member serves the tenant, with everything.
    with open(tmp_path / "rebalance.out", "w") as out:
        assert rebalance(deployment.members(THREE), deployment.members(TWO), token=ADMIN, out=out) == 0
    assert live_copies(deployment, THREE, tenant) == [first]
    with deployment.client(TWO) as client:
        assert sorted(texts_of(client, tenant)) == sorted(texts)
        assert client.verify_integrity(tenant).valid
        client.retain(tenant, f"written to {tenant} after its move")
    for member in THREE:  # the states a move expects are logged as such, never as a fault
        assert "Traceback" not in made.log(member), member


def test_the_members_of_a_move_log_its_states_once_and_never_as_faults(back_and_forth: BackAndForth) -> None:
    """The old member's hot path comes back to a tenant that moved away (its finished events
    expire), the new member's meets the copy not active yet (its import names it for recovery):
    states a move expects, not faults: no traceback, and no state logged again and again (a fault
    would be retried 0.5, 1, 2... s later, each time with its traceback)."""
    made = back_and_forth
    tenant, first, _texts = _moved_there_and_back(made, 100)
    time.sleep(RETENTION_SECONDS + 3.5)  # past the expiry and three retries of a fault
    for member in (first, "m2"):
        log = made.log(member)
        assert "Traceback" not in log, member
        lines = [
            line.split(" mnemosyne.", 1)[1].split(" request_id=")[0] for line in log.splitlines() if tenant in line
        ]
        hot_path = [line for line in lines if line.startswith("hot_path")]
        assert len(hot_path) == len(set(hot_path)), hot_path  # each state once
