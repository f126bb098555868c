"""The data directory: tenant ids to files, the exclusive directory lock, and a bounded LRU of
open tenant files.

Layout::

    DATA_DIR/.mnemosyne.lock        held (flock) by the one process that owns the directory
    DATA_DIR/tenants/<tenant>.sqlite (+ -wal, -shm)
    DATA_DIR/inbox/<tenant>.inbox.sqlite  fast writes not yet taken by a worker (store/inbox.py)

Tenant ids are validated before they become a path. At most ``max_open`` tenant files are kept
open; the least recently used idle one is closed when another is needed. A tenant in use is never
closed under its user: it is closed when the last user releases it.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.store.locks import LockManager
from mnemosyne.store.maintenance import Maintainer
from mnemosyne.store.tenant_store import TenantStore

TENANT_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
TENANT_FILE_SUFFIX = ".sqlite"
LOCK_FILE_NAME = ".mnemosyne.lock"
INBOX_DIR_NAME = "inbox"
INBOX_FILE_SUFFIX = ".inbox.sqlite"


def validate_tenant(tenant: str) -> str:
    """Return the tenant id if it is safe to become a file name, else raise InvalidArgument."""
    if not isinstance(tenant, str) or not TENANT_ID_PATTERN.fullmatch(tenant):
        shown = repr(tenant[:80]) if isinstance(tenant, str) else type(tenant).__name__
        raise InvalidArgument(
            f"tenant {shown} is not a valid tenant id: use 1-63 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit",
            reason="TENANT_INVALID",
        )
    return tenant


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


class _Entry:
    __slots__ = ("store", "users", "evicted")

    def __init__(self, store: TenantStore) -> None:
        self.store = store
        self.users = 0
        self.evicted = False


class TenantPool:
    def __init__(
        self,
        data_dir: Path | str,
        *,
        max_open: int = 1024,
        synchronous: str = "FULL",
        max_readers: int = 4,
        faults: frozenset[str] = frozenset(),
    ) -> None:
        if max_open < 1:
            raise InvalidArgument("max_open must be at least 1", reason="CONFIG_INVALID")
        self.data_dir = Path(data_dir)
        self.tenants_dir = self.data_dir / "tenants"
        self.tenants_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock(self.data_dir)
        self.locks = LockManager()
        self._max_open = max_open
        self._synchronous = synchronous
        self._max_readers = max_readers
        self._faults = faults
        self._open: "OrderedDict[str, _Entry]" = OrderedDict()
        self._guard = threading.Lock()
        self._opening: dict[str, threading.Lock] = {}
        self._closed = False
        self.maintainer = Maintainer(self._maintain)

    def path_for(self, tenant: str) -> Path:
        return self.tenants_dir / f"{validate_tenant(tenant)}{TENANT_FILE_SUFFIX}"

    def inbox_path_for(self, tenant: str) -> Path:
        return self.data_dir / INBOX_DIR_NAME / f"{validate_tenant(tenant)}{INBOX_FILE_SUFFIX}"

    def exists(self, tenant: str) -> bool:
        return self.path_for(tenant).exists()

    def tenant_ids(self) -> list[str]:
        """Tenant ids that have a file, in lexical order."""
        names = []
        for path in self.tenants_dir.glob(f"*{TENANT_FILE_SUFFIX}"):
            name = path.name[: -len(TENANT_FILE_SUFFIX)]
            if TENANT_ID_PATTERN.fullmatch(name):
                names.append(name)
        return sorted(names)

    @property
    def open_count(self) -> int:
        with self._guard:
            return len(self._open)

    @contextmanager
    def tenant(self, tenant: str, *, create: bool) -> Iterator[TenantStore | None]:
        """The open store of a tenant for the duration of the block.

        With ``create=False`` a tenant that has no file yields None and no file is created, so
        reads of unknown tenants never litter the directory.
        """
        entry = self._acquire(tenant, create)
        if entry is None:
            yield None
            return
        try:
            yield entry.store
        finally:
            self._release(entry)

    def _acquire(self, tenant: str, create: bool) -> _Entry | None:
        path = self.path_for(tenant)
        while True:
            with self._guard:
                if self._closed:
                    raise FailedPrecondition("the store is closed", reason="STORE_CLOSED")
                entry = self._open.get(tenant)
                if entry is not None:
                    entry.users += 1
                    self._open.move_to_end(tenant)
                    return entry
                opening = self._opening.setdefault(tenant, threading.Lock())
            # Open outside the pool guard (opening a file may migrate it), one opener per tenant.
            with opening:
                with self._guard:
                    if tenant in self._open:
                        continue
                if not create and not path.exists():
                    with self._guard:
                        self._opening.pop(tenant, None)
                    return None
                store = TenantStore(
                    path,
                    write_lock=self.locks.for_tenant(tenant),  # type: ignore[arg-type]
                    synchronous=self._synchronous,
                    max_readers=self._max_readers,
                    faults=self._faults,
                    on_wal_growth=lambda: self.maintainer.request(tenant),
                    inbox_path=self.inbox_path_for(tenant),
                    inbox_lock=self.locks.for_inbox(tenant),
                )
                with self._guard:
                    self._opening.pop(tenant, None)
                    entry = _Entry(store)
                    entry.users = 1
                    self._open[tenant] = entry
                    victims = self._evict_locked()
                for victim in victims:
                    victim.close()
                return entry

    def _evict_locked(self) -> list[TenantStore]:
        victims = []
        for name in list(self._open):
            if len(self._open) <= self._max_open:
                break
            entry = self._open[name]
            if entry.users == 0:
                del self._open[name]
                victims.append(entry.store)
        return victims

    def _release(self, entry: _Entry) -> None:
        with self._guard:
            entry.users -= 1
            victims = self._evict_locked()
        for victim in victims:
            victim.close()

    def _maintain(self, tenant: str) -> None:
        """Merge a tenant's full-text segments, then checkpoint it, if its store is still open
        (closing a store checkpoints it; the next pass after it reopens merges)."""
        with self._guard:
            entry = self._open.get(tenant)
            if entry is None:
                return
            entry.users += 1
        try:
            entry.store.merge_fulltext()
            entry.store.checkpoint()
        finally:
            self._release(entry)

    def close(self) -> None:
        """Close every tenant file and release the directory. Idempotent."""
        self.maintainer.stop()
        with self._guard:
            if self._closed:
                return
            self._closed = True
            entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            entry.store.close()
        self._dir_lock.release()
