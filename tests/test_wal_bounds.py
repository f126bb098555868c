"""A tenant's WAL stays bounded while a copy of the tenant (an export, a backup) holds an older
snapshot of it: no checkpoint can copy the WAL back meanwhile, so past twice its limit
(store/maintenance.py ``WAL_PINNED_FACTOR``) the tenant's writes are refused, RESOURCE_EXHAUSTED
``WAL_LIMIT_REACHED`` with a retry delay, until the copy ends; nothing acknowledged is lost, through
a SIGKILL too, and the WAL's file is cut back once the copy ended. Real server, files on disk."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient, MnemosyneClientError, ResourceExhaustedError
from mnemosyne.client.types import BackupChunk
from mnemosyne.store.maintenance import PAGE_BYTES, WAL_KEPT_BYTES, WAL_PINNED_FACTOR, wal_limit_pages
from tests.replica_support import ObjectStorage, replica_env
from tests.support import ServerFactory, ServerProcess, wait_until

QUOTA_BYTES = 4_000_000  # a WAL limit of 1,000 pages: refused past 2,000 (~8 MB)
HELD_LIMIT_BYTES = WAL_PINNED_FACTOR * wal_limit_pages(QUOTA_BYTES) * PAGE_BYTES
BATCH = 20


def _wal_bytes(tenant_file: Path) -> int:
    wal = Path(f"{tenant_file}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _texts(client: MemoryClient, tenant: str) -> set[str]:
    texts: set[str] = set()
    token = ""
    while True:
        page = client.list_memories(tenant, page_size=1000, page_token=token)
        texts |= {m.text for m in page.memories}
        token = page.next_page_token
        if not token:
            return texts


def _export(client: MemoryClient, tenant: str, parts: list[object]) -> None:
    """The tenant's export into ``parts``; a failed one (its server killed) leaves them as they are."""
    try:
        parts.extend(client.export_tenant(tenant, timeout=120))
    except MnemosyneClientError:
        pass


def _held_export(
    server: ServerProcess, client: MemoryClient, hold: Path, tenant: str, parts: list[object]
) -> threading.Thread:
    """An export of ``tenant`` started and held midway (the seam ``hold@copy_step``) while ``hold``
    exists: its copy's snapshot held."""
    held_before = server.stderr_path.read_text(errors="replace").count("held at copy_step")
    hold.write_text("copy")
    export = threading.Thread(target=_export, args=(client, tenant, parts))
    export.start()
    wait_until(lambda: server.stderr_path.read_text(errors="replace").count("held at copy_step") > held_before)
    return export


def _write_until_refused(
    client: MemoryClient, server: ServerProcess, tenant: str, acknowledged: list[str]
) -> tuple[ResourceExhaustedError, int]:
    """Batches to ``tenant`` until one is refused (or the WAL passed twice the bound: the assertion
    says so); the refusal and the WAL's largest size seen."""
    refused: ResourceExhaustedError | None = None
    peak = batch = 0
    while refused is None and peak <= 2 * HELD_LIMIT_BYTES:
        texts = [f"note {batch}-{i} of {tenant} written while its copy is held" for i in range(BATCH)]
        try:
            client.retain_batch(tenant, texts)
            acknowledged += texts
        except ResourceExhaustedError as exc:
            refused = exc
        peak = max(peak, _wal_bytes(server.tenant_file(tenant)))
        batch += 1
    assert refused is not None, f"never refused; the WAL reached {peak / 1e6:.1f} MB after {batch} batches"
    assert refused.reason == "WAL_LIMIT_REACHED", f"{refused}; the WAL reached {peak / 1e6:.1f} MB"
    # At most the bound and the one write that crossed it (a batch: a few hundred kB).
    assert peak <= HELD_LIMIT_BYTES + (1 << 20), f"{peak / 1e6:.1f} MB"
    return refused, peak


def _seeded(client: MemoryClient, tenant: str) -> list[str]:
    texts = [f"seed note {i} of {tenant}" for i in range(BATCH)]
    client.retain_batch(tenant, texts)
    return texts


def test_writes_are_refused_rather_than_the_wal_growing_while_an_export_holds_its_snapshot(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    hold = tmp_path / "hold-copy"
    server = server_factory(
        args=["--max-tenant-bytes", str(QUOTA_BYTES)],
        env={"MNEMOSYNE_TEST_FAULTS": f"hold@copy_step={hold}"},
    ).start()
    tenant_file = server.tenant_file("held")
    with MemoryClient(server.target, retries=0, timeout=30) as client:
        acknowledged = _seeded(client, "held")
        parts: list[object] = []
        export = _held_export(server, client, hold, "held", parts)
        # The copy holds its snapshot: every write grows the WAL, until the writes are refused.
        refused, _peak = _write_until_refused(client, server, "held", acknowledged)
        assert refused.retry_after_seconds and "a backup's or an export's copy" in str(refused)
        with pytest.raises(ResourceExhaustedError):  # still held: still refused, nothing written
            client.retain("held", "a note refused while the copy is held")
        assert _wal_bytes(tenant_file) <= HELD_LIMIT_BYTES + (1 << 20)

        hold.unlink()
        export.join(timeout=60)
        assert not export.is_alive()
        chunks = [p for p in parts if isinstance(p, BackupChunk)]
        assert chunks and len(parts) > len(chunks)  # a manifest and its files: the copy completed
        # The copy ended: writes pass again, and the WAL starts again, its file cut back.
        client.retain("held", "a note after the copy ended")
        acknowledged.append("a note after the copy ended")
        assert _wal_bytes(tenant_file) <= WAL_KEPT_BYTES + (1 << 20)

        # Held again, refused again; a SIGKILL then loses nothing acknowledged and adds nothing refused.
        again = _seeded(client, "again")  # another tenant: "held" is near its quota
        second = _held_export(server, client, hold, "again", [])
        _write_until_refused(client, server, "again", again)
        server.kill()
        second.join(timeout=60)
    hold.unlink()
    server.restart()
    with MemoryClient(server.target, timeout=30) as client:
        assert _texts(client, "held") == set(acknowledged)
        assert _texts(client, "again") == set(again)
        client.retain("again", "a note after the restart")
    assert _wal_bytes(server.tenant_file("again")) <= WAL_KEPT_BYTES + (1 << 20)
    # The full-text merges refused meanwhile waited for the next pass, not logged as failures.
    assert "background maintenance failed" not in server.stderr_path.read_text(errors="replace")


def test_with_replication_writes_are_refused_too_while_an_export_holds_its_snapshot(
    server_factory: ServerFactory, object_storage: ObjectStorage, tmp_path: Path
) -> None:
    """Litestream checkpoints a replicated file, not the server; neither can while an export's copy
    holds its snapshot, and the server's refusal passed over a replicated tenant: its WAL grew by
    every write meanwhile. The copy's snapshot is the server's own: while one is held, past twice
    the WAL's bound the writes are refused as without replication."""
    hold = tmp_path / "hold-copy"
    server = server_factory(
        tmp_path / "data",
        env={**replica_env(), "MNEMOSYNE_TEST_FAULTS": f"hold@copy_step={hold}"},
        args=["--replica-url", object_storage.url(object_storage.new_bucket()), "--max-tenant-bytes", str(QUOTA_BYTES)],
    ).start()
    with MemoryClient(server.target, retries=0, timeout=30) as client:
        acknowledged = _seeded(client, "held")
        parts: list[object] = []
        export = _held_export(server, client, hold, "held", parts)
        _write_until_refused(client, server, "held", acknowledged)
        hold.unlink()
        export.join(timeout=60)
        assert any(isinstance(p, BackupChunk) for p in parts)
        client.retain("held", "a note after the copy ended")
        acknowledged.append("a note after the copy ended")
        assert _texts(client, "held") == set(acknowledged)


def test_fast_writes_wait_quietly_while_a_copy_holds_the_wal_and_are_applied_once_it_ends(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """The hot path's worker is refused as a caller is (its round applies the fast writes through
    the same write path): it says once that the tenant's hot path waits, takes the tenant again
    after the refusal's retry delay, and applies every write once the copy ended; not a round
    failure logged with its traceback at each attempt, taken again after a backoff doubling to 30 s."""
    hold = tmp_path / "hold-copy"
    server = server_factory(
        args=["--max-tenant-bytes", str(QUOTA_BYTES)],
        env={"MNEMOSYNE_TEST_FAULTS": f"hold@copy_step={hold}"},
    ).start()
    with MemoryClient(server.target, retries=0, timeout=30) as client:
        acknowledged = _seeded(client, "held")
        client.hot_path("held", "enable")
        export = _held_export(server, client, hold, "held", [])
        _write_until_refused(client, server, "held", acknowledged)
        fast = [f"fast note {i} sent while the copy is held" for i in range(5)]
        assert [client.retain("held", text, fast=True).status for text in fast] == ["enqueued"] * 5
        log = server.stderr_path
        wait_until(lambda: "held: its hot path waits (WAL_LIMIT_REACHED" in log.read_text(errors="replace"))
        time.sleep(2)  # attempts after the first, each a second apart
        hold.unlink()
        export.join(timeout=60)
        flushed = client.hot_path("held", "flush", timeout_seconds=30)
        assert flushed.failed == 0
        assert _texts(client, "held") == set(acknowledged) | set(fast)
    said = log.read_text(errors="replace")
    assert "hot-path round failed for tenant held" not in said
    assert said.count("held: its hot path waits (WAL_LIMIT_REACHED") == 1
