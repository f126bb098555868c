"""Export of one tenant and import into another server: the same tenant there (recall results,
generations, head hash, event ids, request ids, counters), and the refusals of a tampered,
truncated or broken archive, an existing tenant, a user's token and a kill midway."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import apsw
import grpc
import pytest

from mnemosyne.cli.archive import MEMBER_OF_FILE, import_archive, read_manifest
from mnemosyne.cli.manifests import ARCHIVE_MANIFEST_MAX_BYTES
from mnemosyne.client import (
    AbortedError,
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryClient,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    convert,
)
from mnemosyne.client.convert import tenant_backup_to_proto
from mnemosyne.client.errors import error_info
from mnemosyne.client.types import BackupChunk, BackupFile, RetainItem, RetainResult, TenantBackup, ThreadRef
from mnemosyne.store.snapshot import sha256_file
from mnemosyne.v1 import admin_pb2
from tests.support import ServerFactory, ServerProcess, on_a_terminal, tokens_json, wait_until

ADMIN = "admin-token-export"
USER = "user-token-export"
QUERIES = ["refund for ticket RF-88213", "parcel delivered Monday", "status of ticket RF-1"]


def _servers(server_factory: ServerFactory, tenant: str) -> tuple[ServerProcess, ServerProcess]:
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [tenant]})}
    return server_factory(env=env).start(), server_factory(env=env).start()


class Populated(TypedDict):
    first: RetainResult
    generation: int
    event_id: int


def _populate(client: MemoryClient, tenant: str) -> Populated:
    client.retain_batch(
        tenant,
        [
            "The customer requested a refund for ticket RF-88213",
            "Ticket RF-1 status: awaiting review",
            "Ticket RF-1 status: refunded",
            "The parcel PX-77 was delivered on Monday",
            RetainItem("Dana called about the parcel yesterday", occurred_at=1_683_554_160.5, thread=ThreadRef("d", 1)),
            RetainItem("Dana asked where the parcel is", thread=ThreadRef("d", 0), speaker="Dana"),
        ],
    )
    first = client.retain(tenant, "Dana prefers e-mail over phone calls", request_id="req-export-1")
    generation = client.update_global(tenant, "# Memory\n- prefers e-mail\n", 0)
    client.hot_path(tenant, "enable")
    fast = client.retain(tenant, "The invoice INV-5 was paid in full", fast=True)
    client.hot_path(tenant, "flush")
    return {"first": first, "generation": generation, "event_id": fast.event_id}


def _archive(tmp_path: Path, server: ServerProcess, tenant: str, name: str = "t.tar") -> Path:
    path = tmp_path / name
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemosyne.cli",
            "export",
            "--target",
            server.target,
            "--tenant",
            tenant,
            "--to",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MNEMOSYNE_TOKEN": USER},  # the tenant's own token may export it
    )
    assert result.returncode == 0, result.stderr
    return path


def test_export_then_import_is_the_same_tenant(server_factory, tenant: str, tmp_path: Path) -> None:
    source, target = _servers(server_factory, tenant)
    with MemoryClient(source.target, ADMIN) as a:
        seen = _populate(a, tenant)
        recalled = {q: [(h.memory.id, h.memory.text) for h in a.recall(tenant, q, k=3)] for q in QUERIES}
        thread = a.list_memories(tenant, thread="d").memories
        assert [(m.thread, m.occurred_at, m.speaker) for m in thread] == [
            (ThreadRef("d", 0), None, "Dana"),
            (ThreadRef("d", 1), 1_683_554_160.5, ""),
        ]
        head = a.verify_integrity(tenant).head_hash
        stats = a.stats(tenant)
        event = a.get_event(tenant, seen["event_id"])
    archive = _archive(tmp_path, source, tenant)
    with tarfile.open(archive) as tar:
        assert tar.getnames()[0] == "manifest.json" and "database.sqlite" in tar.getnames()

    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "import", "--target", target.target, "--from", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN},
    )
    assert result.returncode == 0, result.stderr
    with MemoryClient(target.target, ADMIN) as b:
        assert {q: [(h.memory.id, h.memory.text) for h in b.recall(tenant, q, k=3)] for q in QUERIES} == recalled
        assert b.list_memories(tenant, thread="d").memories == thread  # time, thread and speaker moved with it
        assert b.verify_integrity(tenant).valid and b.verify_integrity(tenant).head_hash == head
        moved = b.stats(tenant)
        assert (moved.memories, moved.writes, moved.model_calls, moved.ledger_entries) == (
            stats.memories,
            stats.writes,
            stats.model_calls,
            stats.ledger_entries,
        )
        assert b.get_event(tenant, event.event_id).status == event.status  # event ids move with it
        # The request id is still known: a retry answers with the first result, no new memory.
        again = b.retain(tenant, "Dana prefers e-mail over phone calls", request_id="req-export-1")
        assert again == seen["first"]
        # The observation taken before the export lets the agent write after the import.
        generation = b.update_global(tenant, "# Memory\n- prefers e-mail\n- call after 5pm\n", seen["generation"])
        assert generation == seen["generation"] + 1
        with pytest.raises(AbortedError):
            b.update_global(tenant, "# stale\n", seen["generation"])
        b.retain(tenant, "a note written after the import")

        # An existing tenant is refused without replace, and replaced with it.
        with pytest.raises(FailedPreconditionError) as exists:
            import_archive(b, archive)
        assert exists.value.reason == "TENANT_EXISTS"
        assert import_archive(b, archive, replace=True).replaced
        assert b.verify_integrity(tenant).head_hash == head
        # Under another name too.
        copy = import_archive(b, archive, tenant=f"{tenant}-copy")
        assert copy.tenant == f"{tenant}-copy" and b.verify_integrity(copy.tenant).head_hash == head


def test_export_and_import_show_bytes_on_a_terminal_and_a_line_a_step_in_a_pipe(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    source, target = _servers(server_factory, tenant)
    with MemoryClient(source.target, ADMIN) as client:
        client.retain(tenant, "a memory that travels")
    archive = tmp_path / "shown.tar"
    env = {"MNEMOSYNE_TOKEN": ADMIN}
    status, shown = on_a_terminal(["export", "--target", source.target, "--tenant", tenant, "--to", str(archive)], env)
    assert status == 0 and f"export: {tenant}: written to {archive}" in shown, shown
    assert "export: 100%|" in shown and "B/s]" in shown, shown  # tqdm's bar of bytes, all sent
    status, shown = on_a_terminal(["import", "--target", target.target, "--from", str(archive)], env)
    assert status == 0 and f"import: {tenant}: installed" in shown and "import: 100%|" in shown, shown
    # Into a pipe: one plain line per step, no bar.
    piped = tmp_path / "piped.tar"
    command = [sys.executable, "-m", "mnemosyne.cli", "export", "--target", source.target, "--tenant", tenant]
    done = subprocess.run(
        [*command, "--to", str(piped)], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert done.returncode == 0 and "\r" not in done.stderr and "%" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [["export", tenant]] * 3, lines
    assert (
        lines[0].startswith(f"export: {tenant}: 1 memories, ") and lines[-1] == f"export: {tenant}: written to {piped}"
    )


def _rewrite(archive: Path, out: Path, edit_database, manifest_sha: bool = False) -> Path:
    """A copy of the archive whose database member went through ``edit_database(path)``; with
    ``manifest_sha`` the manifest is made to match the edited file."""
    work = out.parent / f"{out.name}.d"
    work.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    edit_database(work / "database.sqlite")
    if manifest_sha:
        manifest = json.loads((work / "manifest.json").read_text())
        entry = next(f for f in manifest["tenant"]["files"] if f["name"] == "database")
        entry.update(size=(work / "database.sqlite").stat().st_size, sha256=sha256_file(work / "database.sqlite"))
        (work / "manifest.json").write_text(json.dumps(manifest))
    with tarfile.open(out, "w") as tar:
        for name in ("manifest.json", *MEMBER_OF_FILE.values()):
            if (work / name).exists():
                tar.add(work / name, arcname=name)
    return out


def test_import_refuses_what_is_not_the_exported_tenant(server_factory, tenant: str, tmp_path: Path) -> None:
    source, target = _servers(server_factory, tenant)
    with MemoryClient(source.target, ADMIN) as a:
        a.retain_batch(tenant, [f"note {i} about the archive" for i in range(30)])
    archive = _archive(tmp_path, source, tenant)

    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    def forge(path: Path) -> None:
        connection = apsw.Connection(str(path))
        connection.execute("UPDATE memories SET body = 'a forged note' WHERE id = 3")
        connection.close()

    def foreign_trigger(path: Path) -> None:  # the chain stays valid: only the schema says it
        connection = apsw.Connection(str(path))
        connection.execute(
            "CREATE TRIGGER not_ours AFTER INSERT ON memories BEGIN DELETE FROM memories WHERE id = 1; END"
        )
        connection.close()

    def index_gone(path: Path) -> None:
        connection = apsw.Connection(str(path))
        index = connection.execute("SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL").fetchall()
        connection.execute(f"DROP INDEX {index[0][0]}")
        connection.close()

    tampered = _rewrite(archive, tmp_path / "tampered.tar", flip)
    forged = _rewrite(archive, tmp_path / "forged.tar", forge, manifest_sha=True)
    # Whose manifest was made to match, chain valid, schema not the server's: installed, the
    # trigger ran in every write (INTERNAL), a missing index slowed every read.
    triggered = _rewrite(archive, tmp_path / "triggered.tar", foreign_trigger, manifest_sha=True)
    unindexed = _rewrite(archive, tmp_path / "unindexed.tar", index_gone, manifest_sha=True)
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])

    with MemoryClient(target.target, ADMIN, retries=0) as b, MemoryClient(target.target, USER, retries=0) as user:
        with pytest.raises(PermissionDeniedError):
            import_archive(user, archive)
        for path, reason, says in (
            (tampered, "ARCHIVE_MISMATCH", ""),
            (forged, "CHAIN_INVALID", ""),
            (triggered, "CHAIN_INVALID", "its schema has trigger not_ours"),
            (unindexed, "CHAIN_INVALID", "its schema has index"),
            (truncated, "ARCHIVE_TRUNCATED", ""),
        ):
            with pytest.raises(InvalidArgumentError) as refused:
                import_archive(b, path)
            assert refused.value.reason == reason and says in str(refused.value), (path.name, refused.value)
        # A stream that ends early, past the client's own checks: the server refuses it.
        with tarfile.open(archive) as tar:
            manifest = read_manifest(tar, archive)
            database = tar.extractfile("database.sqlite")
            assert database is not None
            data = database.read()
        with pytest.raises(InvalidArgumentError) as short:
            b.import_tenant(manifest, [BackupChunk("database", data[: len(data) // 3])])
        assert short.value.reason == "ARCHIVE_TRUNCATED"
        # Whole files whose manifest miscounts the live memories (the call would echo the count).
        for claimed in (manifest.memories + 1, manifest.memories - 1, 2**62):
            with pytest.raises(InvalidArgumentError) as miscounted:
                b.import_tenant(dataclasses.replace(manifest, memories=claimed), [BackupChunk("database", data)])
            assert miscounted.value.reason == "MANIFEST_MISMATCH", claimed
        # ... or gives another change counter, event id or generations than the file holds: they
        # were taken on trust (a host compares its writes with a scope's generation).
        for claims in (
            {"change_counter": manifest.change_counter + 1},
            {"last_event_id": manifest.last_event_id + 5},
            {"last_event_id": -1},
            {"inbox_sequence": 2**62},
            {"generations": {**manifest.generations, "global": 9}},
        ):
            with pytest.raises(InvalidArgumentError) as misdescribed:
                b.import_tenant(dataclasses.replace(manifest, **claims), [BackupChunk("database", data)])
            assert misdescribed.value.reason == "MANIFEST_MISMATCH", claims
            assert next(iter(claims)) in str(misdescribed.value), misdescribed.value
        # A stream with no message, and one whose second message does not decode.
        first = admin_pb2.ImportTenantRequest(manifest=tenant_backup_to_proto(manifest)).SerializeToString()
        with grpc.insecure_channel(target.target) as channel:
            send = channel.stream_unary(
                "/mnemosyne.v1.AdminService/ImportTenant",
                request_serializer=lambda data: data,
                response_deserializer=lambda data: data,
            )
            for messages, reason in (([], "STREAM_EMPTY"), ([first, b"\xff\xff\xff"], "REQUEST_UNDECODABLE")):
                with pytest.raises(grpc.RpcError) as raw:
                    send(iter(messages), metadata=(("authorization", f"Bearer {ADMIN}"),), timeout=30)
                assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                info = error_info(raw.value)
                assert info is not None and info.reason == reason
        assert tenant not in b.list_tenants().tenants
        # Nothing half-written: the scratch space holds nothing and no file has the tenant's name.
        assert [p for p in target.data_dir.rglob("*") if tenant in p.name] == []
        assert not any((target.data_dir / ".backup-scratch").glob("*"))
        # The export was good all along.
        assert import_archive(b, archive).tenant == tenant


@pytest.mark.parametrize(
    "inbox",
    [b"\x00" * 4096, b"SQLite format 3\x00" + b"\xff" * 4080, b"random bytes that are no database"],
    ids=["zeros", "damaged-header", "text"],
)
def test_an_import_whose_inbox_is_no_inbox_is_refused_and_the_tenant_it_would_replace_stays(
    server_factory, tenant: str, inbox: bytes
) -> None:
    """An archive whose manifest lists an inbox that matches its size and SHA-256 but is not an
    inbox the tenant could open is refused (CHAIN_INVALID) before anything is installed: installed,
    every hot-path call of the tenant would fail with TENANT_CORRUPT."""
    source, target = _servers(server_factory, tenant)
    with MemoryClient(source.target, ADMIN) as a:
        a.retain(tenant, "a note the archive holds")
        parts = list(a.export_tenant(tenant))
    manifest = parts[0]
    assert isinstance(manifest, TenantBackup)
    chunks = [p for p in parts[1:] if isinstance(p, BackupChunk) and p.file == "database"]
    digest = hashlib.sha256(inbox).hexdigest()
    files = [f for f in manifest.files if f.name == "database"] + [BackupFile("inbox", len(inbox), digest)]
    forged = dataclasses.replace(manifest, files=files)
    with MemoryClient(target.target, ADMIN, retries=0) as b:
        b.retain(tenant, "the tenant the import would replace")
        with pytest.raises(InvalidArgumentError) as refused:
            b.import_tenant(forged, [*chunks, BackupChunk("inbox", inbox)], replace=True)
        assert refused.value.reason == "CHAIN_INVALID", refused.value
        b.hot_path(tenant, "enable")
        assert b.retain(tenant, "a fast note", fast=True).status == "enqueued"
        texts = {m.text for m in b.list_memories(tenant).memories}
        assert "the tenant the import would replace" in texts and "a note the archive holds" not in texts
        assert not any((target.data_dir / ".backup-scratch").glob("*"))


def test_a_server_killed_during_an_import_keeps_nothing_of_it(server_factory, tenant: str, tmp_path: Path) -> None:
    source, target = _servers(server_factory, tenant)
    with MemoryClient(source.target, ADMIN) as a:
        a.retain_batch(tenant, [f"note {i} before the kill" for i in range(30)])
    archive = _archive(tmp_path, source, tenant)
    with tarfile.open(archive) as tar:
        manifest = read_manifest(tar, archive)
        database = tar.extractfile("database.sqlite")
        assert database is not None
        data = database.read()
    sent, release = threading.Event(), threading.Event()

    def chunks() -> Iterator[BackupChunk]:
        yield BackupChunk("database", data[:4096])
        sent.set()
        release.wait(30)
        yield BackupChunk("database", data[4096:])

    failures: list[BaseException] = []

    def run() -> None:
        with MemoryClient(target.target, ADMIN, retries=0) as b:
            try:
                b.import_tenant(manifest, chunks())
            except BaseException as exc:  # the server dies under it
                failures.append(exc)

    importer = threading.Thread(target=run)
    importer.start()
    assert sent.wait(30)
    _wait_for_scratch(target.data_dir)
    target.kill()
    release.set()
    importer.join(30)
    assert failures
    target.start()
    with MemoryClient(target.target, ADMIN) as b:
        assert tenant not in b.list_tenants().tenants
        assert b.list_memories(tenant).memories == []
    assert not any((target.data_dir / ".backup-scratch").glob("*"))


def _wait_for_scratch(data_dir: Path) -> None:
    deadline = time.monotonic() + 30
    while not any((data_dir / ".backup-scratch").glob("*/database")):
        assert time.monotonic() < deadline, "the import never began writing"
        time.sleep(0.02)


def test_an_operation_open_at_the_export_is_applied_after_the_import(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.write_text("commit")  # the source's workers hold before committing: the write stays open
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [tenant]})}
    source = server_factory(env={**env, "MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    target = server_factory(env=env).start()
    with MemoryClient(source.target, ADMIN) as a:
        a.hot_path(tenant, "enable")
        accepted = a.retain(tenant, "The courier CX-9 arrives on Friday", fast=True)
        assert a.get_event(tenant, accepted.event_id).status in ("pending", "running")
    archive = _archive(tmp_path, source, tenant)
    with MemoryClient(target.target, ADMIN) as b:
        import_archive(b, archive)
        b.hot_path(tenant, "flush")
        event = b.get_event(tenant, accepted.event_id)
        assert event.status == "succeeded"
        assert [m.text for m in b.list_memories(tenant).memories] == ["The courier CX-9 arrives on Friday"]
    hold.unlink()


def test_a_disk_that_fills_during_an_import_keeps_nothing_of_it(server_factory, tenant: str, tmp_path: Path) -> None:
    """The server's disk fills while an import writes its scratch files (the file_bytes seam: the
    write fails with ENOSPC, as on a full filesystem): RESOURCE_EXHAUSTED DISK_FULL, no tenant,
    nothing of it in the scratch space or under the tenant's name; with room again it imports."""
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [tenant]})}
    source = server_factory(env=env).start()
    with MemoryClient(source.target, ADMIN) as a:
        a.retain_batch(tenant, [f"note {i} about the archive and {'padding ' * 20}" for i in range(200)])
    archive = _archive(tmp_path, source, tenant)
    with tarfile.open(archive) as tar:
        size = tar.getmember("database.sqlite").size
    target = server_factory(env={**env, "MNEMOSYNE_TEST_FAULTS": f"file_bytes={size // 2}"}).start()
    with MemoryClient(target.target, ADMIN, retries=0) as b:
        with pytest.raises(ResourceExhaustedError) as full:
            import_archive(b, archive)
        assert full.value.reason == "DISK_FULL", full.value
        # One that announces more than the disk has free is refused before a byte is written (it
        # had filled the disk every tenant writes to, then said DISK_FULL).
        with tarfile.open(archive) as tar:
            manifest = read_manifest(tar, archive)
        huge = dataclasses.replace(manifest, files=[BackupFile("database", 2**62, manifest.files[0].sha256)])
        with pytest.raises(ResourceExhaustedError) as announced:
            b.import_tenant(huge, [BackupChunk("database", b"x" * 4096)])
        assert announced.value.reason == "DISK_FULL" and "announces 4611686018427387904 bytes" in str(announced.value)
        assert tenant not in b.list_tenants().tenants
        assert b.list_memories(tenant).memories == []
    assert [p for p in target.data_dir.rglob("*") if tenant in p.name] == []
    assert not any((target.data_dir / ".backup-scratch").glob("*"))
    target.stop()
    target.env.pop("MNEMOSYNE_TEST_FAULTS")
    target.start()
    with MemoryClient(target.target, ADMIN) as b:
        assert import_archive(b, archive).tenant == tenant
        assert b.verify_integrity(tenant).valid


# -- a client that leaves an import --replace, or a server killed under it ----------------------

# The moments a client leaves an import (or the server is killed): after a message of the stream
# (the manifest alone, a chunk, the last chunk), just after the stream ended (its install under
# way or not yet), while the install waits for a call in flight on the old tenant (closed to new
# calls: TENANT_REPLACING), and at the install's seams (store/pool.py ``install``: begun, its new
# files staged, its tenant file renamed into place). Before the install begins nothing changes;
# from there it runs to its end; a kill leaves the old tenant until the commit, the new one from it.
SENT = ["manifest", "chunk-1", "chunk-3", "last-chunk"]
ENDED = ["ended", "ended+0.05s", "ended+0.1s", "ended+0.2s"]
RECEIVED = "import_received"  # every byte in the server's scratch space, nothing checked yet
SEAMS = [RECEIVED, "install_begun", "install_staged", "install_committed"]
REPLACING = "replacing"
CHUNKS = 6


class Replacing:
    """A target server whose tenants an export of another tenant replaces, the install's seams
    armed by files (``hold@NAME=PATH``: held there while PATH exists); and that export, with an
    operation open in its inbox (accepted, not yet taken by a worker)."""

    def __init__(self, root: Path) -> None:
        self.holds = {seam: root / f"hold-{seam}" for seam in SEAMS}
        faults = ",".join(f"hold@{seam}={path}" for seam, path in self.holds.items())
        env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
        self.workers_hold = root / "hold-workers"  # the target's workers hold before a commit while it exists
        self.target = ServerProcess(
            root / "target",
            env={
                **env,
                "MNEMOSYNE_TEST_FAULTS": faults,
                "MNEMOSYNE_TEST_HOLD_WORKERS": str(self.workers_hold),
                "MNEMOSYNE_LOG_LEVEL": "DEBUG",  # a call its client left is logged (CANCELLED)
            },
        )
        hold = root / "hold-source"
        hold.write_text("inbox")  # the source's workers leave its fast write in the inbox
        source = ServerProcess(root / "source", env={**env, "MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
        try:
            with MemoryClient(source.target, ADMIN) as a:
                a.retain_batch("new", [f"new note {i}: the ferry to Hydra leaves pier {i}" for i in range(300)])
                a.hot_path("new", "enable")
                a.retain("new", "new note: the inbox holds this one", fast=True)
                parts = list(a.export_tenant("new"))
        finally:
            source.stop()
        self.manifest = next(p for p in parts if not isinstance(p, BackupChunk))
        self.new = sorted([f"new note {i}: the ferry to Hydra leaves pier {i}" for i in range(300)])
        self.new = sorted([*self.new, "new note: the inbox holds this one"])
        files: dict[str, bytes] = {}
        for part in parts:
            if isinstance(part, BackupChunk):
                files[part.file] = files.get(part.file, b"") + part.data
        assert set(files) == {"database", "inbox"}
        step = len(files["database"]) // CHUNKS + 1
        self.chunks = [
            BackupChunk("database", files["database"][i : i + step]) for i in range(0, len(files["database"]), step)
        ] + [BackupChunk("inbox", files["inbox"])]
        self.old = sorted(f"old note {i} of the tenant in place" for i in range(5))

    def held(self, seam: str) -> int:
        """How many times the target logged that it held at ``seam``."""
        return self.target.stderr_path.read_text(errors="replace").count(f"held at {seam} ")

    def left(self) -> int:
        """How many imports the target saw their client leave."""
        return self.target.stderr_path.read_text(errors="replace").count("ImportTenant CANCELLED")

    def settled(self) -> bool:
        """No import under way on the target: its scratch space and its staged installs empty."""
        data = self.target.data_dir
        return not any((data / ".backup-scratch").glob("*")) and not any((data / "tenants").glob(".install-*"))


@pytest.fixture(scope="module")
def replacing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replacing]:
    made = Replacing(tmp_path_factory.mktemp("replacing"))
    made.target.start()
    yield made
    made.target.stop()


def _contents(client: MemoryClient, tenant: str) -> list[str]:
    """The tenant's memories, once what its hot path accepted is applied; its chain valid."""
    client.hot_path(tenant, "flush", 30)
    assert client.verify_integrity(tenant).valid
    texts, token = [], ""
    while True:
        page = client.list_memories(tenant, page_size=500, page_token=token)
        texts += [m.text for m in page.memories]
        if not (token := page.next_page_token):
            return sorted(texts)


def _leave_an_import(replacing: Replacing, tenant: str, moment: str, *, kill: bool = False) -> None:
    """Import the export as ``tenant`` with replace, and leave at ``moment``: the client cancels
    its call (or, ``kill``, the target is SIGKILLed there and started again)."""
    sent, release = threading.Event(), threading.Event()
    last = len(replacing.chunks)
    stop_after = {"manifest": 0, "chunk-1": 1, "chunk-3": 3, "last-chunk": last}.get(moment, -1)

    def requests() -> Iterator[admin_pb2.ImportTenantRequest]:
        yield admin_pb2.ImportTenantRequest(
            tenant=tenant, manifest=convert.tenant_backup_to_proto(replacing.manifest), replace=True
        )
        for number, chunk in enumerate(replacing.chunks, start=1):
            if number - 1 == stop_after:
                break
            yield admin_pb2.ImportTenantRequest(chunk=admin_pb2.BackupChunk(file=chunk.file, data=chunk.data))
        if stop_after >= 0:  # leave before the stream ends: nothing more is sent
            sent.set()
            release.wait(60)
            return
        sent.set()

    hold = replacing.holds.get(moment)
    if hold is not None:
        hold.touch()
    held = replacing.held(moment) if hold is not None else 0
    left = replacing.left()
    with MemoryClient(replacing.target.target, ADMIN, retries=0) as client:
        if moment == REPLACING:  # a worker holds the old tenant in use, before its commit
            replacing.workers_hold.write_text("commit")
            accepted = client.retain(tenant, "old note 5, in flight while it is replaced", fast=True)
            wait_until(lambda: client.get_event(tenant, accepted.event_id).status == "running", 30)
        call = client.admin.ImportTenant.future(requests(), timeout=120, metadata=client.call_metadata)
        try:
            assert sent.wait(60)
            if hold is not None:
                wait_until(lambda: replacing.held(moment) > held, 30)
            elif moment == REPLACING:
                wait_until(lambda: _refused(client, tenant) == "TENANT_REPLACING", 30)
            elif moment.startswith("ended+"):
                time.sleep(float(moment.removeprefix("ended+").removesuffix("s")))
            if kill:
                replacing.target.kill()
            else:
                call.cancel()
                # The server saw its client leave while the import is held there. A call cancelled
                # as its requests were sent, nothing holding it, may be gone before the server
                # began it (then nothing logs it): settled below is what such a moment promises.
                if hold is not None or moment == REPLACING:
                    wait_until(lambda: replacing.left() > left, 30)
        finally:
            release.set()
            if hold is not None:
                hold.unlink()
            replacing.workers_hold.unlink(missing_ok=True)
    if kill:
        replacing.target.restart(60)
    wait_until(replacing.settled, 60)


def _refused(client: MemoryClient, tenant: str) -> str:
    """The reason a read of the tenant is refused for ("" when it is answered)."""
    try:
        client.stats(tenant)
    except UnavailableError as exc:
        return exc.reason
    return ""


def _old_tenant(replacing: Replacing, tenant: str) -> None:
    with MemoryClient(replacing.target.target, ADMIN) as client:
        client.retain_batch(tenant, [f"old note {i} of the tenant in place" for i in range(4)])
        client.hot_path(tenant, "enable")
        client.retain(tenant, "old note 4 of the tenant in place", fast=True)
        client.hot_path(tenant, "flush", 30)


@pytest.mark.parametrize("moment", [*SENT, *ENDED, REPLACING, *SEAMS])
def test_a_client_that_leaves_an_import_replace_leaves_one_whole_tenant(replacing: Replacing, moment: str) -> None:
    tenant = f"left-at-{moment.replace('+', '-').replace('.', '-').replace('_', '-')}"
    _old_tenant(replacing, tenant)
    _leave_an_import(replacing, tenant, moment)
    with MemoryClient(replacing.target.target, ADMIN) as client:
        contents = _contents(client, tenant)
        if moment in (*SENT, RECEIVED):  # before its install began: nothing changed
            assert contents == replacing.old
        elif moment in (*SEAMS, REPLACING):  # past the point of no return: the install ran to its end
            assert contents == replacing.new
        else:  # the client left as the install may have begun: one of the two, whole
            assert contents in (replacing.old, replacing.new)
        assert tenant in client.list_tenants().tenants


def test_an_exception_of_the_callers_chunks_cancels_the_import_and_is_raised_as_it_is(
    replacing: Replacing, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The caller's generator failing midway (the file it reads gone) failed in gRPC's request
    # iterator: logged "Exception iterating requests", the caller given an opaque UNKNOWN.
    tenant = "left-by-its-chunks"
    _old_tenant(replacing, tenant)
    raised: list[OSError] = []

    def chunks() -> Iterator[BackupChunk]:
        yield from replacing.chunks[:3]
        try:
            open(tmp_path / "gone", "rb")  # noqa: SIM115  # the file the caller reads, gone
        except OSError as exc:
            raised.append(exc)
            raise

    with MemoryClient(replacing.target.target, ADMIN, retries=0) as client:
        with pytest.raises(FileNotFoundError) as info:
            client.import_tenant(replacing.manifest, chunks(), tenant=tenant, replace=True)
        assert info.value is raised[0]  # the caller's own, its traceback to where it was raised
        assert info.traceback[-1].name == "chunks" and info.value.__cause__ is None
    assert "Exception iterating requests" not in caplog.text
    wait_until(replacing.settled, 30)  # nothing of it in the scratch space, no install staged
    with MemoryClient(replacing.target.target, ADMIN) as client:
        assert _contents(client, tenant) == replacing.old


@pytest.mark.parametrize("seam", SEAMS)
def test_a_server_killed_during_an_import_replace_starts_with_one_whole_tenant(replacing: Replacing, seam: str) -> None:
    tenant = f"killed-at-{seam.replace('_', '-')}"
    _old_tenant(replacing, tenant)
    _leave_an_import(replacing, tenant, seam, kill=True)
    with MemoryClient(replacing.target.target, ADMIN) as client:
        # Killed before the commit, the old tenant is as it was; after it, the new one, its
        # inbox put in place at the start (the operation it held applied once).
        assert _contents(client, tenant) == (replacing.new if seam == "install_committed" else replacing.old)


# -- crafted archives: refused in one line, before the call ------------------------------------

# A member of a crafted archive: its name, its kind ("file", "dir", "fifo", "symlink", "hardlink")
# and its bytes (a file) or what it links to.
Member = tuple[str, str, bytes | str]
# JSON that json.dumps writes for no Python value, put where the edit placed its marker.
_RAW = {'"@1e400"': "1e400", '"@surrogate"': '"\\ud800"', '"@deep"': "[" * 100_000 + "]" * 100_000}


def _crafted(path: Path, members: list[Member]) -> Path:
    """A tar at ``path`` holding ``members`` in that order, as given."""
    kinds = {"dir": tarfile.DIRTYPE, "fifo": tarfile.FIFOTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}
    with tarfile.open(path, "w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            if isinstance(content, bytes):
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            else:
                info.type, info.linkname = kinds[kind], content
                tar.addfile(info)
    return path


def _edited(edit: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], bytes]:
    """The manifest's bytes once ``edit`` changed a copy of it (its markers written as ``_RAW`` says)."""

    def write(manifest: dict[str, Any]) -> bytes:
        copied = json.loads(json.dumps(manifest))
        edit(copied)
        text = json.dumps(copied)
        for marker, raw in _RAW.items():
            text = text.replace(marker, raw)
        return text.encode()

    return write


def _latin1(manifest: dict[str, Any]) -> bytes:
    return json.dumps({**manifest, "server": "caf\u00e9 du nord"}, ensure_ascii=False).encode("latin-1")


def _database(m: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in m["tenant"]["files"] if f["name"] == "database")


# Each manifest an import must refuse ARCHIVE_INVALID, and what its line says.
ARCHIVE_MANIFESTS: dict[str, tuple[Callable[[dict[str, Any]], bytes], str]] = {
    "nested 200,000 deep": (lambda _m: b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
    "a field nested 100,000 deep": (_edited(lambda m: m["tenant"].update(generations="@deep")), "nested too deep"),
    "a size of 1e400": (_edited(lambda m: _database(m).update(size="@1e400")), "size is Infinity"),
    "a generation of 1e400": (_edited(lambda m: m["tenant"].update(generations={"g": "@1e400"})), "Infinity"),
    "a change counter of 2**70": (_edited(lambda m: m["tenant"].update(change_counter=2**70)), "change_counter"),
    "ledger entries of 2**63": (_edited(lambda m: m["tenant"].update(ledger_entries=2**63)), "ledger_entries"),
    "a negative memory count": (_edited(lambda m: m["tenant"].update(memories=-1)), "memories is -1"),
    "a size that is a float": (_edited(lambda m: _database(m).update(size=4096.0)), "size is 4096.0"),
    "an event id that is true": (_edited(lambda m: m["tenant"].update(last_event_id=True)), "last_event_id is true"),
    "no change counter": (_edited(lambda m: m["tenant"].pop("change_counter")), "has no 'change_counter'"),
    'format_version "1"': (_edited(lambda m: m.update(format_version="1")), 'format_version is "1"'),
    "Latin-1 text": (_latin1, "not UTF-8"),
    "a lone surrogate": (_edited(lambda m: m["tenant"].update(head_hash="@surrogate")), "half of a surrogate pair"),
    "a SHA-256 that is not hex": (_edited(lambda m: _database(m).update(sha256="zz" * 32)), "SHA-256"),
    "files as an object": (_edited(lambda m: m["tenant"].update(files={"database": 1})), "not a list"),
    "no database file": (_edited(lambda m: m["tenant"].update(files=[])), "the database once"),
    "a file named ../x": (_edited(lambda m: _database(m).update(name="../x")), "name is"),
    "a tenant that is a number": (_edited(lambda m: m["tenant"].update(tenant=12345)), "not text"),
}


def _refused_in_one_line(result: subprocess.CompletedProcess[str], reason: str, says: str, case: str) -> None:
    """Exit 2 and one line (no traceback) with ``reason`` that says ``says``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, (case, result.returncode, result.stderr[-2000:])
    assert f"[{reason}]" in lines[0] and says in lines[0], (case, lines[0])


def test_import_refuses_a_malformed_archive_in_one_line_before_the_call(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """Each crafted archive (a manifest nested too deep, of the wrong types or out of int64's
    range, not UTF-8; a manifest or file member that is no regular file, or missing) is refused
    with exit 2 and one line naming what is wrong and its reason, before anything is sent: no
    traceback, no UNKNOWN from inside gRPC's request stream, nothing on the server."""
    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"], USER: [tenant]})}).start()
    with MemoryClient(server.target, ADMIN) as client:
        client.retain_batch(tenant, [f"note {i} about crafted archives" for i in range(5)])
    with tarfile.open(_archive(tmp_path, server, tenant)) as tar:
        read = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]  # files
    manifest, database = json.loads(read["manifest.json"]), read["database.sqlite"]
    cases: dict[str, tuple[list[Member], str, str]] = {
        label: (
            [("manifest.json", "file", write(manifest)), ("database.sqlite", "file", database)],
            "ARCHIVE_INVALID",
            says,
        )
        for label, (write, says) in ARCHIVE_MANIFESTS.items()
    }
    good = ("manifest.json", "file", read["manifest.json"])
    for kind, to in (("dir", ""), ("fifo", ""), ("symlink", "nothere"), ("symlink", "database.sqlite")):
        cases[f"manifest a {kind} {to}"] = (
            [("manifest.json", kind, to), ("database.sqlite", "file", database)],
            "ARCHIVE_INVALID",
            "not a regular file",
        )
    cases["manifest a hard link"] = (
        [("manifest.json", "hardlink", "database.sqlite"), ("database.sqlite", "file", database)],
        "ARCHIVE_INVALID",
        "not a regular file",
    )
    for kind, to in (
        ("dir", ""),
        ("fifo", ""),
        ("symlink", "/etc/passwd"),
        ("symlink", "missing"),
        ("hardlink", "manifest.json"),
    ):
        cases[f"database a {kind} {to}"] = (
            [good, ("database.sqlite", kind, to)],
            "ARCHIVE_INVALID",
            "not a regular file",
        )
    cases["no database member"] = (
        [good, ("inbox.sqlite", "file", b"x")],
        "ARCHIVE_TRUNCATED",
        "database.sqlite member",
    )

    # A manifest member whose header claims more bytes than any manifest has (the file sparse: none
    # written) is refused by that size, before a byte of it is read into memory.
    huge = tmp_path / "huge-manifest.tar"
    with huge.open("wb") as file:
        info = tarfile.TarInfo("manifest.json")
        info.size = ARCHIVE_MANIFEST_MAX_BYTES + 1
        file.write(info.tobuf())
        file.truncate(file.tell() + info.size + (-info.size % 512) + 1024)

    copy = f"{tenant}-copy"
    every: list[tuple[str, tuple[list[Member] | Path, str, str]]] = [
        *cases.items(),
        ("a manifest larger than any", (huge, "ARCHIVE_INVALID", "more than the")),
    ]
    for number, (label, (members, reason, says)) in enumerate(every):
        archive = members if isinstance(members, Path) else _crafted(tmp_path / f"crafted-{number}.tar", members)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mnemosyne.cli",
                "import",
                "--target",
                server.target,
                "--from",
                str(archive),
                "--tenant",
                copy,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN},
        )
        _refused_in_one_line(result, reason, says, label)
    with MemoryClient(server.target, ADMIN) as client:
        assert copy not in client.list_tenants().tenants
        assert not any((server.data_dir / ".backup-scratch").glob("*"))
        # The same members, none crafted, import: the refusals were the faults'.
        archive = _crafted(tmp_path / "uncrafted.tar", [good, ("database.sqlite", "file", database)])
        assert import_archive(client, archive, tenant=copy).tenant == copy


def test_an_export_killed_midway_leaves_what_the_next_export_to_its_path_removes(
    server_factory, tenant: str, tmp_path: Path
) -> None:
    """SIGKILL of `mnemosyne export` while it receives: its scratch directory (and a partial
    archive, if it got that far) stays beside the target, and the next export to the same path
    removes them and writes the archive; another path's leftovers are not touched."""
    env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
    server = server_factory(env=env).start()
    with MemoryClient(server.target, ADMIN, timeout=120) as admin:
        for start in range(0, 12_000, 1000):  # several MB: the export is still receiving when killed
            admin.retain_batch(tenant, [f"note {i}: {'padding words ' * 12}{i}" for i in range(start, start + 1000)])
    folder = tmp_path / "exports"
    folder.mkdir()
    other = folder / f".partial-{'0' * 32}-other.tar"
    other.write_bytes(b"another export's")
    command = [sys.executable, "-m", "mnemosyne.cli", "export", "--target", server.target, "--tenant", tenant]
    killed = subprocess.Popen(
        [*command, "--to", str(folder / "t.tar")],
        env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: any(p.name.startswith(".export-t.tar-") for p in folder.iterdir()), seconds=60)
    killed.kill()
    killed.wait(timeout=10)
    assert any(p.name.startswith(".export-t.tar-") for p in folder.iterdir()), "the kill leaves its scratch"
    again = subprocess.run(
        [*command, "--to", str(folder / "t.tar")],
        env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in folder.iterdir()) == [other.name, "t.tar"]
    # A path that is a link to nothing exists too: the archive would take the link's place.
    link = folder / "latest.tar"
    link.symlink_to(tmp_path / "not-yet" / "latest.tar")
    refused = subprocess.run(
        [*command, "--to", str(link)], env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN}, capture_output=True, text=True
    )
    _refused_in_one_line(refused, "ARCHIVE_EXISTS", "symbolic link", "a link to nothing")
    assert link.is_symlink() and sorted(p.name for p in folder.iterdir()) == [other.name, "latest.tar", "t.tar"]
