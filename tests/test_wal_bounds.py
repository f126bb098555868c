"""A tenant's WAL stays bounded while a copy of the tenant (an export, a backup) holds an older
snapshot of it: no checkpoint can copy the WAL back meanwhile, so past twice its limit
(store/maintenance.py ``WAL_PINNED_FACTOR``) the tenant's writes are refused, RESOURCE_EXHAUSTED
``WAL_LIMIT_REACHED`` with a retry delay, until the copy ends; nothing acknowledged is lost, through
a SIGKILL too, and the WAL's file is cut back once the copy ended. Real server, files on disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient, MnemosyneClientError, ResourceExhaustedError
from mnemosyne.client.types import BackupChunk
from mnemosyne.store.maintenance import PAGE_BYTES, WAL_KEPT_BYTES, WAL_PINNED_FACTOR, wal_limit_pages
from tests.support import ServerFactory, wait_until

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


def test_writes_are_refused_rather_than_the_wal_growing_while_an_export_holds_its_snapshot(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    hold = tmp_path / "hold-copy"
    server = server_factory(
        args=["--max-tenant-bytes", str(QUOTA_BYTES)],
        env={"MNEMOSYNE_TEST_FAULTS": f"hold@copy_step={hold}"},
    ).start()
    tenant_file = server.tenant_file("held")
    acknowledged: list[str] = []
    with MemoryClient(server.target, retries=0, timeout=30) as client:
        client.retain_batch("held", [f"seed note {i} of the held tenant" for i in range(BATCH)])
        acknowledged += [f"seed note {i} of the held tenant" for i in range(BATCH)]
        hold.write_text("copy")
        parts: list[object] = []
        export = threading.Thread(target=_export, args=(client, "held", parts))
        export.start()
        wait_until(lambda: "held at copy_step" in server.stderr_path.read_text(errors="replace"))

        # The copy holds its snapshot: every write grows the WAL, until the writes are refused.
        refused: ResourceExhaustedError | None = None
        peak = 0
        batch = 0
        while refused is None and peak <= 2 * HELD_LIMIT_BYTES:
            texts = [f"note {batch}-{i} written while the copy is held" for i in range(BATCH)]
            try:
                client.retain_batch("held", texts)
                acknowledged += texts
            except ResourceExhaustedError as exc:
                refused = exc
            peak = max(peak, _wal_bytes(tenant_file))
            batch += 1
        assert refused is not None, f"never refused; the WAL reached {peak / 1e6:.1f} MB after {batch} batches"
        assert refused.reason == "WAL_LIMIT_REACHED" and refused.retry_after_seconds, refused
        assert "a backup's or an export's copy" in str(refused)
        # At most the limit and the one write that crossed it (a batch: a few hundred kB).
        assert peak <= HELD_LIMIT_BYTES + (1 << 20), f"{peak / 1e6:.1f} MB"
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
        hold.write_text("copy")
        second = threading.Thread(target=_export, args=(client, "held", []))
        second.start()
        wait_until(lambda: server.stderr_path.read_text(errors="replace").count("held at copy_step") >= 2)
        while True:
            texts = [f"note {batch}-{i} written while the copy is held again" for i in range(BATCH)]
            try:
                client.retain_batch("held", texts)
            except ResourceExhaustedError:
                break
            acknowledged += texts
            batch += 1
        server.kill()
        second.join(timeout=60)
    hold.unlink()
    server.restart()
    with MemoryClient(server.target, timeout=30) as client:
        assert _texts(client, "held") == set(acknowledged)
        client.retain("held", "a note after the restart")
    assert _wal_bytes(tenant_file) <= WAL_KEPT_BYTES + (1 << 20)
