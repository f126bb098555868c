"""The data directory: its layout, the exclusive lock of the one process that owns it, its secret,
and what a process killed midway left in it (removed at the next start).

Layout::

    DATA_DIR/.mnemosyne.lock        held (flock) by the one process that owns the directory
    DATA_DIR/.mnemosyne.secret      the key of page tokens that span tenants
    DATA_DIR/tenants/<tenant>.sqlite (+ -wal, -shm)
    DATA_DIR/tenants/<tenant>.ann     its approximate vector index, a cache (engine/ann.py)
    DATA_DIR/inbox/<tenant>.inbox.sqlite  fast writes not yet taken by a worker (store/inbox.py)
    DATA_DIR/erasures.jsonl          one receipt per erased tenant (store/erasure_log.py)
    DATA_DIR/requests_without_file.sqlite  results of keyed calls that found no tenant file (store/tenantless_requests.py)
    DATA_DIR/tenants/<tenant>.incoming  a move is bringing the tenant here (store/ownership.py)
    DATA_DIR/tenants/<tenant>.moved     beside a reclaimed tombstone (store/ownership.py)
    DATA_DIR/tenants/<tenant>.owned     a tenant moved here, then erased: created here again (store/ownership.py)
    DATA_DIR/tenants/member-change.json  a change of the member list begun or completed here (store/member_change.py)
    DATA_DIR/tenants/replica-restored.json  the tenants object storage holds as this server's are here (engine/lost_tenants.py)
    DATA_DIR/tenants/<tenant>.erasing   an erasure under way, finished at the next start once receipted (store/erasure_log.py)
    DATA_DIR/tenants/.install-<tenant>.<random>/  an install under way (store/install.py)
    DATA_DIR/tenants/.new-...         a file being made (a first write, a mark, a reclaim)
    DATA_DIR/tenants/.<tenant>.sqlite-litestream/  Litestream's local state of a replicated file (replication/)

The tenants' files are opened, created and replaced by the pool (store/pool.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.runtime.files import kind_of
from mnemosyne.store.files import SIDE_SUFFIXES, fsync, remove_database, shred

LOCK_FILE_NAME = ".mnemosyne.lock"
SECRET_FILE_NAME = ".mnemosyne.secret"  # the key of page tokens that span tenants
TENANTS_DIR_NAME = "tenants"
TENANT_FILE_SUFFIX = ".sqlite"
INBOX_DIR_NAME = "inbox"
INBOX_FILE_SUFFIX = ".inbox.sqlite"
NEW_FILE_PREFIX = ".new-"
# The name the data of a tombstone being reclaimed keeps until it is overwritten and removed
# (store/ownership.py ``reclaim_tombstone``): ``.new-<tenant>.reclaiming.<random>.sqlite``.
RECLAIMING_MARK = ".reclaiming."
RECLAIMED_SUFFIX = ".moved"  # beside a reclaimed tombstone (store/ownership.py): listings leave it out
LOCAL_STATE_SUFFIX = "-litestream"  # Litestream's directory beside a database: ".<name>-litestream"


def local_state(database: Path) -> Path:
    """Litestream's local state of ``database`` (its LTX files), beside it."""
    return database.with_name(f".{database.name}{LOCAL_STATE_SUFFIX}")


def write_durably(path: Path, text: str) -> None:
    """``path`` holds ``text``, whatever stops it: written under a temporary name (removed at the
    next start when a kill leaves it), synced, renamed over the old one, its directory synced."""
    temporary = path.with_name(f"{NEW_FILE_PREFIX}{path.name}.{uuid.uuid4().hex[:12]}")
    try:
        temporary.write_text(text)
        fsync(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync(path.parent)


def listed_tenants(tenants_dir: Path, valid: Callable[[str], object]) -> list[str]:
    """The ids (``valid`` ones) of the tenant files in ``tenants_dir``, in lexical order, but
    reclaimed tombstones'."""
    reclaimed = {path.name[: -len(RECLAIMED_SUFFIX)] for path in tenants_dir.glob(f"*{RECLAIMED_SUFFIX}")}
    names = (path.name[: -len(TENANT_FILE_SUFFIX)] for path in tenants_dir.glob(f"*{TENANT_FILE_SUFFIX}"))
    return sorted(name for name in names if valid(name) and name not in reclaimed)


def refuse_inside_another(data_dir: Path) -> None:
    """A data directory inside another one (its ``tenants`` folder, say) is refused: its own files
    would be the other's tenants, damaged ones ("hot_path_pending"), and its lock would not keep
    the other's server out. Called before a directory is made, so a refusal makes none."""
    for outer in data_dir.resolve().parents:
        if (outer / LOCK_FILE_NAME).is_file():
            raise FailedPrecondition(
                f"{data_dir} is inside the data directory {outer}: its files would be that directory's "
                "tenants; give a directory of its own",
                reason="DATA_DIR_INSIDE_ANOTHER",
            )


class DataDirLock:
    """An exclusive, process-wide claim on a data directory (released by the OS if we die)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE_NAME
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(self._fd)
            self._fd = None
            raise FailedPrecondition(
                f"data directory {data_dir} is already in use by {holder}; one server (or in-process "
                "MemoryBrain) owns a data directory at a time — stop it or choose another --data-dir",
                reason="DATA_DIR_LOCKED",
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def claim_data_dir(data_dir: Path) -> DataDirLock:
    """Lock the data directory, creating it (and its parents) and its tenants directory when
    missing. A directory that cannot be used is refused with its cause (DATA_DIR_UNUSABLE), the
    first thing a server says."""

    def unusable(why: str) -> InvalidArgument:
        return InvalidArgument(f"the data directory {data_dir} {why}", reason="DATA_DIR_UNUSABLE")

    if data_dir.is_symlink() and not data_dir.exists():  # mkdir would say "File exists"
        raise unusable(
            "is a symbolic link that leads to no directory (a loop, or a link to nothing): "
            "give a directory (it is created when missing)"
        )
    if data_dir.exists() and not data_dir.is_dir():
        kind = kind_of(data_dir.stat().st_mode)
        raise unusable(f"is {kind}, not a directory: give a directory (it is created when missing)")
    refuse_inside_another(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / TENANTS_DIR_NAME).mkdir(exist_ok=True)
        return DataDirLock(data_dir)
    except FileExistsError as exc:  # its tenants folder: a file, or a link to nothing
        raise unusable(f"cannot be used: {exc.filename} is a file or a broken link, where a directory goes") from None
    except OSError as exc:
        raise unusable(f"cannot be used: {exc.strerror or exc}: {exc.filename or data_dir}") from None


def server_secret(data_dir: Path) -> bytes:
    """The data directory's own random key, made once (atomically, readable by its owner only)."""
    path = data_dir / SECRET_FILE_NAME
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(32).hex().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return bytes.fromhex(path.read_text().strip())


def remove_tenant_files(database: Path, inbox: Path) -> None:
    """Its inbox, then its WAL and shared memory before the database: a crash midway leaves a
    whole tenant (its WAL was checkpointed when it closed), never a WAL that a new tenant of that
    name would take for its own (an inbox without its tenant is removed at start-up)."""
    for base in (inbox, database):
        for suffix in (*SIDE_SUFFIXES, ""):
            Path(f"{base}{suffix}").unlink(missing_ok=True)


def remove_leftovers(tenants_dir: Path) -> None:
    """The files a process killed midway left under a temporary name: a first write's (removed),
    or the old data of a tombstone being reclaimed (overwritten first, unless it is still the
    tombstone itself: killed before its replacement, it is a second name of that file)."""
    for leftover in tenants_dir.glob(f"{NEW_FILE_PREFIX}*"):
        if leftover.is_dir():  # a restore from object storage's files (store/pool.py)
            shutil.rmtree(leftover, ignore_errors=True)
            continue
        if RECLAIMING_MARK in leftover.name and leftover.exists():
            tenant = leftover.name[len(NEW_FILE_PREFIX) :].partition(RECLAIMING_MARK)[0]
            path = tenants_dir / f"{tenant}{TENANT_FILE_SUFFIX}"
            if path.exists() and os.path.samefile(path, leftover):
                leftover.unlink()
            else:
                shred(leftover)
            continue
        remove_database(Path(str(leftover).removesuffix("-wal").removesuffix("-shm").removesuffix("-journal")))


def remove_orphan_inboxes(data_dir: Path) -> None:
    """An inbox whose tenant has no file is no tenant's (an inbox is made only once its tenant
    file exists): what a restore or an erasure killed midway left, like the inboxes' own
    temporary names (cli/backup.py). A later tenant of that name must not take it for its own."""
    inbox_dir = data_dir / INBOX_DIR_NAME
    if not inbox_dir.is_dir():
        return
    for path in inbox_dir.iterdir():
        name = path.name
        for suffix in SIDE_SUFFIXES:
            name = name.removesuffix(suffix)
        tenant = name.removesuffix(INBOX_FILE_SUFFIX)
        if name.startswith(NEW_FILE_PREFIX) or (
            name.endswith(INBOX_FILE_SUFFIX)
            and not (data_dir / TENANTS_DIR_NAME / f"{tenant}{TENANT_FILE_SUFFIX}").exists()
        ):
            path.unlink(missing_ok=True)


def volume_bytes(data_dir: Path) -> tuple[int, int]:
    """The size of the filesystem holding ``data_dir`` and the bytes this process may still write
    there (statvfs: what an unprivileged writer has, the root-reserved blocks left out)."""
    figures = os.statvfs(data_dir)
    return figures.f_blocks * figures.f_frsize, figures.f_bavail * figures.f_frsize
