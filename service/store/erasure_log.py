"""The server's log of erased tenants (``DATA_DIR/erasures.jsonl``): one JSON line per erasure,
written and synced before the tenant's first file is removed, so every erasure that removed
anything has its receipt. A receipt names the tenant, when, the token that asked, and the head
hash of the tenant's audit chain as it was, so an operator can match it with a hash recorded
elsewhere. The log holds nothing of the tenant's content; it is never pruned by the server."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

ERASURE_LOG_NAME = "erasures.jsonl"


@dataclass(frozen=True)
class ErasureReceipt:
    tenant: str
    erased_at: float  # seconds since the epoch
    token_name: str  # the name of the token that asked ("" when the server runs without tokens)
    head_hash: str  # the tenant's last ledger hash ("" when its file was damaged)


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
