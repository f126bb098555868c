"""Test seams of the store (in MNEMOSYNE_TEST_FAULTS, ``Seams.store_faults``: runtime/seams.py):
a full disk, and a point where a file swap kills or holds its process (``stop_at``). Never set in
production.

* ``file_bytes=N``: a disk that fills while a file outside SQLite is written. The files one backup
  receives (cli/backup.py) or one import writes into the server's scratch space
  (engine/tenant_import.py) may hold N bytes in all; the write that would pass them fails with
  ENOSPC, as a full filesystem fails it, and goes down the same error path.
* ``max_page_count=N``: SQLite itself refuses to grow a tenant file or an inbox past N pages and
  raises its real disk-full error (SQLITE_FULL), as on a full filesystem (``limit_pages``)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import apsw

_NAME = "file_bytes"


class FileBudget:
    """The bytes left to write under the seam; unlimited (and free) without it."""

    def __init__(self, faults: Iterable[str]) -> None:
        self._left: int | None = None
        for fault in faults:
            name, _, value = fault.partition("=")
            if name == _NAME:
                self._left = int(value)

    def take(self, size: int) -> None:
        """Room for ``size`` more bytes, or the OSError a full disk raises."""
        if self._left is None:
            return
        if size > self._left:
            self._left = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= size


def limit_pages(connection: apsw.Connection, faults: Iterable[str]) -> None:
    """The seam ``max_page_count=N`` on ``connection``, when it is set."""
    for fault in faults:
        name, _, value = fault.partition("=")
        if name == "max_page_count":
            connection.pragma("max_page_count", int(value))


def stop_at(faults: Iterable[str], name: str) -> None:
    """The seam at the point ``name`` of a file swap (store/pool.py ``TenantPool.seam``):
    ``kill@NAME`` kills the process there; ``hold@NAME=PATH`` holds it there while the file PATH
    exists (logged once when it holds), so a test can cancel a call or kill the process exactly
    there."""
    if f"kill@{name}" in faults:
        os.kill(os.getpid(), signal.SIGKILL)
    prefix = f"hold@{name}="
    for fault in faults:
        if fault.startswith(prefix) and Path(fault[len(prefix) :]).exists():
            logging.getLogger("mnemosyne.store").warning("held at %s (test seam)", name)
            while Path(fault[len(prefix) :]).exists():
                time.sleep(0.02)
