"""The tenants whose last process died between a forget's commit and the end of its erasure
(``TenantStore.erase_traces``): their files, and the WAL beside them, still hold the pages as they
were before the forget until the tenant opens again, which finishes it (``TenantStore._resume``).
A start opens these (engine/cut_short_erasures.py), so what a committed forget erased is not kept
on disk for as long as nobody calls its tenant.

Only a tenant left with a WAL can be one: a store that closes removes its WAL, so a WAL at a start
is a file its process had open when it died. Each such file is read, never written, here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from mnemosyne.errors import MnemosyneError
from mnemosyne.store.data_dir import TENANT_FILE_SUFFIX
from mnemosyne.store.tenant_store import read_file

WAL_SUFFIX = f"{TENANT_FILE_SUFFIX}-wal"


def erasures_cut_short(tenants_dir: Path, valid: Callable[[str], object]) -> Iterator[str]:
    """The tenants (``valid`` ids) whose file records an erasure not finished, in lexical order,
    each as it is found."""
    for wal in sorted(tenants_dir.glob(f"*{WAL_SUFFIX}")):
        tenant = wal.name[: -len(WAL_SUFFIX)]
        if valid(tenant) and _pending(wal.with_name(f"{tenant}{TENANT_FILE_SUFFIX}")):
            yield tenant


def _pending(path: Path) -> bool:
    try:
        with read_file(path) as txn:
            return txn.erasure_pending()
    except (MnemosyneError, FileNotFoundError):  # damaged, or gone since: the tenant's own open tells
        return False
