"""Online backup through the running server and offline restore: `mnemosyne backup` while clients
write, `mnemosyne restore` into a fresh data directory, incremental backups, and the refusals."""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import grpc
import pytest

from mnemosyne.cli.archive import import_archive, write_archive
from mnemosyne.cli.backup import restore, write_backup
from mnemosyne.cli.manifests import BACKUP_MANIFEST_MAX_BYTES
from mnemosyne.cli.progress import Progress
from mnemosyne.client import ExpiryPolicy, InvalidArgumentError, Memory, MemoryClient, PermissionDeniedError
from mnemosyne.client.errors import error_info, retry_delay
from mnemosyne.client.types import BackupChunk, TenantBackup
from mnemosyne.engine.backup import FileChunk
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem
from mnemosyne.errors import Conflict
from mnemosyne.store.snapshot import sha256_file
from mnemosyne.store.tenant_store import TenantStore
from mnemosyne.v1 import admin_pb2, admin_pb2_grpc
from tests.cli_session import cli_session
from tests.support import (
    ServerFactory,
    ServerProcess,
    module_server,
    on_a_terminal,
    sql_row,
    tokens_json,
    wait_until,
)
from tests.test_erasure import texts_left

ADMIN = "admin-token-backup"
USER = "user-token-backup"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN, **(env or {})},
    )


def _head(tenant_file: Path) -> tuple[str, int]:
    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        last_hash, last_seq = sql_row(connection, "SELECT hash, seq FROM ledger ORDER BY seq DESC LIMIT 1")
        return str(last_hash), int(last_seq)
    finally:
        connection.close()


def _admin_server(server_factory: ServerFactory, tenants: list[str]) -> ServerProcess:
    return server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: tenants[:1]})}).start()


def test_backup_while_four_clients_write_then_restore(server_factory, tenant: str, tmp_path: Path) -> None:
    tenants = [f"{tenant}-{i}" for i in range(3)]
    server = _admin_server(server_factory, tenants)
    acknowledged: dict[str, list[str]] = {t: [] for t in tenants}
    lock = threading.Lock()
    stop = threading.Event()
    before: dict[str, list[str]] = {}

    with MemoryClient(server.target, ADMIN) as admin:
        admin.hot_path(tenants[1], "enable")
        for t in tenants:
            admin.retain_batch(t, [f"seed note {i} of {t}" for i in range(50)])
            with lock:
                acknowledged[t].extend(f"seed note {i} of {t}" for i in range(50))
        # Expired, in a grace that outlasts the test here; the copy's clock runs past it. A restored
        # file was named in the sweep index by none of its writes: its expired memories stayed.
        admin.set_expiry_policy(tenants[2], ExpiryPolicy(grace_seconds=3600))
        expired = admin.retain(tenants[2], "Plover7781 expired", expires_at=time.time() - 1).memory_id

    def write(number: int) -> None:
        fast = number % 2 == 1  # two writers synchronous, two through the hot path
        target = tenants[1] if fast else tenants[number % 3]
        with MemoryClient(server.target, ADMIN) as client:
            i = 0
            while not stop.is_set():
                text = f"writer {number} note {i} for {target}"
                client.retain(target, text, fast=fast)
                with lock:
                    acknowledged[target].append(text)
                i += 1

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for w in writers:
        w.start()
    time.sleep(0.5)
    with lock:
        before = {t: list(texts) for t, texts in acknowledged.items()}
    directory = tmp_path / "backup"
    result = _cli("backup", "--target", server.target, "--to", str(directory))
    time.sleep(0.2)
    stop.set()
    for w in writers:
        w.join()
    assert result.returncode == 0, result.stderr
    assert "3 tenants copied, 0 unchanged" in result.stdout

    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["format"] == "mnemosyne-backup" and manifest["format_version"] == 1
    assert sorted(manifest["tenants"]) == sorted(tenants)
    assert "inbox" in manifest["tenants"][tenants[1]]["files"]  # the fast writes' tenant has an inbox

    restored = tmp_path / "restored"
    backed_up = sorted(p.relative_to(directory) for p in directory.rglob("*"))
    # MNEMOSYNE_TARGET in the environment is harmless to it (an explicit --target is refused).
    result = _cli("restore", "--from", str(directory), "--data-dir", str(restored), env={"MNEMOSYNE_TARGET": "h:1"})
    assert result.returncode == 0, result.stderr
    # Its checks read the copies as they are: no -wal or -shm made beside them (on a read-only
    # mount, making them failed the restore with a traceback).
    assert sorted(p.relative_to(directory) for p in directory.rglob("*")) == backed_up
    for t in tenants:
        entry = manifest["tenants"][t]
        assert _head(restored / "tenants" / f"{t}.sqlite") == (entry["head_hash"], entry["ledger_entries"])

    (tmp_path / "clock").write_text("7200")
    copy = ServerProcess(restored, env={"MNEMOSYNE_TEST_CLOCK_FILE": str(tmp_path / "clock")}).start()
    try:
        with MemoryClient(copy.target) as client:
            wait_until(lambda: client.get_memory(tenants[2], expired).forgotten, seconds=10)
            for t in tenants:
                client.hot_path(t, "flush")
                texts = {m.text for m in _all_memories(client, t)}
                missing = [text for text in before[t] if text not in texts]
                assert missing == [], f"{t}: {len(missing)} acknowledged writes missing, e.g. {missing[:3]}"
                assert client.verify_integrity(t).valid
    finally:
        copy.stop()

    # Incremental: once the writers are done (and the fast writes applied), a backup copies what
    # changed since the first; then only the tenant written since is copied again.
    with MemoryClient(server.target, ADMIN) as admin:
        admin.hot_path(tenants[1], "flush")
        assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
        manifest = json.loads((directory / "manifest.json").read_text())
        admin.retain(tenants[2], "one more note after the first backup")
    result = _cli("backup", "--target", server.target, "--to", str(directory))
    assert result.returncode == 0, result.stderr
    assert "1 tenants copied, 2 unchanged" in result.stdout
    second = json.loads((directory / "manifest.json").read_text())
    assert second["tenants"][tenants[0]] == manifest["tenants"][tenants[0]]
    assert second["tenants"][tenants[2]]["change_counter"] > manifest["tenants"][tenants[2]]["change_counter"]
    named = {f["path"] for e in second["tenants"].values() for f in e["files"].values()}
    on_disk = {str(p.relative_to(directory)) for p in directory.rglob("*.sqlite")}
    assert on_disk == named  # the replaced copy is gone, nothing else left

    # A full backup after an erasure drops the erased tenant and its files.
    with MemoryClient(server.target, ADMIN) as admin:
        admin.erase_tenant(tenants[0])
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    third = json.loads((directory / "manifest.json").read_text())
    assert sorted(third["tenants"]) == tenants[1:]
    assert not [p for p in directory.rglob("*") if p.name.startswith(tenants[0] + ".")]

    # A tenant erased and made again with as many writes has the same counts as the copy held:
    # it is copied (it was "unchanged", the backup keeping the erased tenant and not the new one).
    again = tenants[1]
    with MemoryClient(server.target, ADMIN) as admin:
        admin.erase_tenant(again)
        admin.retain(again, "the only note")  # counts from 0 again
    assert _cli("backup", "--target", server.target, "--to", str(directory), "--tenant", again).returncode == 0
    with MemoryClient(server.target, ADMIN) as admin:
        admin.erase_tenant(again)
        admin.retain(again, "another only note")  # the same counts as the copy just made
        head = admin.verify_integrity(again).head_hash
    result = _cli("backup", "--target", server.target, "--to", str(directory), "--tenant", again)
    assert result.returncode == 0 and "1 tenants copied, 0 unchanged" in result.stdout, result.stdout
    assert json.loads((directory / "manifest.json").read_text())["tenants"][again]["head_hash"] == head


def _all_memories(client: MemoryClient, tenant: str) -> list[Memory]:
    memories: list[Memory] = []
    token = ""
    while True:
        page = client.list_memories(tenant, page_size=1000, page_token=token)
        memories.extend(page.memories)
        token = page.next_page_token
        if not token:
            return memories


def test_backup_and_restore_refusals(server_factory, tenant: str, tmp_path: Path) -> None:
    tenants = [tenant]
    server = _admin_server(server_factory, tenants)
    with MemoryClient(server.target, ADMIN) as admin:
        admin.retain(tenant, "a note worth keeping")
    with MemoryClient(server.target, USER, retries=0) as user:
        with pytest.raises(PermissionDeniedError):
            list(user.backup())

    # One CLI process for the commands: each refusal is the command's, not its process start's.
    with cli_session({"MNEMOSYNE_TOKEN": ADMIN}) as cli:
        strange = tmp_path / "strange"
        strange.mkdir()
        (strange / "notes.txt").write_text("not a backup")
        result = cli.run("backup", "--target", server.target, "--to", str(strange))
        assert result.returncode == 2 and "BACKUP_DIR_NOT_OURS" in result.stderr
        assert sorted(p.name for p in strange.iterdir()) == ["notes.txt"]

        result = cli.run("backup", "--target", server.target, "--to", str(tmp_path / "b"), "--tenant", "nobody")
        assert result.returncode == 2 and "TENANT_NOT_FOUND" in result.stderr
        # A first backup refused (or with no server to answer) leaves no directory: it had left one
        # holding only its .lock.
        as_user = _cli("backup", "--target", server.target, "--to", str(tmp_path / "u"), env={"MNEMOSYNE_TOKEN": USER})
        assert as_user.returncode == 2 and "ADMIN_REQUIRED" in as_user.stderr
        result = cli.run("backup", "--target", "127.0.0.1:1", "--to", str(tmp_path / "n" / "new"))
        assert result.returncode == 2 and "UNAVAILABLE" in result.stderr
        assert not (tmp_path / "b").exists() and not (tmp_path / "u").exists() and not (tmp_path / "n" / "new").exists()
        # ... and a directory that was there is left as it was, its lock aside.
        (tmp_path / "empty").mkdir()
        assert cli.run("backup", "--target", "127.0.0.1:1", "--to", str(tmp_path / "empty")).returncode == 2
        assert [p.name for p in (tmp_path / "empty").iterdir()] in ([], [".lock"])

        directory = tmp_path / "backup"
        assert cli.run("backup", "--target", server.target, "--to", str(directory)).returncode == 0

        # Thousands of tenants the backup does not hold: one line a person reads, not each of them.
        absent = [arg for i in range(3000) for arg in ("--tenant", f"absent-{i}")]
        result = cli.run("restore", "--from", str(directory), "--data-dir", str(tmp_path / "none"), *absent)
        assert result.returncode == 2 and "TENANT_NOT_IN_BACKUP" in result.stderr and len(result.stderr) < 1000
        assert "absent-0, absent-1," in result.stderr and "and 2990 more" in result.stderr

        # A restore onto the data directory of a running server is refused.
        result = cli.run("restore", "--from", str(directory), "--data-dir", str(server.data_dir))
        assert result.returncode == 2 and "DATA_DIR_LOCKED" in result.stderr
        # So is one inside it: its tenants folder took the restore's lock, index and folders, and the
        # server served the index as a damaged tenant "hot_path_pending".
        before = sorted(p.name for p in (server.data_dir / "tenants").iterdir())
        for into_backup in (directory, directory / "tenants"):  # the backup itself is no data directory
            result = cli.run("restore", "--from", str(directory), "--data-dir", str(into_backup))
            assert result.returncode == 2 and "[DATA_DIR_IN_BACKUP]" in result.stderr, result.stderr
        for inside in (server.data_dir / "tenants", server.data_dir / "tenants" / "restored"):
            result = cli.run("restore", "--from", str(directory), "--data-dir", str(inside))
            assert result.returncode == 2 and "[DATA_DIR_INSIDE_ANOTHER]" in result.stderr, result.stderr
        assert sorted(p.name for p in (server.data_dir / "tenants").iterdir()) == before

        # A file that does not match the manifest: refused, nothing placed.
        manifest = json.loads((directory / "manifest.json").read_text())
        database = directory / manifest["tenants"][tenant]["files"]["database"]["path"]
        original = database.read_bytes()
        database.write_bytes(original[:-4096])
        target = tmp_path / "target"
        result = cli.run("restore", "--from", str(directory), "--data-dir", str(target))
        assert result.returncode == 2 and "BACKUP_FILE_MISMATCH" in result.stderr
        assert not (target / "tenants" / f"{tenant}.sqlite").exists()

        # A broken chain, with a manifest made to match the edited file: refused.
        database.write_bytes(original)
        connection = apsw.Connection(str(database))
        connection.execute("UPDATE memories SET body = 'a note worth forging'")
        connection.close()
        manifest["tenants"][tenant]["files"]["database"].update(
            size=database.stat().st_size, sha256=sha256_file(database)
        )
        (directory / "manifest.json").write_text(json.dumps(manifest))
        result = cli.run("restore", "--from", str(directory), "--data-dir", str(target))
        assert result.returncode == 2 and "CHAIN_INVALID" in result.stderr
        assert not (target / "tenants" / f"{tenant}.sqlite").exists()

        # A copy the previous manifest names, gone or cut short: the next backup copies the tenant
        # again (it had called it unchanged, and the backup could not be restored).
        database.unlink()
        result = cli.run("backup", "--target", server.target, "--to", str(directory))
        assert result.returncode == 0 and f"{tenant}: copied" in result.stderr, result.stderr
        database.write_bytes(database.read_bytes()[:4096])
        result = cli.run("backup", "--target", server.target, "--to", str(directory))
        assert result.returncode == 0 and f"{tenant}: copied" in result.stderr, result.stderr
        assert _cli("restore", "--from", str(directory), "--data-dir", str(target)).returncode == 0


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_backup_or_restore_killed_midway_leaves_nothing_half_written_in_use(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    tenants = [tenant, f"{tenant}-b"]
    server = _admin_server(server_factory, tenants)
    with MemoryClient(server.target, ADMIN) as admin:
        admin.hot_path(tenant, "enable")
        for t in tenants:
            admin.retain_batch(t, [f"note {i} of {t}" for i in range(20)])
        admin.retain(tenant, "a fast note", fast=True)
        admin.hot_path(tenant, "flush")
    directory = tmp_path / "backup"
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    first = (directory / "manifest.json").read_text()
    with MemoryClient(server.target, ADMIN) as admin:
        for t in tenants:
            admin.retain(t, f"a later note of {t}")

    # SIGKILL while the second backup receives a file: the previous manifest and its files stand.
    hold = tmp_path / "hold"
    hold.write_text("backup-receiving")
    env = {**os.environ, "MNEMOSYNE_TOKEN": ADMIN, "MNEMOSYNE_TEST_LIFECYCLE_HOLD": str(hold)}
    command = [sys.executable, "-m", "mnemosyne.cli"]
    backup = subprocess.Popen([*command, "backup", "--target", server.target, "--to", str(directory)], env=env)
    _wait_for(lambda: any(p.name.startswith(".partial-") for p in directory.iterdir()))
    backup.kill()
    backup.wait()
    assert (directory / "manifest.json").read_text() == first
    restored = tmp_path / "restored"
    named_twice = _cli(
        "restore", "--from", str(directory), "--data-dir", str(restored), "--tenant", tenant, "--tenant", tenant
    )
    assert named_twice.returncode == 0 and "restored 1 tenants" in named_twice.stdout, named_twice.stdout
    stale_index = restored / "tenants" / f"{tenant}.ann"  # the replaced file's approximate index
    stale_index.write_bytes(b"a graph of the replaced file's vectors")
    assert _cli("restore", "--from", str(directory), "--data-dir", str(restored), "--replace").returncode == 0
    assert not stale_index.exists()  # a cache of the old file, whose counters the new one may match
    # The next backup finishes the work and removes what the killed one left.
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    assert not any(p.name.startswith(".partial-") for p in directory.iterdir())
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest != json.loads(first)

    # SIGKILL while a restore places the tenant that has an inbox (staged, before its file's rename).
    target = tmp_path / "target"
    hold.write_text("restore-placing")
    restore = subprocess.Popen([*command, "restore", "--from", str(directory), "--data-dir", str(target)], env=env)
    _wait_for(lambda: _staged(target) or (target / "inbox" / f"{tenant}.inbox.sqlite").exists())
    restore.kill()
    restore.wait()
    assert not (target / "tenants" / f"{tenant}.sqlite").exists()
    copy = ServerProcess(target).start()  # the staged install is undone
    try:
        with MemoryClient(copy.target) as client:
            assert client.list_memories(tenant).memories == []
        assert not (target / "inbox" / f"{tenant}.inbox.sqlite").exists() and not _staged(target)
    finally:
        copy.stop()
    hold.unlink()
    result = _cli("restore", "--from", str(directory), "--data-dir", str(target), "--replace")
    assert result.returncode == 0, result.stderr
    copy = ServerProcess(target).start()
    try:
        with MemoryClient(copy.target) as client:
            for t in tenants:
                texts = {m.text for m in client.list_memories(t, page_size=100).memories}
                assert f"a later note of {t}" in texts and client.verify_integrity(t).valid
            client.retain(tenant, "a note only the tenant in place has")
    finally:
        copy.stop()

    # SIGKILL while a restore --replace places it: the tenant in place stays whole (it lost its
    # file before the copy had taken its name).
    hold.write_text("restore-placing")
    restore = subprocess.Popen(
        [*command, "restore", "--from", str(directory), "--data-dir", str(target), "--replace"], env=env
    )
    _wait_for(lambda: _staged(target) or not (target / "tenants" / f"{tenant}.sqlite").exists())
    restore.kill()
    restore.wait()
    copy = ServerProcess(target).start()
    try:
        with MemoryClient(copy.target) as client:
            texts = {m.text for m in client.list_memories(tenant, page_size=100).memories}
            assert "a note only the tenant in place has" in texts and client.verify_integrity(tenant).valid
    finally:
        copy.stop()


def _staged(data_dir: Path) -> bool:
    tenants = data_dir / "tenants"
    return tenants.is_dir() and any(p.name.startswith(".install-") for p in tenants.iterdir())


def test_a_server_killed_while_it_streams_a_backup_leaves_no_half_written_backup(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """SIGKILL of the server while it streams a tenant to `mnemosyne backup`: the CLI fails with
    the reason, the backup directory keeps its previous manifest and the files it names (no
    partial file), the restarted server's scratch space is empty, and a restore gives the previous
    backup. A first backup cut short leaves no manifest, and a restore from it is refused."""
    server = _admin_server(server_factory, [tenant])
    with MemoryClient(server.target, ADMIN, timeout=120) as admin:
        # Several MB of tenant file: more than the stream's flow-control windows hold, so the
        # server is still streaming (its scratch copy in place) while the CLI is held.
        for start in range(0, 12_000, 1000):
            admin.retain_batch(tenant, [f"note {i}: {'padding words ' * 12}{i}" for i in range(start, start + 1000)])
    directory = tmp_path / "backup"
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    first = (directory / "manifest.json").read_text()
    with MemoryClient(server.target, ADMIN) as admin:
        admin.retain(tenant, "a note after the first backup")

    hold = tmp_path / "hold"
    hold.write_text("backup-receiving")
    env = {**os.environ, "MNEMOSYNE_TOKEN": ADMIN, "MNEMOSYNE_TEST_LIFECYCLE_HOLD": str(hold)}
    command = [sys.executable, "-m", "mnemosyne.cli", "backup", "--target", server.target]
    scratch = server.data_dir / ".backup-scratch"
    backup = subprocess.Popen(
        [*command, "--to", str(directory)], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    _wait_for(lambda: any(p.name.startswith(".partial-") for p in directory.iterdir()))
    _wait_for(lambda: any(scratch.glob("*/database")))
    server.kill()
    server.wait_exit(timeout=10)
    assert any(scratch.glob("*/database")), "the kill must leave the server's scratch copy behind"
    hold.unlink()
    _, stderr = backup.communicate(timeout=60)
    assert backup.returncode == 2 and "UNAVAILABLE" in stderr, stderr
    assert (directory / "manifest.json").read_text() == first
    assert not any(p.name.startswith(".partial-") for p in directory.iterdir())

    server.start()
    assert not any(scratch.glob("*")), "the restarted server empties its scratch space"
    restored = tmp_path / "restored"
    backed_up = sorted(p.relative_to(directory) for p in directory.rglob("*"))
    result = _cli("restore", "--from", str(directory), "--data-dir", str(restored))
    assert result.returncode == 0, result.stderr
    # Its checks read the copies as they are: no -wal or -shm made beside them (on a read-only
    # mount, making them failed the restore with a traceback).
    assert sorted(p.relative_to(directory) for p in directory.rglob("*")) == backed_up
    copy = ServerProcess(restored).start()
    try:
        with MemoryClient(copy.target) as client:
            report = client.verify_integrity(tenant)
            assert report.valid and report.checked == 12_000, report  # the first backup's 12,000 retains
            assert "a note after the first backup" not in {h.memory.text for h in client.recall(tenant, "a note after")}
    finally:
        copy.stop()

    # A first backup into a new directory, cut short by a SIGKILL of the CLI: no manifest, so a
    # restore from it is refused and places nothing; the next backup into it completes.
    fresh = tmp_path / "fresh"
    hold.write_text("backup-receiving")
    cut_short = subprocess.Popen([*command, "--to", str(fresh)], env=env)
    _wait_for(lambda: fresh.is_dir() and any(p.name.startswith(".partial-") for p in fresh.iterdir()))
    cut_short.kill()
    cut_short.wait()
    hold.unlink()
    assert not (fresh / "manifest.json").exists()
    nowhere = tmp_path / "nowhere"
    result = _cli("restore", "--from", str(fresh), "--data-dir", str(nowhere))
    assert result.returncode == 2 and "NOT_A_BACKUP" in result.stderr, result.stderr
    assert not (nowhere / "tenants" / f"{tenant}.sqlite").exists()
    assert _cli("backup", "--target", server.target, "--to", str(fresh)).returncode == 0
    assert not any(p.name.startswith(".partial-") for p in fresh.iterdir())
    assert _cli("restore", "--from", str(fresh), "--data-dir", str(nowhere)).returncode == 0


def test_a_disk_that_fills_during_a_backup_leaves_the_previous_backup(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """The disk under the backup directory fills while `mnemosyne backup` writes (the file_bytes
    seam: a write fails with ENOSPC, as on a full filesystem): exit 2 with DISK_FULL, the previous
    manifest and its files as they were, no partial file; a first backup leaves no directory."""
    server = _admin_server(server_factory, [tenant])
    with MemoryClient(server.target, ADMIN) as admin:
        admin.retain_batch(tenant, [f"note {i} with {'padding ' * 20}" for i in range(300)])
    directory = tmp_path / "backup"
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    first = (directory / "manifest.json").read_text()
    named = sorted(p.name for p in (directory / "tenants").iterdir())
    with MemoryClient(server.target, ADMIN) as admin:
        admin.retain(tenant, "a note after the first backup")
    full = {"MNEMOSYNE_TEST_FAULTS": "file_bytes=65536"}
    for target, before in ((directory, first), (tmp_path / "fresh", None)):
        result = _cli("backup", "--target", server.target, "--to", str(target), env=full)
        assert result.returncode == 2 and "[DISK_FULL]" in result.stderr, result.stderr
        if before is None:  # a first backup: the directory it made is gone, with what it held
            assert not target.exists()
        else:
            assert not any(p.name.startswith(".partial-") for p in target.iterdir())
            assert (target / "manifest.json").read_text() == before
            assert sorted(p.name for p in (target / "tenants").iterdir()) == named
            result = _cli("restore", "--from", str(target), "--data-dir", str(tmp_path / "restored"))
            assert result.returncode == 0, result.stderr
    # With room again, the next backup completes.
    assert _cli("backup", "--target", server.target, "--to", str(directory)).returncode == 0
    assert (directory / "manifest.json").read_text() != first


def test_backup_and_restore_show_their_progress_on_a_terminal_and_a_line_a_step_in_a_pipe(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    tenants = [f"{tenant}-a", f"{tenant}-b"]
    server = _admin_server(server_factory, tenants)
    with MemoryClient(server.target, ADMIN) as admin:
        for name in tenants:
            admin.retain(name, f"a note of {name}")
    directory = tmp_path / "backup"
    env = {"MNEMOSYNE_TOKEN": ADMIN}
    status, shown = on_a_terminal(["backup", "--target", server.target, "--to", str(directory)], env)
    assert status == 0
    for name in tenants:
        assert f"backup: {name}: copied (1 memories" in shown, shown
    assert "backup: 2tenant [" in shown and "\r" in shown, shown  # tqdm's bar: the tenants copied so far
    status, shown = on_a_terminal(["backup", "--target", server.target, "--to", str(directory)], env)
    assert status == 0 and all(f"{name}: unchanged since the last backup" in shown for name in tenants), shown
    restored = ["restore", "--from", str(directory), "--data-dir", str(tmp_path / "restored")]
    status, shown = on_a_terminal(restored, env)
    assert status == 0 and all(f"restore: {name}: restored" in shown for name in tenants), shown
    assert "restore: 4step [" in shown, shown  # two tenants checked, two restored
    # Into a pipe: one plain line per step, no bar.
    piped = _cli("backup", "--target", server.target, "--to", str(directory))
    assert piped.returncode == 0 and "\r" not in piped.stderr and "[" not in piped.stderr, piped.stderr
    assert sorted(piped.stderr.splitlines()) == [f"backup: {name}: unchanged since the last backup" for name in tenants]


@dataclass
class _Streaming:
    """A server of this module with a tenant of several MB, and that tenant's export to copy it."""

    server: ServerProcess
    export: list[TenantBackup | BackupChunk]

    def copy(self, tenant: str) -> str:
        """A new tenant holding the large one's memories (imported: faster than writing them)."""
        with MemoryClient(self.server.target, ADMIN, timeout=120) as admin:
            manifest, *chunks = self.export
            assert isinstance(manifest, TenantBackup)
            admin.import_tenant(manifest, [c for c in chunks if isinstance(c, BackupChunk)], tenant=tenant)
        return tenant


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Streaming]:
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
    for server in module_server(tmp_path_factory, "streaming", env=env):
        with MemoryClient(server.target, ADMIN, timeout=120) as admin:
            # More than a stream's flow-control windows hold: a server is still sending when its
            # client stops reading, the scratch copy in place.
            for start in range(0, 12_000, 1000):
                admin.retain_batch(
                    "large", [f"note {i}: {'padding words ' * 12}{i}" for i in range(start, start + 1000)]
                )
            yield _Streaming(server, list(admin.export_tenant("large")))


def _streamed(channel: grpc.Channel, stream: str, tenant: str) -> Any:
    """The responses of an ExportTenant ("export") or Backup ("backup") stream of ``tenant``."""
    stub = admin_pb2_grpc.AdminServiceStub(channel)
    metadata = (("authorization", f"Bearer {ADMIN}"),)
    if stream == "export":
        return stub.ExportTenant(admin_pb2.ExportTenantRequest(tenant=tenant), metadata=metadata)
    return stub.Backup(admin_pb2.BackupRequest(tenants=[tenant]), metadata=metadata)


_READ_ONE_AND_DIE = """
import os, sys, grpc
from mnemosyne.v1 import admin_pb2, admin_pb2_grpc
target, token, tenant, stream = sys.argv[1:]
stub = admin_pb2_grpc.AdminServiceStub(grpc.insecure_channel(target))
metadata = (("authorization", "Bearer " + token),)
if stream == "export":
    responses = stub.ExportTenant(admin_pb2.ExportTenantRequest(tenant=tenant), metadata=metadata)
else:
    responses = stub.Backup(admin_pb2.BackupRequest(tenants=[tenant]), metadata=metadata)
next(responses)
os._exit(0)
"""


@pytest.mark.parametrize("stream", ["export", "backup"])
def test_a_stream_its_client_left_removes_its_scratch_copy_at_once(streaming: _Streaming, stream: str) -> None:
    """An export or backup whose client leaves mid-stream (cancelled, or its process killed) ends
    at once: its scratch copy of the tenant leaves the data directory within seconds, with no
    other call to the server (a forgotten memory's text must not stay in a copy), and the server
    logs no error."""
    server = streaming.server
    scratch = server.data_dir / ".backup-scratch"
    for _ in range(3):
        with grpc.insecure_channel(server.target) as channel:
            responses = _streamed(channel, stream, "large")
            next(responses)
            assert any(scratch.glob("*/database")), "the stream holds its scratch copy"
            responses.cancel()
        _wait_for(lambda: not any(scratch.glob("*")))
    # A client process that dies mid-stream: its connection closes with no cancellation sent.
    for _ in range(3):
        subprocess.run([sys.executable, "-c", _READ_ONE_AND_DIE, server.target, ADMIN, "large", stream], check=True)
        _wait_for(lambda: not any(scratch.glob("*")))
    log = server.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


# The stream's bound on a client that takes none of it (MNEMOSYNE_TEST_SEND_STALL_SECONDS; 30 s).
STALL_SECONDS = 3.0


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that ends a stream whose client takes none of it for STALL_SECONDS, one stream of
    a tenant open at a time (--streams-per-tenant 1), with a tenant of about 20 MB: several times
    what a stream's flow-control windows and its client's buffers hold (about 8 MiB on loopback),
    so a client that stops reading holds up the server's next write."""
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]}), "MNEMOSYNE_TEST_SEND_STALL_SECONDS": str(STALL_SECONDS)}
    for server in module_server(tmp_path_factory, "stalling", env=env, args=["--streams-per-tenant", "1"]):
        with MemoryClient(server.target, ADMIN, timeout=120) as admin:
            for _ in range(15):  # random hex: bytes no store or link makes fewer
                admin.retain_batch("wide", [secrets.token_hex(16_000) for _ in range(20)])
        yield server


def _whole_export(responses: Iterator[admin_pb2.ExportTenantResponse]) -> None:
    """Read an export to its end, checking each file against its manifest's size and SHA-256."""
    manifest, *chunks = responses
    received: dict[str, Any] = {f.name: hashlib.sha256() for f in manifest.manifest.files}
    sizes = dict.fromkeys(received, 0)
    for response in chunks:
        received[response.chunk.file].update(response.chunk.data)
        sizes[response.chunk.file] += len(response.chunk.data)
    assert len(chunks) > 10, "the tenant is several times what the windows hold"
    for file in manifest.manifest.files:
        assert (sizes[file.name], received[file.name].hexdigest()) == (file.size, file.sha256)


def test_an_export_its_client_stopped_reading_ends_and_frees_its_scratch_copy_and_its_place_once_its_client_goes(
    stalling: ServerProcess,
) -> None:
    """An export whose client read its first chunk and then nothing held its scratch copy of the
    tenant and its stream's place for good (the server's write waited on gRPC's flow control).
    The stream ends once its client took none of it for the bound: its copy is deleted at once
    and the server logs one line. gRPC keeps the call, and the message not taken, until its
    client reads on or goes, so the stream keeps its place in --streams-per-tenant (1 here) that
    long: however many streams a tenant leaves unread, they hold no more than that limit. Its
    client, reading on, gets what was sent before and then UNAVAILABLE STREAM_NOT_READ with a
    retry delay, and the place is free again."""
    scratch = stalling.data_dir / ".backup-scratch"
    logged = len(stalling.stderr_path.read_text(errors="replace"))
    with grpc.insecure_channel(stalling.target) as channel:
        stalled = _streamed(channel, "export", "wide")
        next(stalled), next(stalled)  # its manifest and a first chunk, then nothing for a while
        assert any(scratch.glob("*/database")), "the stream holds its scratch copy"
        began = time.monotonic()
        _wait_for(lambda: not any(scratch.glob("*")), timeout=STALL_SECONDS + 15)
        freed = time.monotonic() - began
        with pytest.raises(grpc.RpcError) as refused:
            next(_streamed(channel, "export", "wide"))
        refusal = error_info(refused.value)
        assert refusal is not None and refusal.reason == "STREAMS_PER_TENANT_REACHED", refused.value.details()
        with pytest.raises(grpc.RpcError) as ended:
            for _ in stalled:
                pass
        _wait_for(lambda: _exports_whole(channel))  # the place is given back as gRPC ends the call
    info = error_info(ended.value)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and info is not None, ended.value.details()
    assert info.reason == "STREAM_NOT_READ" and retry_delay(ended.value) == 1.0
    assert STALL_SECONDS - 0.5 < freed < STALL_SECONDS + 10, freed
    log = stalling.stderr_path.read_text(errors="replace")[logged:]
    assert log.count(f"its client took none of the stream for {STALL_SECONDS:g} s") == 1, log
    assert "ExportTenant of tenant wide" in log and "Traceback" not in log and " ERROR " not in log, log


def _exports_whole(channel: grpc.Channel) -> bool:
    """Whether an export of "wide" is taken and arrives whole (False while its place is held)."""
    try:
        _whole_export(_streamed(channel, "export", "wide"))
    except grpc.RpcError as refused:
        info = error_info(refused)
        if info is None or info.reason != "STREAMS_PER_TENANT_REACHED":
            raise
        return False
    return True


def test_an_export_read_slowly_but_steadily_is_sent_whole(stalling: ServerProcess) -> None:
    """A client reading its export a chunk at a time, slowly (one in each twelfth of the bound), is
    never cut: gRPC lets the server's next message through once its client read half of what its
    windows hold (2-4 chunks), always within the bound. Its file arrives whole."""
    logged = len(stalling.stderr_path.read_text(errors="replace"))

    def slowly(responses: Iterator[admin_pb2.ExportTenantResponse]) -> Iterator[admin_pb2.ExportTenantResponse]:
        for response in responses:
            yield response
            time.sleep(STALL_SECONDS / 12)

    with grpc.insecure_channel(stalling.target) as channel:
        _whole_export(slowly(_streamed(channel, "export", "wide")))
    assert "its client took none" not in stalling.stderr_path.read_text(errors="replace")[logged:]


def test_a_backup_refuses_a_tenant_it_is_told_is_held_that_is_no_tenant_or_named_twice(streaming: _Streaming) -> None:
    """``known`` (what the caller holds): a tenant that is no tenant id was passed over, and one
    named twice was held as its last copy; each is refused before anything is copied."""
    with MemoryClient(streaming.server.target, ADMIN, retries=0) as admin:
        with pytest.raises(InvalidArgumentError) as invalid:
            next(iter(admin.backup(["large"], {"../large": (1, 1)})))
        assert invalid.value.reason == "TENANT_INVALID" and "tenant '../large' is not a valid tenant id" in str(
            invalid.value
        )
    twice = [admin_pb2.BackedUpTenant(tenant="large", change_counter=n) for n in (1, 2)]
    with grpc.insecure_channel(streaming.server.target) as channel:
        responses = admin_pb2_grpc.AdminServiceStub(channel).Backup(
            admin_pb2.BackupRequest(tenants=["large"], known=twice), metadata=(("authorization", f"Bearer {ADMIN}"),)
        )
        with pytest.raises(grpc.RpcError) as refused:
            next(responses)
    info = error_info(refused.value)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info is not None
    assert info.reason == "TENANT_LISTED_TWICE" and "tenant large is named twice" in str(refused.value.details())


def test_a_tenant_s_exports_hold_at_most_two_scratch_copies(streaming: _Streaming) -> None:
    """Each export under way holds a copy of its tenant on the server's disk until its client has
    read it: a third export of the same tenant, its first two unread, is refused before a copy is
    made (RESOURCE_EXHAUSTED EXPORTS_PER_TENANT_REACHED, with a retry delay), not a hundredth
    copy of the tenant on the disk every tenant writes to; an operator's backup of that tenant is
    still sent, and an export again once one of the two ended."""
    scratch = streaming.server.data_dir / ".backup-scratch"
    with grpc.insecure_channel(streaming.server.target) as channel:
        held = [_streamed(channel, "export", "large") for _ in range(2)]
        for responses in held:
            next(responses)
        with pytest.raises(grpc.RpcError) as refused:
            next(_streamed(channel, "export", "large"))
        info = error_info(refused.value)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert info is not None and info.reason == "EXPORTS_PER_TENANT_REACHED" and info.metadata["limit"] == "2"
        assert retry_delay(refused.value) == 1.0 and "finish or cancel one" in (refused.value.details() or "")
        assert len(list(scratch.glob("*/database"))) == 2
        backup = _streamed(channel, "backup", "large")
        next(backup)
        backup.cancel()
        held.pop().cancel()
        _wait_for(lambda: len(list(scratch.glob("*/database"))) == 1)
        again = _streamed(channel, "export", "large")
        next(again)
        for responses in (again, *held):
            responses.cancel()
    _wait_for(lambda: not any(scratch.glob("*")))


@pytest.mark.parametrize(("stream", "erasure"), [("export", "forget"), ("backup", "forget"), ("export", "erase")])
def test_an_erasure_revokes_the_copies_being_sent(
    streaming: _Streaming, tenant: str, stream: str, erasure: str
) -> None:
    """A memory forgotten (or its tenant erased) while an export or backup of its tenant is being
    sent is in no file under the data directory once the call returns: the stream's scratch copy
    is revoked (deleted at once), and the stream ends ABORTED COPY_REVOKED, so its client copies
    again instead of keeping what was erased."""
    server = streaming.server
    streaming.copy(tenant)
    secret = f"the vault code is {uuid.uuid4().hex}"
    with MemoryClient(server.target, ADMIN) as admin:
        secret_id = admin.retain(tenant, secret).memory_id
    scratch = server.data_dir / ".backup-scratch"
    with grpc.insecure_channel(server.target) as channel:
        responses = _streamed(channel, stream, tenant)
        next(responses)  # the manifest: the copy is made, and sent as fast as it is read
        assert texts_left(scratch, [secret]), "the copy being sent holds the memory"
        with MemoryClient(server.target, ADMIN) as admin:
            if erasure == "forget":
                assert admin.forget(tenant, secret_id)
            else:
                admin.erase_tenant(tenant)
        assert texts_left(server.data_dir, [secret]) == {}
        with pytest.raises(grpc.RpcError) as revoked:
            for _ in responses:
                pass
        info = error_info(revoked.value)
        assert revoked.value.code() == grpc.StatusCode.ABORTED and info is not None and info.reason == "COPY_REVOKED"
    _wait_for(lambda: not any(scratch.glob("*")))


class _ForgetsOnceMidStream(MemoryClient):
    """A client whose first export or backup stream, once its tenant's manifest has come (the copy
    made and being sent), has the secret forgotten: the server revokes the copy."""

    def __init__(self, target: str, tenant: str, secret_id: int) -> None:
        super().__init__(target, ADMIN, timeout=120)
        self.tenant, self.secret_id, self.streams = tenant, secret_id, 0

    def _forgetting(self, parts: Iterator[Any]) -> Iterator[Any]:
        self.streams += 1
        for part in parts:
            yield part
            if self.streams == 1 and isinstance(part, TenantBackup):
                assert self.forget(self.tenant, self.secret_id)

    def export_tenant(self, tenant: str, timeout: float = 3600.0) -> Iterator[TenantBackup | BackupChunk]:
        return self._forgetting(super().export_tenant(tenant, timeout))

    def backup(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return self._forgetting(super().backup(*args, **kwargs))


@pytest.mark.parametrize("command", ["export", "backup"])
def test_an_export_or_backup_whose_copy_an_erasure_revoked_copies_again(
    streaming: _Streaming, tenant: str, command: str, tmp_path: Path
) -> None:
    """The export and backup commands ask for a copy again when an erasure revoked the one being
    sent (ABORTED COPY_REVOKED says to copy again): the command ends with a whole copy, without
    what was erased, instead of the error."""
    streaming.copy(tenant)
    secret = f"the vault code is {uuid.uuid4().hex}"
    with MemoryClient(streaming.server.target, ADMIN) as admin:
        secret_id = admin.retain(tenant, secret).memory_id
    lines: list[str] = []
    client = _ForgetsOnceMidStream(streaming.server.target, tenant, secret_id)
    with client:
        if command == "export":
            said = io.StringIO()
            write_archive(client, tenant, tmp_path / "archive.tar", progress=Progress("export", stream=said))
            lines = said.getvalue().splitlines()
        else:
            write_backup(client, tmp_path / "backup", tenants=[tenant], progress=lines.append)
        assert client.streams == 2, "copied once more after the revocation"
    assert any("copying again" in line or "backing up again" in line for line in lines), lines
    assert texts_left(tmp_path, [secret]) == {}
    if command == "export":
        with MemoryClient(streaming.server.target, ADMIN, timeout=120) as admin:
            assert import_archive(admin, tmp_path / "archive.tar", tenant=f"{tenant}-back").memories == 12_000
    else:
        assert restore(tmp_path / "backup", tmp_path / "restored") == [tenant]


def test_a_copy_revoked_while_it_is_made_stops_at_its_next_step(
    engine: Engine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy an erasure revoked while it was being made (an export's, its snapshot held) ran on
    to its last page for no one, and the erasure's truncation of the WAL waited for its snapshot
    under the tenant's write lock, every write with it (exports back to back beside forgets:
    forgets of 10-20 s, ending ERASURE_BUSY). It stops at the step after its revocation."""
    words = [uuid.uuid4().hex[:8] for _ in range(300)]
    for batch in range(4):  # a file of many steps
        engine.retain_batch(tenant, [RetainItem(" ".join(_words(words, batch * 500 + i))) for i in range(500)])
    secret = f"the vault code is {uuid.uuid4().hex}"
    secret_id = engine.retain(tenant, RetainItem(secret)).memory_id
    steps: list[str] = []
    forgotten: list[bool] = []
    forget = threading.Thread(target=lambda: forgotten.append(engine.memories.forget(tenant, secret_id)))
    scratch = engine.pool.data_dir / ".backup-scratch"

    def seam(store: TenantStore, name: str) -> None:
        steps.append(name)
        if steps.count("copy_step") == 1:  # the forget commits and revokes the copy, then waits for it
            forget.start()
            wait_until(lambda: not any(scratch.glob("*/database")))

    monkeypatch.setattr(TenantStore, "seam", seam)
    with pytest.raises(Conflict) as revoked:
        list(engine.backups.export(tenant))
    forget.join(timeout=30)
    assert revoked.value.reason == "COPY_REVOKED" and forgotten == [True]
    assert steps == ["copy_step"], f"the copy went on {len(steps) - 1} steps after its revocation"
    assert texts_left(engine.pool.data_dir, [secret]) == {}


def test_no_copy_begins_while_an_erasure_empties_the_wal(
    engine: Engine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy begun after an erasure revoked the copies being sent holds nothing erased, but its
    snapshot held up the erasure's truncation of the WAL for as long as the copy took, and exports
    back to back kept a forget waiting up to its bound (forgets of 4-15 s beside two exporters).
    None begins before the truncation is done; it runs after it, whole."""
    engine.retain_batch(tenant, [RetainItem(f"memory number {i}") for i in range(200)])
    secret = f"the vault code is {uuid.uuid4().hex}"
    secret_id = engine.retain(tenant, RetainItem(secret)).memory_id
    erasing = threading.Event()
    copy_begun = threading.Event()
    steps_while_erasing: list[bool] = []
    parts: list[Any] = []
    exporter = threading.Thread(target=lambda: parts.extend(engine.backups.export(tenant)))
    erase_traces = TenantStore.erase_traces

    def erasing_traces(store: TenantStore) -> None:
        erasing.set()
        try:
            erase_traces(store)
        finally:
            erasing.clear()

    def seam(store: TenantStore, name: str) -> None:
        if name == "copy_step":
            steps_while_erasing.append(erasing.is_set())
            copy_begun.set()

    class OpensAnExport:
        """Told as the erasure revokes the copies being sent: an export opened then."""

        def content_erased(self, erased: str) -> None:
            if erased == tenant and not exporter.is_alive() and not parts:
                exporter.start()
                copy_begun.wait(timeout=1.0)  # held back: it begins after the truncation

        def committed(self, _tenant: str) -> None: ...
        def installed(self, _tenant: str) -> None: ...
        def erased(self, _tenant: str) -> None: ...

    monkeypatch.setattr(TenantStore, "erase_traces", erasing_traces)
    monkeypatch.setattr(TenantStore, "seam", seam)
    engine.pool.watchers.append(OpensAnExport())
    assert engine.memories.forget(tenant, secret_id)
    exporter.join(timeout=30)
    assert steps_while_erasing and not any(steps_while_erasing), "a copy began while the erasure emptied the WAL"
    chunks = b"".join(p.data for p in parts if isinstance(p, FileChunk))
    assert chunks and secret.encode() not in chunks


def _words(words: list[str], start: int) -> list[str]:
    """300 of ``words`` from ``start`` on: a long text, another for each start."""
    return [words[(start + k * 7) % len(words)] for k in range(300)]


# -- crafted backup directories: refused in one line, nothing left behind ------------------------

# JSON that json.dumps writes for no Python value, put where an edit placed its marker.
_RAW = {'"@1e400"': "1e400", '"@surrogate"': '"\\ud800"', '"@deep"': "[" * 100_000 + "]" * 100_000}


def _manifest_edited(edit: Callable[[dict[str, Any]], object]) -> Callable[[Path], None]:
    """What rewrites a backup directory's manifest once ``edit`` changed it (markers as ``_RAW`` says)."""

    def rewrite(directory: Path) -> None:
        manifest = json.loads((directory / "manifest.json").read_text())
        edit(manifest)
        text = json.dumps(manifest)
        for marker, raw in _RAW.items():
            text = text.replace(marker, raw)
        (directory / "manifest.json").write_text(text)

    return rewrite


def _replaced(name: str, make: Callable[[Path], object]) -> Callable[[Path], None]:
    """What puts ``make(path)`` (a directory, a FIFO) in place of the file ``name`` of the directory."""

    def replace(directory: Path) -> None:
        path = directory / name
        path.unlink()
        make(path)

    return replace


def _with_trigger(directory: Path, copy: str) -> None:
    """A trigger no server makes added to the copy ``copy``, the manifest made to match it."""
    connection = apsw.Connection(str(directory / copy))
    connection.execute("CREATE TRIGGER not_ours AFTER INSERT ON memories BEGIN DELETE FROM memories; END")
    connection.close()
    size, digest = (directory / copy).stat().st_size, sha256_file(directory / copy)
    _manifest_edited(lambda m: _database_file(m).update(size=size, sha256=digest))(directory)


def _entry(m: dict[str, Any]) -> dict[str, Any]:
    return next(iter(m["tenants"].values()))


def _database_file(m: dict[str, Any]) -> dict[str, Any]:
    return _entry(m)["files"]["database"]  # type: ignore[no-any-return]  # JSON


# Each fault a restore (and a backup into the directory) must refuse, and what its line says.
BACKUP_FAULTS: dict[str, tuple[Callable[[Path], object], str, str]] = {
    "nested 200,000 deep": (
        lambda d: (d / "manifest.json").write_bytes(b"[" * 200_000 + b"]" * 200_000),
        "MANIFEST_INVALID",
        "nested too deep",
    ),
    "a field nested 100,000 deep": (
        _manifest_edited(lambda m: _entry(m).update(generations="@deep")),
        "MANIFEST_INVALID",
        "nested too deep",
    ),
    "a size of 1e400": (
        _manifest_edited(lambda m: _database_file(m).update(size="@1e400")),
        "MANIFEST_INVALID",
        "size is Infinity",
    ),
    "a generation of 1e400": (
        _manifest_edited(lambda m: _entry(m).update(generations={"g": "@1e400"})),
        "MANIFEST_INVALID",
        "Infinity",
    ),
    "a size of 2**70": (
        _manifest_edited(lambda m: _database_file(m).update(size=2**70)),
        "MANIFEST_INVALID",
        "size is 1180591620717411303424",
    ),
    "a change counter of 2**63": (
        _manifest_edited(lambda m: _entry(m).update(change_counter=2**63)),
        "MANIFEST_INVALID",
        "change_counter",
    ),
    "negative ledger entries": (
        _manifest_edited(lambda m: _entry(m).update(ledger_entries=-5)),
        "MANIFEST_INVALID",
        "ledger_entries is -5",
    ),
    "a counter that is text": (
        _manifest_edited(lambda m: _entry(m).update(inbox_sequence="12")),
        "MANIFEST_INVALID",
        'inbox_sequence is "12"',
    ),
    "no head hash": (_manifest_edited(lambda m: _entry(m).pop("head_hash")), "MANIFEST_INVALID", "'head_hash'"),
    "a lone surrogate in a path": (
        _manifest_edited(lambda m: _database_file(m).update(path="@surrogate")),
        "MANIFEST_INVALID",
        "half of a surrogate pair",
    ),
    "a path that is a number": (
        _manifest_edited(lambda m: _database_file(m).update(path=7)),
        "MANIFEST_INVALID",
        "path is 7",
    ),
    "no files": (_manifest_edited(lambda m: _entry(m).pop("files")), "MANIFEST_INVALID", "'files'"),
    "a tenant entry that is a list": (
        _manifest_edited(lambda m: m["tenants"].update({k: [] for k in m["tenants"]})),
        "MANIFEST_INVALID",
        "a list, not an object",
    ),
    'format_version "1"': (
        _manifest_edited(lambda m: m.update(format_version="1")),
        "MANIFEST_INVALID",
        'format_version is "1"',
    ),
    "Latin-1 text": (
        lambda d: (d / "manifest.json").write_bytes(
            (d / "manifest.json").read_text().replace('"server": "', '"server": "caf\u00e9 ').encode("latin-1")
        ),
        "MANIFEST_INVALID",
        "not UTF-8",
    ),
    # A sparse file: refused by its size, before a byte is read into memory.
    "a manifest larger than any": (
        lambda d: os.truncate(d / "manifest.json", BACKUP_MANIFEST_MAX_BYTES + 1),
        "MANIFEST_INVALID",
        "more than the",
    ),
    "manifest a directory": (_replaced("manifest.json", Path.mkdir), "MANIFEST_INVALID", "not a regular file"),
    "manifest a FIFO": (_replaced("manifest.json", os.mkfifo), "MANIFEST_INVALID", "not a regular file"),
}


def test_restore_refuses_a_malformed_backup_in_one_line_and_leaves_nothing(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """Each crafted backup directory (a manifest nested too deep, of the wrong types or out of
    int64's range, not UTF-8, not a regular file; a copy that is a directory or FIFO; a copy that
    does not match) is refused by ``restore`` with exit 2 and one line naming what is wrong and its
    reason, without a traceback, and leaves nothing: no data directory, no lock, not even in an
    empty one that was there. A ``backup`` into a directory with such a manifest is refused alike."""
    server = _admin_server(server_factory, [tenant])
    with MemoryClient(server.target, ADMIN) as admin:
        admin.retain(tenant, "a note for crafted backups")
    backup = tmp_path / "backup"
    assert _cli("backup", "--target", server.target, "--to", str(backup)).returncode == 0
    copy = _database_file(json.loads((backup / "manifest.json").read_text()))["path"]
    faults = {
        **BACKUP_FAULTS,
        "the copy a directory": (_replaced(copy, Path.mkdir), "BACKUP_FILE_MISSING", "not a regular file"),
        "the copy a FIFO": (_replaced(copy, os.mkfifo), "BACKUP_FILE_MISSING", "not a regular file"),
        "the copy cut short": (
            lambda d: (d / copy).write_bytes((d / copy).read_bytes()[:-4096]),
            "BACKUP_FILE_MISMATCH",
            "does not match",
        ),
        "a copy whose schema is not the server's (its manifest made to match)": (
            lambda d: _with_trigger(d, copy),
            "CHAIN_INVALID",
            "its schema has trigger not_ours",
        ),
        "a copy whose generations are not its manifest's": (
            _manifest_edited(lambda m: _entry(m).update(generations={"global": 7})),
            "MANIFEST_MISMATCH",
            "its manifest's generations say 7",
        ),
        "a miscounted copy": (
            _manifest_edited(lambda m: _entry(m).update(memories=_entry(m)["memories"] + 3)),
            "MANIFEST_MISMATCH",
            "holds 1 live memories; its manifest says 4",
        ),
    }
    empty = tmp_path / "empty"
    empty.mkdir()
    into_empty: set[str] = set()  # the reasons refused into an empty directory that was there
    with cli_session({"MNEMOSYNE_TOKEN": ADMIN}) as cli:  # one process: each refusal is main's, not its start's
        for number, (label, (fault, reason, says)) in enumerate(faults.items()):
            crafted = tmp_path / f"crafted-{number}"
            shutil.copytree(backup, crafted)
            fault(crafted)
            # Into a new directory every time; into the existing empty one once per reason (the
            # refusal is the same check whatever the directory).
            data_dirs = [tmp_path / f"restored-{number}"] + ([empty] if reason not in into_empty else [])
            into_empty.add(reason)
            for data_dir in data_dirs:
                result = cli.run("restore", "--from", str(crafted), "--data-dir", str(data_dir))
                lines = result.stderr.strip().splitlines()
                assert result.returncode == 2 and len(lines) == 1, (label, result.stderr[-2000:])
                assert f"[{reason}]" in lines[0] and says in lines[0], (label, lines[0])
            assert not (tmp_path / f"restored-{number}").exists(), label
            assert list(empty.iterdir()) == [], label
            if reason == "MANIFEST_INVALID":
                result = cli.run("backup", "--target", server.target, "--to", str(crafted))
                assert result.returncode == 2 and f"[{reason}]" in result.stderr, (label, result.stderr[-2000:])
                assert "Traceback" not in result.stderr, label
    # The backup the faults were made in restores: the refusals were the faults'.
    assert _cli("restore", "--from", str(backup), "--data-dir", str(empty)).returncode == 0
