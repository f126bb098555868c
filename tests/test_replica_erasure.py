"""Erasure stays true with replication (docs/replication.md#erasure): a forget moves the tenant's
replica to a new generation, and once ``--replica-retention`` has passed the old generation's
objects are deleted through our own S3 client — no byte of the forgotten text in any object
version (LTX pages decoded) nor in Litestream's local files."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient, UnavailableError
from tests.replica_support import ObjectStorage
from tests.support import ServerProcess, gauge, wait_until
from tests.test_erasure import texts_left
from tests.test_replication import replicating

SECRET = "Zyxwv the vault code is 4471-quokka-9320"


def _quick_member(server_factory, object_storage, bucket: str, tmp_path: Path) -> ServerProcess:
    """A member replicating to ``bucket`` that deletes a forget's old generation at once
    (retention 0) and takes an idle tenant out of Litestream after a second."""
    flags = ("--replica-retention", "0", "--replica-idle-seconds", "1")
    return replicating(server_factory, object_storage, bucket, tmp_path / "member", *flags)


def test_a_forgotten_memory_leaves_object_storage_after_the_retention(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    server = replicating(
        server_factory, object_storage, bucket, tmp_path / "member", "--replica-retention", "0"
    ).start()
    with MemoryClient(server.target) as client:
        kept = client.retain("vault", "the plants need water on fridays")
        secret = client.retain("vault", SECRET)
        wait_until(lambda: gauge(server, "mnemosyne_replication_lag_seconds") == 0.0)
        # The positive control: the scan finds the secret where it is.
        assert object_storage.objects_holding(bucket, [SECRET]), "the secret never reached object storage"
        client.forget("vault", secret.memory_id)
        wait_until(lambda: not object_storage.objects_holding(bucket, [SECRET]), 30)
        assert texts_left(server.data_dir, [SECRET]) == {}
    assert kept.memory_id
    assert object_storage.keys(bucket, "member/vault/00000002/")
    assert not object_storage.keys(bucket, "member/vault/00000001/")
    # What was kept is still replicated: a member on an empty volume restores it from the new generation.
    server.kill()
    shutil.rmtree(server.data_dir)
    server = replicating(
        server_factory, object_storage, bucket, tmp_path / "member", "--replica-retention", "0"
    ).start()
    with MemoryClient(server.target) as client:
        assert [m.text for m in client.list_memories("vault").memories] == ["the plants need water on fridays"]
        assert client.verify_integrity("vault").valid


def test_a_forget_right_after_a_write_to_an_idle_tenant_still_leaves_object_storage(
    server_factory, object_storage, tmp_path
):
    """A write brings the idle tenant back into replication (its registration asks object storage)
    while a forget right after it swaps the file: the forget still starts a new generation, so the
    old one, holding the forgotten text, is deleted after the retention. Before the fix, about one
    such forget in four left the file replicating to the old generation, the text kept there: twelve
    tenants, each written, left idle, then written and its secret forgotten at once (twelve tries
    of the race, their waits for object storage and for idleness shared)."""
    bucket = object_storage.new_bucket()
    server = _quick_member(server_factory, object_storage, bucket, tmp_path).start()
    secrets = {f"idle-{n}": f"{SECRET} tenant {n:02d}" for n in range(12)}  # none in another
    with MemoryClient(server.target) as client:
        memories = {tenant: client.retain(tenant, secret).memory_id for tenant, secret in secrets.items()}
        wait_until(lambda: set(secrets.values()) <= _texts_in(object_storage, bucket, list(secrets.values())), 30)
        wait_until(lambda: gauge(server, "mnemosyne_replication_active_tenants") == 0.0, 30)  # idle: out
        for tenant, memory in memories.items():
            client.retain(tenant, f"the plants need water, {tenant}")
            client.forget(tenant, memory)
        wait_until(lambda: not object_storage.objects_holding(bucket, list(secrets.values())), 30)
        for tenant in secrets:
            assert [m.text for m in client.list_memories(tenant).memories] == [f"the plants need water, {tenant}"]


def _texts_in(object_storage: ObjectStorage, bucket: str, texts: list[str]) -> set[str]:
    """Which of ``texts`` some object version in ``bucket`` holds."""
    return {hit for hits in object_storage.objects_holding(bucket, texts).values() for hit in hits}


def test_a_forget_while_object_storage_hangs_still_leaves_it_once_it_answers(server_factory, object_storage, tmp_path):
    """The same with object storage not answering (its process stopped) when the write brings the
    tenant back: the forget ends (after object storage's timeouts: its forgotten memory is kept in
    the data directory), the registration object storage held up does not replicate the old
    generation after it, and the forgotten text leaves object storage once it answers again."""
    bucket = object_storage.new_bucket()
    server = _quick_member(server_factory, object_storage, bucket, tmp_path).start()
    with MemoryClient(server.target, timeout=60) as client:
        memory = client.retain("hung", SECRET).memory_id
        wait_until(lambda: object_storage.objects_holding(bucket, [SECRET]), 30)
        wait_until(lambda: gauge(server, "mnemosyne_replication_active_tenants") == 0.0, 30)
        with object_storage.paused():
            client.retain("hung", "the plants need water on fridays")
            assert client.forget("hung", memory)  # its forgotten memory kept here, sent later
        wait_until(lambda: not object_storage.objects_holding(bucket, [SECRET]), 60)
        assert [m.text for m in client.list_memories("hung").memories] == ["the plants need water on fridays"]


def test_an_erasure_killed_before_its_new_generation_still_leaves_object_storage(
    server_factory, object_storage, tmp_path
):
    """SIGKILL the moment a forget's erasure ended (its WAL emptied), before its file registered its
    new generation: the restarted member's next replication of it still starts a new generation,
    and the forgotten text leaves object storage after the retention."""
    bucket = object_storage.new_bucket()
    seams = {"MNEMOSYNE_TEST_FAULTS": "kill@erasure_finished"}
    server = replicating(
        server_factory, object_storage, bucket, tmp_path / "member", "--replica-retention", "0", seams=seams
    )
    server.start()
    with MemoryClient(server.target, retries=0) as client:
        client.retain("killed", "the plants need water on fridays")
        memory = client.retain("killed", SECRET).memory_id
        wait_until(lambda: object_storage.objects_holding(bucket, [SECRET]), 30)
        with pytest.raises(UnavailableError):
            client.forget("killed", memory)
    server.wait_exit(timeout=10)
    server.env.pop("MNEMOSYNE_TEST_FAULTS")
    server.start()
    with MemoryClient(server.target) as client:
        assert client.get_memory("killed", memory).forgotten
        client.retain("killed", "written after the restart")
        wait_until(lambda: not object_storage.objects_holding(bucket, [SECRET]), 30)


def test_a_forget_on_a_replicating_tenant_while_object_storage_hangs_ends_within_a_minute(
    server_factory, object_storage, tmp_path
):
    """A tenant Litestream replicates when object storage stops answering: its forget keeps its
    forgotten memories in the data directory after a few seconds and waits for its last sync only
    a few more (before, 30 s each: 96 s in all, near the store's 120 s limit); the text leaves
    object storage once it answers again."""
    bucket = object_storage.new_bucket()
    server = replicating(
        server_factory, object_storage, bucket, tmp_path / "member", "--replica-retention", "0"
    ).start()
    with MemoryClient(server.target, timeout=60, retries=0) as client:
        memory = client.retain("busy", SECRET).memory_id
        wait_until(lambda: object_storage.objects_holding(bucket, [SECRET]), 30)
        with object_storage.paused():
            client.retain("busy", "the plants need water on fridays")  # a commit not yet replicated
            assert client.forget("busy", memory)  # within the deadline
        wait_until(lambda: not object_storage.objects_holding(bucket, [SECRET]), 60)
        assert [m.text for m in client.list_memories("busy").memories] == ["the plants need water on fridays"]


@pytest.mark.parametrize("tenant_was", ["replicating", "idle"])
def test_an_erasure_object_storage_holds_up_past_the_stores_limit_leaves_the_tenant_replicating(
    server_factory, object_storage, tmp_path, tenant_was
):
    """An erasure whose wait for object storage passes the limit a thread of the store waits (the
    seam's 3 s for 120) — in its last sync of a replicating tenant, or in the deletion of an idle
    one's replicas — fails UNAVAILABLE, retryable, and what it began is undone on the
    replication's side too: the deletion stops and records no erasure, and the tenant, kept whole,
    goes on replicating once object storage answers (before, it stayed paused, never replicated
    again, its replicas deleted and its erasure recorded all the same); the erasure asked again
    ends with nothing of it in object storage."""
    bucket = object_storage.new_bucket()
    seams = {"MNEMOSYNE_TEST_REPLICA_CALL_SECONDS": "3"}
    member = tmp_path / "member"
    server = replicating(server_factory, object_storage, bucket, member, "--replica-idle-seconds", "1", seams=seams)
    later = "written after object storage answers again"
    with MemoryClient(server.start().target, timeout=60, retries=0) as client:
        client.retain("held", SECRET)
        wait_until(lambda: object_storage.objects_holding(bucket, [SECRET]), 30)
        if tenant_was == "idle":
            wait_until(lambda: gauge(server, "mnemosyne_replication_active_tenants") == 0.0, 30)
        with object_storage.paused():
            if tenant_was == "replicating":
                client.retain("held", "a commit the erasure's last sync waits for")
            with pytest.raises(UnavailableError) as refused:
                client.erase_tenant("held")
        assert refused.value.reason == "REPLICA_UNREACHABLE", refused.value
        time.sleep(6)  # the deletion given up: its pending call answered once object storage is back, it stops
        assert not [key for key in object_storage.keys(bucket) if key.endswith("erased.json")]
        client.retain("held", later)
        wait_until(lambda: object_storage.objects_holding(bucket, [later]), 30)
        assert SECRET in [m.text for m in client.list_memories("held").memories]
        client.erase_tenant("held")
        assert not object_storage.objects_holding(bucket, [SECRET, later])
