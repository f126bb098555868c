"""Erasing a whole tenant (admin): its files, its inbox and its recovery-index entries go, and a
receipt stays in the server's erasure log (store/erasure_log.py). Afterwards the tenant is not
listed, and a write to its name starts a new, empty tenant. Backups taken before still hold it."""

from __future__ import annotations

import time

from mnemosyne.engine.hot_path import HotPath
from mnemosyne.engine.lost_tenants import restore_if_lost
from mnemosyne.store.erasure_log import ErasureLog
from mnemosyne.store.erasure_log import ErasureReceipt as ErasureReceipt  # what an erasure answers
from mnemosyne.store.pool import TenantPool

# How long an erasure waits for the calls in flight on the tenant to end.
ERASE_WAIT_SECONDS = 10.0


class TenantErasure:
    def __init__(self, *, pool: TenantPool, hot_path: HotPath) -> None:
        self._pool = pool
        self._hot_path = hot_path
        self.log = ErasureLog(pool.data_dir)

    def erase(self, tenant: str, *, token_name: str) -> ErasureReceipt:
        """Remove the tenant; NOT_FOUND when it has no file (an earlier erasure finished)."""
        receipts: list[ErasureReceipt] = []

        def write_receipt(head_hash: str, timeline: str) -> None:
            receipt = ErasureReceipt(
                tenant=tenant, erased_at=time.time(), token_name=token_name, head_hash=head_hash, timeline=timeline
            )
            self.log.append(receipt)
            receipts.append(receipt)

        restore_if_lost(self._pool, tenant)  # else its replicas stayed, to come back at its next call
        self._pool.erase(tenant, before_removal=write_receipt, timeout=ERASE_WAIT_SECONDS)
        self._hot_path.forget_tenant(tenant)
        return receipts[0]
