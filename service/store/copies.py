"""The copies of tenants' files in the server's scratch space while a stream sends them (Backup,
ExportTenant, a move's export: engine/backup.py), so that an erasure reaches them too: a copy is
made before the stream's first message and read chunk by chunk for as long as its client takes,
and a memory forgotten, or a tenant erased, meanwhile must not stay in it (docs/operations.md,
"Erasure of a memory").

An erasure of the tenant (``TenantStore.erase_traces``, ``TenantPool.erase``) revokes its copies:
each is closed and deleted at once, under the lock its reads take, and the stream reading it ends
with ABORTED ``COPY_REVOKED`` at its next chunk (its client copies again).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mnemosyne.errors import Conflict


class StreamedCopy:
    """One tenant's copy (a directory of its files) being sent."""

    def __init__(self, tenant: str, directory: Path) -> None:
        self.tenant = tenant
        self.directory = directory
        self._lock = threading.Lock()  # a chunk's read and the revocation never overlap
        self._revoked = False
        self._file: BinaryIO | None = None

    def chunks(self, name: str, size: int) -> Iterator[bytes]:
        """The bytes of the copy's file ``name``, ``size`` at a time; COPY_REVOKED once revoked."""
        try:
            while True:
                with self._lock:
                    self.check()
                    if self._file is None:
                        self._file = open(self.directory / name, "rb")  # noqa: SIM115  # closed below or by revoke
                    data = self._file.read(size)
                if not data:
                    return
                yield data
        finally:
            with self._lock:
                self._close()

    def revoke(self) -> None:
        """Close and delete the copy; its reader's next chunk is refused."""
        with self._lock:
            self._revoked = True
            self._close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def check(self) -> None:
        """COPY_REVOKED once the copy was revoked."""
        if self._revoked:
            raise Conflict(
                f"content of tenant {self.tenant} was erased while this copy of it was sent; nothing of it "
                "is valid: copy again",
                reason="COPY_REVOKED",
            )

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class StreamedCopies:
    """Every copy being sent, by tenant."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[str, set[StreamedCopy]] = {}

    @contextmanager
    def held(self, tenant: str, directory: Path) -> Iterator[StreamedCopy]:
        """A copy of ``tenant`` in ``directory`` (made by the caller, inside the block), revocable
        while the block lasts; deleted when it ends."""
        copy = StreamedCopy(tenant, directory)
        with self._lock:
            self._copies.setdefault(tenant, set()).add(copy)
        try:
            yield copy
        finally:
            with self._lock:
                held = self._copies.get(tenant, set())
                held.discard(copy)
                if not held:
                    self._copies.pop(tenant, None)
            shutil.rmtree(directory, ignore_errors=True)

    def sending(self, tenant: str) -> bool:
        """Whether a copy of ``tenant`` is being sent (which an erasure now would revoke)."""
        with self._lock:
            return tenant in self._copies

    def revoke(self, tenant: str) -> None:
        """Revoke every copy of ``tenant`` being sent (an erasure of its content)."""
        with self._lock:
            copies = list(self._copies.get(tenant, ()))
        for copy in copies:
            copy.revoke()
