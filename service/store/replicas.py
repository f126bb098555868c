"""What the store tells the replication of its files to object storage (service/replication/,
docs/replication.md), and the one place it does so: the pool (store/pool.py) calls ``Replicas``
around every change of a tenant's files that is not a transaction — a first write's file renamed
into place, an install (``import --replace``, a move's copy, a restore), a tombstone's reclaim,
an erasure, the WAL truncation that finishes a forget — and the stores call it after each commit.
A new swap path goes through ``TenantPool._swapping``; nothing else of the store knows of
replication. Without ``--replica-url`` the pool holds ``NO_REPLICAS``, which does nothing.

The contract, for an implementation:

* ``swapping(tenant, fresh=...)``: a context manager. On entry every file of the tenant (its
  database and its inbox) is out of replication: confirmed replicated as far as it can be (a
  best effort: the files are about to change), unregistered, and the replicator's local state of
  them gone. During the block the store changes the files as files. On exit the tenant is marked
  written, so that it is registered again; ``fresh`` says the database is another one now (an
  install): it replicates to a new generation. ``gone`` (an erasure): the tenant's replicas are
  deleted on entry — before any file goes, so an erasure that cannot reach the store erases
  nothing (UNAVAILABLE) — and it is not registered again.
* ``fetch(tenant, into, judge)``: before a member creates a tenant: when object storage holds a
  replica of that name, its files restored into the directory ``into`` (the database, and the
  inbox or None), which the pool installs instead of a new tenant; None when it holds none;
  UNAVAILABLE naming the reason when it cannot be asked (never a fresh empty tenant then).
  ``judge`` (with members: store/ownership.py ``Ownership.restored_judge``) is asked of each
  generation's restored database, highest first: True takes it, False passes to the one below,
  an exception refuses the restore.
* ``floor(tenant, new=...)``: for a file made here now — a tenant created (``new``: the bucket
  holds none of it) or installed — the highest generation object storage holds of the tenant (0:
  none), which the file records until its first replication (``FLOOR_KEY``); None without
  replication, or when object storage cannot be asked (that file is then not judged by it).
* ``holds(tenant)``: whether object storage (probably) holds a replica of a tenant that has no
  file here: cheap (known from a listing at start), asked before every open of a missing tenant,
  reads too; True sends the open through ``fetch``.
* ``holder(tenant)``: for a tenant that has no file here, the member that started its highest
  generation in object storage (None: none held, or none named); a LIST and a GET, asked once
  per tenant by the ownership's placement (store/ownership.py), not at every call.
* ``newer_than(tenant, generation)``: at a file's open, when it records the generation it
  replicated to: (the bucket's highest generation, the member that started it) when that is
  higher — the file is a stale copy — else None; None too while object storage cannot be asked
  (the open goes on). Asked once per tenant per process once current.
* ``admit_write(tenant)``: before a client's write (not the service's own): RESOURCE_EXHAUSTED
  when the tenant is not replicating and the replicated set is full.
* ``written(tenant)``: after a commit of the tenant's database or inbox; called inside SQLite's
  commit, under the tenant's write lock: it must be cheap and never block.
* ``forgotten(tenant, memories)``: a forget committed (before its traces are erased): every
  memory the tenant's file holds forgotten (``memories()``, read only when replicating: (id,
  created_at) pairs) is kept outside the file, where a restore re-applies it — so no restore, to
  any point in time, brings back what was forgotten. Never raises: what cannot be kept now is
  kept later.
* ``replicated_since(tenant)``: the time (``time.time()``) before which every commit of the
  tenant's files is in object storage; ``math.inf`` without replication. An inbox row leaves only
  once its move into the tenant file is older than this (store/inbox.py ``adopted``).
* ``replicating(tenant)``: whether the tenant's files are in the replication's active set
  (registered in Litestream, or to be at its next tick, from the first commit ``written`` names).
  Litestream then checkpoints them itself, and the store must not: a checkpoint of ours while
  Litestream replicates a file made its replica restore malformed (a tenant written in large
  batches: docs/replication.md#checkpoints). Cheap: asked before every checkpoint.
* ``lag(tenant)``: how far the tenant's replica is behind: the age in seconds of its oldest commit
  not confirmed in object storage, and the WAL bytes since its last confirmed sync began ((0, 0)
  when caught up, and without replication). Cheap: Stats asks it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import apsw

from mnemosyne.errors import FailedPrecondition
from mnemosyne.store.connections import BUSY_TIMEOUT_MS
from mnemosyne.store.membership import Membership

if TYPE_CHECKING:  # the store imports this module (StoreReplication)
    from mnemosyne.store.bookkeeping import BookkeepingReads
    from mnemosyne.store.tenant_store import TenantStore

# The tenant file's meta row naming the generation its replica is written under
# (``PREFIX/<tenant>/<generation>/``): set by the replication before it first replicates a file,
# removed from every file an install brings in (``forget_generation``), so a copy never continues
# the generation of the file it was copied from.
GENERATION_KEY = "replica_generation"
# The meta row of a file due to start a generation: the highest generation object storage held
# when the file was made here (created, installed), or the one it replicated to before an erasure
# (``StoreReplication.erased``). Its next replication starts one above; until then a copy of it
# records no generation, and once object storage holds one above its floor, another file
# replicated since and this one is a stale copy.
FLOOR_KEY = "replica_floor"


class Replicas(Protocol):
    def swapping(self, tenant: str, *, fresh: bool, gone: bool = False) -> AbstractContextManager[None]: ...

    def fetch(
        self, tenant: str, into: Path, judge: Callable[[Path], bool] | None = None
    ) -> tuple[Path, Path | None] | None: ...

    def floor(self, tenant: str, *, new: bool) -> int | None: ...

    def holds(self, tenant: str) -> bool: ...

    def holder(self, tenant: str) -> str | None: ...

    def newer_than(self, tenant: str, generation: int) -> tuple[int, str] | None: ...

    def admit_write(self, tenant: str) -> None: ...

    def written(self, tenant: str) -> None: ...

    def forgotten(self, tenant: str, memories: Callable[[], list[tuple[int, float]]]) -> None: ...

    def replicated_since(self, tenant: str) -> float: ...

    def replicating(self, tenant: str) -> bool: ...

    def lag(self, tenant: str) -> tuple[float, int]: ...


class NoReplicas:
    """No replication: every hook does nothing, and every commit counts as replicated."""

    @contextmanager
    def swapping(self, tenant: str, *, fresh: bool, gone: bool = False) -> Iterator[None]:
        yield

    def fetch(
        self, tenant: str, into: Path, judge: Callable[[Path], bool] | None = None
    ) -> tuple[Path, Path | None] | None:
        return None

    def floor(self, tenant: str, *, new: bool) -> int | None:
        return None

    def holds(self, tenant: str) -> bool:
        return False

    def holder(self, tenant: str) -> str | None:
        return None

    def newer_than(self, tenant: str, generation: int) -> tuple[int, str] | None:
        return None

    def admit_write(self, tenant: str) -> None:
        pass

    def written(self, tenant: str) -> None:
        pass

    def forgotten(self, tenant: str, memories: Callable[[], list[tuple[int, float]]]) -> None:
        pass

    def replicated_since(self, tenant: str) -> float:
        return math.inf

    def replicating(self, tenant: str) -> bool:
        return False

    def lag(self, tenant: str) -> tuple[float, int]:
        return 0.0, 0


NO_REPLICAS = NoReplicas()


def forget_generation(database: Path, floor: int | None) -> None:
    """Remove the replica generation from a tenant file about to be installed (not open
    elsewhere), and record its ``floor`` (``Replicas.floor``): it replicates to a generation of
    its own once installed, above the floor."""
    connection = _connect(database)
    try:
        with connection:
            connection.execute("DELETE FROM meta WHERE key IN (?, ?)", (GENERATION_KEY, FLOOR_KEY))
            if floor is not None:
                connection.execute("INSERT INTO meta(key, value) VALUES(?, ?)", (FLOOR_KEY, str(floor)))
    finally:
        connection.close()


def record_floor(store: TenantStore, floor: int | None) -> None:
    """Record in a new tenant's file, before it is the tenant's, its ``floor``."""
    if floor is not None:
        with store.write(internal=True) as txn:
            txn.set_meta(FLOOR_KEY, str(floor))


def recorded_replica(txn: BookkeepingReads) -> tuple[int | None, int | None]:
    """(the generation a tenant file replicates to, the floor it records until then): None for
    what it does not record (neither: a file of a server without replication, or of an earlier
    version)."""
    generation, floor = txn.meta(GENERATION_KEY), txn.meta(FLOOR_KEY)
    return (
        int(generation) if generation is not None and generation.isdigit() else None,
        int(floor) if floor is not None and floor.isdigit() else None,
    )


class StoreReplication:
    """One tenant's side of ``Replicas``, bound by the pool for the tenant's open store
    (store/tenant_store.py): told of each commit, asked before a client's write, and around the
    truncations that finish a forget."""

    def __init__(self, tenant: str = "", replicas: Replicas = NO_REPLICAS) -> None:
        self.tenant = tenant
        self._replicas = replicas

    def written(self) -> None:
        self._replicas.written(self.tenant)

    def admit_write(self) -> None:
        self._replicas.admit_write(self.tenant)

    def forgotten(self, memories: Callable[[], list[tuple[int, float]]]) -> None:
        self._replicas.forgotten(self.tenant, memories)

    def replicated_since(self) -> float:
        return self._replicas.replicated_since(self.tenant)

    def checkpointed_elsewhere(self) -> bool:
        """Whether another process (Litestream) may checkpoint the tenant's files."""
        return self._replicas is not NO_REPLICAS

    def checkpoints_are_ours(self) -> bool:
        """False while the replication checkpoints the tenant's files (``Replicas.replicating``)."""
        return not self._replicas.replicating(self.tenant)

    def erased(self, connection: apsw.Connection) -> None:
        """In the write transaction that ends an erasure of the tenant's file (its WAL emptied):
        the generation it recorded becomes its floor, so its next replication starts a new one
        above it, and the old one, holding what was erased, goes after the retention, whatever
        stops the process before that replication (the in-memory ``fresh`` of ``paused`` is lost
        with it)."""
        connection.execute(
            "INSERT OR REPLACE INTO meta(key, value) SELECT ?, value FROM meta WHERE key = ?",
            (FLOOR_KEY, GENERATION_KEY),
        )
        connection.execute("DELETE FROM meta WHERE key = ?", (GENERATION_KEY,))

    def paused(self) -> AbstractContextManager[None]:
        """Around the truncations that finish a forget: out of replication meanwhile, then on to a
        new generation (the old one holds the forgotten text until the retention deletes it)."""
        return self._replicas.swapping(self.tenant, fresh=True)


def _connect(database: Path) -> apsw.Connection:
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READWRITE)
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)  # the tenant's writer may hold it a moment
    return connection


def record_generation(database: Path, generation: int) -> None:
    """Record in the tenant file the generation its replica is written under, before the first
    byte of it is replicated (so the replica names its own generation)."""
    connection = _connect(database)
    try:
        with connection:
            connection.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (GENERATION_KEY, str(generation)),
            )
    finally:
        connection.close()


def stale_because(generation: int | None, floor: int | None) -> str:
    """What a stale file records (``recorded_replica``), in a refusal."""
    if generation is not None:
        return f"replica generation {generation}"
    return f"never replicated, made when object storage held {f'generation {floor}' if floor else 'none of it'}"


def refuse_stale(tenant: str, store: TenantStore, replicas: Replicas, membership: Membership | None) -> None:
    """At an open of ``store``: refuse a file that replicated to a generation below one object
    storage holds — a copy left on a volume (a former owner's, a snapshot put back) is never
    served over the newer one. NOT_OWNER naming the member that started the newer one, else
    FAILED_PRECONDITION REPLICA_STALE. A move's fenced source is not: it stays readable while
    its copy replicates above it."""
    if store.fenced:
        return
    with store.read() as txn:
        recorded, floor = recorded_replica(txn)
    below = recorded if recorded is not None else floor
    newer = replicas.newer_than(tenant, below) if below is not None else None
    if newer is None:
        return
    generation, holder = newer
    with store.read() as txn:  # that generation may be this file's own, started since the read above
        if (recorded_replica(txn)[0] or 0) >= generation:
            return
    why = f"the file here is a stale copy ({stale_because(recorded, floor)}; object storage holds {generation})"
    if membership is not None and holder and holder != membership.me:
        raise membership.not_owner(tenant, holder, f"{why}, started there")
    raise FailedPrecondition(
        f"tenant {tenant}: {why}; remove this file (the next call restores the newer one from object storage)",
        reason="REPLICA_STALE",
        metadata={"generation": str(generation)},
    )
