"""The files a backup or an export receives from a server's stream, held to what the server
announced of them before their bytes: the stream is outside data. A size that is negative is
refused (STREAM_INVALID); announced sizes past the disk's free space are refused before a byte is
written (DISK_FULL), not met once the disk is full; and a file is refused (BACKUP_FILE_MISMATCH)
at the first chunk that takes it past its announced size, not after the stream has filled the
disk. The caller removes what it had written (cli/backup.py, cli/archive.py). A copy an erasure
revoked while it was sent is asked for again (``copied_again``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mnemosyne.cli.manifests import INT64_MAX
from mnemosyne.client import AbortedError
from mnemosyne.client.types import BackupFile, TenantBackup
from mnemosyne.errors import DataLoss, ResourceExhausted

# How many copies a backup or an export asks for at most while erasures of its tenants revoke the
# one being sent; a tenant forgotten in faster than it is copied fails with COPY_REVOKED.
COPY_ATTEMPTS = 5
T = TypeVar("T")


def copied_again(receive: Callable[[], T], again: Callable[[int], None]) -> T:
    """``receive()``, called again while an erasure revokes the copy being sent (ABORTED
    COPY_REVOKED: nothing of it is valid, and the error says to copy again), COPY_ATTEMPTS times at
    most; ``again(attempt)`` before each new one (what was received is removed, the user told)."""
    attempt = 1
    while True:
        try:
            return receive()
        except AbortedError as exc:
            if exc.reason != "COPY_REVOKED" or attempt == COPY_ATTEMPTS:
                raise
        attempt += 1
        again(attempt)


def check_announced(copy: TenantBackup, where: Path, stream: str, *, copies: int = 1) -> None:
    """Refuse the files ``copy`` announces when a size is not one a file can have, or when
    ``copies`` times their sizes (an export writes them, then its archive) are more than the
    disk holding ``where`` has free."""
    for file in copy.files:
        if not 0 <= file.size <= INT64_MAX:
            raise DataLoss(
                f"the {stream} stream announces {file.size} bytes for the {file.name} file of tenant {copy.tenant}; "
                f"a size is from 0 to 2^63-1",
                reason="STREAM_INVALID",
            )
    needed, free = copies * sum(file.size for file in copy.files), shutil.disk_usage(where).free
    if needed > free:
        raise ResourceExhausted(
            f"the {stream} of tenant {copy.tenant} needs {needed} bytes; the disk holding {where} has {free} free: "
            "nothing of it was kept",
            reason="DISK_FULL",
        )


def check_within(file: BackupFile, received: int, tenant: str, stream: str) -> None:
    """Refuse the file once ``received`` bytes of it have arrived, more than it was announced with."""
    if received > file.size:
        raise DataLoss(
            f"the {stream} stream sent more than the {file.size} bytes it announced for the {file.name} file "
            f"of tenant {tenant}: nothing of it was kept",
            reason="BACKUP_FILE_MISMATCH",
        )
