"""Names and paths that come from outside this process: a backup's manifest, a tenant archive, an
export file, a peer's answer (a server's backup or export stream, a move's import). A tenant name
from any of them is held to the rule a client's is (store/pool.py ``validate_tenant``), and a path
joined from outside data is checked to stay under its root, symbolic links resolved, before
anything is read or written there: a hostile or broken file or peer never reaches a file outside
the directory it names one in.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mnemosyne.errors import InvalidArgument
from mnemosyne.store.tenant_ids import validate_tenant


def tenant_named_by(tenant: str, source: str) -> str:
    """``tenant``, read from ``source`` (a file or a peer, named for the message), if it is a valid
    tenant id; else INVALID_ARGUMENT TENANT_INVALID, as for a client's."""
    try:
        return validate_tenant(tenant)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{source} names a tenant no client could: {exc.message}", reason=exc.reason) from None


def within(root: Path, relative: str | Path, *, what: str) -> Path:
    """``root / relative`` when it stays under ``root``; INVALID_ARGUMENT PATH_ESCAPES when it is
    absolute, climbs out (``..``) or leads out through a symbolic link (``what``: what names it); the
    OSError ELOOP of a loop of symbolic links, which leads nowhere."""
    path = Path(root) / relative
    inside = not os.path.isabs(relative) and ".." not in Path(relative).parts
    if not inside or not _resolved(path).is_relative_to(_resolved(Path(root))):
        raise InvalidArgument(
            f"{what} {str(relative)[:120]!r} leads outside {root}: refused, nothing was read or written there",
            reason="PATH_ESCAPES",
        )
    return path


def _resolved(path: Path) -> Path:
    """``path`` with its symbolic links resolved; a loop of them is the OSError the system gives
    on opening it (Python before 3.13 raises a RuntimeError, which a command would trace)."""
    try:
        return path.resolve()
    except RuntimeError as exc:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from exc
