"""Two replicating members on one object storage (docs/replication.md#members): a member that
loses its volume gets back from the replica the tenants it owns — its own and one moved to it,
whatever the hash says — and never one moved away from it (NOT_OWNER naming the owner, no file);
a stale copy of a tenant moved away, put back on its former owner's volume, is refused there
(NOT_OWNER naming the owner), neither served nor replicated over the live one."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from pathlib import Path

import pytest

from mnemosyne.cli.rebalance import rebalance
from mnemosyne.client import FailedPreconditionError, MemoryClient, UnavailableError
from mnemosyne.client.types import BackupChunk, TenantBackup
from mnemosyne.store.membership import owner_of
from mnemosyne.store.ownership import MOVE_STEP_KEY
from tests.replica_support import ObjectStorage, replica_env
from tests.support import gauge, wait_until
from tests.test_moves import ADMIN, Deployment, record

IDS = ["m0", "m1"]
LOST = "m1"  # the member whose volume is lost
OTHER = "m0"


def _home(member: str, prefix: str) -> str:
    return next(t for i in range(1000) if owner_of(t := f"{prefix}-{i}", IDS) == member)


def _texts(client: MemoryClient, tenant: str) -> list[str]:
    return sorted(m.text for m in client.list_memories(tenant, page_size=1000).memories)


def _generations(storage: ObjectStorage, bucket: str, tenant: str) -> set[int]:
    return {int(key.split("/")[2]) for key in storage.keys(bucket, f"member/{tenant}/") if key.count("/") >= 3}


def test_a_member_that_lost_its_volume_restores_what_it_owns_and_never_a_stale_copy(
    object_storage: ObjectStorage, tmp_path: Path
) -> None:
    bucket = object_storage.new_bucket()
    deployment = Deployment(tmp_path, 2)
    for member in IDS:
        deployment.processes[member].metrics = True
    env = {m: replica_env() for m in IDS}
    extra = ["--replica-url", object_storage.url(bucket), "--no-forwarding"]
    own, came, went = _home(LOST, "own"), _home(OTHER, "came"), _home(LOST, "went")
    lost = deployment.processes[LOST]

    def replicated() -> None:
        for member in IDS:
            wait_until(lambda: gauge(deployment.processes[member], "mnemosyne_replication_lag_seconds") == 0.0)

    deployment.run(IDS, env=env, extra=extra)
    try:
        with deployment.client(IDS) as client:
            for tenant in (own, came, went):
                client.retain(tenant, f"{tenant}: before the moves")
            doomed = client.retain(went, f"{went}: forgotten by its stale copy").memory_id
            replicated()  # the copy below records the generation it replicated to
        lost.stop()  # a snapshot of the volume: the stale copy of ``went`` (its owner then)
        snapshot = tmp_path / "snapshot.sqlite"
        shutil.copy(lost.tenant_file(went), snapshot)
        deployment.start(LOST, IDS, env=env[LOST], extra=extra)
        with deployment.client(IDS) as client:
            client.move_tenant(came, LOST, member=OTHER)  # its home is OTHER: only the replica says it is LOST's
            client.move_tenant(went, OTHER, member=LOST)
            for tenant in (own, came, went):
                client.retain(tenant, f"{tenant}: after the moves")
            replicated()
            live = {tenant: _texts(client, tenant) for tenant in (own, came, went)}

        lost.kill()
        shutil.rmtree(lost.data_dir)
        deployment.start(LOST, IDS, env=env[LOST], extra=extra)
        with deployment.at(LOST) as there:
            assert _texts(there, own) == live[own]
            assert _texts(there, came) == live[came]  # lazily, at its first open
            with pytest.raises(FailedPreconditionError) as refused:
                there.list_memories(went)
            assert refused.value.reason == "NOT_OWNER"
            assert refused.value.metadata["owner"] == OTHER
            assert not lost.tenant_file(went).exists()
            there.retain(came, f"{came}: after the loss")
        with deployment.client(IDS) as client:
            client.retain(went, f"{went}: on its owner after the loss")
            assert _texts(client, came) == sorted([*live[came], f"{came}: after the loss"])
            replicated()
            generations = _generations(object_storage, bucket, went)

            shutil.copy(snapshot, lost.tenant_file(went))  # the stale copy is back on the former owner
            # Refused whether object storage answers or not: while it does not, by what the restore
            # above told this member; after a restart that forgot it, by asking object storage.
            with object_storage.paused(), deployment.at(LOST) as there:
                _refused_as_a_stale_copy(there, went, doomed)
            lost.stop()
            deployment.start(LOST, IDS, env=env[LOST], extra=extra)
            with deployment.at(LOST) as there:
                _refused_as_a_stale_copy(there, went, doomed)
            assert _generations(object_storage, bucket, went) == generations
            assert _texts(client, went) == sorted([*live[went], f"{went}: on its owner after the loss"])
    finally:
        deployment.stop()


def _refused_as_a_stale_copy(there: MemoryClient, tenant: str, memory_id: int) -> None:
    for call in (lambda: there.list_memories(tenant), lambda: there.forget(tenant, memory_id)):
        with pytest.raises(FailedPreconditionError) as refused:
            call()
        assert refused.value.reason == "NOT_OWNER"
        assert refused.value.metadata["owner"] == OTHER
        assert "stale copy" in refused.value.message


def test_a_tenant_moved_away_from_its_home_is_replaced_online_and_recreated_after_an_erasure(tmp_path: Path) -> None:
    """The fenced import --replace path (an online restore's) and the first write after an
    erasure, on the member a tenant was moved to (not its home by the hash): its owner serves
    both, never NOT_OWNER sending the caller back to the tombstone that sends it here."""
    deployment = Deployment(tmp_path, 2)
    tenant = _home(OTHER, "away")
    deployment.run(IDS, extra=["--no-forwarding"])
    try:
        with deployment.client(IDS) as client:
            client.retain(tenant, "before the move")
            client.move_tenant(tenant, LOST, member=OTHER)
            client.retain(tenant, "after the move")
        with deployment.at(LOST) as owner:
            manifest, *chunks = owner.export_tenant(tenant)
            assert isinstance(manifest, TenantBackup)
            owner.retain(tenant, "undone by the restore")
            owner.import_tenant(
                manifest, (c for c in chunks if isinstance(c, BackupChunk)), tenant=tenant, replace=True
            )
            assert _texts(owner, tenant) == ["after the move", "before the move"]
            owner.erase_tenant(tenant)
        with deployment.client(IDS) as client:
            client.retain(tenant, "the first write after the erasure")
            assert _texts(client, tenant) == ["the first write after the erasure"]
        assert deployment.processes[LOST].tenant_file(tenant).exists()
    finally:
        deployment.stop()


def test_a_move_in_progress_writes_a_new_generation_and_its_source_comes_back_fenced(
    object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """A move held after its import: the destination's inactive copy replicates to a generation
    of its own, above the source's, started by the destination. The source then loses its volume:
    it restores its own generation (passing over the copy never activated) and serves it (fenced
    if the fence had reached its replica), and the move, asked again, finishes with everything."""
    bucket = object_storage.new_bucket()
    deployment = Deployment(tmp_path, 2)
    source, destination = OTHER, LOST
    tenant = _home(source, "moving")
    extra = ["--replica-url", object_storage.url(bucket), "--no-forwarding"]
    env = {m: replica_env() for m in IDS}
    deployment.run(IDS, env={**env, source: {**env[source], "MNEMOSYNE_TEST_MOVE_HOLD_AFTER": "imported"}}, extra=extra)
    try:
        with deployment.client(IDS) as client:
            client.retain(tenant, "before the move")
        wait_until(lambda: bool(_generations(object_storage, bucket, tenant)))
        before = _generations(object_storage, bucket, tenant)
        mover = threading.Thread(target=_move_quietly, args=(deployment, tenant, destination, source), daemon=True)
        mover.start()
        wait_until(lambda: record(deployment.processes[destination], tenant).get(MOVE_STEP_KEY) == "inactive", 30)
        wait_until(lambda: len(_generations(object_storage, bucket, tenant)) > len(before), 30)
        copy = max(_generations(object_storage, bucket, tenant))
        assert copy > max(before)
        holder = object_storage.client().get_object(Bucket=bucket, Key=f"member/{tenant}/{copy:08d}/holder.json")
        assert json.loads(holder["Body"].read()) == destination

        lost = deployment.processes[source]
        lost.kill()
        shutil.rmtree(lost.data_dir)
        deployment.start(source, IDS, env=env[source], extra=extra)
        mover.join(30)
        expected = ["before the move"]
        with deployment.at(source) as there:
            assert _texts(there, tenant) == expected  # its own generation, not the copy never activated
            try:  # fenced when the fence reached its replica before the copy began: writes refused
                there.retain(tenant, "written on the source before the move is asked again")
                expected.append("written on the source before the move is asked again")
            except UnavailableError as refused:
                assert refused.reason == "TENANT_MOVING"
        with deployment.client(IDS) as client:
            client.move_tenant(tenant, destination, member=source)
            client.retain(tenant, "after the move")
        with deployment.at(destination) as there:
            assert _texts(there, tenant) == sorted([*expected, "after the move"])
    finally:
        deployment.stop()


def _move_quietly(deployment: Deployment, tenant: str, destination: str, source: str) -> None:
    """The move the seam holds; it ends when its source is killed."""
    with contextlib.suppress(Exception), deployment.client(IDS, retries=0) as client:
        client.move_tenant(tenant, destination, member=source, timeout=60)


def test_a_destination_that_loses_its_volume_right_after_a_move_comes_back_with_the_tenant(
    object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """A move answers once its destination's copy, activated, is in object storage: the
    destination SIGKILLed the moment the move returned, its volume deleted, comes back with the
    tenant and everything it held (not the copy before its activation, which its restore passes
    over, nor a NOT_OWNER sending callers back to the source's tombstone)."""
    bucket = object_storage.new_bucket()
    deployment = Deployment(tmp_path, 2)
    source, destination = OTHER, LOST
    extra = ["--replica-url", object_storage.url(bucket), "--no-forwarding"]
    env = {m: replica_env() for m in IDS}
    tenants = [_home(source, f"moved{i}") for i in range(3)]
    deployment.run(IDS, env=env, extra=extra)
    try:
        with deployment.client(IDS) as client:
            for tenant in tenants:
                for n in range(3):
                    client.retain(tenant, f"{tenant}: note {n} before the move")
            for tenant in tenants:
                client.move_tenant(tenant, destination, member=source)
        lost = deployment.processes[destination]
        lost.kill()
        shutil.rmtree(lost.data_dir)
        deployment.start(destination, IDS, env=env[destination], extra=extra)
        with deployment.client(IDS) as client:
            for tenant in tenants:
                assert _texts(client, tenant) == [f"{tenant}: note {n} before the move" for n in range(3)]
                assert client.verify_integrity(tenant).valid
                client.retain(tenant, "after the loss")
        assert all(lost.tenant_file(tenant).exists() for tenant in tenants)
    finally:
        deployment.stop()


def test_a_member_that_lost_its_volume_hands_over_even_the_tenants_no_call_restored_yet(
    object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """A member back on an empty volume restores the tenants object storage holds as its own (its
    own and one moved to it; not one moved away) in the background, and a change of the member
    list begins there only once it has, so a scale-down right after the loss, before any call
    reached those tenants, moves them to their new owner with everything they held."""
    bucket = object_storage.new_bucket()
    deployment = Deployment(tmp_path, 2)
    extra = ["--replica-url", object_storage.url(bucket), "--no-forwarding"]
    env = {m: replica_env() for m in IDS}
    own, came, went = _home(LOST, "own"), _home(OTHER, "came"), _home(LOST, "went")
    lost = deployment.processes[LOST]
    for member in IDS:
        deployment.processes[member].metrics = True
    deployment.run(IDS, env=env, extra=extra)
    try:
        with deployment.client(IDS) as client:
            for tenant in (own, came, went):
                for n in range(2):
                    client.retain(tenant, f"{tenant}: note {n}")
            client.move_tenant(came, LOST, member=OTHER)
            client.move_tenant(went, OTHER, member=LOST)
            client.retain(came, f"{came}: moved here")
            live = {tenant: _texts(client, tenant) for tenant in (own, came, went)}
        for member in IDS:
            wait_until(lambda: gauge(deployment.processes[member], "mnemosyne_replication_lag_seconds") == 0.0)
        lost.kill()
        shutil.rmtree(lost.data_dir)
        deployment.start(LOST, IDS, env=env[LOST], extra=extra)
        with open(tmp_path / "rebalance.out", "w") as out:
            assert rebalance(deployment.members(IDS), deployment.members([OTHER]), token=ADMIN, out=out) == 0
        assert not lost.tenant_file(went).exists()  # moved away before the loss: never restored there
        deployment.run([OTHER], env=env, extra=extra)
        with deployment.client([OTHER]) as client:
            for tenant in (own, came, went):
                assert _texts(client, tenant) == live[tenant], tenant
                assert client.verify_integrity(tenant).valid
    finally:
        deployment.stop()
