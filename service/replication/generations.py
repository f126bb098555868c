"""Which generation a tenant's file replicates under (``PREFIX/<tenant>/<generation>/``, recorded in
the file first: store/replicas.py ``GENERATION_KEY``), and whether it is still the highest the
bucket holds. A file without one takes the bucket's highest + 1; one behind it is a stale copy,
never replicated — judged when the file is first registered (``choose``) and again at every
REPLICATED barrier (``overtaken``): a server that shares the prefix without being a member of one
deployment may have started a generation above it since (docs/replication.md#one-writer-per-prefix).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from mnemosyne.errors import FailedPrecondition
from mnemosyne.replication.bucket import Bucket
from mnemosyne.replication.sweeps import Sweeps
from mnemosyne.store.ownership import TOMBSTONED, OwnershipRecord
from mnemosyne.store.replicas import record_generation, recorded_replica, stale_because
from mnemosyne.store.tenant_store import read_file

log = logging.getLogger("mnemosyne.replication")

STALE = "REPLICA_STALE"


def _recorded(database: Path) -> tuple[int | None, int | None, OwnershipRecord]:
    """The file's generation, its floor and its ownership record."""
    with read_file(database) as txn:
        (generation, floor), ownership = recorded_replica(txn), OwnershipRecord.read(txn)
    return generation, floor, ownership


def _moved_away(ownership: OwnershipRecord, behind: bool, holder: Callable[[], str | None]) -> bool:
    """A move's source (tombstoned, or fenced while the newer generation is its destination's
    copy): below that copy by design — readable, never above it, never stale."""
    return ownership.step == TOMBSTONED or (ownership.fenced and behind and holder() == ownership.peer)


class Generations:
    def __init__(self, bucket: Bucket, sweeps: Sweeps) -> None:
        self._bucket = bucket
        self._sweeps = sweeps

    def choose(self, tenant: str, database: Path, fresh: bool) -> int | str | None:
        """The generation the tenant's file replicates under (the module's docstring); None for a
        move's source; for a stale copy, why it is refused. A file changed as a file (``fresh``)
        takes a new one, recorded in it first; those below go after the retention."""
        recorded, floor, ownership = _recorded(database)
        latest = self._bucket.highest_generation(tenant)
        behind = recorded is None or recorded < latest
        if _moved_away(ownership, behind, lambda: self._bucket.holder(tenant)):
            return None
        # A floor is compared with the generations held, not an erasure's (a tenant made after it).
        if (recorded is not None and recorded < latest) or (
            recorded is None and floor is not None and self._bucket.newer_than(tenant, floor) is not None
        ):
            return (
                f"tenant {tenant}'s file is a stale copy ({stale_because(recorded, floor)}; object storage holds "
                f"generation {latest}: a newer one was written elsewhere); it is not replicated"
            )
        if recorded is None or fresh:
            record_generation(database, latest + 1)
            self._bucket.record_holder(tenant, latest + 1, ownership.holder or "")
            log.info("tenant %s: replicates to generation %d", tenant, latest + 1)
            if latest:
                self._sweeps.plan(tenant, latest + 1)
            return latest + 1
        return recorded

    def overtaken(self, tenant: str, database: Path, registered: int) -> FailedPrecondition | None:
        """After a sync confirmed the tenant's commits at a REPLICATED barrier, under generation
        ``registered``: the refusal when the bucket holds a generation above it, started elsewhere
        since (a restore takes that one, without what this file confirmed); None while it is the
        highest, or the file is a move's source. One LIST; the file is read, and the newer
        generation's holder fetched, only when one is found (``Bucket.newer_than``)."""
        newer = self._bucket.newer_than(tenant, registered)
        if newer is None or not database.exists():
            return None
        recorded, _floor, ownership = _recorded(database)
        generation, holder = newer
        if (recorded or 0) >= generation or _moved_away(ownership, True, lambda: holder):
            return None  # its own, started since it registered (a forget's new generation); a move's source
        started = f"started by member {holder}" if holder else "started by a server without members"
        return FailedPrecondition(
            f"tenant {tenant}: object storage holds generation {generation} ({started}), above this file's "
            f"generation {registered}: another server replicates to the same bucket prefix, and a restore takes "
            "that one — these writes are not in it. This file is a stale copy from now on, not replicated; "
            "run one server (or one deployment of members) per prefix, and remove this file (the next call "
            "restores the newer one)",
            reason=STALE,
            metadata={"generation": str(generation), "holder": holder},
        )
