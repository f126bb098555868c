"""Idempotency: the result a request id already had, wherever it is kept.

A write that carries a ``request_id`` stores its result with it, in the same transaction as the
write: in the tenant file (``requests``) or, for a fast write not yet taken by a worker, in the
tenant's inbox. A retry with the same id gets that first result, whatever happened to the reply;
the same id with another method or payload is a client bug, not a retry, and is refused, wherever
the first one is kept: a write of its own transaction (``keyed_write``) looks in the inbox too
(``replayed_anywhere``), under the inbox lock, so a fast write's id still queued there is never
taken by another write (whose record would then refuse the fast write's own retry).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from mnemosyne.engine.types import RetainOutcome
from mnemosyne.errors import Conflict
from mnemosyne.store.tenant_store import TenantStore, WriteTxn
from mnemosyne.store.tenantless_requests import TenantlessRequests

# How long a request id is remembered (a retry after this is a new request).
REQUEST_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True)
class RequestKey:
    """What a write's request id stands for: the id, its method and the hash of its payload."""

    request_id: str
    method: str
    payload_hash: str


class RequestReader(Protocol):
    """A transaction that can look a request id up (the tenant file's, or the inbox's)."""

    def find_request(self, request_id: str) -> tuple[str, str, str] | None: ...


def replayed_result(txn: RequestReader, request_id: str, method: str, payload_hash: str) -> str | None:
    """The stored result JSON of an earlier call with this request id, or None if there was none.

    The same id with another method or payload is a client bug, not a retry: refuse it."""
    return _same_request(txn.find_request(request_id), request_id, method, payload_hash)


def replayed_without_file(
    requests: TenantlessRequests, tenant: str, request_id: str, method: str, payload_hash: str
) -> str | None:
    """``replayed_result`` among the results of calls that found ``tenant`` without a file
    (store/tenantless_requests.py): a retry of one, after the tenant's first write, answers it."""
    return _same_request(requests.find(tenant, request_id), request_id, method, payload_hash)


def result_without_file(requests: TenantlessRequests, tenant: str, key: RequestKey, result_json: str) -> str:
    """The result a keyed call that found ``tenant`` without a file answers: ``result_json``, kept
    for its retries, or what the first call with this request id answered."""
    kept = requests.first(tenant, key.request_id, key.method, key.payload_hash, result_json)
    prior = _same_request(kept, key.request_id, key.method, key.payload_hash)
    assert prior is not None  # kept is never None
    return prior


def _same_request(prior: tuple[str, str, str] | None, request_id: str, method: str, payload_hash: str) -> str | None:
    if prior is None:
        return None
    prior_method, prior_hash, result_json = prior
    if prior_method != method or prior_hash != payload_hash:
        raise Conflict(
            f"request_id {request_id!r} was already used for a different request; use a new request_id for new content",
            reason="IDEMPOTENCY_KEY_REUSED",
        )
    return result_json


@contextmanager
def keyed_write(store: TenantStore, request_id: str | None) -> Iterator[WriteTxn]:
    """The tenant's write transaction of a write that may carry a request id: with one, under the
    inbox lock too (taken first: store/inbox.py's order), so no fast write of the same id is
    accepted between its check (``replayed_anywhere``) and its commit."""
    with store.inbox_lock if request_id else nullcontext(), store.write() as txn:
        yield txn


def replayed_anywhere(
    store: TenantStore, txn: RequestReader, request_id: str, method: str, payload_hash: str
) -> str | None:
    """``replayed_result`` in the tenant file (``txn``), then in its inbox, where a fast write not
    yet taken by a worker keeps its id (call it in a ``keyed_write``)."""
    prior = replayed_result(txn, request_id, method, payload_hash)
    inbox = store.inbox(create=False) if prior is None else None
    if inbox is not None:
        with inbox.read() as inbox_txn:
            prior = replayed_result(inbox_txn, request_id, method, payload_hash)
    return prior


def prior_outcomes(txn: RequestReader, key: RequestKey) -> list[RetainOutcome] | None:
    """The outcomes an earlier retain with this request id answered, or None."""
    result_json = replayed_result(txn, key.request_id, key.method, key.payload_hash)
    return None if result_json is None else [RetainOutcome.from_json(o) for o in json.loads(result_json)]


def prior_outcomes_anywhere(store: TenantStore, key: RequestKey) -> list[RetainOutcome] | None:
    """An earlier retain's outcomes for this request id, in the tenant file or, for a fast write
    not yet taken by a worker, in its inbox (read first: a key moving meanwhile is then still
    found)."""
    inbox = store.inbox(create=False)
    if inbox is not None:
        with inbox.read() as inbox_txn:
            prior = prior_outcomes(inbox_txn, key)
        if prior is not None:
            return prior
    with store.read() as txn:
        return prior_outcomes(txn, key)
