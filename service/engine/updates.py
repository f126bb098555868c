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

import json
import time
from collections.abc import Callable, Mapping

from mnemosyne.engine import conflicts
from mnemosyne.engine import limits as check
from mnemosyne.engine.embedder import check_tenant_embedder
from mnemosyne.engine.index import drop_vectors, replace_vector
from mnemosyne.engine.memories import memory_from_row
from mnemosyne.engine.postings import drop_texts, replace_text
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.quotas import check_bytes_quota
from mnemosyne.engine.requests import replayed_result
from mnemosyne.engine.types import Memory, MemoryVersion, RetainItem, ThreadRef, UpdateOutcome
from mnemosyne.engine.write_path import WritePath
from mnemosyne.errors import FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.store import ledger
from mnemosyne.store.memory_rows import MemoryRow
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn, TenantStore

# Most memories one ForgetMemories may forget in its one transaction: beyond it the call is
# refused before anything changes (FORGET_TOO_MANY), so one call never holds the tenant's writer
# for minutes; narrow the filter, or erase the tenant.
MAX_FORGET_MEMORIES = 10_000


def _not_found(memory_id: int) -> NotFound:
    return NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")


def _live_row(txn: ReadTxn, memory_id: int) -> MemoryRow:
    """The memory's row, if it can be updated: it exists, is not forgotten, not merged away."""
    row = txn.memories_by_ids([memory_id], with_details=False).get(memory_id)
    if row is None or row.forgotten:
        raise _not_found(memory_id)
    if row.merged_into:
        raise FailedPrecondition(
            f"memory {memory_id} was merged into memory {row.merged_into}; update that one",
            reason="MEMORY_MERGED",
            metadata={"memory_id": str(row.merged_into)},
        )
    return row


def _refuse_duplicate(txn: ReadTxn, memory_id: int, fingerprint: str) -> None:
    """New content that another memory already holds is refused (MEMORY_DUPLICATE, naming it)."""
    holder = txn.find_by_fingerprints([fingerprint]).get(fingerprint)
    if holder is not None and holder != memory_id:
        raise FailedPrecondition(
            f"memory {holder} already holds this text; update or forget that one instead",
            reason="MEMORY_DUPLICATE",
            metadata={"memory_id": str(holder)},
        )


class Updates:
    def __init__(
        self, *, pool: TenantPool, write_path: WritePath, committed: Callable[[str], None] = lambda _method: None
    ) -> None:
        self._pool = pool
        self._write_path = write_path
        self._committed = committed  # the crash-after-commit test seam (EngineConfig.committed)

    def update(
        self,
        tenant: str,
        memory_id: int,
        *,
        text: str = "",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> UpdateOutcome:
        """Replace a memory's text (empty: keep it) and metadata (None: keep it) under its id."""
        request_id = check.validate_request_id(request_id)
        if not text and metadata is None:
            raise InvalidArgument("give the new text, or the new metadata (replace_metadata)", reason="UPDATE_EMPTY")
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            with store.read() as txn:
                row = _live_row(txn, memory_id)
            item = RetainItem(  # its time and thread stay: relative times in a new text read against them
                text=text or row.body,
                scope=row.scope,
                metadata=dict(row.metadata if metadata is None else metadata),
                occurred_at=row.occurred_at,
                thread=None if row.thread_id is None else ThreadRef(row.thread_id, row.thread_position or 0),
                speaker=row.speaker,
            )
            _, (prepared,) = self._write_path.prepare([item], per_item_errors=False)
            payload_hash = ledger.sha256_hex(
                ledger.canonical_json(["update", memory_id, prepared.item.text, prepared.metadata_json])
            )
            if prepared.item.text == row.body and prepared.item.metadata == row.metadata:
                return UpdateOutcome(memory=self._get(store, memory_id), updated=False)
            # Outside the transaction: extraction, embedding, near duplicates (as for a retain).
            self._write_path.extract_missing(store, [prepared], force=True)
            return self._replace(store, memory_id, prepared, request_id, payload_hash)

    def _replace(
        self, store: TenantStore, memory_id: int, prepared: PreparedItem, request_id: str | None, payload_hash: str
    ) -> UpdateOutcome:
        """The update's ONE write transaction (a request id seen before answers its first result
        instead), then the caches take the new vector and text in place."""
        assert prepared.extraction is not None and prepared.vector is not None
        near = [i for i in prepared.near_duplicate_of if i != memory_id]
        with store.write() as txn:
            prior = replayed_result(txn, request_id, "update", payload_hash) if request_id else None
            if prior is not None:
                answer = json.loads(prior)
                return UpdateOutcome(
                    memory=self._get_in(txn, memory_id),
                    updated=bool(answer["updated"]),
                    near_duplicate_of=tuple(answer["near_duplicate_of"]),
                    supersedes=tuple(answer["supersedes"]),
                )
            _live_row(txn, memory_id)  # a forget or merge may have raced us
            _refuse_duplicate(txn, memory_id, prepared.fingerprint)
            check_tenant_embedder(txn, self._write_path.embedders.of(store), write=True)
            _, epoch_before = txn.index_state()
            now = time.time()
            new = prepared.new_memory(now, resolve_relative_time=self._write_path.resolve_relative_time)
            txn.update_memory(memory_id, new)
            supersedes = conflicts.adjudicate(
                txn, memory_id=memory_id, scope=prepared.item.scope, triples=prepared.extraction.triples, at=now
            )
            near_live = sorted(txn.live_ids(near))
            check_bytes_quota(txn, self._write_path.limits)
            _, epoch_after = txn.index_state()
            txn.add_counters({"updates": 1, "model_calls": 1, "embed_calls": 1})
            if request_id:
                result = {"updated": True, "near_duplicate_of": near_live, "supersedes": supersedes}
                txn.save_request(request_id, "update", payload_hash, json.dumps(result))
        # The caches take the new vector and text in place rather than reloading the tenant's.
        replace_vector(store, memory_id, prepared.vector, from_epoch=epoch_before, to_epoch=epoch_after)
        replace_text(store, memory_id, new, from_epoch=epoch_before, to_epoch=epoch_after)
        self._committed("update")
        return UpdateOutcome(
            memory=self._get(store, memory_id),
            updated=True,
            near_duplicate_of=tuple(near_live),
            supersedes=tuple(supersedes),
        )

    def versions(self, tenant: str, memory_id: int) -> list[MemoryVersion]:
        """Every version of a memory, oldest first, the current one last. A forgotten memory has
        none left (NOT_FOUND): its forget erased them all."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise _not_found(memory_id)
            with store.read() as txn:
                row = txn.memories_by_ids([memory_id], with_details=False).get(memory_id)
                if row is None or row.forgotten:
                    raise _not_found(memory_id)
                earlier = txn.memory_versions(memory_id)
        versions = [MemoryVersion(v.version, v.body, v.metadata, v.at) for v in earlier]
        current_at = row.updated_at or row.created_at
        versions.append(MemoryVersion(len(earlier) + 1, row.body, row.metadata, current_at, current=True))
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
            if store is None:
                return 0
            count, erased, epochs = self._forget_matching(store, scopes, wanted, request_id, payload_hash)
            if erased:  # the caches drop those rows rather than reloading the tenant's vectors and postings
                drop_vectors(store, erased, from_epoch=epochs[0], to_epoch=epochs[1])
                drop_texts(store, erased, from_epoch=epochs[0], to_epoch=epochs[1])
            self._committed("forget_matching")
            if erased or store.erasure_pending():
                store.erase_traces()
        return count

    @staticmethod
    def _forget_matching(
        store: TenantStore, scopes: list[str], wanted: dict[str, str], request_id: str | None, payload_hash: str
    ) -> tuple[int, list[int], tuple[int, int]]:
        with store.write() as txn:
            prior = replayed_result(txn, request_id, "forget_matching", payload_hash) if request_id else None
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
            erased: list[int] = []
            count = 0
            for memory_id in ids:
                if txn.forget_memory(memory_id):
                    erased.append(memory_id)
                    count += 1
                for merged_id in txn.merged_into_ids(memory_id):
                    if txn.forget_memory(merged_id):
                        erased.append(merged_id)
            _, epoch_after = txn.index_state()
            if request_id:
                txn.save_request(request_id, "forget_matching", payload_hash, json.dumps(count))
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
