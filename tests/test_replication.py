"""Replication to object storage (docs/replication.md): real servers replicating with Litestream to
SeaweedFS's S3 on loopback (tests/replica_support.py), each test in a bucket of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import apsw
import grpc
import pytest

from mnemosyne.cli.server_process import _free_port
from mnemosyne.client import FailedPreconditionError, MemoryClient, ResourceExhaustedError, UnavailableError
from mnemosyne.client.errors import error_info
from mnemosyne.v1 import hot_path_pb2, hot_path_pb2_grpc, memory_pb2, memory_pb2_grpc
from tests.replica_support import ObjectStorage, litestream_pid, replica_env, retain_replicated
from tests.support import SERVE, ServerFactory, ServerProcess, gauge, wait_until


def replicating(
    server_factory: ServerFactory,
    storage: ObjectStorage,
    bucket: str,
    data_dir: Path,
    *flags: str,
    seams: dict[str, str] | None = None,
) -> ServerProcess:
    """A server replicating to ``bucket``, with more ``flags`` and test ``seams`` (variables)."""
    env = {**replica_env(), **(seams or {})}
    return server_factory(data_dir, env=env, args=["--replica-url", storage.url(bucket), *flags], metrics=True)


def wait_replicated(server: ServerProcess, seconds: float = 20.0) -> None:
    """Until every commit the server made so far is confirmed in object storage (a commit marks
    its tenant behind before its call returns: the lag is 0 only once a sync confirmed it)."""
    wait_until(lambda: gauge(server, "mnemosyne_replication_lag_seconds") == 0.0, seconds)


def test_writes_reach_object_storage_and_a_lost_volume_comes_back(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    data_dir = tmp_path / "member"
    server = replicating(server_factory, object_storage, bucket, data_dir).start()
    tenants = [f"r{i}" for i in range(3)]
    with MemoryClient(server.target) as client:
        for tenant in tenants:
            for n in range(4):
                client.retain(tenant, f"{tenant} note {n}: the heron nests by the weir")
    wait_replicated(server)
    server.kill()
    shutil.rmtree(data_dir)  # the volume is lost
    server = replicating(server_factory, object_storage, bucket, data_dir).start()
    with MemoryClient(server.target) as client:
        for tenant in tenants:
            texts = sorted(m.text for m in client.list_memories(tenant).memories)
            assert texts == sorted(f"{tenant} note {n}: the heron nests by the weir" for n in range(4))
            assert client.verify_integrity(tenant).valid
        client.retain(tenants[0], "written after the restore")
    # The restored file replicates to a generation of its own: two members never write one path.
    wait_until(lambda: object_storage.keys(bucket, f"member/{tenants[0]}/00000002/db/"))


def test_litestream_killed_is_restarted_and_catches_up(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("alpha", "first")
        wait_until(lambda: litestream_pid(server) is not None)
        first = litestream_pid(server)
        assert first is not None
        os.kill(first, signal.SIGKILL)
        client.retain("alpha", "second, while Litestream is down")
        wait_until(lambda: litestream_pid(server) not in (None, first))
        client.retain("alpha", "third")
    wait_replicated(server)
    assert gauge(server, "mnemosyne_litestream_restarts") == 1.0
    server.kill()  # no last sync at a stop: what the restarted Litestream replicated is all there is
    shutil.rmtree(tmp_path / "member")
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        assert sorted(m.text for m in client.list_memories("alpha").memories) == sorted(
            ["first", "second, while Litestream is down", "third"]
        )


def test_a_member_that_cannot_reach_object_storage_creates_no_tenant(server_factory, tmp_path):
    closed = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    data_dir = tmp_path / "member"
    server = server_factory(data_dir, env=replica_env(), args=["--replica-url", f"s3://nowhere/p?endpoint={closed}"])
    server.start()
    began = time.monotonic()
    with MemoryClient(server.target, retries=0) as client, pytest.raises(UnavailableError) as raised:
        client.retain("fresh", "must not land in a new empty tenant")  # one try: the refusal's own time
    assert time.monotonic() - began < 15
    assert raised.value.reason == "REPLICA_UNREACHABLE"
    assert "object storage" in str(raised.value)
    assert not list((data_dir / "tenants").glob("fresh*"))


def _restore_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVE, "restore", *args], env={**os.environ, **replica_env()}, capture_output=True, text=True, timeout=120
    )


def test_point_in_time_restore_of_one_tenant_is_online_and_gives_exactly_the_first_batch(
    server_factory, object_storage, tmp_path
):
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    first = [f"first batch {n}: the kettle whistles in C" for n in range(5)]
    second = [f"second batch {n}: a bad agent run" for n in range(5)]
    with MemoryClient(server.target) as client:
        for text in first:
            client.retain("pit", text)
        client.retain("other", "a neighbour the restore must not touch")
        wait_replicated(server)
        time.sleep(1.0)
        between = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        time.sleep(1.0)
        for text in second:
            client.retain("pit", text)
        wait_replicated(server)
        done = _restore_command(
            "--from-replica", object_storage.url(bucket), "--tenant", "pit", "--timestamp", between,
            "--target", server.target,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert sorted(m.text for m in client.list_memories("pit").memories) == sorted(first)
        assert client.verify_integrity("pit").valid
        assert [m.text for m in client.list_memories("other").memories] == ["a neighbour the restore must not touch"]
        client.retain("pit", "after the restore")
        # The restored tenant replicates to a generation of its own, above the one it came from.
        wait_until(lambda: object_storage.keys(bucket, "member/pit/00000002/db/"))


def test_an_offline_restore_killed_midway_leaves_no_stray_files_after_the_next_one(
    server_factory, object_storage, tmp_path
):
    bucket, restored = object_storage.new_bucket(), tmp_path / "restored"
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("kept", "a note the restore brings back")
    wait_replicated(server)
    command = [*SERVE, "restore", "--from-replica", object_storage.url(bucket), "--data-dir", str(restored)]
    killed = subprocess.Popen(command, env={**os.environ, **replica_env()})

    def staging() -> list[Path]:
        return [p for p in restored.rglob("*") if p.is_dir() and "restore" in p.name]

    wait_until(lambda: bool(staging()) or killed.poll() is not None, 30)
    killed.kill()  # mid-fetch: its staging directory is left behind
    killed.wait()
    assert staging(), "the restore ended before it could be killed midway"
    done = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(restored), "--replace")
    assert done.returncode == 0, done.stderr
    assert not staging()
    assert sorted(p.name for p in (restored / "tenants").iterdir()) == ["kept.sqlite"]


def test_a_point_in_time_after_a_generations_last_write_is_its_state_then_and_a_bad_time_is_refused(
    server_factory, object_storage, tmp_path
):
    """Litestream refuses a time after its replica's last upload: the state then is the latest."""
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    url = object_storage.url(bucket)
    with MemoryClient(server.target) as client:
        client.retain("quiet", "written before the bad run")
        wait_replicated(server)
        time.sleep(1.5)
        quiet_since = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        for bad in ("yesterday", "2026-12-06T07:00:00", "2999-01-01T00:00:00Z"):
            refused = _restore_command(
                "--from-replica", url, "--tenant", "quiet", "--timestamp", bad, "--target", server.target
            )
            assert refused.returncode == 2 and "TIMESTAMP_INVALID" in refused.stderr, (bad, refused.stderr)
        for n in range(2):  # the state then: generation 1's latest, then also once generation 2 began after it
            done = _restore_command(
                "--from-replica", url, "--tenant", "quiet", "--timestamp", quiet_since, "--target", server.target
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert [m.text for m in client.list_memories("quiet").memories] == ["written before the bad run"]
            client.retain("quiet", f"the bad run {n}")
            wait_replicated(server)


def test_a_whole_member_is_restored_offline_and_a_held_directory_is_refused(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        for tenant in ("m1", "m2", "m3"):
            client.retain(tenant, f"{tenant} keeps its keys under the mat")
    wait_replicated(server)
    refused = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(server.data_dir))
    assert refused.returncode != 0 and "DATA_DIR_LOCKED" in refused.stderr + refused.stdout
    missing = _restore_command(
        "--from-replica", object_storage.url("no-such-bucket"), "--data-dir", str(tmp_path / "x")
    )
    assert missing.returncode == 2 and "NoSuchBucket" in missing.stderr, missing.stderr
    assert "the replica URL's bucket or the AWS_* keys are wrong" in missing.stderr and not (tmp_path / "x").exists()
    # A prefix that holds no tenant (mistyped): said, and no empty data directory made.
    empty = _restore_command(
        "--from-replica", object_storage.url(bucket, "no-such-prefix"), "--data-dir", str(tmp_path / "x")
    )  # fmt: skip
    assert empty.returncode == 2 and "[TENANT_NOT_IN_REPLICA]" in empty.stderr, empty.stdout + empty.stderr
    assert "holds no tenant's replica" in empty.stderr and not (tmp_path / "x").exists()
    server.kill()
    done = _restore_command(
        "--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "restored"), "--tenant", "m1",
        "--tenant", "m1",
    )  # fmt: skip
    assert done.returncode == 0 and "restored 1 tenants" in done.stdout, done.stdout + done.stderr
    # A tenant whose member was SIGKILLed after it started the tenant's generation and before
    # Litestream's first upload: its holder and nothing else. Passed over (no write of it was
    # acknowledged at REPLICATED), not a refusal of every other tenant's restore.
    s3 = object_storage.client()
    s3.put_object(Bucket=bucket, Key="member/m4/00000001/holder.json", Body=b'""')
    done = _restore_command(
        "--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "restored"), "--replace"
    )  # fmt: skip
    assert done.returncode == 0 and "restored 3 tenants" in done.stdout, done.stdout + done.stderr
    assert "m4: nothing of it was replicated" in done.stdout + done.stderr
    assert not (tmp_path / "restored" / "tenants" / "m4.sqlite").exists()
    # A name no client could give, in the index of tenants with open operations (as an older
    # restore left from a bucket's listing): dropped at start, not a worker's traceback every 0.5 s.
    index = apsw.Connection(str(tmp_path / "restored" / "hot_path_pending.sqlite"))
    index.execute("INSERT INTO pending(tenant, since) VALUES('Not A Tenant', 0)")
    index.close()
    plain = server_factory(tmp_path / "restored").start()  # no replication: the files are there themselves
    with MemoryClient(plain.target) as client:
        for tenant in ("m1", "m2", "m3"):
            assert [m.text for m in client.list_memories(tenant).memories] == [f"{tenant} keeps its keys under the mat"]
            assert client.verify_integrity(tenant).valid
    log = plain.stderr_path.read_text()
    assert "names 'Not A Tenant', which no tenant is called: removed" in log and "Traceback" not in log, log[-3000:]
    # A tenant's objects under a name no client could give (put there by hand, by another tool): a
    # whole restore is refused TENANT_INVALID and makes nothing (a file of that name is never
    # served); a tenant named with --tenant restores.
    foreign = "member/Not A Tenant/"
    for key in object_storage.keys(bucket, "member/m2/"):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        s3.put_object(Bucket=bucket, Key=key.replace("member/m2/", foreign, 1), Body=body)
    refused = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "y"))
    assert refused.returncode == 2 and "[TENANT_INVALID]" in refused.stderr, refused.stdout + refused.stderr
    assert "'Not A Tenant'" in refused.stderr and "--tenant" in refused.stderr and not (tmp_path / "y").exists()
    named = _restore_command(
        "--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "z"), "--tenant", "m3"
    )  # fmt: skip
    assert named.returncode == 0 and [p.name for p in (tmp_path / "z" / "tenants").iterdir()] == ["m3.sqlite"]


def test_an_offline_restore_over_a_tenant_back_in_litestream_after_idle_replicates_again(
    server_factory, object_storage, tmp_path
):
    """A tenant back in Litestream after it was idle has local state that starts at its replica's
    last LTX file, not at the first: the replaced file's, continued into the restored file's new
    (empty) generation, failed every sync for ever (its local state stayed in the data directory)."""
    bucket, data_dir = object_storage.new_bucket(), tmp_path / "member"
    server = replicating(server_factory, object_storage, bucket, data_dir, "--replica-idle-seconds", "1").start()
    state = data_dir / "tenants" / ".back.sqlite-litestream"
    with MemoryClient(server.target, retries=0) as client:
        for n in range(2):  # past its replica's first LTX file
            retain_replicated(client, "back", f"before it was idle {n}")
        wait_until(lambda: not state.exists())  # idle: out of Litestream, its local state removed
        retain_replicated(client, "back", "after it was idle")
    server.kill()
    done = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(data_dir), "--replace")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not state.exists()
    server = replicating(server_factory, object_storage, bucket, data_dir, "--replica-idle-seconds", "1").start()
    with MemoryClient(server.target, retries=0) as client:
        retain_replicated(client, "back", "after the restore", timeout_seconds=10)


@pytest.mark.parametrize("taken", ["before its first replication", "after it, before a forget"])
def test_a_stale_copy_put_back_is_refused_neither_served_nor_replicated(
    server_factory, object_storage, tmp_path, taken
):
    """A snapshot of a tenant's file put back on the volume after object storage got a newer
    generation of it: REPLICA_STALE (this member started the newer one), nothing replicated from
    it; once removed, the next call restores the newer one. A copy taken before the tenant's first
    replication records no generation: its floor (the newest generation when the file was made)
    judges it."""
    bucket, hold = object_storage.new_bucket(), tmp_path / "hold-database"
    seams = {"MNEMOSYNE_TEST_HOLD_REPLICA_DATABASE": str(hold)}
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member", seams=seams)
    before = taken == "before its first replication"
    if before:
        hold.touch()  # the tenant file is not replicated yet when the copy below is taken
    server.start()
    snapshot = tmp_path / "snapshot"
    with MemoryClient(server.target) as client:
        doomed = client.retain("snap", "kept only by the stale copy").memory_id
        if not before:
            wait_replicated(server)
        server.kill()  # the snapshot of the volume: the file and its WAL as a crash left them
        snapshot.mkdir()
        for side in ("", "-wal"):
            if Path(f"{server.tenant_file('snap')}{side}").exists():
                shutil.copy(f"{server.tenant_file('snap')}{side}", snapshot / f"snap{side}")
        hold.unlink(missing_ok=True)
        server.start()
        client.forget("snap", doomed)  # a new generation for the live file
        client.retain("snap", "written after the copy")
        wait_replicated(server)
        live = sorted(m.text for m in client.list_memories("snap").memories)
    generations = {key.split("/")[2] for key in object_storage.keys(bucket, "member/snap/") if key.count("/") >= 3}
    server.stop()
    for side in ("", "-wal", "-shm"):
        Path(f"{server.tenant_file('snap')}{side}").unlink(missing_ok=True)
    for copied in snapshot.iterdir():
        shutil.copy(copied, f"{server.tenant_file('snap')}{copied.name.removeprefix('snap')}")
    server.start()
    with MemoryClient(server.target) as client:
        for call in (lambda: client.list_memories("snap"), lambda: client.retain("snap", "on the stale copy")):
            with pytest.raises(FailedPreconditionError) as refused:
                call()
            assert refused.value.reason == "REPLICA_STALE"
            assert "stale copy" in refused.value.message
        time.sleep(2.0)  # two replication ticks: a stale file is never registered
    assert {
        key.split("/")[2] for key in object_storage.keys(bucket, "member/snap/") if key.count("/") >= 3
    } == generations
    server.stop()
    for side in ("", "-wal", "-shm"):
        Path(f"{server.tenant_file('snap')}{side}").unlink(missing_ok=True)
    server.start()
    with MemoryClient(server.target) as client:  # the newer copy, restored from object storage
        assert sorted(m.text for m in client.list_memories("snap").memories) == live


def test_two_servers_on_one_prefix_a_replicated_write_into_a_passed_over_generation_is_refused(
    server_factory, object_storage, tmp_path
):
    """Two servers of no one deployment on one bucket prefix: A replicates tenant x to generation
    1; B's first call restores x and starts generation 2. A's next write at REPLICATED, confirmed
    in generation 1, which a restore passes over, is refused REPLICA_STALE naming generation 2
    (and A replicates x no more): every write acknowledged at REPLICATED is in what a restore
    brings back. Each later refusal is the same, its metadata too (it once kept the message only)."""
    bucket = object_storage.new_bucket()
    a = replicating(server_factory, object_storage, bucket, tmp_path / "a").start()
    b = replicating(server_factory, object_storage, bucket, tmp_path / "b").start()
    with MemoryClient(a.target) as on_a, MemoryClient(b.target) as on_b:
        retain_replicated(on_a, "x", "A wrote this first")
        retain_replicated(on_b, "x", "B wrote this after restoring x")
        for attempt in ("A wrote this after B started", "A wrote this once refused"):
            with pytest.raises(FailedPreconditionError) as refused:
                retain_replicated(on_a, "x", attempt)
            assert refused.value.reason == "REPLICA_STALE", refused.value.message
            assert "stale copy" in refused.value.message
            assert refused.value.metadata["generation"] == "2", refused.value.message
            assert "holder" in refused.value.metadata, refused.value.metadata
    assert "generation 2" in a.stderr_path.read_text()
    assert not object_storage.keys(bucket, "member/x/00000003/")
    done = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(tmp_path / "restored"))
    assert done.returncode == 0, done.stderr
    plain = server_factory(tmp_path / "restored").start()
    with MemoryClient(plain.target) as client:
        texts = {m.text for m in client.list_memories("x").memories}
    assert texts == {"A wrote this first", "B wrote this after restoring x"}


def test_a_stale_copy_taken_up_again_at_start_leaves_litestream_and_its_local_state_goes(
    server_factory, object_storage, tmp_path
):
    """A's tenant x, in Litestream when A was killed (its local state left), became a stale copy
    meanwhile (B started generation 2). Taken up again at A's start, x is refused REPLICA_STALE;
    its local state stayed, and x in the active set (a slot of --replica-active-limit), while A
    ran: its sync raised before it could ever be idle."""
    bucket = object_storage.new_bucket()
    a = replicating(server_factory, object_storage, bucket, tmp_path / "a", "--replica-idle-seconds", "1").start()
    b = replicating(server_factory, object_storage, bucket, tmp_path / "b").start()
    state = tmp_path / "a" / "tenants" / ".x.sqlite-litestream"
    with MemoryClient(a.target) as on_a:
        retain_replicated(on_a, "x", "A wrote this first")
    assert state.exists()
    a.kill()
    with MemoryClient(b.target) as on_b:
        retain_replicated(on_b, "x", "B wrote this after restoring x")
    a.start()
    wait_until(lambda: "stale copy" in a.stderr_path.read_text())
    wait_until(lambda: not state.exists() and gauge(a, "mnemosyne_replication_active_tenants") == 0.0, 5)
    assert not object_storage.keys(bucket, "member/x/00000003/")


def test_a_replica_edited_behind_the_servers_back_is_refused_whole(server_factory, object_storage, tmp_path):
    """A stray writer put a blob where a ledger entry's text belongs; Litestream replicated it. The
    restore checks the chain first: CHAIN_INVALID, no crash, and no tenant file restored."""
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("forged", "the first note")
        connection = apsw.Connection(str(server.tenant_file("forged")))
        connection.set_busy_timeout(5000)
        connection.execute("UPDATE ledger SET entry = X'00ff' WHERE seq = 1")
        connection.close()
        client.retain("forged", "a later note: its commit carries the edit to object storage")
    wait_replicated(server)
    server.kill()
    restored = tmp_path / "restored"
    done = _restore_command("--from-replica", object_storage.url(bucket), "--data-dir", str(restored))
    assert done.returncode != 0 and "CHAIN_INVALID" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not list(restored.rglob("forged*"))


S3_DOWN_SECONDS = 3.0  # how long object storage stops answering in the tests below


def test_while_object_storage_is_down_writes_go_on_the_lag_shows_then_drains(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("down", "before the outage")
        client.retain("calm", "a neighbour not written during the outage")
        wait_replicated(server)
        with object_storage.paused():
            began = time.monotonic()
            for n in range(5):
                client.retain("down", f"during the outage {n}")  # answered at VISIBLE as ever
            assert time.monotonic() - began < 2.0
            time.sleep(S3_DOWN_SECONDS)
            assert gauge(server, "mnemosyne_replication_lag_seconds") >= S3_DOWN_SECONDS - 0.5
            # Stats names the tenant's own lag (the metrics carry no tenant label).
            behind, calm = client.stats("down"), client.stats("calm")
            assert behind.replication_lag_seconds >= S3_DOWN_SECONDS - 0.5 and behind.replication_lag_bytes > 0
            assert (calm.replication_lag_seconds, calm.replication_lag_bytes) == (0.0, 0)
        wait_replicated(server, 60)
        caught_up = client.stats("down")
        assert (caught_up.replication_lag_seconds, caught_up.replication_lag_bytes) == (0.0, 0)


def test_a_write_acknowledged_without_the_barrier_is_lost_with_the_volume_within_the_lag(
    server_factory, object_storage, tmp_path
):
    """What does NOT hold (docs/replication.md#what-holds): a write answered at VISIBLE whose
    replication had not finished is gone with the volume; one answered at REPLICATED is not."""
    bucket = object_storage.new_bucket()
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        client.retain("lost", "replicated before the outage")
        wait_replicated(server)
        with object_storage.paused():
            client.retain("lost", "acknowledged visible during the outage")
            server.kill()
            shutil.rmtree(server.data_dir)
    server = replicating(server_factory, object_storage, bucket, tmp_path / "member").start()
    with MemoryClient(server.target) as client:
        assert [m.text for m in client.list_memories("lost").memories] == ["replicated before the outage"]


def test_only_the_active_set_is_in_litestream_and_past_its_limit_a_write_is_refused(
    server_factory, object_storage, tmp_path
):
    bucket = object_storage.new_bucket()
    args = ["--replica-url", object_storage.url(bucket), "--replica-active-limit", "2", "--replica-idle-seconds", "1"]
    server = server_factory(tmp_path / "member", env=replica_env(), args=args, metrics=True).start()
    with MemoryClient(server.target, retries=0) as client:
        client.retain("a1", "one")
        client.retain("a2", "two")
        with pytest.raises(ResourceExhaustedError) as refused:
            client.retain("a3", "three: the set is full")
        assert refused.value.reason == "REPLICATION_FULL"
        assert "--replica-active-limit" in str(refused.value)
        assert gauge(server, "mnemosyne_replication_active_tenants") == 2.0
        # Replicated and idle, they leave Litestream, and the next tenant is taken.
        wait_until(lambda: gauge(server, "mnemosyne_replication_active_tenants") == 0.0)
        client.retain("a3", "three, once the others were idle")
        client.retain("a1", "one again: it comes back")
        wait_replicated(server)
    assert object_storage.keys(bucket, "member/a3/00000001/db/")


def test_a_replicated_wait_at_the_end_of_a_shutdown_s_grace_answers_shutting_down(
    server_factory, object_storage, tmp_path
):
    """A Flush at REPLICATED still waiting for object storage (every sync fails while held) when
    the grace period of a SIGTERM ends answers UNAVAILABLE / SHUTTING_DOWN before the server
    stops; it was cut without a reason before (over HTTP, a bare 500)."""
    hold = tmp_path / "hold-database"
    hold.touch()
    server = replicating(
        server_factory,
        object_storage,
        object_storage.new_bucket(),
        tmp_path / "member",
        "--grace-seconds",
        "1",
        seams={"MNEMOSYNE_TEST_HOLD_REPLICA_DATABASE": str(hold)},
    ).start()
    with grpc.insecure_channel(server.target) as channel:
        grpc_hot_path = hot_path_pb2_grpc.HotPathServiceStub(channel)
        memory_pb2_grpc.MemoryServiceStub(channel).Retain(
            memory_pb2.RetainRequest(tenant="held", text="Not in storage")
        )
        waiting = grpc_hot_path.Flush.future(
            hot_path_pb2.FlushRequest(tenant="held", timeout_seconds=30),
            metadata=[("mnemosyne-consistency-level", "replicated")],
        )
        time.sleep(0.5)  # it waits for a sync that fails while held
        assert not waiting.done() and server.process is not None
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as ended:
            waiting.result(timeout=30)
    info = error_info(ended.value)
    assert (ended.value.code(), info.reason if info is not None else "") == (
        grpc.StatusCode.UNAVAILABLE,
        "SHUTTING_DOWN",
    )
    hold.unlink()
    assert server.wait_exit(timeout=60) == 0
