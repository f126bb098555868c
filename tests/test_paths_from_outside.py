"""Names and paths that come from outside (store/paths.py): a tenant name read from a backup's
manifest, a tenant archive or a server's answer is held to the rule a client's is, and no path
built from one leads outside its directory — not by ``..``, not by an absolute name, not through a
symbolic link. `mnemosyne restore`, `backup`, `export` and `import` run as commands, against real
servers and, for a hostile one, a real gRPC server on loopback that answers with such names."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.v1 import admin_pb2
from tests.support import ServerProcess, tokens_json

ADMIN = "admin-token-paths"
# Names no client could give, each of which, joined to a directory, leads out of it or is no name.
HOSTILE = ["../../pwned", "../pwned", "/tmp/pwned-absolute", "tenants/../../pwned", "..", "Pwned", ""]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MNEMOSYNE_TOKEN": ADMIN},
    )


def _everything(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _outside(root: Path, inside: Path, before: set[Path]) -> list[Path]:
    """What appeared under ``root`` since ``before``, outside the directory ``inside`` (and not
    one of the folders that lead to it)."""
    return sorted(
        p for p in _everything(root) - before if not p.is_relative_to(inside) and not inside.is_relative_to(p)
    )


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """A real server with two tenants and a real backup of it (the directory is copied by each
    test before it edits it)."""
    root = tmp_path_factory.mktemp("backed-up")
    server = ServerProcess(root / "data", env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}).start()
    with MemoryClient(server.target, ADMIN) as client:
        for tenant in ("alpha", "beta"):
            client.retain_batch(tenant, [f"{tenant} note {i}: the quay in Tallinn" for i in range(20)])
    result = _cli("backup", "--target", server.target, "--to", str(root / "backup"))
    assert result.returncode == 0, result.stderr
    yield server, root / "backup"
    server.stop()


def _edited_backup(backup: Path, to: Path, edit) -> Path:
    shutil.copytree(backup, to)
    manifest = json.loads((to / "manifest.json").read_text())
    edit(to, manifest)
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to


@pytest.mark.parametrize("name", ["../../outside/pwn", *HOSTILE])
def test_restore_refuses_a_manifest_naming_a_tenant_no_client_could(
    backed_up: tuple[ServerProcess, Path], tmp_path: Path, name: str
) -> None:
    def rename(directory: Path, manifest: dict[str, Any]) -> None:
        manifest["tenants"][name] = manifest["tenants"].pop("alpha")

    backup = _edited_backup(backed_up[1], tmp_path / "deep" / "er" / "backup", rename)
    data = tmp_path / "deep" / "er" / "data"
    before = _everything(tmp_path)
    result = _cli("restore", "--from", str(backup), "--data-dir", str(data))
    assert result.returncode == 2 and "[TENANT_INVALID]" in result.stderr, result.stderr
    assert "names a tenant no client could" in result.stderr
    # Nothing restored at all (the other tenant neither: every name is checked first), nothing
    # written outside the data directory.
    assert not any((data / "tenants").glob("*.sqlite"))
    assert _outside(tmp_path, data, before) == []
    assert not [p for p in tmp_path.rglob("*pwn*")]


def test_restore_refuses_a_manifest_file_path_that_leads_outside(
    backed_up: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    """The manifest's file paths are read from: one that climbs out, one that is absolute, and one
    that is a symbolic link inside the backup to a file outside it (here a real tenant file of
    another data directory, its size and SHA-256 written into the manifest so that every other
    check passes) are refused before anything is read or put in place."""
    server, original = backed_up
    foreign = tmp_path / "foreign.sqlite"  # a tenant file that is not the backup's
    shutil.copyfile(server.tenant_file("beta"), foreign)
    digest = hashlib.sha256(foreign.read_bytes()).hexdigest()

    def point(path: str, link: bool):
        def edit(directory: Path, manifest: dict[str, Any]) -> None:
            if link:
                (directory / path).symlink_to(foreign)
            manifest["tenants"]["beta"]["files"]["database"].update(
                path=path, size=foreign.stat().st_size, sha256=digest
            )

        return edit

    cases = {
        "climbs": point("../foreign.sqlite", link=False),
        "absolute": point(str(foreign), link=False),
        "link": point("tenants/beta.c99.i0.sqlite", link=True),
    }
    for label, edit in cases.items():
        backup = _edited_backup(original, tmp_path / f"backup-{label}", edit)
        data = tmp_path / f"data-{label}"
        result = _cli("restore", "--from", str(backup), "--data-dir", str(data), "--tenant", "beta")
        assert result.returncode == 2 and "[PATH_ESCAPES]" in result.stderr, (label, result.stderr)
        assert not (data / "tenants" / "beta.sqlite").exists(), label


def test_restore_says_a_manifest_file_path_through_a_loop_of_links_is_unusable(
    backed_up: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    """A manifest's file that is a loop of symbolic links leads nowhere: the command says so with
    the path and PATH_UNUSABLE (it was a RuntimeError traceback), and restores nothing."""

    def loop(directory: Path, manifest: dict[str, Any]) -> None:
        path = manifest["tenants"]["beta"]["files"]["database"]["path"]
        (directory / path).unlink()
        (directory / path).symlink_to(directory / path)

    backup = _edited_backup(backed_up[1], tmp_path / "backup", loop)
    result = _cli("restore", "--from", str(backup), "--data-dir", str(tmp_path / "data"), "--tenant", "beta")
    assert result.returncode == 2 and "[PATH_UNUSABLE]" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "symbolic links" in result.stderr
    assert not (tmp_path / "data" / "tenants" / "beta.sqlite").exists()


# -- a hostile (or broken) server ----------------------------------------------------------------


class HostileServer:
    """A real gRPC server on loopback speaking AdminService's Backup and ExportTenant (and nothing
    else), answering each with the messages it is given."""

    def __init__(self) -> None:
        self.backup: list[admin_pb2.BackupResponse] = []
        self.export: list[admin_pb2.ExportTenantResponse] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Backup": grpc.unary_stream_rpc_method_handler(
                lambda _request, _context: iter(self.backup),
                request_deserializer=admin_pb2.BackupRequest.FromString,
                response_serializer=admin_pb2.BackupResponse.SerializeToString,
            ),
            "ExportTenant": grpc.unary_stream_rpc_method_handler(
                lambda _request, _context: iter(self.export),
                request_deserializer=admin_pb2.ExportTenantRequest.FromString,
                response_serializer=admin_pb2.ExportTenantResponse.SerializeToString,
            ),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("mnemosyne.v1.AdminService", handlers),)
        )
        self.target = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(None)


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.stop()


DATA = b"SQLite format 3\x00" + b"\x00" * 4080  # the bytes of a "tenant file"


def _copy(tenant: str) -> admin_pb2.TenantBackup:
    digest = hashlib.sha256(DATA).hexdigest()
    return admin_pb2.TenantBackup(
        tenant=tenant,
        change_counter=1,
        head_hash="0" * 64,
        ledger_entries=1,
        files=[admin_pb2.BackupFile(name="database", size=len(DATA), sha256=digest)],
    )


@pytest.mark.parametrize("name", HOSTILE)
def test_backup_refuses_a_tenant_name_a_server_sends(hostile: HostileServer, tmp_path: Path, name: str) -> None:
    hostile.backup = [
        admin_pb2.BackupResponse(tenant=_copy(name)),
        admin_pb2.BackupResponse(chunk=admin_pb2.BackupChunk(file="database", data=DATA)),
        admin_pb2.BackupResponse(summary=admin_pb2.BackupSummary(copied=1, bytes=len(DATA))),
    ]
    backup = tmp_path / "a" / "b" / "backup"
    before = _everything(tmp_path)
    result = _cli("backup", "--target", hostile.target, "--to", str(backup))
    assert result.returncode == 2 and "[TENANT_INVALID]" in result.stderr, result.stderr
    assert _outside(tmp_path, backup, before) == []
    assert not (backup / "manifest.json").exists()  # nothing recorded
    assert [p.name for p in backup.rglob("*") if p.is_file() and p.name != ".lock"] == []


def test_backup_refuses_to_write_through_a_folder_that_links_outside(hostile: HostileServer, tmp_path: Path) -> None:
    hostile.backup = [
        admin_pb2.BackupResponse(tenant=_copy("gamma")),
        admin_pb2.BackupResponse(chunk=admin_pb2.BackupChunk(file="database", data=DATA)),
        admin_pb2.BackupResponse(summary=admin_pb2.BackupSummary(copied=1, bytes=len(DATA))),
    ]
    backup, elsewhere = tmp_path / "backup", tmp_path / "elsewhere"
    backup.mkdir()
    elsewhere.mkdir()
    (backup / "tenants").symlink_to(elsewhere)
    result = _cli("backup", "--target", hostile.target, "--to", str(backup))
    assert result.returncode == 2 and "[PATH_ESCAPES]" in result.stderr, result.stderr
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("name", ["../../pwned", "Pwned"])
def test_export_refuses_a_tenant_name_a_server_sends(hostile: HostileServer, tmp_path: Path, name: str) -> None:
    hostile.export = [
        admin_pb2.ExportTenantResponse(manifest=_copy(name)),
        admin_pb2.ExportTenantResponse(chunk=admin_pb2.BackupChunk(file="database", data=DATA)),
    ]
    archive = tmp_path / "out" / "alpha.tar"
    archive.parent.mkdir()
    result = _cli("export", "--target", hostile.target, "--tenant", "alpha", "--to", str(archive))
    assert result.returncode == 2 and "[TENANT_INVALID]" in result.stderr, result.stderr
    assert list(archive.parent.iterdir()) == []


@pytest.mark.parametrize("name", ["../../pwned", "Pwned"])
def test_import_refuses_an_archive_naming_a_tenant_no_client_could(
    backed_up: tuple[ServerProcess, Path], tmp_path: Path, name: str
) -> None:
    server, _backup = backed_up
    archive = tmp_path / "alpha.tar"
    assert _cli("export", "--target", server.target, "--tenant", "alpha", "--to", str(archive)).returncode == 0
    hostile = tmp_path / "hostile.tar"
    with tarfile.open(archive) as source, tarfile.open(hostile, "w") as out:
        for member in source.getmembers():
            extracted = source.extractfile(member)
            assert extracted is not None, member.name
            data = extracted.read()
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest["tenant"]["tenant"] = name
                data = json.dumps(manifest).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    result = _cli("import", "--target", server.target, "--from", str(hostile))
    assert result.returncode == 2 and "[TENANT_INVALID]" in result.stderr, result.stderr
    assert sorted(p.name for p in (server.data_dir / "tenants").glob("*.sqlite")) == ["alpha.sqlite", "beta.sqlite"]
    assert not [p for p in server.data_dir.parent.rglob("*pwned*")]
    with MemoryClient(server.target, ADMIN) as client:
        assert sorted(client.list_tenants().tenants) == ["alpha", "beta"]


def _announcing(size: int) -> admin_pb2.TenantBackup:
    copy = _copy("gamma")
    copy.files[0].size = size
    return copy


@pytest.mark.parametrize("stream", ["backup", "export"])
@pytest.mark.parametrize(
    ("announced", "reason", "says"),
    [
        (len(DATA), "BACKUP_FILE_MISMATCH", f"sent more than the {len(DATA)} bytes it announced for the database"),
        (-1, "STREAM_INVALID", "announces -1 bytes for the database file of tenant gamma"),
        (2**62, "DISK_FULL", "needs"),
    ],
)
def test_a_stream_that_is_not_as_announced_is_refused_before_its_bytes_are_written(
    hostile: HostileServer, tmp_path: Path, stream: str, announced: int, reason: str, says: str
) -> None:
    """A hostile or broken server's file longer than it announced was written whole (the disk
    filled, then DISK_FULL), and a size no disk holds, or a negative one, was taken: refused at the
    first chunk past the size, or before any byte, with nothing of the copy left."""
    from mnemosyne.cli.archive import write_archive
    from mnemosyne.cli.backup import write_backup
    from mnemosyne.errors import MnemosyneError

    chunk = admin_pb2.BackupChunk(file="database", data=DATA)
    hostile.backup = [admin_pb2.BackupResponse(tenant=_announcing(announced))]
    hostile.backup += [admin_pb2.BackupResponse(chunk=chunk)] * 2
    hostile.backup.append(admin_pb2.BackupResponse(summary=admin_pb2.BackupSummary(copied=1, bytes=2 * len(DATA))))
    hostile.export = [admin_pb2.ExportTenantResponse(manifest=_announcing(announced))]
    hostile.export += [admin_pb2.ExportTenantResponse(chunk=chunk)] * 2
    written = tmp_path / "out"
    written.mkdir()
    with MemoryClient(hostile.target) as client, pytest.raises(MnemosyneError) as refused:
        if stream == "backup":
            write_backup(client, written / "backup")
        else:
            write_archive(client, "gamma", written / "gamma.tar")
    assert refused.value.reason == reason and says in refused.value.message, refused.value
    assert list(written.iterdir()) == []
