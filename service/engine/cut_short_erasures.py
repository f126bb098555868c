"""The erasures a kill cut short (store/erasures_cut_short.py), finished soon after a start: a
background thread opens each such tenant, which finishes its erasure (``TenantStore._resume``), so
what a committed forget erased does not stay on disk for as long as nobody calls the tenant. A call
that opens one of them first finishes it then, as any open does. In the background, so a start
after a kill of a server holding many tenants open is not held up by looking at each one."""

from __future__ import annotations

import logging
import threading

from mnemosyne.errors import MnemosyneError
from mnemosyne.store.erasures_cut_short import erasures_cut_short
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_ids import TENANT_ID_PATTERN

log = logging.getLogger("mnemosyne.engine")


class CutShortErasures:
    """``start`` it after the pool opened; ``stop`` it before the pool closes."""

    def __init__(self, pool: TenantPool) -> None:
        self._pool = pool
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cut-short-erasures", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        # At normal priority, not idle: what it does is short, and it holds a tenant's file locks
        # (a glance that recovers a WAL the kill left, the open): starved by a busy machine at
        # idle priority, it held them past a call's busy timeout (a recall failed so in CI).
        for tenant in erasures_cut_short(self._pool.tenants_dir, TENANT_ID_PATTERN.fullmatch):
            if self._stopping.is_set():
                return
            if not self._pool.served_here(tenant):
                continue  # a copy moved away or not yet active: its owner's open finishes it
            try:
                with self._pool.tenant(tenant, create=False):
                    pass  # the open finishes the erasure
            except MnemosyneError as exc:  # the tenant's next open finishes it
                log.warning("the erasure a kill cut short in tenant %s is finished at its next open: %s", tenant, exc)
