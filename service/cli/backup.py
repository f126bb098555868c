"""A backup directory: what ``mnemosyne backup`` writes from a server's backup stream, on the
machine that runs it, and what ``mnemosyne restore`` puts back into a data directory (offline).

Layout::

    DIR/manifest.json                         the manifest (below), replaced atomically
    DIR/tenants/<tenant>.c<counter>.i<inbox>.sqlite        a tenant file as copied
    DIR/inbox/<tenant>.c<counter>.i<inbox>.inbox.sqlite    its hot-path inbox, when it had one
    DIR/.lock                                 held (flock) by the one backup writing DIR

The manifest (``format`` "mnemosyne-backup", ``format_version`` 1) names, per tenant, its files
(path, size, SHA-256) and what its copy holds: the head hash of its audit chain, its ledger
entries, live memories, scope generations, last hot-path event id, change counter and inbox
sequence. Every file is received under a temporary name (``.partial-…``), checked against the
size and SHA-256 the server announced, synced, and only then renamed; the manifest is written
last, the same way, so an interrupted backup leaves the previous manifest and every file it names
as they were (a first backup that fails removes the directory it made). A tenant's file names
carry its change counter, so a changed tenant never overwrites the copy the previous manifest
names. Files no manifest names are removed after the new manifest is in place.

A restore checks every selected tenant before it puts any file in place: the files' sizes and
SHA-256 against the manifest, each tenant file's audit chain (valid, with the head hash and
entry count of the manifest), and the copy's other figures (store/snapshot.py ``check_copy``). It takes the data directory's lock, so it refuses a directory a
running server owns, and installs each tenant as an import does (store/install.py): its copies
staged under temporary names, the tenant file replaced in one rename, the inbox after it (the pool
removes what a kill left before that rename, and finishes an install killed after it: store/pool.py).

Neither trusts what it reads: a tenant name from the server's stream or from a manifest is held to
the rule a client's is, and every path joined from one (a copy's name, a manifest's file path)
must stay under its directory (store/paths.py), or nothing is written. A manifest's whole shape
is checked as it is read, before anything is used (MANIFEST_INVALID: a regular file of UTF-8
JSON, every count a whole number an int64 holds, every text UTF-8: cli/manifests.py), and
a restore checks every selected tenant before it creates or locks the data directory: a refused
restore leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mnemosyne.cli.manifests import (
    BACKUP_MANIFEST_MAX_BYTES,
    copy_figures,
    field,
    json_object,
    parse_manifest,
    sha256_hex,
    text,
    whole_number,
    within_size,
)
from mnemosyne.cli.received import COPY_ATTEMPTS, check_announced, check_within, copied_again
from mnemosyne.client import MemoryClient
from mnemosyne.client.types import BackupChunk, BackupSummary, BackupUnchanged, SkippedTenant, TenantBackup
from mnemosyne.errors import DataLoss, FailedPrecondition, InvalidArgument, ResourceExhausted
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.data_dir import (
    INBOX_DIR_NAME,
    INBOX_FILE_SUFFIX,
    NEW_FILE_PREFIX,
    TENANT_FILE_SUFFIX,
    DataDirLock,
    local_state,
    refuse_inside_another,
)
from mnemosyne.store.file_faults import FileBudget
from mnemosyne.store.files import checkpoint_away, fsync
from mnemosyne.store.install import finish, old_file_only, stage_and_commit, stamp_new_timeline
from mnemosyne.store.paths import tenant_named_by, within
from mnemosyne.store.pending_index import PendingIndex
from mnemosyne.store.snapshot import SnapshotFacts, check_copy, sha256_file
from mnemosyne.store.tenant_ids import validate_tenant

MANIFEST_NAME = "manifest.json"
FORMAT = "mnemosyne-backup"
FORMAT_VERSION = 1
LOCK_NAME = ".lock"
PARTIAL_PREFIX = ".partial-"

# Told a line as each step ends (cli/progress.py ``Progress`` is one).
StepDone = Callable[[str], None]


_COPY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}\.c\d+\.i\d+(\.inbox)?\.sqlite")


def listed(names: Sequence[str], most: int = 10) -> str:
    """``names`` as a message lists them: the first ``most``, and how many more (a command given
    thousands of --tenant flags is told in one line a person reads)."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _hold(stage: str) -> None:
    """The test seam MNEMOSYNE_TEST_LIFECYCLE_HOLD (runtime/seams.py): while its file holds this
    stage's name, the stage waits (work is then provably half done when a test kills the process)."""
    seams = Seams.from_environment()
    hold = seams.lifecycle_hold_file if seams is not None else None
    while hold is not None:
        try:
            if hold.read_text().strip() != stage:
                return
        except FileNotFoundError:
            return
        time.sleep(0.02)


def _disk_full(where: Path) -> ResourceExhausted:
    return ResourceExhausted(
        f"the disk holding {where} is full; the backup directory is as it was before (its manifest and the "
        "files it names are unchanged)",
        reason="DISK_FULL",
    )


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a backup directory, its whole shape checked; FAILED_PRECONDITION when there
    is none or it is not one this code reads."""
    path = directory / MANIFEST_NAME
    if path.exists() and not path.is_file():  # a directory fails to read; a FIFO would block the read
        raise FailedPrecondition(f"{path} is not a regular file", reason="MANIFEST_INVALID")
    try:
        with path.open("rb") as file:
            within_size(os.fstat(file.fileno()).st_size, BACKUP_MANIFEST_MAX_BYTES)  # before any is read
            manifest = parse_manifest(file.read(BACKUP_MANIFEST_MAX_BYTES + 1))  # one that grew: cut, and refused
    except FileNotFoundError:
        raise FailedPrecondition(
            f"{directory} has no {MANIFEST_NAME}: it is not a backup directory", reason="NOT_A_BACKUP"
        ) from None
    except ValueError as exc:
        raise FailedPrecondition(f"{path} is {exc}", reason="MANIFEST_INVALID") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise FailedPrecondition(f"{path} is not a Mnemosyne backup manifest", reason="NOT_A_BACKUP")
    try:
        version = whole_number(field(manifest, "format_version", "the manifest"), "format_version")
        if version != FORMAT_VERSION:  # another version's shape is not this one's: said first
            raise FailedPrecondition(
                f"{path} has format version {version}; this program reads version {FORMAT_VERSION}",
                reason="MANIFEST_VERSION",
            )
        tenants = json_object(field(manifest, "tenants", "the manifest"), "tenants")
        for tenant, entry in tenants.items():
            tenant_named_by(tenant, f"the backup manifest {path}")
            _check_entry(json_object(entry, f"tenants[{tenant!r}]"), f"tenants[{tenant!r}]")
    except ValueError as exc:
        raise FailedPrecondition(f"{path} is malformed: {exc}", reason="MANIFEST_INVALID") from None
    return manifest


def _check_entry(entry: dict[str, Any], where: str) -> None:
    """A tenant's entry in the manifest: its copy's figures, and its files (a database, an inbox
    at most), each with its path, size and SHA-256; ValueError naming the first that is wrong."""
    copy_figures(entry, where)
    files = json_object(field(entry, "files", where), f"{where}.files")
    if "database" not in files or not set(files) <= {"database", "inbox"}:
        raise ValueError(f"{where}.files names {sorted(files)[:4]}: a database, and an inbox at most")
    for name, file in files.items():
        at = f"{where}.files.{name}"
        file = json_object(file, at)
        text(field(file, "path", at), f"{at}.path")
        whole_number(field(file, "size", at), f"{at}.size")
        sha256_hex(field(file, "sha256", at), f"{at}.sha256")


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FailedPrecondition(f"another backup is writing {directory}", reason="BACKUP_DIR_LOCKED") from None
        yield
    finally:
        os.close(fd)


def _prepare(directory: Path) -> dict[str, Any]:
    """The previous manifest of ``directory`` (empty for a new or empty directory); refuses a
    directory that holds anything else."""
    if directory.exists() and not directory.is_dir():
        raise FailedPrecondition(f"{directory} is not a directory", reason="BACKUP_DIR_INVALID")
    directory.mkdir(parents=True, exist_ok=True)
    for sub in ("tenants", INBOX_DIR_NAME):  # written into, and cleaned: never a link to elsewhere
        within(directory, sub, what="the backup directory's folder")
    # What a first backup killed before its manifest left counts as empty: its partial files and
    # the copies it had renamed (removed once the new manifest is in place).
    entries = {p.name for p in directory.iterdir() if not p.name.startswith(PARTIAL_PREFIX)} - {LOCK_NAME}
    entries -= {
        name
        for name in ("tenants", INBOX_DIR_NAME)
        if (directory / name).is_dir() and all(_COPY_NAME.fullmatch(p.name) for p in (directory / name).iterdir())
    }
    if not entries:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "tenants": {}}
    if MANIFEST_NAME not in entries:
        raise FailedPrecondition(
            f"{directory} is not empty and holds no {MANIFEST_NAME}: it is not a backup directory of ours; "
            "give an empty or new directory",
            reason="BACKUP_DIR_NOT_OURS",
        )
    return read_manifest(directory)


@dataclass
class _Receiving:
    """The tenant whose files are being received."""

    copy: TenantBackup
    files: dict[str, dict[str, Any]]  # name -> manifest entry, for those already received
    name: str = ""
    partial: Path | None = None
    handle: IO[bytes] | None = None
    received: int = 0


def _final_path(tenant: str, copy: TenantBackup, file: str) -> str:
    stem = f"{tenant}.c{copy.change_counter}.i{copy.inbox_sequence}"
    if file == "database":
        return f"tenants/{stem}{TENANT_FILE_SUFFIX}"
    return f"{INBOX_DIR_NAME}/{stem}{INBOX_FILE_SUFFIX}"


class _Writer:
    def __init__(self, directory: Path, progress: StepDone) -> None:
        self.directory = directory
        self.progress = progress
        self.current: _Receiving | None = None
        self.done: dict[str, dict[str, Any]] = {}
        seams = Seams.from_environment()  # the file_bytes test seam (store/file_faults.py)
        self.budget = FileBudget(seams.store_faults if seams is not None else ())

    def tenant(self, copy: TenantBackup) -> None:
        self.finish_tenant()
        check_announced(copy, self.directory, "backup")
        self.current = _Receiving(copy, {})

    def chunk(self, chunk: BackupChunk) -> None:
        current = self.current
        if current is None:
            raise DataLoss("the backup stream sent file bytes before naming their tenant", reason="STREAM_INVALID")
        if chunk.file != current.name:
            self._close_file()
            announced = {f.name for f in current.copy.files}
            if chunk.file not in announced or chunk.file in current.files:
                raise DataLoss(f"the backup stream sent an unannounced file {chunk.file!r}", reason="STREAM_INVALID")
            current.name = chunk.file
            current.partial = self.directory / f"{PARTIAL_PREFIX}{uuid.uuid4().hex}"
            current.handle = open(current.partial, "wb")
            current.received = 0
        assert current.handle is not None
        file = next(f for f in current.copy.files if f.name == current.name)
        check_within(file, current.received + len(chunk.data), current.copy.tenant, "backup")
        self.budget.take(len(chunk.data))
        current.handle.write(chunk.data)
        current.received += len(chunk.data)
        current.handle.flush()
        _hold("backup-receiving")

    def _close_file(self) -> None:
        """Check the file just received against what the server announced, sync it, rename it."""
        current = self.current
        if current is None or current.handle is None or current.partial is None:
            return
        current.handle.flush()
        os.fsync(current.handle.fileno())
        current.handle.close()
        current.handle = None
        announced = next(f for f in current.copy.files if f.name == current.name)
        digest = sha256_file(current.partial)
        if current.received != announced.size or digest != announced.sha256:
            raise DataLoss(
                f"the {current.name} file of tenant {current.copy.tenant} arrived with {current.received} bytes "
                f"(SHA-256 {digest[:12]}…), not the {announced.size} announced (SHA-256 {announced.sha256[:12]}…)",
                reason="BACKUP_FILE_MISMATCH",
            )
        relative = _final_path(current.copy.tenant, current.copy, current.name)
        target = within(self.directory, relative, what=f"the {current.name} file of tenant {current.copy.tenant}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(current.partial, target)
        current.files[current.name] = {"path": relative, "size": announced.size, "sha256": announced.sha256}
        current.partial = None

    def finish_tenant(self) -> None:
        current = self.current
        if current is None:
            return
        self._close_file()
        missing = [f.name for f in current.copy.files if f.name not in current.files]
        if missing:
            raise DataLoss(
                f"the backup stream ended tenant {current.copy.tenant} without its {', '.join(missing)} file",
                reason="STREAM_INVALID",
            )
        copy = current.copy
        self.done[copy.tenant] = {
            **copy.figures(),
            "backed_up_at": time.time(),
            "files": current.files,
        }
        self.progress(f"{copy.tenant}: copied ({copy.memories} memories, {sum(f.size for f in copy.files)} bytes)")
        self.current = None

    def abandon(self) -> None:
        current = self.current
        if current is not None and current.handle is not None:
            current.handle.close()
        for leftover in self.directory.glob(f"{PARTIAL_PREFIX}*"):
            leftover.unlink(missing_ok=True)


def write_backup(
    client: MemoryClient, directory: Path, *, tenants: Sequence[str] = (), progress: StepDone = lambda _line: None
) -> BackupSummary:
    """Back the server's tenants (or those named) up into ``directory``: incremental when it
    already holds a backup (tenants unchanged since are not copied again)."""
    for tenant in tenants:
        validate_tenant(tenant)
    directory = Path(directory)
    created = not directory.exists()
    try:  # a copy an erasure revoked while it was sent is asked for again (cli/received.py)
        said = f"an erasure revoked a copy being sent: backing up again (attempt {{}} of {COPY_ATTEMPTS})"
        return copied_again(
            lambda: _write_backup(client, directory, tenants, progress), lambda n: progress(said.format(n))
        )
    except BaseException:
        if created:  # a first backup refused or failed before its manifest: no directory left behind
            _remove_unfinished(directory)
        raise


def _remove_unfinished(directory: Path) -> None:
    """Remove what a failed first backup left in the directory it made, when that is all the
    directory holds: its lock, copies no manifest names, empty folders."""
    if (directory / MANIFEST_NAME).exists():
        return
    for sub in ("tenants", INBOX_DIR_NAME):
        folder = directory / sub
        if folder.is_dir() and not folder.is_symlink():
            for copy in folder.iterdir():
                if _COPY_NAME.fullmatch(copy.name) and copy.is_file():
                    copy.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()
    (directory / LOCK_NAME).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # anything else in it: kept, and the directory with it
        directory.rmdir()


def _write_backup(client: MemoryClient, directory: Path, tenants: Sequence[str], progress: StepDone) -> BackupSummary:
    previous = _prepare(directory)
    with _locked(directory):
        previous = _prepare(directory)  # again under the lock: another backup may have written it
        for leftover in directory.glob(f"{PARTIAL_PREFIX}*"):  # what a killed backup was receiving
            leftover.unlink()
        known = {  # a tenant whose copy is gone or cut short is not unchanged: copied again
            t: (int(entry["change_counter"]), int(entry["inbox_sequence"]), str(entry["head_hash"]))
            for t, entry in previous["tenants"].items()
            if (not tenants or t in tenants) and _copy_whole(directory, t, entry)
        }
        writer = _Writer(directory, progress)
        try:
            summary, unchanged, skipped = _receive(client, tenants, known, writer, progress)
            # A full backup drops the tenants the server no longer has (erased ones above all);
            # a skipped tenant's previous copy, if any, is kept.
            kept = {
                t: e
                for t, e in previous["tenants"].items()
                if t in unchanged or t in skipped or (tenants and t not in tenants)
            }
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "created_at": time.time(),
                "server": client.target,
                "tenants": dict(sorted({**kept, **writer.done}.items())),
            }
            _write_manifest(directory, manifest)
        except OSError as exc:
            writer.abandon()
            if exc.errno == errno.ENOSPC:
                raise _disk_full(directory) from None
            raise
        except BaseException:
            writer.abandon()
            raise
        _remove_unnamed(directory, manifest)
        return summary


def _copy_whole(directory: Path, tenant: str, entry: dict[str, Any]) -> bool:
    """Whether each file of a tenant's copy the manifest names is there, a regular file of the
    size it gives (its SHA-256 is read by a restore, not here: a backup would read every copy)."""
    for name, file in entry["files"].items():
        path = within(directory, file["path"], what=f"the manifest's {name} file of {tenant}")
        if not path.is_file() or path.stat().st_size != file["size"]:
            return False
    return True


def _receive(
    client: MemoryClient,
    tenants: Sequence[str],
    known: dict[str, tuple[int, int, str]],
    writer: _Writer,
    progress: StepDone,
) -> tuple[BackupSummary, set[str], set[str]]:
    """The server's backup stream, its files written through ``writer``: its summary, and the
    tenants unchanged since the copies ``known`` and those the server skipped."""
    unchanged: set[str] = set()
    skipped: set[str] = set()
    summary: BackupSummary | None = None
    for part in client.backup(tenants, known):
        if not isinstance(part, (BackupChunk, BackupSummary)):
            tenant_named_by(part.tenant, f"the backup stream of {client.target}")
        if isinstance(part, BackupChunk):
            writer.chunk(part)
        elif isinstance(part, TenantBackup):
            writer.tenant(part)
        elif isinstance(part, BackupUnchanged):
            writer.finish_tenant()
            unchanged.add(part.tenant)
            progress(f"{part.tenant}: unchanged since the last backup")
        elif isinstance(part, SkippedTenant):
            writer.finish_tenant()
            skipped.add(part.tenant)
            progress(f"{part.tenant}: skipped ({part.reason}: {part.message})")
        else:
            writer.finish_tenant()
            summary = part
    if summary is None:
        raise DataLoss("the backup stream ended before its summary", reason="STREAM_INVALID")
    return summary, unchanged, skipped


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """The manifest, in place at once (renamed over the previous one once synced)."""
    temporary = directory / f"{PARTIAL_PREFIX}{uuid.uuid4().hex}"
    temporary.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    fsync(temporary)
    os.replace(temporary, directory / MANIFEST_NAME)
    fsync(directory)


def _remove_unnamed(directory: Path, manifest: dict[str, Any]) -> None:
    named = {directory / f["path"] for entry in manifest["tenants"].values() for f in entry["files"].values()}
    for sub in ("tenants", INBOX_DIR_NAME):
        for path in (directory / sub).glob("*"):
            if path not in named:
                path.unlink(missing_ok=True)


# -- restore ---------------------------------------------------------------------------------


def _check_tenant(directory: Path, tenant: str, entry: dict[str, Any]) -> dict[str, Path]:
    """The tenant's files (name -> path, each under ``directory``), once they match the manifest
    and the chain verifies with the manifest's head (its shape checked by ``read_manifest``)."""
    files = entry["files"]
    paths = {
        name: within(directory, file["path"], what=f"the manifest's {name} file of {tenant}")
        for name, file in files.items()
    }
    for name, file in files.items():
        path = paths[name]
        if not path.is_file():  # a directory or FIFO in its place is no copy either
            raise DataLoss(
                f"{path} (the {name} file of {tenant}) is missing or not a regular file", reason="BACKUP_FILE_MISSING"
            )
        size, digest = path.stat().st_size, sha256_file(path)
        if size != file["size"] or digest != file["sha256"]:
            raise DataLoss(
                f"{path} does not match the manifest ({size} bytes, SHA-256 {digest[:12]}…; the manifest says "
                f"{file['size']} bytes, {str(file['sha256'])[:12]}…)",
                reason="BACKUP_FILE_MISMATCH",
            )
    figures = SnapshotFacts(**copy_figures(entry, tenant))
    check_copy(paths["database"], paths.get("inbox"), tenant=tenant, manifest=figures, error=DataLoss)
    return paths


def place_tenant(tenants_dir: Path, inbox_dir: Path, tenant: str, database: Path, inbox: Path | None) -> None:
    """Copy a tenant's files (checked by the caller) in place of its own, in a data directory no
    server is using, on a new timeline (its consistency tokens see TIMELINE_CHANGED). Atomic as an
    import's install (store/install.py): the copies are staged beside the tenant files, the new
    tenant file takes the old one's name in one rename, and its inbox follows. A kill before that
    rename leaves the old tenant whole (a ``--replace`` killed midway never leaves it with no
    tenant file); after it, the server finishes the install (the inbox) at its next start."""
    tenant_file = within(tenants_dir, f"{tenant}{TENANT_FILE_SUFFIX}", what="the tenant file")
    inbox_file = within(inbox_dir, f"{tenant}{INBOX_FILE_SUFFIX}", what="the inbox file")
    new_database = _copy_beside(database, tenant_file, stamp=stamp_new_timeline)
    new_inbox = _copy_beside(inbox, tenant_file) if inbox is not None else None  # staged on the same filesystem
    checkpoint_away(tenant_file, f"{tenant_file} is being read; it was not replaced, retry the restore")
    old_only = old_file_only(tenant_file)  # its WAL emptied above
    # The old file's Litestream state, continued into the new file's generation, would lack its
    # first LTX files there: gone before the new file takes the name (a kill leaves none of it).
    for replicated in (tenant_file, inbox_file):
        shutil.rmtree(local_state(replicated), ignore_errors=True)
    staging = stage_and_commit(tenant_file, new_database, new_inbox, old_only=old_only, seam=_held_before_commit)
    inbox_dir.mkdir(parents=True, exist_ok=True)
    finish(staging, inbox_file, done=(), sync=lambda: _fsync_all(inbox_dir, tenants_dir))


def _fsync_all(*directories: Path) -> None:
    for directory in directories:
        fsync(directory)


def _held_before_commit(stage: str) -> None:
    if stage == "install_staged":  # the tests' kill point: staged, the tenant in place untouched
        _hold("restore-placing")


def _copy_beside(source: Path, target: Path, *, stamp: Callable[[Path], None] | None = None) -> Path:
    """A synced copy of ``source`` under a temporary name in ``target``'s directory (removed at
    the server's start if a kill leaves it); ``stamp``: what is done to the copy first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{NEW_FILE_PREFIX}{uuid.uuid4().hex[:12]}.{source.name}")
    try:
        shutil.copyfile(source, temporary)
        if stamp is not None:
            stamp(temporary)
        fsync(temporary)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def restore(
    directory: Path,
    data_dir: Path,
    *,
    tenants: Sequence[str] = (),
    replace: bool = False,
    progress: StepDone = lambda _line: None,
) -> list[str]:
    """Put tenants of a backup directory into a data directory no server is using; returns the
    tenants restored. Every selected tenant is checked before any file is placed."""
    directory, data_dir = Path(directory), Path(data_dir)
    manifest = read_manifest(directory)
    if data_dir.resolve().is_relative_to(directory.resolve()):  # the backup would become a server's files
        raise FailedPrecondition(
            f"{data_dir} is in the backup directory {directory}: give a data directory outside the backup",
            reason="DATA_DIR_IN_BACKUP",
        )
    available: dict[str, dict[str, Any]] = manifest["tenants"]
    chosen = list(dict.fromkeys(validate_tenant(t) for t in tenants)) or sorted(available)  # named twice: once
    absent = [t for t in chosen if t not in available]
    if absent:
        raise InvalidArgument(f"the backup holds no tenant {listed(absent)}", reason="TENANT_NOT_IN_BACKUP")
    # The backup is checked before the data directory is created or locked: a refused restore
    # leaves nothing behind (what can refuse it past here needs a directory that was there).
    checked = {}
    for tenant in chosen:
        checked[tenant] = _check_tenant(directory, tenant, available[tenant])
        progress(f"{tenant}: checked (chain valid, head {available[tenant]['head_hash'][:12]}…)")
    refuse_inside_another(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(data_dir)  # refuses a data directory a server (or another restore) holds
    try:
        tenants_dir, inbox_dir = data_dir / "tenants", data_dir / INBOX_DIR_NAME
        present = [t for t in chosen if (tenants_dir / f"{t}{TENANT_FILE_SUFFIX}").exists()]
        if present and not replace:
            raise FailedPrecondition(
                f"{data_dir} already has the tenants {listed(present)}; give --replace to overwrite them",
                reason="TENANT_EXISTS",
            )
        index = PendingIndex(data_dir)
        try:
            for tenant in chosen:
                index.add_placed(tenant)
        finally:
            index.close()
        for tenant in chosen:
            files = checked[tenant]
            place_tenant(tenants_dir, inbox_dir, tenant, files["database"], files.get("inbox"))
            progress(f"{tenant}: restored")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ResourceExhausted(
                f"the disk holding {data_dir} is full; rerun the restore once there is room", reason="DISK_FULL"
            ) from None
        raise
    finally:
        lock.release()
    return chosen
