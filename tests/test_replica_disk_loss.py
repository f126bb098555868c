"""Deleting a member's data directory loses nothing a REPLICATED wait acknowledged
(docs/replication.md#what-holds): writers on 20 tenants — synchronous writes, fast writes (the hot
path's inbox and log, replicated as two files) and workspace compare-and-set — each acknowledged
by a Flush at REPLICATED, the member SIGKILLed mid-run, its directory deleted, a new member started
on an empty one with the same bucket."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.client.types import RecordChange, TenantBackup
from mnemosyne.v1 import memory_pb2
from tests.replica_support import REPLICATED, flush_replicated, replica_env
from tests.support import gauge, threads_at, wait_until

LEVEL = REPLICATED
TENANTS = 20
RUN_SECONDS = 4.0  # at least this long, and until ENOUGH writes were acknowledged
ENOUGH = 40
RUN_DEADLINE_SECONDS = 120.0  # a loaded machine takes seconds for a tenant's first replication


@dataclass
class Acknowledged:
    """What the writers saw acknowledged at REPLICATED, per tenant."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    sent: dict[str, list[str]] = field(default_factory=dict)  # every text sent, acknowledged or not
    generation: dict[str, int] = field(default_factory=dict)  # the workspace's last acknowledged
    failures: list[str] = field(default_factory=list)  # errors seen before the member was killed
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return sum(len(t) for t in self.texts.values())


def _writer(
    target: str, tenants: list[str], fast: set[str], acked: Acknowledged, stop: threading.Event, killed: threading.Event
) -> None:
    rng = random.Random(tenants[0])
    with MemoryClient(target, retries=0, session_consistency=False) as client:
        n = 0
        while not stop.is_set():
            tenant = rng.choice(tenants)
            n += 1
            text = f"{tenant} write {n} of {threading.get_ident() % 10_000}: otters hold hands asleep"
            try:
                with acked.lock:
                    acked.sent.setdefault(tenant, []).append(text)
                if n % 5 == 0:
                    generation = acked.generation.get(tenant, 0)
                    new = client.update_workspace(tenant, "plan", [RecordChange("put", "step", text)], generation)
                    flush_replicated(client, tenant)
                    with acked.lock:
                        acked.generation[tenant] = new
                    continue
                response = client.call(
                    client.memory.Retain,
                    memory_pb2.RetainRequest(tenant=tenant, text=text, fast=tenant in fast),
                    retry=False,
                    metadata=[LEVEL],
                    session=False,
                )
                flush_replicated(client, tenant, response.consistency_token)
                with acked.lock:
                    acked.texts.setdefault(tenant, []).append(text)
            except (MnemosyneClientError, grpc.RpcError) as error:
                if not killed.is_set():
                    with acked.lock:
                        acked.failures.append(f"{tenant}: {error}")
                return  # after the kill: the member is gone


def _all_texts(client: MemoryClient, tenant: str) -> list[str]:
    texts, token = [], ""
    while True:
        page = client.list_memories(tenant, page_size=1000, page_token=token)
        texts += [m.text for m in page.memories]
        token = page.next_page_token
        if not token:
            return texts


def test_a_deleted_data_directory_loses_no_replicated_write(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    data_dir = tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    tenants = [f"d{i:02d}" for i in range(TENANTS)]
    fast = set(tenants[::2])
    with MemoryClient(server.target) as client:
        for tenant in fast:
            client.hot_path(tenant, "enable")
    acked, stop, killed = Acknowledged(), threading.Event(), threading.Event()
    writers = [
        threading.Thread(target=_writer, args=(server.target, tenants[i::4], fast, acked, stop, killed))
        for i in range(4)
    ]
    for writer in writers:
        writer.start()
    started = time.monotonic()
    time.sleep(RUN_SECONDS)
    while (acked.count() < ENOUGH or not acked.generation) and time.monotonic() - started < RUN_DEADLINE_SECONDS:
        assert not acked.failures, f"a write failed before the kill: {acked.failures[0]}"
        time.sleep(0.2)
    killed.set()
    server.kill()  # mid-write: some calls were accepted and never acknowledged
    stop.set()
    for writer in writers:
        writer.join(30)
    acknowledged = acked.count()
    print(f"acknowledged at REPLICATED: {acknowledged} memories, {len(acked.generation)} workspaces")
    assert not acked.failures, f"a write failed before the kill: {acked.failures[0]}"
    assert acknowledged >= ENOUGH, "the writers acknowledged too little to prove anything"
    assert acked.generation, "no workspace write was acknowledged"

    shutil.rmtree(data_dir)  # the volume is lost
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:
        for tenant in tenants:
            if tenant in fast:
                client.hot_path(tenant, "flush", timeout_seconds=30)  # the restored inbox drains
            held = Counter(_all_texts(client, tenant))
            for text in acked.texts.get(tenant, []):
                assert held[text] == 1, f"{tenant}: acknowledged {text!r} is back {held[text]} times"
            for text in acked.sent.get(tenant, []):
                assert held[text] <= 1, f"{tenant}: {text!r} applied {held[text]} times"
            assert client.verify_integrity(tenant).valid
            if tenant in acked.generation:
                assert client.list_records(tenant, "workspace/plan").generation >= acked.generation[tenant]


def test_a_new_volume_gets_back_every_tenant_at_once_none_refused_as_a_stale_copy(
    server_factory, object_storage, tmp_path
):
    """A server started on an empty volume restores every tenant the bucket holds in the
    background, several at once, and marks its data directory done; a backup of every tenant
    asked meanwhile waits for them (it skipped those not restored yet); a tenant whose restored
    file began its own generation while it was being opened is not taken for a stale copy of it."""
    bucket = object_storage.new_bucket()
    data_dir = tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags, metrics=True).start()
    tenants = [f"b{i:02d}" for i in range(48)]
    with MemoryClient(server.target) as client:
        for tenant in tenants:
            client.retain(tenant, f"{tenant}: the only memory")
    wait_until(lambda: gauge(server, "mnemosyne_replication_lag_seconds") == 0.0)
    server.kill()
    shutil.rmtree(data_dir)
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:  # a backup of every tenant waits for them all
        backed_up = [p.tenant for p in client.backup() if isinstance(p, TenantBackup)]
    assert backed_up == tenants
    mark = data_dir / "tenants" / "replica-restored.json"
    assert json.loads(mark.read_text()) == {"restored": len(tenants)}
    assert sorted(p.stem for p in (data_dir / "tenants").glob("*.sqlite")) == tenants
    with MemoryClient(server.target) as client:
        for tenant in tenants:
            assert [m.text for m in client.list_memories(tenant).memories] == [f"{tenant}: the only memory"]


def test_a_tenant_whose_file_was_lost_is_backed_up_and_erased_from_object_storage_not_said_absent(
    server_factory, object_storage, tmp_path
):
    """A tenant object storage holds and this server has no file of (lost, and no call has
    restored it yet) is restored by a backup naming it and by its erasure, as by a call: before,
    both answered TENANT_NOT_FOUND, and the erased tenant's replicas stayed, to come back at its
    next call."""
    bucket = object_storage.new_bucket()
    data_dir = tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:
        for tenant in ("kept", "erased"):
            client.retain(tenant, f"{tenant}: a memory that must not be said absent")
            flush_replicated(client, tenant)
    wait_until(lambda: (data_dir / "tenants" / "replica-restored.json").exists())  # the empty bucket: done
    server.stop()
    for tenant in ("kept", "erased"):  # these files lost; the volume's mark says it was matched before
        for path in (data_dir / "tenants").glob(f"{tenant}.*"):
            path.unlink()
    server.start()
    with MemoryClient(server.target) as client:
        parts = list(client.backup(["kept"]))
        assert [p.tenant for p in parts if isinstance(p, TenantBackup)] == ["kept"]
        assert client.erase_tenant("erased").tenant == "erased"
        assert client.list_memories("erased").memories == []
    assert not [k for k in object_storage.keys(bucket, "member/erased/") if k.endswith(".ltx")]


def test_a_call_meeting_a_tenant_restored_in_the_background_waits_for_it_not_refused(
    server_factory, object_storage, tmp_path
):
    """A call for a tenant the background restore of a new volume is installing, from the moment
    its file has its name until its install ends (the seam ``install_committed``), waits for the
    install, as a call that found no file does: before, it was refused UNAVAILABLE
    TENANT_REPLACING at once, and a client's few retries could all fall in that window. A backup of
    every tenant waits for the restore too, and meanwhile the restore's threads leave idle
    priority: before, busy cores starved them past the backup's minute (RESTORING_FROM_REPLICA)."""
    bucket = object_storage.new_bucket()
    data_dir = tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags, metrics=True).start()
    with MemoryClient(server.target) as client:
        client.retain("lost", "lost: restored before any call reads it")
    wait_until(lambda: gauge(server, "mnemosyne_replication_lag_seconds") == 0.0)
    server.kill()
    shutil.rmtree(data_dir)
    hold = tmp_path / "hold-install"
    hold.write_text("the background restore holds after its rename")
    env = {**replica_env(), "MNEMOSYNE_TEST_FAULTS": f"hold@install_committed={hold}"}
    server = server_factory(data_dir, env=env, args=flags).start()
    wait_until(lambda: "held at install_committed" in server.stderr_path.read_text(errors="replace"))
    assert (data_dir / "tenants" / "lost.sqlite").exists()
    answers: list[object] = []
    idle = threads_at(server.pid, os.SCHED_IDLE)  # the restore's among them (not its worker holding the lock)
    with MemoryClient(server.target, retries=0) as client:
        reader = threading.Thread(
            target=lambda: answers.append(_texts_or_error(client, "lost")), name="reader", daemon=True
        )
        backup = threading.Thread(
            target=lambda: answers.append([p.tenant for p in client.backup() if isinstance(p, TenantBackup)]),
            name="backup",
            daemon=True,
        )
        reader.start()
        backup.start()
        reader.join(1.0)
        assert reader.is_alive() and backup.is_alive(), answers  # waiting for the install, not refused
        wait_until(lambda: bool(idle & threads_at(server.pid, os.SCHED_OTHER)))  # the restore competes now
        hold.unlink()
        reader.join(30)
        backup.join(30)
    assert sorted(answers, key=str) == [["lost"], ["lost: restored before any call reads it"]]


def _texts_or_error(client: MemoryClient, tenant: str) -> list[str] | MnemosyneClientError:
    try:
        return [m.text for m in client.list_memories(tenant).memories]
    except MnemosyneClientError as error:
        return error
