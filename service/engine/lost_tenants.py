"""The tenants a lost volume held, restored from object storage in the background
(docs/replication.md, "Members").

A member on a new volume restores a tenant of its own lazily, at the tenant's first call
(store/pool.py ``_restore_from_replica``). Until then it has no file of it: its listing leaves the
tenant out, and ``mnemosyne rebalance``, which moves the tenants each member lists, would leave it
where no member of the new list looks for it. So a member whose data directory has not yet been
matched with object storage (no ``DATA_DIR/tenants/replica-restored.json``: a new volume, or the
first start with replication) goes through the bucket's tenants once, in a background thread:
each it has no file of whose newest generation it started (``holder.json``; a member's own,
or one moved to it) is opened as a call would open it, which restores it; then it writes the mark.
A change of the member list begins on this member only once that is done (``wait``).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from concurrent import futures

from mnemosyne.errors import MnemosyneError, Unavailable
from mnemosyne.replication.replicator import Replicator
from mnemosyne.runtime.background import become_background_thread, keep_up
from mnemosyne.store.data_dir import write_durably
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_ids import TENANT_ID_PATTERN

log = logging.getLogger("mnemosyne.engine")

MARK_FILE_NAME = "replica-restored.json"
RESTORING_FROM_REPLICA = "RESTORING_FROM_REPLICA"
# The tenants looked at at once (a holder asked: a LIST and a GET; a restore): a new member of a
# large deployment asks one holder per tenant the bucket holds, each call waiting on the network
# to object storage (docs/replication.md, "Restore").
AT_ONCE = 4
RETRY_FIRST_SECONDS, RETRY_MOST_SECONDS = 1.0, 60.0
# How long a call that needs every tenant here (a change of the member list, a backup of all) waits
# for the restore before it is refused (RESTORING_FROM_REPLICA: retry).
LOST_TENANTS_WAIT_SECONDS = 60.0
# How soon the thread that hands the tenants out sees a call begin to wait for them (``_pace``).
PACE_SECONDS = 0.1


class LostTenants:
    """The background restore of this member's tenants that have no file here (the module's
    docstring). ``start`` it after the pool opened; ``stop`` it before the pool closes."""

    def __init__(self, pool: TenantPool, replicator: Replicator) -> None:
        self._pool = pool
        self._replicator = replicator
        self._mark = pool.tenants_dir / MARK_FILE_NAME
        self._done = threading.Event()
        self._stopping = threading.Event()
        self._checked: set[str] = set()  # asked (and restored when its own): not asked again after a retry
        self.restored = 0
        self._awaited = 0  # the calls in ``wait``
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="lost-tenants", daemon=True)

    def start(self) -> None:
        if self._mark.exists():
            self._done.set()
        else:
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait(self, timeout: float) -> None:
        """Return once every tenant object storage holds as this member's has its file here;
        UNAVAILABLE when that takes longer than ``timeout``. Meanwhile the restore competes with
        request threads as an equal (``_pace``)."""
        with self._guard:
            self._awaited += 1
        try:
            if not self._done.wait(timeout):
                raise Unavailable(
                    f"this member is still restoring its tenants from object storage ({self.restored} restored, "
                    f"{len(self._checked)} of the bucket's tenants looked at); retry",
                    reason=RESTORING_FROM_REPLICA,
                    retry_after_seconds=RETRY_FIRST_SECONDS,
                )
        finally:
            with self._guard:
                self._awaited -= 1

    def _pace(self) -> None:
        """The calling thread of the restore at idle priority, or at the normal one while a call
        waits for the restore (``wait``): a request waits for it then, as for a background thread
        that fell behind (runtime/background.py), and busy cores would starve an idle one past
        the call's minute (a loaded run's backup of every tenant found 31 of 48 restored after it)."""
        keep_up(math.inf if self._awaited else 0.0)

    def _run(self) -> None:
        become_background_thread()
        delay = RETRY_FIRST_SECONDS
        while not self._stopping.is_set():
            try:
                self._restore_all()
            except Unavailable as exc:
                log.warning("restoring this member's tenants from object storage waits: %s", exc.message)
                self._stopping.wait(delay)
                delay = min(2 * delay, RETRY_MOST_SECONDS)
                continue
            if self._stopping.is_set():
                return
            write_durably(self._mark, json.dumps({"restored": self.restored}))
            if self.restored:
                log.info("restored %d tenants from object storage (this member's volume was new)", self.restored)
            self._done.set()
            return

    def _restore_all(self) -> None:
        """One pass over the bucket's tenants not looked at yet, several at once; the first
        UNAVAILABLE met (object storage, or a tenant a move is bringing here) raised at its end."""
        self._pace()
        missing = [
            tenant
            for tenant in self._replicator.bucket.tenants()
            if TENANT_ID_PATTERN.fullmatch(tenant) and tenant not in self._checked and not self._pool.exists(tenant)
        ]
        waits: list[Unavailable] = []
        workers = futures.ThreadPoolExecutor(
            AT_ONCE, thread_name_prefix="lost-tenants", initializer=become_background_thread
        )
        try:
            looking = {workers.submit(self._look_at, tenant): tenant for tenant in missing}
            while looking:
                self._pace()
                done, _ = futures.wait(looking, PACE_SECONDS, return_when=futures.FIRST_COMPLETED)
                for future in done:
                    tenant, outcome = looking.pop(future), future.result()
                    if isinstance(outcome, Unavailable):
                        waits.append(outcome)
                        continue
                    self.restored += outcome
                    self._checked.add(tenant)
        finally:
            workers.shutdown(cancel_futures=True)
        if waits:
            raise waits[0]

    def _look_at(self, tenant: str) -> bool | Unavailable:
        """Whether ``tenant`` was restored here (False: not this member's, or not restorable), or
        the UNAVAILABLE that stopped it (it is looked at again at the next pass)."""
        if self._stopping.is_set():
            return Unavailable("the server is stopping", reason=RESTORING_FROM_REPLICA, retry_after_seconds=1.0)
        self._pace()
        try:
            if not self._own(tenant, self._replicator.holder(tenant)):
                return False
            with self._pool.tenant(tenant, create=False):
                pass  # the open restores it (or finds the file a call restored meanwhile)
        except Unavailable as exc:
            return exc
        except MnemosyneError as exc:  # held elsewhere after all, damaged: a call there says so too
            log.warning("tenant %s: not restored from object storage: %s", tenant, exc.message)
            return False
        return self._pool.exists(tenant)

    def _own(self, tenant: str, holder: str | None) -> bool:
        """Whether a tenant whose newest generation ``holder`` started is this member's to restore:
        any held one without members; with members, one it started, or one started before members
        existed ("") at its home (the restore's judge decides the rest: store/ownership.py)."""
        membership = self._pool.membership
        if holder is None:
            return False
        if membership is None:
            return True
        return holder == membership.me or (holder == "" and membership.home(tenant) == membership.me)


def restore_if_lost(pool: TenantPool, tenant: str) -> None:
    """A tenant with no file here that object storage holds (a lost volume's, not restored yet)
    restored now, as a call's open restores it: so that what works on its file (an erasure, a
    backup, a move) finds it rather than answering that it does not exist here."""
    if not pool.exists(tenant) and pool.replicas.holds(tenant):
        with pool.tenant(tenant, create=False):
            pass
