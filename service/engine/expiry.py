"""Memories that expire (docs/expiry.md): a tenant's policy, the expiry a new or updated memory
gets, and the sweep that erases expired memories once their grace has passed.

Semantics, on the engine's clock (runtime/clock.py): a memory whose ``expires_at`` is at or before
now is expired. An expired memory is hidden from Recall, ListMemories and everything built on them
(mem0's search and list, AssembleContext, the MCP tools); GetMemory still answers it. Once
``expires_at + grace`` has passed, the sweep erases it exactly as ForgetMemory does (every column
but the kept ones cleared, its facts, triples, vector, full-text entries, versions and revisions
deleted, the WAL emptied), with an ``expire`` ledger entry instead of ``forget``.

Who sweeps, and when: the hot path's workers (engine/hot_path/worker.py), which take tenants
round-robin, run a tenant's sweep between its rounds, bounded (``SWEEP_BATCH`` memories per
transaction, ``SWEEP_MAX_BATCHES`` per turn): a tenant with erasures due is a tenant with work,
taking its turn beside the fast writes of every tenant, and a sweep behind by more than
runtime/background.py's URGENT_AFTER_SECONDS runs at normal priority, so erasure stays bounded
under load, not only when the server is idle. The tenants with erasures due are named in the
member-level recovery index (store/pending_index.py ``sweeps``) BEFORE the write that gives a
memory its expiry commits, so no restart and no idle tenant misses one, and no file is polled;
the write holds the name until it committed (``naming``), so a sweep that read the file before
that commit keeps it named (engine/hot_path/recovery.py ``sweep_if_due``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from mnemosyne.engine import changers
from mnemosyne.engine.index import drop_vectors
from mnemosyne.engine.postings import drop_texts
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.types import ExpiryPolicy
from mnemosyne.errors import InvalidArgument
from mnemosyne.runtime.clock import Clock
from mnemosyne.store.copies import StreamedCopies
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

POLICY_META = "expiry_policy"
MAX_TTL_SECONDS = 100 * 365 * 86400
MAX_GRACE_SECONDS = 10 * 365 * 86400
# A sweep's turn: memories erased per transaction (a few milliseconds of the tenant's write lock
# each) and transactions per turn; what is left waits for the tenant's next turn.
SWEEP_BATCH = 100
SWEEP_MAX_BATCHES = 5
# An erasure revokes the tenant's copies being sent (store/copies.py): while one is, the sweep waits,
# so that a backup or an export of a tenant whose memories expire all the time can finish, looking
# again every COPY_RECHECK_SECONDS, and erases once its oldest erasure is this late however many
# copies follow one another.
ERASURE_WAITS_FOR_COPIES_SECONDS = 600.0
COPY_RECHECK_SECONDS = 1.0


def read_policy(txn: ReadTxn) -> ExpiryPolicy:
    """The tenant's policy (the default one when it never set any)."""
    stored = txn.meta(POLICY_META)
    if not stored:
        return ExpiryPolicy()
    values = json.loads(stored)
    return ExpiryPolicy(
        default_ttl_seconds=int(values["default_ttl_seconds"]),
        update_extends=bool(values["update_extends"]),
        grace_seconds=int(values["grace_seconds"]),
    )


def validate_policy(policy: ExpiryPolicy) -> ExpiryPolicy:
    if not 0 <= policy.default_ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidArgument(
            f"default_ttl_seconds is {policy.default_ttl_seconds}; give 0 (never expire) to {MAX_TTL_SECONDS} "
            "(100 years)",
            reason="EXPIRY_POLICY_INVALID",
        )
    if not 0 <= policy.grace_seconds <= MAX_GRACE_SECONDS:
        raise InvalidArgument(
            f"grace_seconds is {policy.grace_seconds}; give 0 (erase at once) to {MAX_GRACE_SECONDS} (10 years)",
            reason="EXPIRY_POLICY_INVALID",
        )
    return policy


def next_erasure(txn: ReadTxn) -> float | None:
    """When the tenant's next erasure is due (engine clock; None: nothing expires)."""
    soonest = txn.next_expiry()
    return None if soonest is None else soonest + read_policy(txn).grace_seconds


def is_expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at <= now


class Expiry:
    """The policy, the stamping of expiries and the sweep, on ``clock``. ``with naming(tenant,
    at)`` names the tenant in the member-level index with an erasure due at ``at`` (engine clock)
    and wakes a worker then (the hot path's recovery index), held named while the write it
    encloses commits. ``copies``: those being sent, which the sweep waits for."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        clock: Clock,
        naming: Callable[[str, float], AbstractContextManager[None]],
        copies: StreamedCopies,
    ) -> None:
        self._pool = pool
        self.clock = clock
        self._naming = naming
        self._copies = copies
        pool.watchers.append(self)

    # -- told by the pool of its files' changes (store/file_watchers.py) ----------------------------

    def installed(self, tenant: str) -> None:
        """A file that arrived whole (an import, an online restore, a move) was named by none of
        its writes here: its next erasure, read from the file, is named now."""
        with self._pool.glance(tenant) as txn:
            due = next_erasure(txn)
        if due is not None:
            self._name_committed(tenant, due)

    def committed(self, tenant: str) -> None:
        pass  # a write that gives an expiry names its tenant itself (``stamped``, ``naming``)

    def content_erased(self, tenant: str) -> None:
        pass

    def erased(self, tenant: str) -> None:
        pass  # the hot path forgets an erased tenant, its sweep with it

    # -- the policy -------------------------------------------------------------------------------

    def policy(self, tenant: str) -> ExpiryPolicy:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return ExpiryPolicy()
            with store.read() as txn:
                return read_policy(txn)

    def set_policy(self, tenant: str, policy: ExpiryPolicy) -> ExpiryPolicy:
        """Replace the tenant's policy, with one ledger entry; memories already stored keep their
        expiry. A shorter grace makes erasures due sooner: the tenant is visited at once."""
        validate_policy(policy)
        value = json.dumps(dataclasses.asdict(policy), sort_keys=True)
        with self._pool.tenant(tenant, create=True) as store:
            assert store is not None
            with store.write() as txn:
                txn.set_meta(POLICY_META, value)
                txn.append_ledger({"op": "expiry_policy", **dataclasses.asdict(policy)})
                soonest = txn.next_expiry()
        if soonest is not None:
            self._name_committed(tenant, soonest + policy.grace_seconds)
        return policy

    def _name_committed(self, tenant: str, due: float) -> None:
        """Names an erasure read from the file after its commit: a sweep that read the file before
        that commit still runs, and keeps what is named meanwhile."""
        with self._naming(tenant, due):
            pass

    # -- what a write gives a memory ----------------------------------------------------------------

    @contextmanager
    def stamped(self, tenant: str, store: TenantStore, prepared: Sequence[PreparedItem]) -> Iterator[None]:
        """Around the write: each item without an expiry of its own gets the tenant's default
        time to live from now (its acceptance); the index names the tenant with the soonest
        erasure these items bring, before they can commit and until they did."""
        with store.read() as txn:
            policy = read_policy(txn)
        if policy.default_ttl_seconds:
            expires_at = self.clock.now() + policy.default_ttl_seconds
            for p in prepared:
                if p.item.expires_at is None:
                    p.item = dataclasses.replace(p.item, expires_at=expires_at)
        with self.naming(tenant, [p.item.expires_at for p in prepared], policy):
            yield

    @contextmanager
    def naming(self, tenant: str, expiries: Sequence[float | None], policy: ExpiryPolicy) -> Iterator[None]:
        """The index names the tenant with the soonest erasure of ``expiries``, if any, before
        the write this encloses commits and until it did."""
        soonest = min((e for e in expiries if e is not None), default=None)
        if soonest is None:
            yield
            return
        with self._naming(tenant, soonest + policy.grace_seconds):
            yield

    def note_applied(self, tenant: str, store: TenantStore, expiries: Sequence[float | None]) -> None:
        """Before a round of fast writes commits memories with ``expiries``: the index names the
        tenant again. Their acceptance named it, but a sweep while they were queued found nothing
        expiring in the file and cleared the name, and their erasures would never come due. (No
        sweep of the tenant overlaps the round: the tenant's worker runs both, one after the other.)"""
        if any(e is not None for e in expiries):
            with store.read() as txn:
                policy = read_policy(txn)
            with self.naming(tenant, expiries, policy):
                pass

    def updated_expiry(
        self,
        policy: ExpiryPolicy,
        current: float | None,
        *,
        expires_at: float | None,
        clear: bool,
        content_changed: bool,
    ) -> float | None:
        """A memory's expiry after an update: the one given, none when cleared, else (when the
        policy says an update extends it and the content changed) now + the default time to live
        if that is later, else the one it had. A memory that never expires is never given one here."""
        if clear:
            return None
        if expires_at is not None:
            return expires_at
        if content_changed and policy.update_extends and policy.default_ttl_seconds and current is not None:
            return max(current, self.clock.now() + policy.default_ttl_seconds)
        return current

    # -- the sweep ----------------------------------------------------------------------------------

    def sweep(self, tenant: str, store: TenantStore) -> float | None:
        """Erase the tenant's memories whose grace has passed, a bounded turn of them (the
        memories merged into one go with it); returns when its next erasure is due (engine clock;
        now when this turn left some; None: nothing expires). The erased text leaves the WAL too.
        While a copy of the tenant is being sent, nothing, up to ERASURE_WAITS_FOR_COPIES_SECONDS."""
        now = self.clock.now()
        if self._copies.sending(tenant):
            with store.read() as txn:
                oldest_due = next_erasure(txn)
            if oldest_due is not None and now < oldest_due + ERASURE_WAITS_FOR_COPIES_SECONDS:
                return min(oldest_due + ERASURE_WAITS_FOR_COPIES_SECONDS, now + COPY_RECHECK_SECONDS)
        erased_any = False
        with changers.changes_by(changers.EXPIRY_SWEEP):
            for _ in range(SWEEP_MAX_BATCHES):
                with store.write() as txn:
                    # The grace as of this transaction: a policy acknowledged meanwhile holds for every later batch.
                    grace = read_policy(txn).grace_seconds
                    _, epoch_before = txn.index_state()
                    due = txn.expiring(before=now - grace, limit=SWEEP_BATCH)
                    erased = [
                        i
                        for memory_id in due
                        for i in (memory_id, *txn.merged_into_ids(memory_id))
                        if txn.forget_memory(i, op="expire")
                    ]
                    _, epoch_after = txn.index_state()
                if erased:  # the caches drop those rows rather than reloading the tenant's
                    erased_any = True
                    drop_vectors(store, erased, from_epoch=epoch_before, to_epoch=epoch_after)
                    drop_texts(store, erased, from_epoch=epoch_before, to_epoch=epoch_after)
                if len(due) < SWEEP_BATCH:
                    break
        if erased_any or store.erasure_pending():
            store.erase_traces()
        with store.read() as txn:
            return next_erasure(txn)
