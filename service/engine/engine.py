"""The engine: memory operations on top of the per-tenant store.

Write path (Retain, RetainBatch): validate → answer a known request id → look for exact
duplicates (a read, so duplicates cost no model call) → extract and embed outside any transaction
→ ONE ``BEGIN IMMEDIATE`` transaction that re-checks the request id and the fingerprints, inserts
each new memory (body, facts, triples, embedding, full-text row, audit entry), bumps the
persisted counters and stores the request id with its result.

The engine knows nothing of gRPC; the transport converts its values and maps its errors.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import apsw
import numpy as np

from mnemosyne.engine import limits as check
from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.extractor import Extraction, Extractor, RulesExtractor
from mnemosyne.engine.index import VectorIndex
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.recall import fts_match_expression, fuse, top_vector_hits
from mnemosyne.engine.types import (
    Hit,
    IntegrityReport,
    Memory,
    MemoryPage,
    RecallMode,
    RetainItem,
    RetainOutcome,
    RetainStatus,
    TenantStats,
)
from mnemosyne.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.store import ledger
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import InjectedFault, MemoryRow, NewMemory, ReadTxn, TenantStore, WriteTxn

REQUEST_TTL_SECONDS = 24 * 3600
_VECTOR_CACHE = "vectors"


@dataclass(frozen=True)
class EngineConfig:
    data_dir: Path
    max_open_tenants: int = 1024
    synchronous: str = "FULL"
    limits: Limits = field(default_factory=Limits)
    request_ttl_seconds: float = REQUEST_TTL_SECONDS
    # Test seams, empty in production: store fault points, and methods after whose commit the
    # process kills itself (to test a reply lost after a commit).
    store_faults: frozenset[str] = frozenset()
    crash_after_commit: frozenset[str] = frozenset()
    # The hot path (asynchronous writes): worker threads shared by all tenants, operations per
    # commit, and failed attempts before an operation is failed for good.
    hot_path_workers: int = 2
    hot_path_batch: int = 16
    hot_path_max_failures: int = 3
    hot_path_retry_seconds: float = 0.5  # backoff after a failed attempt, doubling each time
    # Hot-path test seams: workers hold before committing while this file exists; extraction
    # fails for any text containing this marker (a poison operation).
    test_hold_workers_file: Path | None = None
    test_poison_marker: str = ""


def normalise_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def fingerprint(scope: str, text: str) -> str:
    """Identity of content for exact dedup: scope and normalised text (never metadata)."""
    return ledger.sha256_hex(scope + "\n" + normalise_text(text))


def _memory(row: MemoryRow) -> Memory:
    return Memory(
        id=row.id,
        scope=row.scope,
        text=row.body,
        metadata=row.metadata,
        created_at=row.created_at,
        facts=row.facts,
        triples=row.triples,
        forgotten=row.forgotten,
    )


class ExtractionMissing(Exception):
    """A memory believed duplicate vanished before the write: extract it and try again."""


@dataclass
class PreparedItem:
    position: int
    item: RetainItem
    fingerprint: str
    metadata_json: str
    extraction: Extraction | None = None
    vector: bytes | None = None
    counted: bool = False  # its model call is already in the persisted counters


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        extractor: Extractor | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.config = config
        self.limits = config.limits
        self.extractor = extractor or RulesExtractor()
        self.embedder = embedder or HashingEmbedder()
        self.pool = TenantPool(
            config.data_dir,
            max_open=config.max_open_tenants,
            synchronous=config.synchronous,
            faults=config.store_faults,
        )
        from mnemosyne.engine.hot_path import HotPath, PoisonedExtractor  # imports this module

        if config.test_poison_marker:
            self.extractor = PoisonedExtractor(self.extractor, config.test_poison_marker)
        try:
            self.hot_path = HotPath(self)
            self.hot_path.start()
        except BaseException:
            self.pool.close()  # release the directory lock for the next attempt
            raise

    def close(self) -> None:
        self.hot_path.stop()
        self.pool.close()

    # -- writes ---------------------------------------------------------------------------------

    def retain(
        self, tenant: str, item: RetainItem, *, request_id: str | None = None, fast: bool = False
    ) -> RetainOutcome:
        """Retain one item. Synchronous (on return it is committed and recallable) unless
        ``fast`` is set and the tenant's hot path is enabled: then it is only appended to the
        durable operation log and the outcome is ENQUEUED with an event id."""
        self._validate_item(item)
        return self._retain(
            tenant, [item], request_id=request_id, method="retain", per_item_errors=False, fast=fast
        )[0]

    def retain_batch(
        self, tenant: str, items: Sequence[RetainItem], *, request_id: str | None = None, fast: bool = False
    ) -> list[RetainOutcome]:
        """Retain items independently in one transaction; each gets its own outcome."""
        if not items:
            raise InvalidArgument("items is empty; send at least one item", reason="BATCH_EMPTY")
        if len(items) > self.limits.max_batch_items:
            raise InvalidArgument(
                f"batch has {len(items)} items; the limit is {self.limits.max_batch_items} (max_batch_items)",
                reason="BATCH_TOO_LARGE",
            )
        return self._retain(
            tenant, list(items), request_id=request_id, method="retain_batch", per_item_errors=True, fast=fast
        )

    def _validate_item(self, item: RetainItem) -> RetainItem:
        check.validate_text(item.text, self.limits)
        check.validate_scope(item.scope)
        check.validate_metadata(item.metadata, self.limits)
        return item

    def _retain(
        self,
        tenant: str,
        items: list[RetainItem],
        *,
        request_id: str | None,
        method: str,
        per_item_errors: bool,
        fast: bool = False,
    ) -> list[RetainOutcome]:
        request_id = check.validate_request_id(request_id)
        outcomes: list[RetainOutcome | None] = [None] * len(items)
        prepared: list[PreparedItem] = []
        for position, item in enumerate(items):
            try:
                self._validate_item(item)
            except InvalidArgument as exc:
                outcomes[position] = RetainOutcome(RetainStatus.INVALID, error_reason=exc.reason, error_message=exc.message)
                continue
            scope = check.validate_scope(item.scope)
            item = RetainItem(item.text, scope, dict(item.metadata))
            prepared.append(
                PreparedItem(position, item, fingerprint(scope, item.text), ledger.canonical_json(item.metadata))
            )
        payload_hash = ledger.sha256_hex(
            ledger.canonical_json([method, [[i.text, i.scope or "global", i.metadata] for i in items]])
        )
        with self.pool.tenant(tenant, create=True) as store:
            assert store is not None
            if request_id:
                with store.read() as txn:
                    prior = self._prior_result(txn, request_id, method, payload_hash)
                if prior is not None:
                    return prior
            if fast and prepared:
                enqueued = self.hot_path.enqueue(tenant, store, prepared, outcomes, request_id, method, payload_hash)
                if enqueued is not None:
                    return enqueued
            for _attempt in range(3):
                self._extract_missing(store, prepared)
                try:
                    result = self._commit_items(store, prepared, outcomes, request_id, method, payload_hash, per_item_errors)
                except ExtractionMissing:
                    continue
                break
            else:  # pragma: no cover - needs three forget/retain races in a row
                raise Conflict("the memory changed repeatedly during the write; retry", reason="WRITE_CONTENDED")
        if method in self.config.crash_after_commit:
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: the reply is lost after the commit
        return result

    def _prior_result(self, txn: ReadTxn, request_id: str, method: str, payload_hash: str) -> list[RetainOutcome] | None:
        prior = txn.find_request(request_id)
        if prior is None:
            return None
        prior_method, prior_hash, result_json = prior
        if prior_method != method or prior_hash != payload_hash:
            raise Conflict(
                f"request_id {request_id!r} was already used for a different request; use a new request_id "
                "for new content",
                reason="IDEMPOTENCY_KEY_REUSED",
            )
        return [RetainOutcome.from_json(o) for o in json.loads(result_json)]

    def _extract_missing(
        self,
        store: TenantStore,
        prepared: list[PreparedItem],
        errors: dict[int, Exception] | None = None,
        *,
        force: bool = False,
    ) -> None:
        """Extract and embed, outside any transaction, the items that are not known duplicates.

        With ``errors`` (the hot path), a failing extraction is recorded per item position and
        the others go on; without it the first failure raises. ``force`` extracts every item
        still lacking an extraction, even one that looked like a duplicate."""
        known: set[str] = set()
        if not force:
            with store.read() as txn:
                known = {p.fingerprint for p in prepared if txn.find_by_fingerprint(p.fingerprint) is not None}
        batch_seen: set[str] = set()
        todo = []
        for p in prepared:
            if errors is not None and p.position in errors:
                continue
            if not force and (p.fingerprint in known or p.fingerprint in batch_seen):
                continue
            batch_seen.add(p.fingerprint)
            if p.extraction is None:
                todo.append(p)
        extracted = []
        for p in todo:
            if errors is None:
                p.extraction = self.extractor.extract(p.item.text)
                extracted.append(p)
                continue
            try:
                p.extraction = self.extractor.extract(p.item.text)
                extracted.append(p)
            except Exception as exc:  # the model failed on this item; the others go on
                errors[p.position] = exc
        if extracted:
            vectors = self.embedder.embed([p.item.text for p in extracted])
            for p, vector in zip(extracted, vectors):
                p.vector = np.ascontiguousarray(vector, dtype="<f4").tobytes()

    def _commit_items(
        self,
        store: TenantStore,
        prepared: list[PreparedItem],
        outcomes: list[RetainOutcome | None],
        request_id: str | None,
        method: str,
        payload_hash: str,
        per_item_errors: bool,
    ) -> list[RetainOutcome]:
        with store.write() as txn:
            if request_id:
                prior = self._prior_result(txn, request_id, method, payload_hash)
                if prior is not None:
                    return prior
            self._check_embedder(txn, write=True)
            results = list(outcomes)
            created, duplicates = self.apply_prepared(txn, prepared, results, per_item_errors=per_item_errors)
            extracted = [p for p in prepared if p.extraction is not None and not p.counted]
            txn.add_counters(
                {
                    "writes": created,
                    "duplicates": duplicates,
                    "model_calls": len(extracted),
                    "embed_calls": 1 if extracted else 0,
                }
            )
            final = [r for r in results if r is not None]
            assert len(final) == len(results)
            if request_id:
                txn.save_request(request_id, method, payload_hash, json.dumps([r.to_json() for r in final]))
                txn.prune_requests(time.time() - self.config.request_ttl_seconds)
        for p in extracted:
            p.counted = True
        return final

    def apply_prepared(
        self,
        txn: WriteTxn,
        prepared: Sequence[PreparedItem],
        results: list[RetainOutcome | None],
        *,
        per_item_errors: bool,
    ) -> tuple[int, int]:
        """THE write of prepared items, shared by synchronous Retain and the hot-path workers:
        inside the caller's write transaction, re-check each fingerprint (exact dedup) and insert
        each new memory (body, facts, triples, embedding, full-text row, audit entry) in its own
        savepoint. Fills ``results[p.position]``; returns (created, duplicates). Counters are
        the caller's, so each path counts its own work in its own transaction."""
        created = duplicates = 0
        for p in prepared:
            existing = txn.find_by_fingerprint(p.fingerprint)
            if existing is not None:
                results[p.position] = RetainOutcome(RetainStatus.DUPLICATE, memory_id=existing)
                duplicates += 1
                continue
            if p.extraction is None or p.vector is None:
                raise ExtractionMissing()
            try:
                with txn.savepoint():
                    memory_id = txn.insert_memory(
                        NewMemory(
                            scope=p.item.scope,
                            body=p.item.text,
                            metadata_json=p.metadata_json,
                            fingerprint=p.fingerprint,
                            facts=p.extraction.facts,
                            triples=p.extraction.triples,
                            embedding=p.vector,
                            fts_text=p.item.text,
                            created_at=time.time(),
                        )
                    )
            except (apsw.Error, InjectedFault) as exc:
                if not per_item_errors:
                    raise
                results[p.position] = RetainOutcome(
                    RetainStatus.INVALID,
                    error_reason="ITEM_NOT_STORED",
                    error_message=f"this item could not be stored ({type(exc).__name__}); the others were",
                )
                continue
            results[p.position] = RetainOutcome(RetainStatus.CREATED, memory_id=memory_id)
            created += 1
        return created, duplicates

    def _check_embedder(self, txn: ReadTxn, *, write: bool) -> None:
        """A tenant's vectors are made by one embedder; mixing two would corrupt similarity."""
        recorded = txn.meta("embedder")
        mine = f"{self.embedder.name}/{self.embedder.dim}"
        if recorded is None:
            if write:
                assert isinstance(txn, WriteTxn)
                txn.set_meta("embedder", mine)
            return
        if recorded != mine:
            raise FailedPrecondition(
                f"this tenant's vectors were made by embedder {recorded}, but the server runs {mine}; "
                "start the server with the tenant's embedder",
                reason="EMBEDDER_MISMATCH",
            )

    def forget(self, tenant: str, memory_id: int, *, request_id: str | None = None) -> bool:
        """Erase a memory's text and derived rows. False if it was already forgotten."""
        request_id = check.validate_request_id(request_id)
        payload_hash = ledger.sha256_hex(f"forget:{memory_id}")
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
            with store.write() as txn:
                if request_id:
                    prior = txn.find_request(request_id)
                    if prior is not None:
                        if prior[1] != payload_hash:
                            raise Conflict(
                                f"request_id {request_id!r} was already used for a different request",
                                reason="IDEMPOTENCY_KEY_REUSED",
                            )
                        return bool(json.loads(prior[2]))
                if not txn.memories_by_ids([memory_id], with_details=False):
                    raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
                forgotten = txn.forget_memory(memory_id)
                if request_id:
                    txn.save_request(request_id, "forget", payload_hash, json.dumps(forgotten))
        return forgotten

    # -- reads ----------------------------------------------------------------------------------

    def recall(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 5,
        scopes: Sequence[str] = (),
        metadata_equals: Mapping[str, str] | None = None,
        mode: RecallMode = RecallMode.HYBRID,
    ) -> list[Hit]:
        check.validate_query(query, self.limits)
        k = check.validate_k(k, self.limits)
        scopes = sorted({check.validate_scope(s) for s in scopes})
        filters = check.validate_metadata(metadata_equals or {}, self.limits, field="metadata_equals")
        query_vector = self.embedder.embed([query])[0]
        match = fts_match_expression(query)
        depth = max(4 * k, 50)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return []
            index = store.cache.get(_VECTOR_CACHE)
            if index is None:
                index = store.cache.setdefault(_VECTOR_CACHE, VectorIndex(self.embedder.dim))
            with store.read() as txn:
                self._check_embedder(txn, write=False)
                vector_hits: list[tuple[int, float]] = []
                text_hits: list[tuple[int, float]] = []
                if mode is not RecallMode.TEXT:
                    ids, matrix = index.sync(txn)
                    allowed = None
                    if scopes or filters:
                        allowed = np.isin(ids, np.array(txn.filtered_ids(scopes, filters), dtype=np.int64))
                    vector_hits = top_vector_hits(query_vector, ids, matrix, limit=depth, allowed=allowed)
                if mode is not RecallMode.VECTOR and match:
                    text_hits = txn.fts_search(match, limit=depth, scopes=scopes, metadata_equals=filters)
                ranked = fuse(vector_hits, text_hits)[: 2 * k]
                rows = txn.memories_by_ids([c.memory_id for c in ranked])
        hits = []
        for candidate in ranked:
            row = rows.get(candidate.memory_id)
            if row is None or row.forgotten:  # newer than this snapshot, or forgotten
                continue
            hits.append(Hit(_memory(row), candidate.score, candidate.vector_score, candidate.text_score))
            if len(hits) == k:
                break
        return hits

    def get_memory(self, tenant: str, memory_id: int) -> Memory:
        with self.pool.tenant(tenant, create=False) as store:
            rows: dict[int, MemoryRow] = {}
            if store is not None:
                with store.read() as txn:
                    rows = txn.memories_by_ids([memory_id])
        if memory_id not in rows:
            raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
        return _memory(rows[memory_id])

    def list_memories(
        self,
        tenant: str,
        *,
        scope: str = "",
        page_size: int = 0,
        page_token: str = "",
        include_forgotten: bool = False,
    ) -> MemoryPage:
        page_size = check.validate_page_size(page_size, self.limits)
        scope = check.validate_scope(scope) if scope else ""
        after_id = _decode_page_token(page_token)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return MemoryPage([], "")
            with store.read() as txn:
                ids = txn.list_memory_ids(
                    scope=scope or None, after_id=after_id, limit=page_size + 1, include_forgotten=include_forgotten
                )
                rows = txn.memories_by_ids(ids[:page_size])
        memories = [_memory(rows[i]) for i in ids[:page_size]]
        token = _encode_page_token(ids[page_size - 1]) if len(ids) > page_size else ""
        return MemoryPage(memories, token)

    def verify_integrity(self, tenant: str) -> IntegrityReport:
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return IntegrityReport(True, 0, 0, ledger.GENESIS_HASH, [])
            with store.read() as txn:
                verdict = ledger.verify(txn.ledger_rows(), txn.stored_memories())
        return IntegrityReport(
            valid=verdict.valid,
            first_broken_at=verdict.first_broken_at,
            checked=verdict.checked,
            head_hash=verdict.head_hash,
            problems=[(p.ledger_seq, p.memory_id, p.kind, p.detail) for p in verdict.problems],
        )

    def stats(self, tenant: str) -> TenantStats:
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return TenantStats()
            with store.read() as txn:
                counters = txn.counters()
                live, forgotten, entries = txn.counts()
            return TenantStats(
                memories=live,
                forgotten=forgotten,
                writes=counters.get("writes", 0),
                model_calls=counters.get("model_calls", 0),
                embed_calls=counters.get("embed_calls", 0),
                duplicates=counters.get("duplicates", 0),
                ledger_entries=entries,
                file_bytes=store.file_bytes(),
            )


def _encode_page_token(after_id: int) -> str:
    return base64.urlsafe_b64encode(f"after:{after_id}".encode()).decode().rstrip("=")


def _decode_page_token(token: str) -> int:
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        prefix, _, number = text.partition(":")
        if prefix != "after":
            raise ValueError(prefix)
        return int(number)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(
            "page_token is not one this server issued; pass next_page_token from the previous page unchanged",
            reason="PAGE_TOKEN_INVALID",
        ) from None

