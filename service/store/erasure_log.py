"""The server's log of erased tenants (``DATA_DIR/erasures.jsonl``): one JSON line per erasure,
written and synced before the tenant's first file is removed, so every erasure that removed
anything has its receipt. A receipt names the tenant, when, the token that asked, and the head
hash of the tenant's audit chain as it was, so an operator can match it with a hash recorded
elsewhere. The log holds nothing of the tenant's content; it is never pruned by the server.

The receipt is an erasure's commit: a process killed after it, before the files went, finishes the
erasure at its next start (``finish_erasures``), so a receipted tenant is never served again. The
mark ``DATA_DIR/tenants/<tenant>.erasing`` (its head hash), synced before the receipt and removed
after the files, tells that start which erasures were under way."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mnemosyne.errors import DataLoss
from mnemosyne.store.files import fsync
from mnemosyne.store.tenant_store import read_file

ERASURE_LOG_NAME = "erasures.jsonl"
ERASING_SUFFIX = ".erasing"  # the mark of an erasure under way, beside the tenant's file


@dataclass(frozen=True)
class ErasureReceipt:
    tenant: str
    erased_at: float  # seconds since the epoch
    token_name: str  # the name of the token that asked ("" when the server runs without tokens)
    head_hash: str  # the tenant's last ledger hash ("" when its file was damaged)
    # The timeline its consistency tokens named (engine/consistency.py): one signed with its erased
    # secret is then told "timeline changed", not "forged", by the tenant made again after it.
    timeline: str = ""


class ErasureLog:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / ERASURE_LOG_NAME
        self._lock = threading.Lock()

    def append(self, receipt: ErasureReceipt) -> None:
        line = json.dumps(asdict(receipt), sort_keys=True, separators=(",", ":")) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def receipts(self) -> list[ErasureReceipt]:
        """Every receipt, oldest first (a line torn by a crash mid-append is skipped)."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            try:
                found.append(ErasureReceipt(**json.loads(line)))
            except (ValueError, TypeError):
                continue
        return found

    def timelines(self, tenant: str) -> set[str]:
        """The timelines of ``tenant``'s erased files."""
        return {r.timeline for r in self.receipts() if r.tenant == tenant and r.timeline}


def head_of(path: Path) -> str | None:
    """The head hash of a tenant file's audit chain ("" for a damaged file, whose chain cannot be
    read; None: no file)."""
    return _read_of(path, lambda txn: txn.ledger_head()[1])


def timeline_of(path: Path) -> str:
    """A tenant file's timeline ("" for a damaged file, or none)."""
    return _read_of(path, lambda txn: txn.timeline()) or ""


def _read_of(path: Path, read: Callable[[Any], str]) -> str | None:
    if not path.exists():
        return None
    try:
        with read_file(path) as txn:
            return read(txn)
    except DataLoss:
        return ""


@contextmanager
def erasing(tenants_dir: Path, tenant: str, head_hash: str) -> Iterator[None]:
    """The block that writes an erasure's receipt and removes the tenant's files: its mark
    (naming ``head_hash``) is synced before and removed after, when every file went."""
    mark = tenants_dir / f"{tenant}{ERASING_SUFFIX}"
    fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps({"head_hash": head_hash}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync(tenants_dir)
    yield
    mark.unlink(missing_ok=True)
    fsync(tenants_dir)


def finish_erasures(
    data_dir: Path,
    tenants_dir: Path,
    valid: Callable[[str], object],
    head_of: Callable[[str], str | None],
    remove: Callable[[str], None],
) -> list[str]:
    """At a start: each erasure a process killed after its receipt is finished (``remove``), when
    the tenant's file is still the one receipted (``head_of``: its head hash, None without a file);
    one killed before its receipt removed nothing and leaves the tenant as it is. Returns the
    tenants finished."""
    marks = sorted(tenants_dir.glob(f"*{ERASING_SUFFIX}"))
    receipts = ErasureLog(data_dir).receipts() if marks else []
    finished = []
    for mark in marks:
        tenant = mark.name[: -len(ERASING_SUFFIX)]
        try:
            head_hash = str(json.loads(mark.read_text())["head_hash"])
        except (OSError, ValueError, KeyError, TypeError):  # torn: the process died before its receipt
            head_hash = None
        last = next((r for r in reversed(receipts) if r.tenant == tenant), None)
        if valid(tenant) and last is not None and last.head_hash == head_hash and head_of(tenant) in (None, head_hash):
            remove(tenant)
            finished.append(tenant)
        mark.unlink(missing_ok=True)
    if marks:
        fsync(tenants_dir)
    return finished
