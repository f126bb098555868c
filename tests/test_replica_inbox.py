"""The inbox and the tenant file replicate independently (docs/replication.md#the-inbox-and-the-
tenant-file): an inbox row leaves only once its move into the tenant file is in object storage,
so with the inbox's replica ahead of the tenant file's, a fast write accepted before the volume
is lost is in one of them after the restore, and applied exactly once."""

from __future__ import annotations

import shutil
import time
from collections import Counter

from mnemosyne.client import MemoryClient
from tests.replica_support import replica_env
from tests.support import gauge, wait_until
from tests.test_replica_disk_loss import _all_texts
from tests.test_replication import wait_replicated

FAST_WRITES = 12
# Litestream ships a registered file's WAL about every second by itself; this is a few of those.
INBOX_SHIPPED_SECONDS = 4.0


def test_with_the_inbox_replica_ahead_a_restore_applies_each_fast_write_once(server_factory, object_storage, tmp_path):
    bucket = object_storage.new_bucket()
    data_dir, hold = tmp_path / "member", tmp_path / "hold-database"
    flags = ["--replica-url", object_storage.url(bucket), "--replica-idle-seconds", "1"]
    env = {**replica_env(), "MNEMOSYNE_TEST_HOLD_REPLICA_DATABASE": str(hold)}
    server = server_factory(data_dir, env=env, args=flags, metrics=True).start()
    texts = [f"fast write {n}: the moth circles the porch lamp" for n in range(FAST_WRITES)]
    with MemoryClient(server.target, session_consistency=False) as client:
        client.hot_path("inbox", "enable")
        client.retain("inbox", "written before: in both replicas")
        wait_replicated(server)
        wait_until(lambda: gauge(server, "mnemosyne_replication_active_tenants") == 0.0)  # out of Litestream
        hold.touch()  # from now on the tenant file's replica stays behind; the inbox's goes on
        for text in texts:
            client.retain("inbox", text, fast=True)
        client.hot_path("inbox", "flush", timeout_seconds=30)  # every one moved into the tenant file
        assert sorted(m.text for m in client.list_memories("inbox", page_size=100).memories) == sorted(
            [*texts, "written before: in both replicas"]
        )
        time.sleep(INBOX_SHIPPED_SECONDS)  # the inbox's replica has caught up with its file
    server.kill()
    shutil.rmtree(data_dir)  # the volume is lost

    server = server_factory(data_dir, env=replica_env(), args=flags).start()
    with MemoryClient(server.target) as client:
        client.hot_path("inbox", "flush", timeout_seconds=30)  # the restored inbox drains
        held = Counter(_all_texts(client, "inbox"))
        assert held == Counter([*texts, "written before: in both replicas"])
        assert client.verify_integrity("inbox").valid
