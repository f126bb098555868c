"""Installing a tenant from an export (admin): its files arrive in chunks into the server's
scratch space, are checked against the export's manifest (sizes, SHA-256) and its audit chain
against the manifest's head hash, and only then replace the tenant's files, by renames
(store/pool.py ``install``). A file copy keeps everything that makes the tenant the same tenant:
memories, records and their generations, event ids, request ids within their retention, counters,
its page-token secret. Its open hot-path operations, if any, resume at once.

A client's mistake is INVALID_ARGUMENT with its reason, never INTERNAL: a stream that ends early
(ARCHIVE_TRUNCATED), bytes that differ from the manifest (ARCHIVE_MISMATCH), a chain that does not
verify, a schema not as this server makes it, or an inbox that could not be opened (CHAIN_INVALID), a chain that ends elsewhere
or a figure of the manifest the files do not hold: memories, change counter, inbox sequence, last
event id, a scope's generation (MANIFEST_MISMATCH), a file of a newer schema (SCHEMA_TOO_NEW). Nothing is left where the service
reads it until every check passed.

A client that leaves (its call cancelled, its connection lost) ends the import: before the install
began nothing changes and the scratch files go; once it began (every check passed: the point of
no return), it runs to its end, atomic (store/pool.py ``install``), so the tenant is the old one
or the new one, whole, whatever moment the client left.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mnemosyne.engine.backup import DATABASE_FILE, INBOX_FILE, Backups, CopiedFile, TenantCopy
from mnemosyne.engine.hot_path import HotPath
from mnemosyne.errors import InvalidArgument, ResourceExhausted, Unavailable
from mnemosyne.store.file_faults import FileBudget
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.snapshot import check_copy, check_schema
from mnemosyne.store.tenant_ids import validate_tenant

# How long an import waits for the calls in flight on the tenant it replaces.
REPLACE_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Imported:
    tenant: str
    head_hash: str
    ledger_entries: int
    memories: int
    replaced: bool


def _refuse(message: str, reason: str) -> InvalidArgument:
    return InvalidArgument(message, reason=reason)


class TenantImport:
    """One import in progress: ``write`` each chunk, then ``finish``; ``abort`` when its stream
    ends, however it ended. ``abort`` may come from another thread while a step runs (its client
    left): the step then ends as it would (``finish`` past its point of no return installs the
    tenant) and the scratch files go when it returns."""

    def __init__(
        self,
        *,
        tenant: str,
        copy: TenantCopy,
        replace: bool,
        directory: Path,
        pool: TenantPool,
        hot_path: HotPath,
        budget: FileBudget | None = None,
        move: tuple[str, int] | None = None,
    ) -> None:
        self.tenant = tenant
        self._move = move  # (source, epoch) of a move's step 4 (engine/moves.py)
        self._copy = copy
        self._replace = replace
        self._directory = directory
        self._pool = pool
        self._hot_path = hot_path
        self._budget = budget or FileBudget(())  # the file_bytes test seam (store/file_faults.py)
        self._order: Sequence[CopiedFile] = copy.files
        self._index = -1  # the file being received
        self._received = 0
        self._digest = hashlib.sha256()
        self._handle: IO[bytes] | None = None
        self._state = threading.Lock()  # guards the two flags below
        self._running = False  # a step (write, finish) runs on some thread
        self._abandoned = False  # abort came: no step may begin, the scratch files go

    def _begin_step(self) -> None:
        with self._state:
            if self._abandoned:
                raise Unavailable("the import was abandoned: its client left", reason="IMPORT_ABANDONED")
            self._running = True

    def _end_step(self) -> None:
        with self._state:
            self._running = False
            abandoned = self._abandoned
        if abandoned:
            self._remove_scratch()

    def write(self, file: str, data: bytes) -> None:
        self._begin_step()
        try:
            self._write(file, data)
        finally:
            self._end_step()

    def _write(self, file: str, data: bytes) -> None:
        if self._index < 0 or file != self._order[self._index].name:
            self._end_file()
            self._index += 1
            if self._index >= len(self._order) or self._order[self._index].name != file:
                expected = self._order[self._index].name if self._index < len(self._order) else "nothing more"
                raise _refuse(
                    f"the import sent bytes of {file[:40]!r} where its manifest announces {expected}",
                    "ARCHIVE_MISMATCH",
                )
            self._directory.mkdir(parents=True, exist_ok=True)
            self._handle = open(self._directory / file, "wb")
            self._received, self._digest = 0, hashlib.sha256()
        announced = self._order[self._index]
        if self._received + len(data) > announced.size:
            raise _refuse(
                f"the {file} file of the import is longer than the {announced.size} bytes its manifest announces",
                "ARCHIVE_MISMATCH",
            )
        assert self._handle is not None
        try:
            self._budget.take(len(data))
            self._handle.write(data)
        except OSError as exc:
            raise _disk_error(exc) from None
        self._received += len(data)
        self._digest.update(data)

    def _end_file(self) -> None:
        if self._handle is None:
            return
        announced = self._order[self._index]
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:
            raise _disk_error(exc) from None
        finally:
            self._handle.close()
            self._handle = None
        if self._received != announced.size:
            raise _refuse(
                f"the import is truncated: its {announced.name} file has {self._received} of the {announced.size} "
                "bytes its manifest announces",
                "ARCHIVE_TRUNCATED",
            )
        if self._digest.hexdigest() != announced.sha256:
            raise _refuse(
                f"the {announced.name} file of the import does not match its manifest (SHA-256 "
                f"{self._digest.hexdigest()[:12]}…, the manifest says {announced.sha256[:12]}…)",
                "ARCHIVE_MISMATCH",
            )

    def finish(self) -> Imported:
        self._begin_step()
        try:
            return self._finish()
        finally:
            self._end_step()

    def _finish(self) -> Imported:
        self._pool.seam("import_received")  # every byte is in the scratch space; nothing checked yet
        self._end_file()
        if self._index != len(self._order) - 1:
            missing = ", ".join(f.name for f in self._order[self._index + 1 :])
            raise _refuse(f"the import is truncated: it ended without its {missing} file", "ARCHIVE_TRUNCATED")
        database = self._directory / DATABASE_FILE
        facts = self._copy.facts
        check_schema(database, tenant=self.tenant, error=InvalidArgument)
        inbox = self._directory / INBOX_FILE
        check_copy(
            database, inbox if inbox.exists() else None, tenant=self.tenant, manifest=facts, error=InvalidArgument
        )
        with self._state:  # the point of no return: from here the install runs to its end
            if self._abandoned:
                raise Unavailable(
                    "the import was abandoned before its install: its client left", reason="IMPORT_ABANDONED"
                )
        self._hot_path.index.add(self.tenant)  # before the files: its open operations are never missed
        try:
            replaced = self._pool.install(
                self.tenant,
                database,
                inbox if inbox.exists() else None,
                replace=self._replace,
                timeout=REPLACE_WAIT_SECONDS,
                move=self._move,
            )
        except OSError as exc:
            raise _disk_error(exc) from None
        self._hot_path.forget_figures(self.tenant)  # what it knew of a tenant replaced
        if self._move is None:  # a moved tenant's operations resume when it is activated
            self._hot_path.resume(self.tenant)
        return Imported(self.tenant, facts.head_hash, facts.ledger_entries, facts.memories, replaced)

    def abort(self) -> None:
        """The import's stream ended (after ``finish``, or without it: its client left, a chunk
        was refused). Its scratch files go, now or, while a step runs, when that step returns."""
        with self._state:
            self._abandoned = True
            if self._running:
                return
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        shutil.rmtree(self._directory, ignore_errors=True)


def _disk_error(exc: OSError) -> Exception:
    if exc.errno == errno.ENOSPC:
        return ResourceExhausted(
            "the disk holding the data directory is full; nothing of the import was kept", reason="DISK_FULL"
        )
    return exc


class TenantImports:
    def __init__(
        self, *, pool: TenantPool, hot_path: HotPath, backups: Backups, faults: frozenset[str] = frozenset()
    ) -> None:
        self._pool = pool
        self._hot_path = hot_path
        self._backups = backups
        self._faults = faults  # test seams (Seams.store_faults, runtime/seams.py): file_bytes, store/file_faults.py

    def begin(
        self, tenant: str, copy: TenantCopy, *, replace: bool, move: tuple[str, int] | None = None
    ) -> TenantImport:
        """An import of ``copy`` (the export's manifest) as ``tenant`` (its own name when empty);
        ``move``: (source member, epoch) when a move brings it here (installed inactive)."""
        tenant = validate_tenant(tenant or copy.tenant)
        names = [f.name for f in copy.files]
        if DATABASE_FILE not in names or not set(names) <= {DATABASE_FILE, INBOX_FILE} or len(set(names)) != len(names):
            shown = ", ".join(repr(n[:40]) for n in names[:4]) + (", …" if len(names) > 4 else "")
            raise _refuse(
                f"the import's manifest names {len(names)} files ({shown}); it must name 'database' once, and "
                "'inbox' at most once",
                "MANIFEST_INVALID",
            )
        if any(f.size < 0 or len(f.sha256) != 64 for f in copy.files):
            raise _refuse("the import's manifest gives a negative size or a malformed SHA-256", "MANIFEST_INVALID")
        # Refused before a byte is received: streamed, it would fill the disk every tenant writes to.
        announced, free = sum(f.size for f in copy.files), shutil.disk_usage(self._pool.data_dir).free
        if announced > free:
            raise ResourceExhausted(
                f"the import announces {announced} bytes; the disk holding the data directory has {free} free: "
                "nothing was received",
                reason="DISK_FULL",
            )
        return TenantImport(
            tenant=tenant,
            copy=copy,
            replace=replace,
            directory=self._backups.scratch_directory(),
            pool=self._pool,
            hot_path=self._hot_path,
            budget=FileBudget(self._faults),
            move=move,
        )
