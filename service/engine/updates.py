"""Memories changed in place and forgotten by filter: UpdateMemory, ForgetMemories, versions.

An update keeps the memory's id and replaces its content the way a new write would make it: the
text and metadata are validated as a retain's are (engine/limits.py), extracted and embedded
outside any transaction, its near duplicates looked up (engine/dedup.py) and its attribute facts
adjudicated (engine/conflicts.py) in the ONE write transaction that replaces body, facts, triples,
embedding and full-text row, keeps the earlier version (``memory_versions``) and appends one
``update`` ledger entry (store/memory_writes.py ``update_memory``). New content that another
memory already holds is refused (MEMORY_DUPLICATE, naming it), as a retain of it would have
answered that memory.

ForgetMemories forgets every memory matching a filter in ONE transaction of the tenant: all of
them or none (another tenant is never touched, nor slowed: its file and lock are its own).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mnemosyne.engine import conflicts
from mnemosyne.engine import limits as check
from mnemosyne.engine.expiry import Expiry, read_policy
from mnemosyne.engine.hot_path.fences import Fences
from mnemosyne.engine.index import drop_vectors, replace_vector
from mnemosyne.engine.memories import memory_from_row
from mnemosyne.engine.postings import drop_texts, replace_text
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.quotas import check_bytes_growth, check_bytes_quota, keep_requests_within_quota, used_before
from mnemosyne.engine.reembed import write_next_vectors
from mnemosyne.engine.requests import (
    RequestKey,
    keyed_write,
    replayed_anywhere,
    replayed_result,
    replayed_without_file,
    result_without_file,
)
from mnemosyne.engine.types import Memory, MemoryRevision, MemoryVersion, RetainItem, ThreadRef, UpdateOutcome
from mnemosyne.engine.write_path import ExtractionMissing, WritePath
from mnemosyne.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import MemoryRow, metadata_of
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.revisions import REVERTED, UPDATED
from mnemosyne.store.tenant_store import ReadTxn, TenantStore, WriteTxn
from mnemosyne.store.tenantless_requests import TenantlessRequests

# Most memories one ForgetMemories may forget in its one transaction: beyond it the call is
# refused before anything changes (FORGET_TOO_MANY), so one call never holds the tenant's writer
# for minutes; narrow the filter, or erase the tenant.
MAX_FORGET_MEMORIES = 10_000
# Preparations of an update whose memory (or tenant embedder) another write changed meanwhile,
# before it answers WRITE_CONTENDED.
REWRITE_ATTEMPTS = 5


def _not_found(memory_id: int, *, forgotten: bool = False) -> NotFound:
    """MEMORY_NOT_FOUND for a memory that never was and for a forgotten one alike (its text and
    versions are erased), the message telling which, as GetMemory shows a forgotten one."""
    if forgotten:
        return NotFound(
            f"memory {memory_id} was forgotten: its text and its versions are erased",
            reason="MEMORY_NOT_FOUND",
        )
    return NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")


def _live_row(txn: ReadTxn, memory_id: int) -> MemoryRow:
    """The memory's row, if it can be updated: it exists, is not forgotten, not merged away."""
    row = txn.memories_by_ids([memory_id], with_details=False).get(memory_id)
    if row is None or row.forgotten:
        raise _not_found(memory_id, forgotten=row is not None)
    if row.merged_into:
        raise FailedPrecondition(
            f"memory {memory_id} was merged into memory {row.merged_into}; update that one",
            reason="MEMORY_MERGED",
            metadata={"memory_id": str(row.merged_into)},
        )
    return row


class _Changed(Exception):
    """Another write changed the memory between an update's read and its transaction."""


def _content(row: MemoryRow) -> tuple[object, ...]:
    """What an update keeps of the memory unless it gives its own: text, metadata, expiry."""
    return (row.body, dict(row.metadata), row.expires_at)


def _still_as_read(txn: ReadTxn, memory_id: int, seen: tuple[object, ...]) -> None:
    """In the update's transaction: the memory is live (NOT_FOUND, MEMORY_MERGED) and holds what
    the update was prepared from (else ``_Changed``: prepare it again, never write over it)."""
    if _content(_live_row(txn, memory_id)) != seen:
        raise _Changed


def _refuse_duplicate(txn: ReadTxn, memory_id: int, fingerprint: str) -> None:
    """New content that another memory already holds is refused (MEMORY_DUPLICATE, naming it)."""
    holder = txn.find_by_fingerprints([fingerprint]).get(fingerprint)
    if holder is not None and holder != memory_id:
        raise FailedPrecondition(
            f"memory {holder} already holds this text; update or forget that one instead",
            reason="MEMORY_DUPLICATE",
            metadata={"memory_id": str(holder)},
        )


@dataclass(frozen=True)
class _Change:
    """What an update or a revert asks: the text ("": keep), metadata (None: keep), expiry (None
    and not clear: keep or extend), and the revision it adds."""

    text: str
    metadata: Mapping[str, str] | None
    expires_at: float | None
    clear_expires_at: bool
    kind: str = UPDATED
    reverted_to: int = 0

    def payload_hash(self, method: str, memory_id: int) -> str:
        """Its request id's payload hash: what the request itself asks, never what the memory
        holds (a retry after another change to the memory, or after its forget or merge, is
        still the same request). A revert asks for a revision, whatever content it restores."""
        if self.kind == REVERTED:
            return ledger.sha256_hex(ledger.canonical_json([method, memory_id, "revision", self.reverted_to]))
        expiry: list[object] = (
            ["never"] if self.clear_expires_at else [] if self.expires_at is None else [self.expires_at]
        )
        metadata = None if self.metadata is None else dict(self.metadata)
        return ledger.sha256_hex(ledger.canonical_json([method, memory_id, "asked", self.text, metadata, *expiry]))


def _remember(
    txn: WriteTxn,
    request_id: str | None,
    request: tuple[str, str],
    near_duplicate_of: list[int],
    supersedes: list[int],
    revision: int,
    *,
    updated: bool = True,
) -> None:
    """An update's result, kept with its request id (if it has one) for a retry to answer."""
    if request_id:
        result = {"updated": updated, "near_duplicate_of": near_duplicate_of, "supersedes": supersedes}
        txn.save_request(request_id, request[0], request[1], json.dumps({**result, "revision": revision}))


class Updates:
    def __init__(
        self,
        *,
        pool: TenantPool,
        write_path: WritePath,
        fences: Fences,
        settle: Callable[[str, Sequence[str]], None],
        expiry: Expiry,
        tenantless: TenantlessRequests,
        committed: Callable[[str], None] = lambda _method: None,
    ) -> None:
        self._pool = pool
        self._tenantless = tenantless  # the results of keyed calls that found no tenant file
        self._expiry = expiry  # what an update does to a memory's expiry (engine/expiry.py)
        self._write_path = write_path
        self._fences = fences  # forgets and updates fence the queued writes (engine/hot_path/fences.py)
        self._settle = settle  # a write of queued content waits for it (engine/hot_path/awaited.py)
        self._committed = committed  # the crash-after-commit test seam (EngineConfig.committed)

    def update(
        self,
        tenant: str,
        memory_id: int,
        *,
        text: str = "",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        expires_at: float | None = None,
        clear_expires_at: bool = False,
    ) -> UpdateOutcome:
        """Replace a memory's text (empty: keep it), metadata (None: keep it) and expiry (None and
        not ``clear_expires_at``: keep it, or extend it as the tenant's policy says) under its id."""
        request_id = check.validate_request_id(request_id)
        expires_at = check.validate_expires_at(expires_at)
        if expires_at is not None and clear_expires_at:
            raise InvalidArgument("give expires_at or clear_expires_at, not both", reason="EXPIRES_AT_CONFLICT")
        if not text and metadata is None and expires_at is None and not clear_expires_at:
            raise InvalidArgument(
                "give the new text, the new metadata (replace_metadata) or a new expiry (expires_at, clear_expires_at)",
                reason="UPDATE_EMPTY",
            )
        # What the request alone shows is refused before the memory is looked up, as for a retain.
        if text:
            check.validate_text(text, self._write_path.limits)
        if metadata is not None:
            check.validate_metadata(metadata, self._write_path.limits)
        return self._rewrite(
            tenant,
            memory_id,
            _Change(text, metadata, expires_at, clear_expires_at),
            request_id=request_id,
            method="update",
        )

    def revert(self, tenant: str, memory_id: int, revision: int, *, request_id: str | None = None) -> UpdateOutcome:
        """Restore the text and metadata a memory had after ``revision``, as a new revision
        (docs/revisions.md): an update of it, with every rule of one."""
        request_id = check.validate_request_id(request_id)
        asked = _Change("", None, None, False, kind=REVERTED, reverted_to=revision)
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            replayed = self._replayed_first(
                store, memory_id, request_id, ("revert", asked.payload_hash("revert", memory_id))
            )
            if replayed is not None:
                return replayed
            with store.read() as txn:
                row = _live_row(txn, memory_id)
                target = next((r for r in txn.memory_revisions(memory_id) if r.revision == revision), None)
                if target is None:
                    content = None
                elif target.version == txn.current_version(memory_id):
                    content = (row.body, row.metadata)
                else:
                    kept = txn.version_content(memory_id, target.version)
                    content = None if kept is None else (kept[0], metadata_of(kept[1]))
        if content is None:
            raise NotFound(
                f"memory {memory_id} has no revision {revision} (ListMemoryRevisions lists the ones kept)",
                reason="REVISION_NOT_FOUND",
            )
        change = _Change(content[0], content[1], None, False, kind=REVERTED, reverted_to=revision)
        return self._rewrite(tenant, memory_id, change, request_id=request_id, method="revert")

    def _rewrite(
        self, tenant: str, memory_id: int, change: _Change, *, request_id: str | None, method: str
    ) -> UpdateOutcome:
        """An update or a revert: prepared as a new write would be from a read of the memory, then
        written in one transaction (or, when only the expiry changes, a smaller one) if the memory
        is still as read; else prepared again, so a concurrent change is never written over."""
        request = (method, change.payload_hash(method, memory_id))
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            replayed = self._replayed_first(store, memory_id, request_id, request)
            if replayed is not None:
                return replayed
            for _attempt in range(REWRITE_ATTEMPTS):
                try:
                    return self._rewrite_once(tenant, store, memory_id, change, request_id, request)
                except (ExtractionMissing, _Changed):  # a re-embedding switched the tenant, or a write the memory
                    continue
        raise Conflict(
            "the memory (or the tenant's embedder) changed repeatedly during the update; retry",
            reason="WRITE_CONTENDED",
        )

    def _rewrite_once(
        self,
        tenant: str,
        store: TenantStore,
        memory_id: int,
        change: _Change,
        request_id: str | None,
        request: tuple[str, str],
    ) -> UpdateOutcome:
        with store.read() as txn:
            row = _live_row(txn, memory_id)
            policy = read_policy(txn)
        item = RetainItem(  # its time and thread stay: relative times in a new text read against them
            text=change.text or row.body,
            scope=row.scope,
            metadata=dict(row.metadata if change.metadata is None else change.metadata),
            occurred_at=row.occurred_at,
            thread=None if row.thread_id is None else ThreadRef(row.thread_id, row.thread_position or 0),
            speaker=row.speaker,
        )
        _, (prepared,) = self._write_path.prepare([item], per_item_errors=False)
        changed = [
            name
            for name, differs in (
                ("text", prepared.item.text != row.body),
                ("metadata", prepared.item.metadata != row.metadata),
            )
            if differs
        ]
        expires_at = self._expiry.updated_expiry(
            policy,
            row.expires_at,
            expires_at=change.expires_at,
            clear=change.clear_expires_at,
            content_changed=bool(changed),
        )
        if expires_at != row.expires_at:
            changed.append("expires_at")
        seen = _content(row)
        if not changed:
            return self._unchanged(store, memory_id, request_id, request, seen)
        # A new expiry is named in the index before the commit, and held named until it.
        with self._expiry.naming(tenant, [expires_at] if "expires_at" in changed else [], policy):
            if changed == ["expires_at"]:
                return self._set_expiry(store, memory_id, expires_at, request_id, request, seen)
            prepared.item = dataclasses.replace(prepared.item, expires_at=expires_at)
            # Queued writes of the new text were accepted first: they are applied before it.
            self._settle(tenant, [prepared.fingerprint])
            # Outside the transaction: extraction, embedding, near duplicates (as for a retain).
            self._write_path.extract_missing(store, [prepared], force=True)
            return self._replace(tenant, store, memory_id, prepared, request_id, request, change, changed, seen)

    def _replayed_first(
        self, store: TenantStore, memory_id: int, request_id: str | None, request: tuple[str, str]
    ) -> UpdateOutcome | None:
        """A retry answers its first result before the memory is looked at: the memory may have
        been changed, forgotten or merged since (that first result stands); an id used for another
        request is refused. None: the id is new (the write transaction looks again)."""
        if not request_id:
            return None
        # The inbox lock before the read (store/inbox.py's order): a reader waiting for it would
        # hold up an erasure's WAL truncation, which waits for readers under the write lock.
        with store.inbox_lock, store.read() as txn:
            prior = replayed_anywhere(store, txn, request_id, *request)
            return None if prior is None else self._replayed(txn, memory_id, prior)

    def _unchanged(
        self,
        store: TenantStore,
        memory_id: int,
        request_id: str | None,
        request: tuple[str, str],
        seen: tuple[object, ...],
    ) -> UpdateOutcome:
        """An update that changes nothing writes nothing but, with a request id, its result: a
        retry answers "unchanged" even after another writer changed the memory (applying it then
        would write over that change); a retry of one that did change the memory (its reply lost)
        answers that first result; an id used for another request is refused."""
        if request_id:
            with keyed_write(store, request_id) as txn:
                prior = replayed_anywhere(store, txn, request_id, *request)
                if prior is not None:
                    return self._replayed(txn, memory_id, prior)
                _still_as_read(txn, memory_id, seen)  # else it would not be unchanged: prepare it again
                _remember(txn, request_id, request, [], [], 0, updated=False)
                keep_requests_within_quota(txn, self._write_path.limits)
        return UpdateOutcome(memory=self._get(store, memory_id), updated=False)

    def _set_expiry(
        self,
        store: TenantStore,
        memory_id: int,
        expires_at: float | None,
        request_id: str | None,
        request: tuple[str, str],
        seen: tuple[object, ...],
    ) -> UpdateOutcome:
        """An update of the expiry alone: one small transaction, one ``expiry`` ledger entry. Past
        the byte quota it is refused if it grows the tenant, whichever way the expiry moves: each
        adds a ledger entry, and an expiry can be moved (even earlier) without end."""
        limits = self._write_path.limits
        with keyed_write(store, request_id) as txn:
            prior = replayed_anywhere(store, txn, request_id, *request) if request_id else None
            if prior is not None:
                return self._replayed(txn, memory_id, prior)
            _still_as_read(txn, memory_id, seen)  # a forget, a merge or another change may have raced us
            before = used_before(txn, limits)
            txn.set_expiry(memory_id, expires_at)
            revision = txn.newest_revision(memory_id)
            _remember(txn, request_id, request, [], [], revision)
            keep_requests_within_quota(txn, limits)
            check_bytes_growth(txn, limits, before)
        self._committed(request[0])
        return UpdateOutcome(memory=self._get(store, memory_id), updated=True, revision=revision)

    def _replace(
        self,
        tenant: str,
        store: TenantStore,
        memory_id: int,
        prepared: PreparedItem,
        request_id: str | None,
        request: tuple[str, str],
        change: _Change,
        changed: list[str],
        seen: tuple[object, ...],
    ) -> UpdateOutcome:
        """The update's ONE write transaction (a request id seen before answers its first result
        instead), then the caches take the new vector and text in place."""
        assert prepared.extraction is not None and prepared.vector is not None
        method, payload_hash = request
        near = [i for i in prepared.near_duplicate_of if i != memory_id]
        with self._fences.fenced(tenant, store) as (txn, fence):
            prior = replayed_result(txn, request_id, method, payload_hash) if request_id else None
            if prior is not None:
                return self._replayed(txn, memory_id, prior)
            _still_as_read(txn, memory_id, seen)  # a forget, a merge or another change may have raced us
            _refuse_duplicate(txn, memory_id, prepared.fingerprint)
            # Queued writes of the text it replaces would have been its duplicates: they are.
            fence.duplicates_of(txn.fingerprints_of([memory_id]))
            self._write_path.check_vectors(txn, store, [prepared])
            _, epoch_before = txn.index_state()
            now = time.time()
            # Accepted now: its new facts are the latest accepted (engine/conflicts.py).
            prepared.acceptance = store.acceptances.take()
            txn.note_acceptance(prepared.acceptance)
            new = prepared.new_memory(now, resolve_relative_time=self._write_path.resolve_relative_time)
            txn.update_memory(memory_id, new, kind=change.kind, changed=changed, reverted_to=change.reverted_to)
            revision = txn.newest_revision(memory_id)
            supersedes = conflicts.adjudicate(
                txn,
                memory_id=memory_id,
                acceptance=prepared.acceptance,
                scope=prepared.item.scope,
                triples=prepared.extraction.triples,
                at=now,
            )
            near_live = sorted(txn.live_ids(near))
            check_bytes_quota(txn, self._write_path.limits)
            write_next_vectors(txn, [(memory_id, prepared)])  # a re-embedding's (engine/reembed.py)
            _, epoch_after = txn.index_state()
            txn.add_counters({"updates": 1, "model_calls": 1, "embed_calls": 1})
            _remember(txn, request_id, request, near_live, supersedes, revision)
        # The caches take the new vector and text in place rather than reloading the tenant's.
        replace_vector(store, memory_id, prepared.vector, from_epoch=epoch_before, to_epoch=epoch_after)
        replace_text(store, memory_id, new, from_epoch=epoch_before, to_epoch=epoch_after)
        self._committed(method)
        return UpdateOutcome(
            memory=self._get(store, memory_id),
            updated=True,
            near_duplicate_of=tuple(near_live),
            supersedes=tuple(supersedes),
            revision=revision,
        )

    def _replayed(self, txn: ReadTxn, memory_id: int, prior: str) -> UpdateOutcome:
        """What a request id seen before answered the first time."""
        answer = json.loads(prior)
        return UpdateOutcome(
            memory=self._get_in(txn, memory_id),
            updated=bool(answer["updated"]),
            near_duplicate_of=tuple(answer["near_duplicate_of"]),
            supersedes=tuple(answer["supersedes"]),
            revision=int(answer.get("revision", 0)),
        )

    def revisions(self, tenant: str, memory_id: int) -> list[MemoryRevision]:
        """A memory's revisions, oldest first, each with the text and metadata it left; none for
        a forgotten (or expired and erased) memory: its erasure took them."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            with store.read() as txn:
                row = txn.memories_by_ids([memory_id], with_details=False).get(memory_id)
                if row is None:
                    raise _not_found(memory_id)
                if row.forgotten:
                    return []
                stored = txn.memory_revisions(memory_id)
                current = txn.current_version(memory_id)
                earlier = {v.version: (v.body, v.metadata) for v in txn.memory_versions(memory_id)}
        earlier[current] = (row.body, row.metadata)
        return [
            MemoryRevision(
                revision=r.revision,
                kind=r.kind,
                at=r.at,
                surface=r.by.surface,
                token_name=r.by.token_name,
                changed=r.changed,
                version=r.version,
                text=earlier.get(r.version, ("", {}))[0],
                metadata=dict(earlier.get(r.version, ("", {}))[1]),
                expires_at=r.expires_at,
                ledger_seq=r.ledger_seq,
                related_memory_id=r.related_memory_id,
                reverted_to=r.reverted_to,
            )
            for r in stored
        ]

    def versions(self, tenant: str, memory_id: int) -> list[MemoryVersion]:
        """Every version of a memory, oldest first, the current one last. A forgotten memory has
        none left (NOT_FOUND): its forget erased them all."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            with store.read() as txn:
                row = txn.memories_by_ids([memory_id], with_details=False).get(memory_id)
                if row is None or row.forgotten:
                    raise _not_found(memory_id, forgotten=row is not None)
                earlier = txn.memory_versions(memory_id)
                current = txn.current_version(memory_id)
        versions = [MemoryVersion(v.version, v.body, v.metadata, v.at) for v in earlier]
        current_at = row.updated_at or row.created_at
        versions.append(MemoryVersion(current, row.body, row.metadata, current_at, current=True))
        return versions

    def forget_matching(
        self, tenant: str, *, scope: str = "", metadata_equals: Mapping[str, str], request_id: str | None = None
    ) -> int:
        """Forget every live memory of ``scope`` (all scopes when empty) whose metadata has each
        pair of ``metadata_equals`` (at least one pair: use EraseTenant for everything), in one
        transaction: all or none. Returns how many were forgotten (merged memories of a forgotten
        one are forgotten with it and not counted)."""
        request_id = check.validate_request_id(request_id)
        wanted = check.validate_metadata(metadata_equals, self._write_path.limits, field="metadata_equals")
        if not wanted:
            raise InvalidArgument(
                "metadata_equals is empty; name at least one key/value pair (EraseTenant removes everything)",
                reason="FILTER_EMPTY",
            )
        scopes = [check.validate_scope(scope)] if scope else []
        payload_hash = ledger.sha256_hex(ledger.canonical_json(["forget_matching", scopes, wanted]))
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:  # nothing to forget; a retry after the tenant's first write answers 0 too
                if not request_id:
                    return 0
                key = RequestKey(request_id, "forget_matching", payload_hash)
                return int(result_without_file(self._tenantless, tenant, key, "0"))
            count, erased, epochs = self._forget_matching(tenant, store, scopes, wanted, request_id, payload_hash)
            if erased:  # the caches drop those rows rather than reloading the tenant's vectors and postings
                drop_vectors(store, erased, from_epoch=epochs[0], to_epoch=epochs[1])
                drop_texts(store, erased, from_epoch=epochs[0], to_epoch=epochs[1])
            self._committed("forget_matching")
            if erased or store.erasure_pending():
                store.erase_traces()
        return count

    def _forget_matching(
        self,
        tenant: str,
        store: TenantStore,
        scopes: list[str],
        wanted: dict[str, str],
        request_id: str | None,
        payload_hash: str,
    ) -> tuple[int, list[int], tuple[int, int]]:
        with self._fences.fenced(tenant, store) as (txn, fence):
            prior = None
            if request_id:
                prior = replayed_result(txn, request_id, "forget_matching", payload_hash) or replayed_without_file(
                    self._tenantless, tenant, request_id, "forget_matching", payload_hash
                )
            if prior is not None:
                return int(json.loads(prior)), [], (0, 0)
            ids = txn.filtered_ids(scopes, wanted)
            if len(ids) > MAX_FORGET_MEMORIES:
                raise FailedPrecondition(
                    f"{len(ids)} memories match; one call forgets at most {MAX_FORGET_MEMORIES}: narrow the filter "
                    "and call again",
                    reason="FORGET_TOO_MANY",
                )
            _, epoch_before = txn.index_state()
            merged = [m for memory_id in ids for m in txn.merged_into_ids(memory_id)]
            fence.duplicates_of(txn.fingerprints_of([*ids, *merged]))  # queued writes of their content
            erased: list[int] = []
            count = 0
            for memory_id in ids:
                if txn.forget_memory(memory_id):
                    erased.append(memory_id)
                    count += 1
                for merged_id in txn.merged_into_ids(memory_id):
                    if txn.forget_memory(merged_id):
                        erased.append(merged_id)
            fence.matching(scopes, wanted)  # the queued writes it matches, never applied
            _, epoch_after = txn.index_state()
            if request_id:
                txn.save_request(request_id, "forget_matching", payload_hash, json.dumps(count))
                keep_requests_within_quota(txn, self._write_path.limits)
        return count, erased, (epoch_before, epoch_after)

    @staticmethod
    def _get_in(txn: ReadTxn, memory_id: int) -> Memory:
        rows = txn.memories_by_ids([memory_id])
        if memory_id not in rows:
            raise _not_found(memory_id)
        return memory_from_row(rows[memory_id])

    def _get(self, store: TenantStore, memory_id: int) -> Memory:
        with store.read() as txn:
            return self._get_in(txn, memory_id)
