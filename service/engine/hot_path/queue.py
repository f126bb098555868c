"""The queue: a fast write on an enabled tenant is accepted by appending its items to the tenant's
inbox (store/inbox.py: a file of its own, so an enqueue never waits for a worker's commit) in one
short transaction; it answers ENQUEUED with their event ids. A tenant past its byte quota has them
refused (QUOTA_BYTES) as its synchronous writes are, a retry of one accepted before answered still:
accepted, each grew its inbox and log past the quota without end."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from mnemosyne.engine.config import HOT_PATH_SYNC_CHOICES
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.depths import Depths
from mnemosyne.engine.hot_path.recovery import Recovery
from mnemosyne.engine.hot_path.scheduler import Wake
from mnemosyne.engine.hot_path.state import TenantStates
from mnemosyne.engine.limits import Limits, set_by
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.quotas import check_bytes_quota
from mnemosyne.engine.requests import RequestKey, prior_outcomes
from mnemosyne.engine.types import RetainOutcome, RetainStatus
from mnemosyne.errors import InvalidArgument, ResourceExhausted
from mnemosyne.store.inbox import InboxRequest, InboxTxn
from mnemosyne.store.tenant_store import TenantStore

# How long a fast write refused for a full backlog is told to wait before its retry.
BACKLOG_RETRY_SECONDS = 1.0


def enqueue_syncs(sync: str) -> bool:
    """Whether each enqueue is synced (``--hot-path-sync``). "enqueue": each enqueue commits to
    the inbox with the store's synchronous setting (an fsync with FULL). "round": an enqueue does
    not fsync. In both, no worker transaction fsyncs under a write lock: the worker syncs the
    tenant's log after its commits, outside the lock (store.sync_log), and so do the barriers."""
    if sync not in HOT_PATH_SYNC_CHOICES:
        raise InvalidArgument(
            f"--hot-path-sync must be one of {', '.join(HOT_PATH_SYNC_CHOICES)}, not {sync!r}",
            reason="HOT_PATH_SYNC_INVALID",
        )
    return sync == "enqueue"


class Queue:
    """Accepts fast writes into the inboxes, and tells the workers and the waiters."""

    def __init__(
        self,
        *,
        states: TenantStates,
        recovery: Recovery,
        depths: Depths,
        wake: Wake,
        changes: Changes,
        sync_each_enqueue: bool,
        limits: Limits,
    ) -> None:
        self._states = states
        self._limits = limits
        self._recovery = recovery
        self._depths = depths
        self._wake = wake
        self._changes = changes
        self._sync_each_enqueue = sync_each_enqueue

    def enqueue(
        self,
        tenant: str,
        store: TenantStore,
        prepared: Sequence[PreparedItem],
        outcomes: list[RetainOutcome | None],
        request: RequestKey | None,
    ) -> list[RetainOutcome] | None:
        """Append prepared items to the tenant's inbox in one transaction (a worker moves them into
        the log); None when the hot path is off (the caller then writes synchronously)."""
        if not self._states.enabled(store):
            return None
        inbox = store.inbox(create=True)
        assert inbox is not None
        # The inbox's lock, not the tenant's: an enqueue never waits for a worker's commit.
        with inbox.lock:
            store.check_writable()  # a tenant moving between members (fenced under this lock)
            if not self._states.enabled(store):  # disabled since the read above (set_enabled holds this lock)
                return None
            self._recovery.accepting(tenant)  # durable before the operations are
            with inbox.write(sync=self._sync_each_enqueue) as txn:
                prior = _prior(txn, store, request) if request else None
                if prior is not None:
                    return prior
                if self._limits.max_tenant_bytes > 0:  # past it, refused as a synchronous write is
                    with store.read() as log_txn:
                        check_bytes_quota(log_txn, self._limits)
                self._check_backlog(tenant, len(prepared))
                now = time.time()
                # Their acceptance positions, under the inbox lock: ids are appended in order.
                first = store.acceptances.take(len(prepared))
                final = _append(txn, prepared, outcomes, request, now, first)
            self._depths.enqueued(tenant, store, len(prepared), now)
        self._wake.notify(tenant)
        self._changes.notify(tenant)
        return final

    def _check_backlog(self, tenant: str, adding: int) -> None:
        """RESOURCE_EXHAUSTED BACKLOG_FULL, with a retry delay, when ``adding`` more would pass the
        tenant's backlog limit (the depth as last counted, kept under this same inbox lock)."""
        limit = self._limits.max_tenant_backlog
        open_now = self._depths.of(tenant)[0]
        if limit > 0 and open_now + adding > limit:
            raise ResourceExhausted(
                f"tenant {tenant} has {open_now} fast writes not applied yet, and {adding} more would pass its "
                f"backlog limit of {limit} ({set_by('max_tenant_backlog')}); retry once the workers have caught up, "
                "or write synchronously",
                reason="BACKLOG_FULL",
                retry_after_seconds=BACKLOG_RETRY_SECONDS,
                metadata={"limit": str(limit), "backlog": str(open_now)},
            )


def _prior(txn: InboxTxn, store: TenantStore, request: RequestKey) -> list[RetainOutcome] | None:
    """The first result of a request id seen before. The inbox, then the tenant file: while the
    inbox lock is held no key can leave the inbox, so one not here either never came or was
    adopted before."""
    prior = prior_outcomes(txn, request)
    if prior is None:
        with store.read() as log_txn:
            prior = prior_outcomes(log_txn, request)
    return prior


def _append(
    txn: InboxTxn,
    prepared: Sequence[PreparedItem],
    outcomes: list[RetainOutcome | None],
    request: RequestKey | None,
    now: float,
    first: int,
) -> list[RetainOutcome]:
    """One operation per item, at the positions from ``first`` on (its event id), and the request
    id with the call's result; the call's outcomes."""
    results = list(outcomes)
    event_id = 0
    for offset, p in enumerate(prepared):
        event_id = p.acceptance = first + offset
        txn.append(event_id, "retain", p.to_payload(), p.fingerprint, request.request_id if request else None, now)
        results[p.position] = RetainOutcome(status=RetainStatus.ENQUEUED, event_id=event_id)
    final = [r for r in results if r is not None]
    if request:
        result_json = json.dumps([r.to_json() for r in final])
        txn.save_request(
            InboxRequest(
                request_id=request.request_id,
                method=request.method,
                payload_hash=request.payload_hash,
                result=result_json,
                created_at=now,
            ),
            event_id,
        )
    return final
