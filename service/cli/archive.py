"""A tenant archive: one tenant exported from a server (``mnemosyne export``), to be imported into
another (``mnemosyne import``), across machines, clusters or versions.

Format (``mnemosyne-tenant-archive``, version 1): an uncompressed POSIX tar file whose members are,
in this order,

* ``manifest.json``: ``format``, ``format_version``, ``exported_at`` (seconds since the epoch),
  ``server`` (where it was exported from) and ``tenant``: what the copy holds, as the server
  described it (``tenant``, ``change_counter``, ``inbox_sequence``, ``head_hash``,
  ``ledger_entries``, ``memories``, ``last_event_id``, ``generations``) and ``files``, each with
  ``name`` ("database" or "inbox"), ``size``, ``sha256`` and ``member`` (its name in the tar);
* ``database.sqlite``: the tenant file, a consistent snapshot (SQLite's own format, schema
  version in its header);
* ``inbox.sqlite``: its hot-path inbox, when it had one.

An archive is written under a temporary name beside its destination, each file checked against
the size and SHA-256 the server announced (its bytes past that size refused as they arrive, and the
sizes held to the free space first: cli/received.py), and renamed once complete. An import streams the
members to the server, which checks them against the manifest and the chain against its head hash
before the tenant is put in place (engine/tenant_import.py). The tenant an archive or a server's
export names is held to the rule a client's is (store/paths.py).

An archive is read as outside data: before anything is sent, its manifest must be UTF-8 JSON of
the shape above (every count a whole number from 0 to 2^63-1, what the protocol's int64 carries;
every text UTF-8) and each member read a regular file, or the import is refused in one line
(ARCHIVE_INVALID; ARCHIVE_TRUNCATED when a member is missing or cannot be read). The checks of a
manifest's values are shared with the backup manifest's (cli/manifests.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mnemosyne.cli.manifests import (
    ARCHIVE_MANIFEST_MAX_BYTES,
    copy_figures,
    field,
    json_object,
    parse_manifest,
    sha256_hex,
    shown,
    text,
    whole_number,
    within_size,
)
from mnemosyne.cli.progress import Progress
from mnemosyne.cli.received import COPY_ATTEMPTS, check_announced, check_within, copied_again
from mnemosyne.client import MemoryClient, MnemosyneClientError
from mnemosyne.client.types import BackupChunk, BackupFile, ImportResult, TenantBackup
from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument
from mnemosyne.store.paths import tenant_named_by
from mnemosyne.store.snapshot import sha256_file

FORMAT = "mnemosyne-tenant-archive"
FORMAT_VERSION = 1
MANIFEST_MEMBER = "manifest.json"
MEMBER_OF_FILE = {"database": "database.sqlite", "inbox": "inbox.sqlite"}
CHUNK_BYTES = 1 << 20
_MEMBER_KIND = {
    tarfile.DIRTYPE: "a directory",
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
}


# -- export ---------------------------------------------------------------------------------


def _manifest_json(copy: TenantBackup, server: str) -> bytes:
    tenant: dict[str, Any] = {
        "tenant": copy.tenant,
        **copy.figures(),
        "files": [
            {"name": f.name, "size": f.size, "sha256": f.sha256, "member": MEMBER_OF_FILE[f.name]} for f in copy.files
        ],
    }
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "exported_at": time.time(),
        "server": server,
        "tenant": tenant,
    }
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


def write_archive(client: MemoryClient, tenant: str, path: Path, *, progress: Progress | None = None) -> TenantBackup:
    """Export ``tenant`` from the client's server into a new archive at ``path`` (``progress``: told
    the manifest, the bytes as they arrive, the check and the archive written)."""
    path = Path(path)
    progress = progress or Progress.silent("export")
    _make_way(path)
    with tempfile.TemporaryDirectory(prefix=f".export-{path.name}-", dir=path.parent) as scratch:

        def again(attempt: int) -> None:
            for received in Path(scratch).iterdir():
                received.unlink()
            progress(f"{tenant}: an erasure revoked the copy being sent; copying again ({attempt} of {COPY_ATTEMPTS})")

        copy = copied_again(lambda: _receive_export(client, tenant, path.parent, Path(scratch), progress), again)
        for file in copy.files:
            received = Path(scratch) / file.name
            if not received.exists() and file.size == 0:
                received.touch()
            size = received.stat().st_size if received.exists() else 0
            if size != file.size or sha256_file(received) != file.sha256:
                raise DataLoss(
                    f"the {file.name} file of the export arrived with {size} bytes, not as announced "
                    f"({file.size} bytes, SHA-256 {file.sha256[:12]}…)",
                    reason="BACKUP_FILE_MISMATCH",
                )
        progress(f"{copy.tenant}: received, every file as announced")
        temporary = path.with_name(f".partial-{uuid.uuid4().hex}-{path.name}")
        try:
            with tarfile.open(temporary, "w", format=tarfile.PAX_FORMAT) as archive:
                manifest = _manifest_json(copy, client.target)
                info = tarfile.TarInfo(MANIFEST_MEMBER)
                info.size, info.mtime = len(manifest), int(time.time())
                archive.addfile(info, io.BytesIO(manifest))
                for file in copy.files:
                    archive.add(Path(scratch) / file.name, arcname=MEMBER_OF_FILE[file.name], recursive=False)
            with open(temporary, "rb") as written:
                os.fsync(written.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    progress(f"{copy.tenant}: written to {path}")
    return copy


def _receive_export(
    client: MemoryClient, tenant: str, destination: Path, scratch: Path, progress: Progress
) -> TenantBackup:
    """The export stream's manifest, its files written into ``scratch``, each refused at once when
    it is not as announced (cli/received.py)."""
    copy: TenantBackup | None = None
    handles: dict[str, Any] = {}
    try:
        for part in client.export_tenant(tenant):
            if isinstance(part, TenantBackup):
                tenant_named_by(part.tenant, f"the export stream of {client.target}")
                check_announced(part, destination, "export", copies=2)  # its files, then the archive
                copy = part
                size = sum(f.size for f in part.files)
                progress.set_total(size)
                progress(f"{part.tenant}: {part.memories} memories, {size} bytes in {len(part.files)} files")
                continue
            if copy is None or part.file not in MEMBER_OF_FILE:
                raise DataLoss("the export stream sent file bytes before its manifest", reason="STREAM_INVALID")
            announced = next((f for f in copy.files if f.name == part.file), None)
            if announced is None:
                raise DataLoss(f"the export stream sent an unannounced file {part.file!r}", reason="STREAM_INVALID")
            handle = handles.get(part.file)
            if handle is None:
                handle = handles[part.file] = open(scratch / part.file, "wb")
            check_within(announced, handle.tell() + len(part.data), copy.tenant, "export")
            handle.write(part.data)
            progress.advance(len(part.data))
    finally:
        for handle in handles.values():
            handle.close()
    if copy is None:
        raise DataLoss("the export stream ended before its manifest", reason="STREAM_INVALID")
    return copy


def _make_way(path: Path) -> None:
    """Refuse an archive's ``path`` that exists (ARCHIVE_EXISTS), and remove what an export to it
    killed before its end left beside it (its scratch directory of received files, its partial
    archive)."""
    if path.is_symlink() and not path.exists():  # the archive would take the link's place, not its target's
        raise FailedPrecondition(
            f"{path} is a symbolic link (to nothing); give the archive a new name", reason="ARCHIVE_EXISTS"
        )
    if path.exists():
        raise FailedPrecondition(f"{path} exists; give the archive a new name", reason="ARCHIVE_EXISTS")
    scratch = re.compile(rf"\.export-{re.escape(path.name)}-[a-z0-9_]{{8}}")  # tempfile's random part
    partial = re.compile(rf"\.partial-[0-9a-f]{{32}}-{re.escape(path.name)}")
    for leftover in path.parent.iterdir():
        if scratch.fullmatch(leftover.name) and leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        elif partial.fullmatch(leftover.name):
            leftover.unlink(missing_ok=True)


def _refuse(path: Path, why: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"{path} is not a usable tenant archive: {why}", reason=reason)


def _regular(member: tarfile.TarInfo, path: Path) -> tarfile.TarInfo:
    """``member`` when it is a regular file: a directory, link, FIFO or device member has no bytes
    of its own, and reading one fails (or follows the link) far from here."""
    if not member.isfile():
        kind = _MEMBER_KIND.get(member.type, f"of tar type {member.type!r}")
        raise _refuse(path, f"its {member.name} member is {kind}, not a regular file", "ARCHIVE_INVALID")
    return member


def read_manifest(archive: tarfile.TarFile, path: Path) -> TenantBackup:
    """The archive's manifest (its first member), its whole shape checked: what an import sends is
    then known good before the call begins."""
    try:
        first = archive.next()
        if first is None or first.name != MANIFEST_MEMBER:
            raise _refuse(path, f"its first member is not {MANIFEST_MEMBER}", "ARCHIVE_INVALID")
        extracted = archive.extractfile(_regular(first, path))
        assert extracted is not None  # a regular member's
        within_size(first.size, ARCHIVE_MANIFEST_MAX_BYTES)
        data = extracted.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refuse(path, f"its manifest cannot be read ({exc})", "ARCHIVE_TRUNCATED") from None
    except ValueError as exc:  # its size, from the member's header: nothing read yet
        raise _refuse(path, f"its manifest is {exc}", "ARCHIVE_INVALID") from None
    try:
        manifest = parse_manifest(data)
    except ValueError as exc:
        raise _refuse(path, f"its manifest is {exc}", "ARCHIVE_INVALID") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _refuse(path, "its manifest is not a Mnemosyne tenant archive's", "ARCHIVE_INVALID")
    try:
        version = whole_number(field(manifest, "format_version", "the manifest"), "format_version")
        if version != FORMAT_VERSION:  # another version's shape is not this one's: said first
            raise _refuse(
                path, f"it has format version {version}; this program reads version {FORMAT_VERSION}", "ARCHIVE_VERSION"
            )
        return _copy(json_object(field(manifest, "tenant", "the manifest"), "tenant"), path)
    except ValueError as exc:
        raise _refuse(path, f"its manifest is malformed: {exc}", "ARCHIVE_INVALID") from None


def _copy(t: dict[str, Any], path: Path) -> TenantBackup:
    """The manifest's ``tenant`` object as the copy it describes; ValueError naming its first
    field of the wrong type or range."""
    files = field(t, "files", "tenant")
    if not isinstance(files, list):
        raise ValueError(f"tenant.files is {shown(files)}, not a list")
    copy = TenantBackup(
        tenant=tenant_named_by(text(field(t, "tenant", "tenant"), "tenant.tenant"), f"the archive {path}"),
        **copy_figures(t, "tenant"),
        files=[_file(json_object(f, f"tenant.files[{i}]"), f"tenant.files[{i}]") for i, f in enumerate(files)],
    )
    names = [f.name for f in copy.files]
    if "database" not in names or len(set(names)) != len(names):
        raise ValueError(f"tenant.files names {names[:4]}: the database once, and the inbox at most once")
    return copy


def _file(f: dict[str, Any], where: str) -> BackupFile:
    name = field(f, "name", where)
    if name not in MEMBER_OF_FILE:
        raise ValueError(f"{where}.name is {shown(name)}, not one of {sorted(MEMBER_OF_FILE)}")
    return BackupFile(
        name=name,
        size=whole_number(field(f, "size", where), f"{where}.size"),
        sha256=sha256_hex(field(f, "sha256", where), f"{where}.sha256"),
    )


def _members(archive: tarfile.TarFile, copy: TenantBackup, path: Path) -> dict[str, tarfile.TarInfo]:
    """The member of each of the copy's files (name -> member), each a regular file. The members
    follow the manifest, so the scan stops once they are found: bytes cut short within them are
    left to ``_chunks`` and the server (ARCHIVE_TRUNCATED, with the server's word on it)."""
    wanted = {MEMBER_OF_FILE[f.name]: f.name for f in copy.files}
    found: dict[str, tarfile.TarInfo] = {}
    try:
        while len(found) < len(wanted) and (member := archive.next()) is not None:
            if member.name in wanted and wanted[member.name] not in found:
                found[wanted[member.name]] = _regular(member, path)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refuse(path, f"it ends before its members ({exc})", "ARCHIVE_TRUNCATED") from None
    missing = [MEMBER_OF_FILE[f.name] for f in copy.files if f.name not in found]
    if missing:
        raise _refuse(path, f"it ends without its {', '.join(missing)} member", "ARCHIVE_TRUNCATED")
    return found


def _chunks(
    archive: tarfile.TarFile,
    copy: TenantBackup,
    members: dict[str, tarfile.TarInfo],
    problems: list[str],
    progress: Progress,
) -> Iterator[BackupChunk]:
    """The members' bytes in chunks. What cannot be read (a truncated archive) ends the stream
    early, noted in ``problems``: the server then refuses the import as truncated, and the
    command says which member could not be read besides the server's refusal."""
    for file in copy.files:
        try:
            extracted = archive.extractfile(members[file.name])
            assert extracted is not None  # a regular member's (``_members``)
            while data := extracted.read(CHUNK_BYTES):
                yield BackupChunk(file=file.name, data=data)
                progress.advance(len(data))
            progress(f"{copy.tenant}: {file.name} sent ({file.size} bytes)")
        except (tarfile.TarError, EOFError, OSError) as exc:
            problems.append(f"its {file.name} member cannot be read ({exc})")
            return


def import_archive(
    client: MemoryClient, path: Path, *, tenant: str = "", replace: bool = False, progress: Progress | None = None
) -> ImportResult:
    """Stream the archive at ``path`` to the client's server, which installs it (``progress``: told
    the manifest read, the bytes as they go, each file sent and the install)."""
    path = Path(path)
    progress = progress or Progress.silent("import")
    if path.exists() and not path.is_file():  # a directory fails to open; a FIFO would block the read
        raise _refuse(path, "it is not a regular file", "ARCHIVE_INVALID")
    try:
        archive = tarfile.open(path, "r:")
    except FileNotFoundError:
        raise InvalidArgument(f"{path} does not exist", reason="ARCHIVE_MISSING") from None
    except (tarfile.TarError, EOFError) as exc:
        raise _refuse(path, f"it is not a tar file ({exc})", "ARCHIVE_INVALID") from None
    problems: list[str] = []
    with archive:
        copy = read_manifest(archive, path)
        members = _members(archive, copy, path)
        size = sum(f.size for f in copy.files)
        progress.set_total(size)
        progress(f"{copy.tenant}: {copy.memories} memories, {size} bytes in {len(copy.files)} files")
        try:
            result = client.import_tenant(
                copy, _chunks(archive, copy, members, problems, progress), tenant=tenant, replace=replace
            )
            progress(f"{result.tenant}: installed")
            return result
        except MnemosyneClientError as exc:
            if not problems:
                raise
            # The server's refusal, with what was wrong with the file beside it.
            message = f"{exc.message} ({path}: {problems[0]})"
            raise type(exc)(exc.code, exc.reason, message, exc.metadata) from exc
