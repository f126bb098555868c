"""Every change of a tenant's files that is no transaction, with replication on
(docs/replication.md#how-it-works, "File swaps"): a first write, a forget's truncation, an
import --replace, an online restore, an erasure and the first write after it, a move's install and its
reclaim — then the tenant restored from object storage alone equals the live one, and
each swap that brings another file went to a new generation (a move's destination above its
source's, so two members never write one path)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mnemosyne.client import MemoryClient
from mnemosyne.client.types import BackupChunk, TenantBackup
from tests.replica_support import ObjectStorage, replica_env
from tests.support import SERVE, ServerFactory, gauge, wait_until
from tests.test_moves import ADMIN, Deployment
from tests.test_replication import _restore_command

TENANT = "swap"


def _generations(storage: ObjectStorage, bucket: str) -> set[str]:
    return {key.split("/")[2] for key in storage.keys(bucket, f"member/{TENANT}/") if key.count("/") >= 3}


def _state(client: MemoryClient) -> tuple[list[tuple[int, str]], str]:
    memories = sorted((m.id, m.text) for m in client.list_memories(TENANT, page_size=1000).memories)
    return memories, client.verify_integrity(TENANT).head_hash


def test_every_file_swap_then_a_restore_from_the_replica_equals_the_live_tenant(
    server_factory: ServerFactory, object_storage: ObjectStorage, tmp_path: Path
) -> None:
    bucket = object_storage.new_bucket()
    url = object_storage.url(bucket)
    deployment = Deployment(tmp_path, 2)
    ids = ["m0", "m1"]
    extra = ["--replica-url", url]
    for member in ids:
        deployment.processes[member].metrics = True
    deployment.run(ids, env={m: replica_env() for m in ids}, extra=extra)
    try:
        seen: list[set[str]] = []

        def replicated() -> None:
            for member in ids:
                wait_until(lambda: gauge(deployment.processes[member], "mnemosyne_replication_lag_seconds") == 0.0)
            seen.append(_generations(object_storage, bucket))

        with deployment.client(ids) as client:
            client.retain(TENANT, "first write: the file is renamed into place")
            doomed = client.retain(TENANT, "forgotten: its truncation is a swap")
            replicated()
            client.forget(TENANT, doomed.memory_id)  # the WAL truncated: a new generation
            client.retain(TENANT, "after the forget")
            replicated()
            manifest, *chunks = client.export_tenant(TENANT)
            assert isinstance(manifest, TenantBackup)
            client.import_tenant(
                manifest, (c for c in chunks if isinstance(c, BackupChunk)), tenant=TENANT, replace=True
            )
            client.retain(TENANT, "after the import --replace")
            replicated()
            owner = next(m for m in ids if (deployment.processes[m].data_dir / "tenants" / f"{TENANT}.sqlite").exists())
            target = f"127.0.0.1:{deployment.ports[owner]}"
            done = subprocess.run(
                [*SERVE, "restore", "--from-replica", url, "--tenant", TENANT, "--target",
                 target],
                env={**os.environ, **replica_env(), "MNEMOSYNE_TOKEN": ADMIN},
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            client.retain(TENANT, "after the online restore")
            replicated()
            client.erase_tenant(TENANT)
            client.retain(TENANT, "the first write after the erasure")
            client.retain(TENANT, "and another")
            replicated()
            source = next(
                m for m in ids if (deployment.processes[m].data_dir / "tenants" / f"{TENANT}.sqlite").exists()
            )
            destination = next(m for m in ids if m != source)
            client.move_tenant(TENANT, destination, member=source)  # the install there, the reclaim here
            client.retain(TENANT, "after the move")
            replicated()
            live = _state(client)

        # Each swap that brought another file replicated to a generation above every earlier one.
        highest = [max(generations) for generations in seen]
        assert highest == sorted(set(highest)), f"generations did not rise at every swap: {seen}"
        restored = _restore_command("--from-replica", url, "--tenant", TENANT, "--data-dir", str(tmp_path / "restored"))
        assert restored.returncode == 0, restored.stderr
        plain = server_factory(tmp_path / "restored").start()
        with MemoryClient(plain.target) as client:
            assert _state(client) == live
            assert [text for _, text in live[0]] == [
                "the first write after the erasure",
                "and another",
                "after the move",
            ]
    finally:
        deployment.stop()
