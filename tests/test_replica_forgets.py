"""A restore never brings back what was forgotten (docs/replication.md#restore): forgotten memories
are kept in the bucket beside the tenant's generations and forgotten again in whatever a restore
fetches, to any point in time; an erased tenant is never restored nor replicated again, even from a
member's stale copy of it."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import apsw

from mnemosyne.client import MemoryClient
from mnemosyne.replication.litestream import litestream_binary, litestream_environment
from mnemosyne.replication.url import DATABASE_REPLICA, ReplicaUrl
from tests.replica_support import replica_env
from tests.support import wait_until
from tests.test_erasure import texts_left
from tests.test_replication import _restore_command, replicating, wait_replicated

SECRET = "Qwpzx the gate code is 7731-wombat-2208"
KEPT = "the ferns want misting every morning"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _replica_at(url: str, tenant: str, timestamp: str, into: Path) -> str:
    """What the tenant's first generation held at ``timestamp``, restored by Litestream itself
    (none of our restore's steps): its memories' texts, joined."""
    replica = ReplicaUrl.parse(url).of(tenant, 1, DATABASE_REPLICA)
    into.mkdir()
    done = subprocess.run(
        [litestream_binary(), "restore", "-o", str(into / "t.sqlite"), "-timestamp", timestamp, replica],
        env={**litestream_environment(), **replica_env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    connection = apsw.Connection(str(into / "t.sqlite"))
    try:
        return "\n".join(str(row[0]) for row in connection.execute("SELECT body FROM memories"))
    finally:
        connection.close()


def test_a_point_in_time_restore_to_before_a_forget_keeps_the_memory_forgotten(
    server_factory, object_storage, tmp_path
):
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("pit", KEPT)
        secret = client.retain("pit", SECRET)
        wait_replicated(server)
        time.sleep(1.0)
        before_forget = _now()
        time.sleep(1.0)
        assert client.forget("pit", secret.memory_id)
        wait_replicated(server)
        # The positive control: the replica's state at that time holds the secret.
        assert SECRET in _replica_at(object_storage.url(bucket), "pit", before_forget, tmp_path / "raw")

        done = _restore_command(
            "--from-replica", object_storage.url(bucket), "--tenant", "pit", "--timestamp", before_forget,
            "--target", server.target,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [m.text for m in client.list_memories("pit").memories] == [KEPT]
        shown = client.get_memory("pit", secret.memory_id)
        assert shown.forgotten and not shown.text
        assert not [h for h in client.recall("pit", "gate code wombat") if SECRET in h.memory.text]
        assert client.verify_integrity("pit").valid
        wait_replicated(server)
        assert texts_left(server.data_dir, [SECRET]) == {}


def test_an_erased_tenant_is_never_restored_nor_replicated_again_from_a_stale_copy(
    server_factory, object_storage, tmp_path
):
    bucket = object_storage.new_bucket()
    data_dir, stale = tmp_path / "member", tmp_path / "stale-volume"
    server = replicating(server_factory, object_storage, bucket, data_dir).start()
    with MemoryClient(server.target) as client:
        client.retain("gone", SECRET)
        client.retain("stays", KEPT)
    wait_replicated(server)
    server.kill()
    shutil.copytree(data_dir, stale)  # a copy of the volume as it was (a snapshot, a disk thought lost)
    server = replicating(server_factory, object_storage, bucket, data_dir).start()
    with MemoryClient(server.target) as client:
        client.erase_tenant("gone")
    server.kill()
    assert object_storage.keys(bucket, "member/gone/") == ["member/gone/erased.json"]

    # The stale copy is served where it is, but never replicated over the erasure.
    stale_server = replicating(server_factory, object_storage, bucket, stale).start()
    with MemoryClient(stale_server.target) as client:
        client.retain("gone", "written to the stale copy")
        wait_until(lambda: "stale copy" in stale_server.stderr_path.read_text(errors="replace"), 20)
    assert object_storage.keys(bucket, "member/gone/") == ["member/gone/erased.json"]
    stale_server.kill()

    named = _restore_command(
        "--from-replica", object_storage.url(bucket), "--tenant", "gone", "--data-dir", str(tmp_path / "one")
    )
    assert named.returncode != 0 and "TENANT_ERASED" in named.stderr + named.stdout
    assert not (tmp_path / "one").exists(), "a refused restore leaves no data directory it made"
    absent = _restore_command(
        "--from-replica", object_storage.url(bucket), "--tenant", "never", "--data-dir", str(tmp_path / "none")
    )
    assert absent.returncode == 2 and "TENANT_NOT_IN_REPLICA" in absent.stderr, absent.stderr
    assert not (tmp_path / "none").exists()
    whole = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "all"))
    assert whole.returncode == 0, whole.stderr
    assert sorted(p.name for p in (tmp_path / "all" / "tenants").glob("*.sqlite")) == ["stays.sqlite"]
