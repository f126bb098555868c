"""A tenant's hot-path state: whether its fast writes are queued (a flag in its file, surviving
restarts) and the figures Status reports (queue depth, counters)."""

from __future__ import annotations

import time

from mnemosyne.engine.hot_path.snapshot import add_depths, snapshot
from mnemosyne.engine.types import HotPathState
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import TenantStore

HOT_PATH_META = "hot_path"  # the flag's key in the tenant file's meta table: "on" or "off"
_FLAG_CACHE_KEY: CacheKey[bool] = CacheKey("hot_path_enabled")

_NO_FILE = HotPathState(
    enabled=False,
    queue_depth=0,
    oldest_pending_seconds=0.0,
    accepted=0,
    succeeded=0,
    failed=0,
    duplicates=0,
    writes=0,
    model_calls=0,
)


class TenantStates:
    """The flag of each tenant (read and set), and its Status."""

    def __init__(self, pool: TenantPool) -> None:
        self._pool = pool

    def set_enabled(self, tenant: str, enabled: bool) -> bool:
        """Set the flag; enabling creates the tenant, disabling never does. False when the tenant
        has no file (then nothing was to be disabled)."""
        with self._pool.tenant(tenant, create=enabled) as store:
            if store is None:
                return False
            # Under the inbox lock: an enqueue re-reads the flag under it before appending.
            with self._pool.locks.for_inbox(tenant), store.write() as txn:
                txn.set_meta(HOT_PATH_META, "on" if enabled else "off")
                store.cache[_FLAG_CACHE_KEY] = enabled
        return True

    @staticmethod
    def enabled(store: TenantStore) -> bool:
        """The flag, cached on the open store (only ``set_enabled`` changes it, and this process
        owns the data directory); the enqueue re-reads it under the inbox lock."""
        enabled = store.cache.get(_FLAG_CACHE_KEY)
        if enabled is None:
            with store.read() as txn:
                enabled = store.cache[_FLAG_CACHE_KEY] = txn.meta(HOT_PATH_META) == "on"
        return bool(enabled)

    def status(self, tenant: str) -> HotPathState:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return _NO_FILE
            with snapshot(store) as (txn, waiting):
                enabled = txn.meta(HOT_PATH_META) == "on"
                in_inbox = waiting.depth()
                depth, oldest = add_depths(txn.oplog_depth(), in_inbox)
                counters = txn.counters()
        return HotPathState(
            enabled=enabled,
            queue_depth=depth,
            oldest_pending_seconds=max(0.0, time.time() - oldest) if oldest else 0.0,
            # An operation is counted accepted when it leaves the inbox; those still in it are.
            accepted=counters.get("accepted", 0) + in_inbox[0],
            succeeded=counters.get("succeeded", 0),
            failed=counters.get("failed", 0),
            duplicates=counters.get("duplicates", 0),
            writes=counters.get("writes", 0),
            model_calls=counters.get("model_calls", 0),
        )
