"""Disk-sync probe for a server process under test (tests/test_hot_path_sync.py).

Loaded by Python at start-up when this directory is on PYTHONPATH and MNEMOSYNE_TEST_SYNC_LOG
names a file. It records, one line per event, every write SQLite makes to a ``-wal`` file and
every sync of any file: SQLite's own (an apsw VFS that inherits the real "unix" VFS and only
records before forwarding) and the process's os.fsync/os.fdatasync calls (wrapped the same way).
Every call still reaches the real file system; nothing in the server is replaced.

Line format: ``<started> <ended> <write|sync> <sqlite|os> <file name>`` (time.time() when the
call began and when it returned: a sync covers the writes logged as ended before it started).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike


class _Sync(Protocol):
    """os.fsync's and os.fdatasync's signature (a caller may name ``fd``)."""

    def __call__(self, fd: FileDescriptorLike) -> None: ...


_LOG = os.environ.get("MNEMOSYNE_TEST_SYNC_LOG")

if _LOG:
    import apsw

    _lock = threading.Lock()
    _out = open(_LOG, "a", buffering=1)

    def _record(started: float, kind: str, source: str, path: str) -> None:
        with _lock:
            _out.write(f"{started:.6f} {time.time():.6f} {kind} {source} {os.path.basename(path)}\n")

    class _ProbedFile(apsw.VFSFile):
        def __init__(self, name: str | apsw.URIFilename | None, flags: list[int]) -> None:
            self._path = name.filename() if isinstance(name, apsw.URIFilename) else str(name or "")
            super().__init__("unix", name, flags)

        def xWrite(self, data: bytes, offset: int) -> None:
            started = time.time()
            super().xWrite(data, offset)
            if self._path.endswith("-wal"):
                _record(started, "write", "sqlite", self._path)

        def xSync(self, flags: int) -> None:
            started = time.time()
            super().xSync(flags)
            _record(started, "sync", "sqlite", self._path)

    class _ProbeVFS(apsw.VFS):
        def __init__(self) -> None:
            super().__init__("sync-probe", "unix", makedefault=True)

        def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
            return _ProbedFile(name, flags)

    _vfs = _ProbeVFS()  # kept referenced for the life of the process

    def _probed(real: _Sync) -> _Sync:
        def sync(fd: FileDescriptorLike) -> None:
            started = time.time()
            real(fd)
            number = fd if isinstance(fd, int) else fd.fileno()
            _record(started, "sync", "os", os.readlink(f"/proc/self/fd/{number}"))

        return sync

    os.fsync = _probed(os.fsync)
    if hasattr(os, "fdatasync"):
        os.fdatasync = _probed(os.fdatasync)
