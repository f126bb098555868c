"""When an accepted fast write reaches the disk (``--hot-path-sync``), seen from the syncs the
server process really makes: tests/sync_probe records every WAL write and every sync of the
server's files on their way to the real file system.

Default ("round"): an enqueue commits to the tenant's inbox without an fsync (it survives a
process kill: WAL), so it never waits for the disk; the worker syncs the tenant's log after
applying, and a Flush returns only once a sync that started after the last write to the tenant's
log has finished. "enqueue": every enqueue is synced before it returns."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from tests.support import serve_args

PROBE_DIR = Path(__file__).parent / "sync_probe"
ENQUEUES = 20


@dataclass(frozen=True)
class DiskEvent:
    started: float
    ended: float
    kind: str  # write | sync
    source: str  # sqlite | os
    file: str


def _probed(log: Path, hold: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(PROBE_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "MNEMOSYNE_TEST_SYNC_LOG": str(log), "MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}


def _events(log: Path, file: str) -> list[DiskEvent]:
    events = []
    for line in log.read_text().splitlines():
        started, ended, kind, source, name = line.split(" ", 4)
        if name == file:
            events.append(DiskEvent(float(started), float(ended), kind, source, name))
    return events


def _enqueue_window(server, c: MemoryClient, tenant: str) -> tuple[float, float, str, str]:
    """Enable the tenant's hot path, enqueue once (the tenant then has its inbox and its place in
    the recovery index), then time ENQUEUES more enqueues. Returns the window and the names of
    the inbox's WAL and of the tenant log's WAL."""
    c.hot_path(tenant, "enable")
    assert c.retain(tenant, "first fast write: crate CR-0", fast=True).status == "enqueued"
    started = time.time()
    for i in range(1, ENQUEUES + 1):
        assert c.retain(tenant, f"fast write {i}: crate CR-{i}", fast=True).status == "enqueued"
    inbox_wal = f"{tenant}.inbox.sqlite-wal"
    assert (server.data_dir / "inbox" / inbox_wal).exists()
    return started, time.time(), inbox_wal, server.tenant_file(tenant).name + "-wal"


def test_by_default_an_enqueue_takes_no_fsync_and_flush_returns_once_it_is_on_disk(
    server_factory, tmp_path: Path
) -> None:
    log, hold = tmp_path / "disk.log", tmp_path / "hold"
    hold.touch()  # workers hold before committing: the enqueues' own disk work stands alone
    server = server_factory(env=_probed(log, hold)).start()
    with MemoryClient(server.target) as c:
        started, ended, inbox_wal, wal = _enqueue_window(server, c, "synced")
        during = [e for e in _events(log, inbox_wal) if started <= e.started and e.ended <= ended]
        assert sum(e.kind == "write" for e in during) >= ENQUEUES  # the probe sees each commit
        assert [e for e in during if e.kind == "sync"] == []
        # Nor does the worker's move of them into the tenant's log sync it (still held).
        assert [e for e in _events(log, wal) if started <= e.started and e.ended <= ended and e.kind == "sync"] == []
        hold.unlink()
        flushed = c.hot_path("synced", "flush", timeout_seconds=30)
        returned = time.time()
        assert (flushed.succeeded, flushed.failed) == (flushed.flushed, 0)
        assert (
            c.recall("synced", f"crate CR-{ENQUEUES}", k=1)[0].memory.text
            == f"fast write {ENQUEUES}: crate CR-{ENQUEUES}"
        )
    before_return = [e for e in _events(log, wal) if e.ended <= returned]
    last_write = max(e.ended for e in before_return if e.kind == "write")
    assert any(e.kind == "sync" and e.started >= last_write for e in before_return), (
        "Flush returned before the log was synced after its last write"
    )


def test_hot_path_sync_enqueue_syncs_every_enqueue_before_it_returns(server_factory, tmp_path: Path) -> None:
    log, hold = tmp_path / "disk.log", tmp_path / "hold"
    hold.touch()
    server = server_factory(env=_probed(log, hold), args=["--hot-path-sync", "enqueue"]).start()
    with MemoryClient(server.target) as c:
        started, ended, inbox_wal, _ = _enqueue_window(server, c, "each")
        during = [e for e in _events(log, inbox_wal) if started <= e.started and e.ended <= ended]
        assert sum(e.kind == "sync" and e.source == "sqlite" for e in during) >= ENQUEUES
        hold.unlink()
        assert c.hot_path("each", "flush", timeout_seconds=30).failed == 0


def test_an_unknown_hot_path_sync_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mnemosyne.cli.commands import main

    monkeypatch.setenv("MNEMOSYNE_HOT_PATH_SYNC", "sometimes")
    with pytest.raises(SystemExit) as refused:  # argparse's usage error, as for a flag given by hand
        main(serve_args(tmp_path / "d"))
    assert refused.value.code == 2
    assert "'sometimes' is not one of round, enqueue" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
