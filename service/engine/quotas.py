"""Per-tenant quotas: how much one tenant may keep.

Checked inside the write transaction (so two concurrent writers cannot both slip under the
limit) against what the transaction itself sees: live memories, and database pages in use.
Exceeding a quota fails the whole write with RESOURCE_EXHAUSTED naming the quota; nothing of it
is kept. A quota of 0 means unlimited. The byte quota holds memories and records alike: the tenant
file is one, and the volume it fills is every tenant's. A forget is never refused by it (forgetting
frees room), nor a call that changes nothing: the request ids those keep past the quota are
bounded instead (``keep_requests_within_quota``). An update of an expiry alone is refused when it
grows the tenant (``check_bytes_growth``), even moving it earlier: each adds a ledger entry, and
an expiry can be moved without end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mnemosyne.engine.limits import Limits, set_by
from mnemosyne.errors import ResourceExhausted
from mnemosyne.store.tenant_store import ReadTxn, WriteTxn
from mnemosyne.store.tenantless_requests import KEPT_PER_TENANT


def check_memory_quota(
    txn: ReadTxn, limits: Limits, fingerprints: Iterable[str], *, stored: Mapping[str, int] | None = None
) -> None:
    """Before inserting memories with these fingerprints (the ones already stored are duplicates
    and add nothing): would the tenant hold more than its quota? ``stored`` is the caller's
    ``find_by_fingerprints`` of them in this transaction, if it has it."""
    if limits.max_tenant_memories <= 0:
        return
    unique = set(fingerprints)
    if stored is None:
        stored = txn.find_by_fingerprints(list(unique))
    adding = sum(1 for f in unique if f not in stored)
    if adding == 0:
        return
    live = txn.live_memory_count()
    if live + adding > limits.max_tenant_memories:
        raise ResourceExhausted(
            f"the tenant's quota is {limits.max_tenant_memories} live memories ({set_by('max_tenant_memories')}); "
            f"it holds {live} and this write adds {adding}: forget memories or ask the operator to raise the quota",
            reason="QUOTA_MEMORIES",
            metadata={"quota": "max_tenant_memories", "limit": str(limits.max_tenant_memories)},
        )


def check_bytes_quota(txn: ReadTxn, limits: Limits) -> None:
    """After the inserts, before the commit: does the tenant's database exceed its byte quota?"""
    if limits.max_tenant_bytes <= 0:
        return
    used = txn.used_bytes()
    if used > limits.max_tenant_bytes:
        raise ResourceExhausted(
            f"the tenant's quota is {limits.max_tenant_bytes} bytes of database ({set_by('max_tenant_bytes')}); "
            f"this write would bring it to {used} bytes: forget memories or delete records, or ask the operator to "
            "raise the quota",
            reason="QUOTA_BYTES",
            metadata={"quota": "max_tenant_bytes", "limit": str(limits.max_tenant_bytes)},
        )


def used_before(txn: ReadTxn, limits: Limits) -> int:
    """Bytes in use before a write that may as well shrink the tenant (a records edit), for
    ``check_bytes_growth`` (0 without a byte quota: nothing is measured)."""
    return txn.used_bytes() if limits.max_tenant_bytes > 0 else 0


def check_bytes_growth(txn: ReadTxn, limits: Limits, before: int) -> None:
    """After such a write, before its commit: past the byte quota, refused if it grew the tenant,
    so that a tenant over its quota can still delete and shrink what it keeps."""
    if limits.max_tenant_bytes > 0 and txn.used_bytes() > before:
        check_bytes_quota(txn, limits)


def keep_requests_within_quota(txn: WriteTxn, limits: Limits) -> None:
    """After a write no quota refuses (a forget, a merge, an update that changed nothing) saved its
    request id: past the byte quota, the tenant keeps only its latest ``KEPT_PER_TENANT`` request
    ids, as a tenant without a file does, so new ids without end cannot grow it past its quota by
    more than that."""
    if limits.max_tenant_bytes > 0 and txn.used_bytes() > limits.max_tenant_bytes:
        txn.keep_latest_requests(KEPT_PER_TENANT)
