"""Scale out, part 2 (docs/scale-out.md, "Moving tenants"): tenants moved between members when
the member list changes, losing nothing at any step.

Real server processes on loopback whose member list changes by a restart (as a Kubernetes
upgrade does), the real Python client, `mnemosyne rebalance` as a child process where it is
killed, and SIGKILL of the source, the destination and the rebalancer at each step of a move
(the MNEMOSYNE_TEST_MOVE_HOLD_AFTER seam holds the move there).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.client.errors import FailedPreconditionError, UnavailableError
from mnemosyne.client.types import RecordChange
from mnemosyne.rebalance import rebalance
from mnemosyne.server_process import ServerProcess, _free_port
from mnemosyne.store.membership import EPOCH_KEY, HOLDER_KEY, MOVE_PEER_KEY, MOVE_STEP_KEY, owner_of
from mnemosyne.store.tenant_store import read_file
from mnemosyne.v1 import memory_pb2
from tests.support import tokens_json, wait_until

ADMIN = "admin-token"
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
        self, ids: list[str], *, previous: list[str] | None = None, env: dict[str, dict[str, str]] | None = None
    ) -> None:
        """Stop every member, then start ``ids`` with that list (and ``previous``: the list before)."""
        for member in self.running:
            self.processes[member].stop()
        for member in ids:
            self.start(member, ids, previous=previous, env=(env or {}).get(member, {}))
        self.running = list(ids)

    def start(self, member: str, ids: list[str], *, previous: list[str] | None = None, env: dict[str, str]) -> None:
        process = self.processes[member]
        process.args = ["--member", member, "--members", self.members(ids)]
        if previous:
            process.args += ["--previous-members", self.members(previous)]
        process.env = {**ENV, **env}
        process.start(60, port=self.ports[member])

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()

    def client(self, ids: list[str], retries: int = 30) -> MemoryClient:
        return MemoryClient("", ADMIN, members=self.members(ids), retries=retries)

    def at(self, member: str) -> MemoryClient:
        return MemoryClient(f"127.0.0.1:{self.ports[member]}", ADMIN, retries=0)


def record(process: ServerProcess, tenant: str) -> dict[str, str | None]:
    """What the tenant's file on that member records (read without its server's help)."""
    if not process.tenant_file(tenant).exists():
        return {}
    with read_file(process.tenant_file(tenant)) as txn:
        return {key: txn.meta(key) for key in (HOLDER_KEY, EPOCH_KEY, MOVE_STEP_KEY, MOVE_PEER_KEY)}


def head_of(process: ServerProcess, tenant: str) -> str:
    with read_file(process.tenant_file(tenant)) as txn:
        return txn.ledger_head()[1]


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
            client.retain(tenant, f"{tenant} keeps its notes in Lisbon", request_id=f"{tenant}-first")
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
    heads = {t: head_of(deployment.processes[owner_of(t, old)], t) for t in tenants}  # the tombstone's chain
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
            again = client.retain(tenant, f"{tenant} keeps its notes in Lisbon", request_id=f"{tenant}-first")
            assert again.memory_id and len(client.recall(tenant, "Lisbon Tuesdays")) == 2
    # Run again: nothing to do but to find each move done.
    with open(out, "w") as written:
        assert rebalance(deployment.members(old), deployment.members(new), token=ADMIN, out=written) == 0
    assert "moved already" in out.read_text()
