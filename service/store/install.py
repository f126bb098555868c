"""The atomic install of a tenant's files (store/pool.py ``install``): the new files are staged
beside the tenant files, the database first (``.install-<tenant>.<random>/``), then the new tenant
file takes the old one's name in one rename — the commit — and its inbox follows. Until the
commit the old tenant is whole and in place; from it, the new one is, and an install a kill
stopped after its commit is finished at the next start (``staged_installs``)."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import apsw

from mnemosyne.store.bookkeeping import TIMELINE_META
from mnemosyne.store.files import SIDE_SUFFIXES, fsync
from mnemosyne.store.tenant_store import ANN_FILE_SUFFIX
from mnemosyne.store.transactions import translate_sqlite_error

log = logging.getLogger("mnemosyne.store")

INSTALL_PREFIX = ".install-"
STAGED_DATABASE = "database"
STAGED_INBOX = "inbox"
STAGED_NO_INBOX = "no-inbox"  # the new tenant has no inbox: the old one's goes


def stamp_new_timeline(database: Path) -> None:
    """Give a tenant file that is about to replace a tenant's content (an import, a restore) a
    timeline of its own, synced: a consistency token of the content it replaces is then answered
    at once (TIMELINE_CHANGED) instead of waiting for positions that name other writes now
    (engine/consistency.py). The file is closed after, its WAL folded back into it."""
    try:
        connection = apsw.Connection(str(database))
        try:
            with connection:
                connection.execute(
                    "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (TIMELINE_META, os.urandom(8).hex()),
                )
        finally:
            connection.close()
    except apsw.Error as exc:
        raise translate_sqlite_error(exc, database.name) from exc
    fsync(database)


def old_file_only(path: Path) -> list[Path]:
    """What belongs to the tenant file at ``path`` only, and goes when another file takes its
    place: its approximate index (a cache of its vectors: kept, it could pass for the new file's
    when their counters match), its WAL, shared memory and journal (emptied by the caller)."""
    return [path.with_suffix(ANN_FILE_SUFFIX), *(Path(f"{path}{suffix}") for suffix in SIDE_SUFFIXES)]


def staged_installs(tenants_dir: Path) -> Iterator[tuple[str, Path, bool]]:
    """The installs a kill interrupted: (tenant, staging directory, whether it committed — its
    staged database renamed into place, its inbox or the word that it has none still staged)."""
    for staging in tenants_dir.glob(f"{INSTALL_PREFIX}*"):
        if staging.is_dir():
            tenant = staging.name[len(INSTALL_PREFIX) :].rpartition(".")[0]
            committed = not (staging / STAGED_DATABASE).exists() and (
                (staging / STAGED_INBOX).exists() or (staging / STAGED_NO_INBOX).exists()
            )
            yield tenant, staging, committed


def stage_and_commit(
    path: Path, database: Path, inbox: Path | None, *, old_only: Iterable[Path], seam: Callable[[str], None]
) -> Path:
    """Stage ``database`` and ``inbox`` (files on this filesystem, made and synced by the caller)
    beside ``path``, remove ``old_only`` (what belonged to the old file only, its WAL emptied by
    the caller), and commit: the staged database takes ``path``'s name. Returns the staging
    directory, which ``finish`` empties. Before the commit, anything that stops it leaves the old
    tenant as it was."""
    tenants_dir = path.parent
    staging = tenants_dir / f"{INSTALL_PREFIX}{path.stem}.{uuid.uuid4().hex[:12]}"
    try:
        staging.mkdir()
        os.replace(database, staging / STAGED_DATABASE)  # first: while it is staged, nothing is committed
        if inbox is not None:
            os.replace(inbox, staging / STAGED_INBOX)
        else:
            (staging / STAGED_NO_INBOX).touch()
        fsync(staging)
        fsync(tenants_dir)
        seam("install_staged")
        for old in old_only:
            old.unlink(missing_ok=True)
        os.replace(staging / STAGED_DATABASE, path)  # the commit
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync(tenants_dir)
    seam("install_committed")
    return staging


def finish(staging: Path, inbox_path: Path, *, done: Iterable[Path], sync: Callable[[], None]) -> None:
    """An install after its commit: the new inbox replaces the old tenant's at ``inbox_path`` (or
    the old one goes when the new tenant has none), ``done`` goes (what only said an install was
    coming), ``sync`` syncs the directories, and the staging directory goes last. Idempotent: a
    kill midway is finished again at the next start — the staged inbox is linked into place, not
    moved, so that until the staging directory goes it still says the install committed."""
    staged = staging / STAGED_INBOX
    for suffix in (*SIDE_SUFFIXES, ""):
        Path(f"{inbox_path}{suffix}").unlink(missing_ok=True)
    if staged.exists():
        inbox_path.parent.mkdir(parents=True, exist_ok=True)
        os.link(staged, inbox_path)
    for path in done:
        path.unlink(missing_ok=True)
    sync()
    shutil.rmtree(staging)


def recover(tenants_dir: Path, valid: Callable[[str], object], finish: Callable[[str, Path], None]) -> list[str]:
    """The installs a kill interrupted: ``finish``ed (tenant, staging) if they had committed, else
    undone (the old tenant stands as it was; a staging directory emptied by a finished install is
    only removed). ``valid``: whether a name is a tenant id (else not a staging ``install`` made).
    Returns the tenants whose install was finished."""
    finished = []
    for tenant, staging, committed in staged_installs(tenants_dir):
        if not valid(tenant):
            continue
        if committed:
            finish(tenant, staging)
            finished.append(tenant)
            log.info("tenant %s: an install stopped after its commit was finished (its inbox put in place)", tenant)
        else:
            shutil.rmtree(staging)
            log.info("tenant %s: an install stopped before its commit was undone (the tenant is as it was)", tenant)
    return finished
