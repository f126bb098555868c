"""Reading and forgetting memories, and checking a tenant's audit chain."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.hot_path.fences import Fences
from mnemosyne.engine.index import drop_vectors
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.postings import drop_texts
from mnemosyne.engine.quotas import keep_requests_within_quota
from mnemosyne.engine.requests import replayed_result
from mnemosyne.engine.types import IntegrityReport, Memory, MemoryPage, ThreadRef
from mnemosyne.errors import InvalidArgument, NotFound
from mnemosyne.runtime.clock import Clock
from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.pool import TenantPool


def memory_from_row(row: MemoryRow) -> Memory:
    """A stored memory as the engine's value."""
    thread = None if row.thread_id is None else ThreadRef(row.thread_id, row.thread_position or 0)
    # In Memory's field order, by position: a recall makes one per hit, and its 17 keywords were a
    # third of the cost of making one.
    return Memory(
        row.id,
        row.scope,
        row.body,  # text
        row.metadata,
        row.created_at,
        row.facts,
        row.triples,
        row.forgotten,
        row.superseded_by,
        row.superseded_at,
        row.merged_into,
        row.occurred_at,
        thread,
        row.updated_at,
        row.speaker,
        row.forgotten_at,
        row.expires_at,
    )


def _thread_cursor(position: str | None) -> tuple[int, int] | None:
    """The (thread position, id) a thread listing's token continues after; None for no token."""
    if position is None:
        return None
    thread_position, _, memory_id = position.partition(":")
    if not thread_position.isdigit() or not memory_id.isdigit():  # pragma: no cover - only we write positions
        raise page_tokens.invalid()
    return int(thread_position), int(memory_id)


def _listing_query(
    scope: str, include_forgotten: bool, newest_first: bool, thread: str, wanted: Mapping[str, str]
) -> str:
    """What a page token is bound to: its listing, the order and the filters included."""
    query = f"memories\x1f{scope}\x1f{int(include_forgotten)}" + ("\x1fnewest" if newest_first else "")
    if thread:
        query += f"\x1fthread\x1f{thread}"
    if wanted:
        query += "\x1f" + ledger.canonical_json(wanted)
    return query


def _position(last: Memory, thread: str) -> str:
    """Where the next page of a listing starts: after ``last`` (in thread order with ``thread``)."""
    return f"{last.thread.position}:{last.id}" if thread and last.thread else str(last.id)


# The highest page number ``numbered_page`` serves (its offset is read past row by row).
MAX_PAGE_NUMBER = 100_000
_RECEIPT = "receipt"  # the list a write receipt belongs to (page_tokens' query)


class Memories:
    def __init__(
        self,
        *,
        pool: TenantPool,
        limits: Limits,
        fences: Fences,
        observer: EngineObserver,
        committed: Callable[[str], None] = lambda _method: None,
        clock: Clock | None = None,
    ) -> None:
        self.pool = pool
        self._observer = observer  # told each audit's verdict (the integrity metrics)
        self.limits = limits
        self._fences = fences  # a forget fences the queued writes (engine/hot_path/fences.py)
        self._committed = committed  # the crash-after-commit test seam (EngineConfig.committed)
        self._clock = clock or Clock()  # expired memories are not listed (engine/expiry.py)

    def get(self, tenant: str, memory_id: int) -> Memory:
        with self.pool.tenant(tenant, create=False) as store:
            rows: dict[int, MemoryRow] = {}
            if store is not None:
                with store.read() as txn:
                    rows = txn.memories_by_ids([memory_id])
        if memory_id not in rows:
            raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
        return memory_from_row(rows[memory_id])

    def page(
        self,
        tenant: str,
        *,
        scope: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_forgotten: bool = False,
        newest_first: bool = False,
        thread: str = "",
        metadata_equals: Mapping[str, str] | None = None,
    ) -> MemoryPage:
        """Memories in id order (descending with ``newest_first``), a page at a time: ``page_size``
        of them at most, fewer when their encoded size would pass the response budget
        (check.RESPONSE_BUDGET_BYTES). With ``thread``, only that thread's memories, in thread
        order (position, then id). With ``metadata_equals``, only memories whose metadata has each
        of its pairs exactly."""
        page_size = check.validate_page_size(page_size, self.limits)
        scope = check.validate_scope(scope) if scope else ""
        if thread:
            check.validate_thread(ThreadRef(thread, 0), field="thread")
        wanted = check.validate_metadata(metadata_equals or {}, self.limits, field="metadata_equals")
        query = _listing_query(scope, include_forgotten, newest_first, thread, wanted)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                page_tokens.decode(None, tenant, query, page_token)  # any token is one we never issued
                return MemoryPage([], "")
            with store.read() as txn:
                secret = txn.page_token_secret()
                if thread:
                    after = _thread_cursor(page_tokens.decode(secret, tenant, query, page_token))
                    ids = txn.list_thread_ids(
                        thread,
                        scope=scope or None,
                        after=after,
                        limit=page_size + 1,
                        include_forgotten=include_forgotten,
                        newest_first=newest_first,
                        metadata_equals=wanted,
                        unexpired_at=self._clock.now(),
                    )
                else:
                    ids = txn.list_memory_ids(
                        scope=scope or None,
                        after_id=page_tokens.decode_int(secret, tenant, query, page_token),
                        limit=page_size + 1,
                        include_forgotten=include_forgotten,
                        newest_first=newest_first,
                        metadata_equals=wanted,
                        unexpired_at=self._clock.now(),
                    )
                rows = txn.memories_by_ids(ids[:page_size])
        memories = [memory_from_row(rows[i]) for i in ids[:page_size]]
        kept = check.within_budget([check.memory_bytes(m) for m in memories])
        more = kept < len(memories) or len(ids) > page_size
        memories = memories[:kept]
        if not (more and memories):
            return MemoryPage(memories, "")
        return MemoryPage(memories, page_tokens.encode(secret, tenant, query, _position(memories[-1], thread)))

    def numbered_page(
        self, tenant: str, *, metadata_equals: Mapping[str, str], page: int, page_size: int
    ) -> tuple[list[Memory], int]:
        """Page ``page`` (from 1) of the live memories with every pair of ``metadata_equals``,
        newest first, and how many there are in all: pages by number, for APIs that count them
        (the mem0-compatible endpoints). Unlike a page token, a number may shift when memories are
        added or forgotten between two calls."""
        page_size = check.validate_page_size(page_size, self.limits)
        if not 1 <= page <= MAX_PAGE_NUMBER:
            raise InvalidArgument(f"page must be 1-{MAX_PAGE_NUMBER}, not {page}", reason="PAGE_INVALID")
        wanted = check.validate_metadata(metadata_equals, self.limits, field="filters")
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return [], 0
            with store.read() as txn:
                now = self._clock.now()
                total = txn.count_filtered(wanted, unexpired_at=now)
                ids = txn.list_memory_ids(
                    scope=None,
                    after_id=0,
                    limit=page_size,
                    include_forgotten=False,
                    newest_first=True,
                    metadata_equals=wanted,
                    offset=(page - 1) * page_size,
                    unexpired_at=now,
                )
                rows = txn.memories_by_ids(ids)
        memories = [memory_from_row(rows[i]) for i in ids]
        return memories[: check.within_budget([check.memory_bytes(m) for m in memories])], total

    def receipt(self, tenant: str, memory_id: int) -> str:
        """An opaque id naming a synchronous write of ``memory_id`` in this tenant (the event id the
        mem0-compatible add answers when the hot path is off): authenticated with the tenant's
        own secret, so no other tenant's, and no made-up one, is ever accepted."""
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
            with store.read() as txn:
                secret = txn.page_token_secret()
        return page_tokens.encode(secret, tenant, _RECEIPT, str(memory_id))

    def receipt_memory(self, tenant: str, receipt: str) -> int:
        """The memory id a ``receipt`` of this tenant names; EVENT_NOT_FOUND for any other."""
        with self.pool.tenant(tenant, create=False) as store:
            secret = None
            if store is not None:
                with store.read() as txn:
                    secret = txn.page_token_secret()
        try:
            return page_tokens.decode_int(secret, tenant, _RECEIPT, receipt)
        except InvalidArgument:
            raise NotFound(f"event {receipt[:80]!r} does not exist in this tenant", reason="EVENT_NOT_FOUND") from None

    def verify_integrity(self, tenant: str) -> IntegrityReport:
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return IntegrityReport(
                    valid=True, first_broken_at=0, checked=0, head_hash=ledger.GENESIS_HASH, problems=[]
                )
            with store.read() as txn:
                verdict = txn.audit()
        self._observer.integrity_checked(valid=verdict.valid)
        return IntegrityReport(
            valid=verdict.valid,
            first_broken_at=verdict.first_broken_at,
            checked=verdict.checked,
            head_hash=verdict.head_hash,
            problems=[(p.ledger_seq, p.memory_id, p.kind, p.detail) for p in verdict.problems],
        )

    def forget(self, tenant: str, memory_id: int, *, request_id: str | None = None) -> bool:
        """Erase a memory's text and everything derived from it, so that on return no byte of it
        is left in any file of the tenant (docs/operations.md, "Erasure"). False if it was already
        forgotten (an erasure that an earlier call could not finish is finished then)."""
        request_id = check.validate_request_id(request_id)
        payload_hash = ledger.sha256_hex(f"forget:{memory_id}")
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
            erased: list[int] = []
            with self._fences.fenced(tenant, store) as (txn, fence):
                prior = replayed_result(txn, request_id, "forget", payload_hash) if request_id else None
                if prior is not None:
                    forgotten = bool(json.loads(prior))
                else:
                    if not txn.memories_by_ids([memory_id], with_details=False):
                        raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
                    _, epoch_before = txn.index_state()
                    # Memories Dedup merged into this one hold the same content: forget them too.
                    doomed = [memory_id, *txn.merged_into_ids(memory_id)]
                    fence.duplicates_of(txn.fingerprints_of(doomed))  # queued writes of its content
                    for forget_id in doomed:
                        if txn.forget_memory(forget_id):
                            erased.append(forget_id)
                    forgotten = bool(erased)
                    _, epoch_after = txn.index_state()
                    if request_id:
                        txn.save_request(request_id, "forget", payload_hash, json.dumps(forgotten))
                        keep_requests_within_quota(txn, self.limits)
            if erased:  # the caches drop those rows rather than reloading the tenant's vectors and postings
                drop_vectors(store, erased, from_epoch=epoch_before, to_epoch=epoch_after)
                drop_texts(store, erased, from_epoch=epoch_before, to_epoch=epoch_after)
            self._committed("forget")
            if forgotten or store.erasure_pending():
                store.erase_traces()
        return forgotten
