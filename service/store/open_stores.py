"""The bounded LRU of open tenant stores (store/pool.py opens them): which are open and who uses
each. At most ``max_open`` stay open (fewer when the process's open-file limit cannot hold that
many: ``open_tenant_budget``); the least recently used idle one is closed when another is needed,
and idle ones are closed early when the process runs out of file descriptors (``make_room``). A
store in use is never closed under its user: it is closed when the last user releases it.
Thread-safe."""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from mnemosyne.errors import FailedPrecondition, Unavailable
from mnemosyne.store.tenant_store import TenantStore

# File descriptors one open tenant holds in the common case: its writer's database and WAL, the
# shared-memory file, one pooled reader's database and WAL, and its hot-path inbox's three.
FILES_PER_OPEN_TENANT = 8
# Descriptors kept free for everything else: sockets, the recovery index, logs, libraries.
RESERVED_FILES = 128
# A tenant closed off (moved, erased) or in use clears within seconds: the wait its refusal names.
RETRY_SECONDS = 0.5

log = logging.getLogger("mnemosyne.store")


def open_tenant_budget(requested: int) -> int:
    """How many tenants may stay open: ``requested``, or fewer when the open-file limit cannot
    hold that many (FILES_PER_OPEN_TENANT each, after RESERVED_FILES)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return requested
    return max(1, min(requested, (soft - RESERVED_FILES) // FILES_PER_OPEN_TENANT))


class OpenStore:
    """One open tenant store and how many use it."""

    __slots__ = ("store", "users")

    def __init__(self, store: TenantStore) -> None:
        self.store = store
        self.users = 0


class OpenStores:
    def __init__(self, requested: int) -> None:
        self.max_open = open_tenant_budget(requested)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.info(
            "open-tenant cache: %d tenant files (asked %d; open-file limit %s, hard %s: %d per open tenant + %d reserved)",
            self.max_open,
            requested,
            soft,
            hard,
            FILES_PER_OPEN_TENANT,
            RESERVED_FILES,
        )
        self._open: OrderedDict[str, OpenStore] = OrderedDict()
        # tenant -> (what is done to it, the refusal's reason) while its files are removed or
        # replaced: no new user meanwhile (``closed_off``).
        self._closed_off: dict[str, tuple[str, str]] = {}
        self._closed = False
        self._guard = threading.Lock()

    def __len__(self) -> int:
        with self._guard:
            return len(self._open)

    def __contains__(self, tenant: str) -> bool:
        return tenant in self._open  # one dict lookup, atomic: no guard on the per-call path

    def use(self, tenant: str) -> OpenStore | None:
        """The tenant's open store, now in use by the caller (who releases it); None when it is not
        open. Refuses every tenant once closed (STORE_CLOSED), and a tenant closed off
        (UNAVAILABLE, its reason)."""
        with self._guard:
            if self._closed:
                raise FailedPrecondition("the store is closed", reason="STORE_CLOSED")
            closed_off = self._closed_off.get(tenant)
            if closed_off is not None:
                raise Unavailable(
                    f"tenant {tenant} is being {closed_off[0]}; retry shortly",
                    reason=closed_off[1],
                    retry_after_seconds=RETRY_SECONDS,
                )
            entry = self._open.get(tenant)
            if entry is not None:
                entry.users += 1
                self._open.move_to_end(tenant)
            return entry

    def borrow(self, tenant: str) -> OpenStore | None:
        """The tenant's open store, now in use by the caller, without refusing anything and
        without counting as a use for the LRU; None when it is not open."""
        with self._guard:
            entry = self._open.get(tenant)
            if entry is not None:
                entry.users += 1
            return entry

    def admit(self, tenant: str, store: TenantStore) -> OpenStore:
        """A store just opened, in use by the caller; the least recently used idle ones beyond
        ``max_open`` are closed."""
        entry = OpenStore(store)
        entry.users = 1
        with self._guard:
            self._open[tenant] = entry
            victims = self._evict_locked(self.max_open)
        for victim in victims:
            victim.close()
        return entry

    def release(self, entry: OpenStore) -> None:
        with self._guard:
            entry.users -= 1
            victims = self._evict_locked(self.max_open)
        for victim in victims:
            victim.close()

    def make_room(self) -> bool:
        """Close the idle half of the open stores (the least recently used), as when the process
        runs out of file descriptors. True if any was closed."""
        with self._guard:
            victims = self._evict_locked(len(self._open) // 2)
        for victim in victims:
            victim.close()
        if victims:
            log.warning("out of file descriptors: closed %d idle tenant files", len(victims))
        return bool(victims)

    def _evict_locked(self, keep: int) -> list[TenantStore]:
        victims = []
        for name in list(self._open):
            if len(self._open) <= keep:
                break
            entry = self._open[name]
            if entry.users == 0:
                del self._open[name]
                victims.append(entry.store)
        return victims

    @contextmanager
    def closed_off(self, tenant: str, *, doing: str, reason: str, timeout: float) -> Iterator[None]:
        """For the block, the tenant's store is closed and no one uses it: new users are refused
        (UNAVAILABLE ``reason``), those in flight are waited for up to ``timeout`` seconds (then
        UNAVAILABLE TENANT_BUSY, and the block does not run)."""
        with self._guard:
            self._closed_off[tenant] = (doing, reason)
        try:
            deadline = time.monotonic() + timeout
            while True:
                with self._guard:
                    entry = self._open.get(tenant)
                    if entry is None or entry.users == 0:
                        self._open.pop(tenant, None)
                        break
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"tenant {tenant} stayed in use for {timeout:.0f}s; it was not {doing}, retry",
                        reason="TENANT_BUSY",
                        retry_after_seconds=RETRY_SECONDS,
                    )
                time.sleep(0.01)
            if entry is not None:
                entry.store.close()
            yield
        finally:
            with self._guard:
                self._closed_off.pop(tenant, None)

    def close(self) -> bool:
        """Close every store and refuse every use from now on. False when closed already."""
        with self._guard:
            if self._closed:
                return False
            self._closed = True
            entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            entry.store.close()
        return True
