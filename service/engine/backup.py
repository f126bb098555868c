"""Online backup and export through the running server: tenants copied one at a time, each a
consistent snapshot of its file and its hot-path inbox (store/snapshot.py), and streamed to the
caller in chunks, which writes them on its own machine. The server writes only into its own
scratch directory (``DATA_DIR/.backup-scratch``, emptied at start-up and after each tenant),
never to a path a client names. A copy being sent is revoked by an erasure of its tenant's
content (store/copies.py): the stream ends with COPY_REVOKED, and nothing erased stays in it.

A tenant the caller already holds with the same change counter, inbox sequence and audit chain's
head hash is answered ``unchanged`` (an incremental backup): the store counts every write
transaction, so a change of any kind (a memory, the operation log, a counter, a flag) is a new
counter, and time plays no part; the head hash tells a tenant erased and made again (whose counts
start over) from the one the caller holds.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mnemosyne.engine.lost_tenants import LOST_TENANTS_WAIT_SECONDS, LostTenants, restore_if_lost
from mnemosyne.errors import DataLoss, InvalidArgument, NotFound, ResourceExhausted
from mnemosyne.store.copies import StreamedCopies, StreamedCopy
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.snapshot import SnapshotFacts as SnapshotFacts  # a copy's facts, part of a TenantCopy
from mnemosyne.store.snapshot import change_marks, copy_tenant, sha256_file
from mnemosyne.store.tenant_ids import validate_tenant

SCRATCH_DIR_NAME = ".backup-scratch"
CHUNK_BYTES = 1 << 20  # a quarter of gRPC's default message limit
DATABASE_FILE = "database"
INBOX_FILE = "inbox"
# The exports of one tenant that may hold their scratch copies at once. Each copy is the whole
# tenant file, on the disk every tenant writes to, kept for as long as its client takes to read
# it: unbounded, a tenant's token holding a hundred unread exports (its stream limit) took a
# hundred times its size of that disk. A backup or a move (an operator's) is not counted.
EXPORTS_PER_TENANT = 2
EXPORT_RETRY_SECONDS = 1.0

# What a caller holds of a tenant: (change counter, inbox sequence, head hash; "" = not said, as
# by a client from before it was asked).
KnownCopy = tuple[int, int, str]


def known_by_tenant(known: Iterable[tuple[str, KnownCopy]]) -> dict[str, KnownCopy]:
    """What a caller holds (tenant, copy) by tenant: a tenant that is no tenant id is refused
    TENANT_INVALID and one named twice TENANT_LISTED_TWICE (which of its copies it holds is not
    said), before anything is copied; each was passed over, the second copy taken."""
    held: dict[str, KnownCopy] = {}
    for tenant, copy in known:
        if validate_tenant(tenant) in held:
            raise InvalidArgument(
                f"tenant {tenant} is named twice in what the caller holds (known): name each tenant once",
                reason="TENANT_LISTED_TWICE",
            )
        held[tenant] = copy
    return held


def _held_already(marks: KnownCopy, known: KnownCopy) -> bool:
    return marks[:2] == known[:2] and (not known[2] or marks[2] == known[2])


@dataclass(frozen=True)
class CopiedFile:
    name: str  # DATABASE_FILE or INBOX_FILE
    size: int
    sha256: str


@dataclass(frozen=True)
class TenantCopy:
    tenant: str
    facts: SnapshotFacts
    files: list[CopiedFile]


@dataclass(frozen=True)
class FileChunk:
    file: str
    data: bytes


@dataclass(frozen=True)
class TenantUnchanged:
    tenant: str


@dataclass(frozen=True)
class TenantSkipped:
    tenant: str
    reason: str
    message: str


@dataclass(frozen=True)
class BackupSummary:
    copied: int
    unchanged: int
    skipped: int
    bytes: int


BackupPart = TenantCopy | FileChunk | TenantUnchanged | TenantSkipped | BackupSummary


class Backups:
    def __init__(self, *, pool: TenantPool, copies: StreamedCopies, lost_tenants: LostTenants | None = None) -> None:
        self._pool = pool
        self._lost_tenants = lost_tenants
        self._scratch = pool.data_dir / SCRATCH_DIR_NAME
        shutil.rmtree(self._scratch, ignore_errors=True)  # what a backup killed midway left
        self._copies = copies  # those being sent, which an erasure revokes
        self._exports: Counter[str] = Counter()  # the exports under way, by tenant (moves' aside)
        self._exports_lock = threading.Lock()
        pool.watchers.append(self)

    # -- told by the pool of its files' changes (store/file_watchers.py) ------------------------

    def committed(self, tenant: str) -> None:
        pass

    def installed(self, tenant: str) -> None:
        pass

    def content_erased(self, tenant: str) -> None:
        self._copies.revoke(tenant)

    def erased(self, tenant: str) -> None:
        self._copies.revoke(tenant)

    def backup(self, tenants: Sequence[str], known: Iterable[tuple[str, KnownCopy]]) -> Iterator[BackupPart]:
        """Every part of a backup of ``tenants`` (all when empty), ending with its summary.
        ``known``: (tenant, (change counter, inbox sequence, head hash)) the caller already holds,
        each tenant once (``known_by_tenant``)."""
        names = [validate_tenant(t) for t in dict.fromkeys(tenants)]
        held = known_by_tenant(known)
        if not names and self._lost_tenants is not None:  # every tenant: those a lost volume held too
            self._lost_tenants.wait(LOST_TENANTS_WAIT_SECONDS)
        for name in names:
            restore_if_lost(self._pool, name)
            if not self._pool.exists(name):
                raise NotFound(f"tenant {name} has no data on this server", reason="TENANT_NOT_FOUND")
        copied = unchanged = skipped = sent = 0
        # Every tenant this member serves (not the tombstones of tenants moved away: their data is
        # the destination's), or those named.
        for tenant in names or [t for t in self._pool.tenant_ids() if self._pool.served_here(t)]:
            for part in self._tenant(tenant, held.get(tenant)):
                if isinstance(part, TenantCopy):
                    copied += 1
                elif isinstance(part, TenantUnchanged):
                    unchanged += 1
                elif isinstance(part, TenantSkipped):
                    skipped += 1
                elif isinstance(part, FileChunk):
                    sent += len(part.data)
                yield part
        yield BackupSummary(copied=copied, unchanged=unchanged, skipped=skipped, bytes=sent)

    def _tenant(self, tenant: str, known: KnownCopy | None) -> Iterator[BackupPart]:
        with self._copies.held(tenant, self._scratch / uuid.uuid4().hex) as held:
            try:
                copy = self._copy(held, known)
            except DataLoss as exc:  # a damaged tenant file: the others are still backed up
                yield TenantSkipped(tenant, exc.reason, str(exc))
                return
            if copy is None:
                yield TenantUnchanged(tenant)
                return
            yield copy
            yield from _chunks(held, copy)

    def export(self, tenant: str, *, move: bool = False) -> Iterator[TenantCopy | FileChunk]:
        """One tenant's copy, as Backup takes it: its manifest, then its files' chunks. NOT_FOUND
        when it has no data; a damaged file is DATA_LOSS (TENANT_CORRUPT); past
        EXPORTS_PER_TENANT under way, RESOURCE_EXHAUSTED before any copy (a move's: never)."""
        validate_tenant(tenant)
        place = nullcontext() if move else self._export_place(tenant)
        # The place is given back before the copy is deleted: once its copy is gone, it is free.
        with self._copies.held(tenant, self._scratch / uuid.uuid4().hex) as held, place:
            copy = self._copy(held)
            assert copy is not None  # nothing is known: always copied
            yield copy
            yield from _chunks(held, copy)

    @contextmanager
    def _export_place(self, tenant: str) -> Iterator[None]:
        with self._exports_lock:
            if self._exports[tenant] >= EXPORTS_PER_TENANT:
                raise ResourceExhausted(
                    f"tenant {tenant} has {EXPORTS_PER_TENANT} exports under way, as many as it may: each holds a "
                    "copy of the tenant on the server's disk until its client has read it; finish or cancel one",
                    reason="EXPORTS_PER_TENANT_REACHED",
                    metadata={"limit": str(EXPORTS_PER_TENANT)},
                    retry_after_seconds=EXPORT_RETRY_SECONDS,
                )
            self._exports[tenant] += 1
        try:
            yield
        finally:
            with self._exports_lock:
                self._exports[tenant] -= 1
                if not self._exports[tenant]:
                    del self._exports[tenant]

    def _copy(self, held: StreamedCopy, known: KnownCopy | None = None) -> TenantCopy | None:
        """``copy`` into the held copy's directory; COPY_REVOKED when an erasure of the tenant
        revoked it meanwhile (its files deleted under the copy). A copy revoked while it is made
        stops at its next step: its snapshot, which the erasure's truncation of the WAL waits for,
        ends then, not after the rest of a copy no one will read."""
        try:
            return self.copy(held.tenant, held.directory, known=known, on_step=lambda _left, _all: held.check())
        except Exception:  # a copy whose files were deleted under it fails as it may: said as such
            held.check()
            raise

    def scratch_directory(self) -> Path:
        """A new directory of the server's own scratch space (on the data directory's filesystem,
        so a file made there is put in place by a rename), not made yet: its user makes it with
        its first file (an import its client left before its first chunk leaves nothing)."""
        return self._scratch / uuid.uuid4().hex

    def copy(
        self,
        tenant: str,
        directory: Path,
        *,
        known: KnownCopy | None = None,
        on_step: Callable[[int, int], None] = lambda _left, _all: None,
    ) -> TenantCopy | None:
        """A consistent copy of the tenant into ``directory`` (a scratch directory of the
        server's): None when ``known`` says the caller has it already. NOT_FOUND when the tenant
        has no data (erased meanwhile). ``on_step``: as ``copy_tenant``'s (store/snapshot.py)."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"tenant {tenant} has no data on this server", reason="TENANT_NOT_FOUND")
            if known is not None and _held_already(change_marks(store), known):
                return None
            directory.mkdir(parents=True, exist_ok=True)
            facts, has_inbox = copy_tenant(store, directory / DATABASE_FILE, directory / INBOX_FILE, on_step=on_step)
        names = [DATABASE_FILE, INBOX_FILE] if has_inbox else [DATABASE_FILE]
        files = [CopiedFile(n, (directory / n).stat().st_size, sha256_file(directory / n)) for n in names]
        return TenantCopy(tenant, facts, files)


def _chunks(held: StreamedCopy, copy: TenantCopy) -> Iterator[FileChunk]:
    """The copy's files in chunks, each read as long as the copy is not revoked."""
    for file in copy.files:
        for data in held.chunks(file.name, CHUNK_BYTES):
            yield FileChunk(file.name, data)
