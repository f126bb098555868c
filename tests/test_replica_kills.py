"""Litestream failing under writes acknowledged at REPLICATED (docs/replication.md#the-barrier-writes-at-replicated):
SIGKILLed, a wait whose sync it failed (killed mid-sync, or not back yet) waits for the restarted
one until its deadline — never INTERNAL; its local state of a file broken (a file of it gone), the
tenant starts over in it from object storage instead of never replicating again. What was
acknowledged, and every forget, holds after the volume is lost."""

from __future__ import annotations

import os
import shutil
import signal

from mnemosyne.client import MemoryClient
from tests.replica_support import flush_replicated, litestream_pid, replica_env, retain_replicated
from tests.support import wait_until

KILLS = 3  # Litestream comes back after 0.5 s, then 1 s, then 2 s


def test_writes_and_forgets_acknowledged_at_replicated_while_litestream_is_killed_hold(
    server_factory, object_storage, tmp_path
):
    bucket, data_dir = object_storage.new_bucket(), tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    acknowledged, forgotten = [], []
    with MemoryClient(server.target, retries=0) as client:
        retain_replicated(client, "k", "before the kills")
        acknowledged.append("before the kills")
        for n in range(KILLS):
            wait_until(lambda: litestream_pid(server) is not None)
            os.kill(litestream_pid(server) or 0, signal.SIGKILL)
            # Right away, while it is down: each call waits for the restarted one.
            retain_replicated(client, "k", f"written while Litestream restarts {n}")
            acknowledged.append(f"written while Litestream restarts {n}")
            secret = client.retain("k", f"the vault code is {n}{n}{n}").memory_id
            client.forget("k", secret)
            flush_replicated(client, "k", timeout_seconds=30)
            forgotten.append(f"the vault code is {n}{n}{n}")
    server.kill()
    shutil.rmtree(data_dir)  # the volume is lost
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:
        texts = [m.text for m in client.list_memories("k").memories]
        assert sorted(texts) == sorted(acknowledged)
        assert not set(texts) & set(forgotten)
        assert client.verify_integrity("k").valid


def test_a_tenant_whose_litestream_local_state_broke_starts_over_and_replicates(
    server_factory, object_storage, tmp_path
):
    bucket, data_dir = object_storage.new_bucket(), tmp_path / "member"
    flags = ["--replica-url", object_storage.url(bucket)]
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target, retries=0) as client:
        retain_replicated(client, "b", "before its local state broke")
        for ltx in (data_dir / "tenants" / ".b.sqlite-litestream").rglob("*.ltx"):
            ltx.unlink()  # every later sync of the file fails at Litestream's local stage
        retain_replicated(client, "b", "after its local state broke")
    server.kill()
    shutil.rmtree(data_dir)  # the volume is lost
    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:
        assert sorted(m.text for m in client.list_memories("b").memories) == [
            "after its local state broke",
            "before its local state broke",
        ]
        assert client.verify_integrity("b").valid
