"""One process owns a data directory; read-only inspection works beside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.errors import FailedPrecondition
from tests.support import SERVE, serve_args


def test_second_server_on_the_same_directory_refuses_to_start(server_factory) -> None:
    first = server_factory().start()
    result = subprocess.run(
        [*SERVE, *serve_args(first.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "already in use" in result.stderr and "DATA_DIR_LOCKED" in result.stderr
    with pytest.raises(FailedPrecondition) as info:
        Engine(EngineConfig(first.data_dir))
    assert info.value.reason == "DATA_DIR_LOCKED"


def test_inspect_reads_a_locked_directory_without_the_lock(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        client.retain_batch("acme", ["one", "two", "three"])
    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "inspect", "--data-dir", str(server.data_dir), "--tenant", "acme"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    summary = json.loads(result.stdout)
    assert summary["memories"] == 3 and summary["integrity"]["valid"] is True


@pytest.mark.parametrize("command", ["inspect", "oplog"])
def test_inspect_of_a_stopped_servers_file_leaves_no_file_behind(server_factory, command: str) -> None:
    """A file closed cleanly has no -wal or -shm; reading it makes none (made by an operator's
    user, a server running as another could not write them)."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        client.retain_batch("acme", ["one", "two", "three"])
        client.hot_path("acme", "enable")
        client.retain("acme", "four, queued first", fast=True)
        client.hot_path("acme", "flush")
    server.stop()
    before = sorted(str(path.relative_to(server.data_dir)) for path in server.data_dir.rglob("*"))
    assert any("inbox" in name for name in before), before  # the oplog reads the inbox too
    assert not any(name.endswith(("-wal", "-shm")) for name in before), before
    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", command, "--data-dir", str(server.data_dir), "--tenant", "acme"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout)
    assert sorted(str(path.relative_to(server.data_dir)) for path in server.data_dir.rglob("*")) == before
    if command == "inspect":
        assert json.loads(result.stdout)["memories"] == 4


def test_directory_is_released_after_a_kill(server_factory) -> None:
    server = server_factory().start()
    server.kill()
    engine = Engine(EngineConfig(server.data_dir))  # the OS dropped the dead process's lock
    engine.close()
    engine.close()  # idempotent
