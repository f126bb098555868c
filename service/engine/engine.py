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
import logging
import os
import signal
import threading
import time
import unicodedata
from concurrent import futures
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import apsw
import numpy as np

from mnemosyne import background
from mnemosyne.engine import conflicts, dedup, page_tokens
from mnemosyne.engine import limits as check
from mnemosyne.engine.conversation import Message, conversation_item
from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.extractor import Extraction, Extractor, RulesExtractor
from mnemosyne.engine.index import VectorIndex
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver, SafeObserver
from mnemosyne.engine.quotas import check_bytes_quota, check_memory_quota
from mnemosyne.engine.recall import (
    coordinate,
    fuse,
    match_expression,
    query_terms,
    soften_length_normalisation,
    top_rows,
    vector_scores,
)
from mnemosyne.engine.types import (
    AggregateChunk,
    DedupGroup,
    DedupReport,
    Hit,
    IntegrityReport,
    Memory,
    MemoryPage,
    RecallMode,
    Recalled,
    RetainItem,
    RetainOutcome,
    RetainStatus,
    TenantPage,
    TenantStats,
)
from mnemosyne.errors import Conflict, FailedPrecondition, InvalidArgument, MnemosyneError, NotFound
from mnemosyne.store import ledger
from mnemosyne.store.inbox import InboxTxn
from mnemosyne.store.pool import TenantPool, validate_tenant
from mnemosyne.store.tenant_store import InjectedFault, MemoryRow, NewMemory, ReadTxn, TenantStore, WriteTxn

REQUEST_TTL_SECONDS = 24 * 3600
EVENT_RETENTION_SECONDS = 7 * 24 * 3600.0  # finished hot-path events (cli.py repeats it as text)
# From this many items to extract, a write looks for near duplicates on a helper thread while it
# extracts (engine.extract_missing); below it, the thread would cost more than it hides.
_OVERLAP_MIN_ITEMS = 32
_VECTOR_CACHE = "vectors"
# Tenant files an aggregate reads at once (SQLite releases the GIL while it reads).
AGGREGATE_CONCURRENCY = 4
log = logging.getLogger("mnemosyne.engine")


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
    # When an accepted fast write becomes durable against power loss (with synchronous=FULL):
    # "round" (the worker's fsync after applying it, or the next Flush) or "enqueue" (before the
    # enqueue returns: an fsync per enqueue, with the worker's commits synced inside the lock).
    hot_path_sync: str = "round"
    # Finished (succeeded or failed) hot-path events are deleted this long after they finished;
    # 0 keeps them forever. Open operations are never deleted.
    event_retention_seconds: float = EVENT_RETENTION_SECONDS
    # Hot-path test seams: workers hold before committing while this file exists; extraction
    # fails for any text containing this marker (a poison operation).
    test_hold_workers_file: Path | None = None
    test_poison_marker: str = ""
    # Cosine at or above which a memory with the same atoms is a near duplicate (engine/dedup.py).
    near_duplicate_threshold: float = dedup.DEFAULT_THRESHOLD
    # Test seams of host-owned generations (engine/workspace.py): the generation a scope has
    # before its first record change (0 in production; e.g. 9_000_000 to make generations
    # recognisable in output), and a Global commit made while AssembleContext's read is open.
    generation_base: int = 0
    commit_during_assemble: bool = False


def normalise_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def fingerprint(scope: str, text: str) -> str:
    """Identity of content for exact dedup: scope and normalised text (never metadata)."""
    return ledger.sha256_hex(scope + "\n" + normalise_text(text))


def _outcome(call: "futures.Future[Extraction]") -> Extraction | Exception:
    """A finished extraction call's answer, or its error as a value."""
    failure = call.exception()
    if failure is None:
        return call.result()
    if isinstance(failure, Exception):
        return failure
    raise failure


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
        superseded_by=row.superseded_by,
        superseded_at=row.superseded_at,
        merged_into=row.merged_into,
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
    near_duplicate_of: list[int] = field(default_factory=list)  # found outside the transaction
    near_batch: list["PreparedItem"] = field(default_factory=list)  # earlier items of the same commit


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        extractor: Extractor | None = None,
        embedder: Embedder | None = None,
        observer: EngineObserver | None = None,
    ) -> None:
        self.config = config
        self.observer: EngineObserver = SafeObserver(observer or EngineObserver())
        self.limits = config.limits
        self.extractor = extractor or RulesExtractor()
        self.embedder = embedder or HashingEmbedder()
        self.pool = TenantPool(
            config.data_dir,
            max_open=config.max_open_tenants,
            synchronous=config.synchronous,
            faults=config.store_faults,
        )
        self.in_flight = dedup.InFlight()  # DEDUP: one extraction for racing identical writes
        # Threads start on first use; see extract_missing.
        self._helper = futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="near-duplicates", initializer=background.request_thread
        )
        self._extract_pool: futures.ThreadPoolExecutor | None = None  # a remote model's calls (_extract)
        self._extract_pool_lock = threading.Lock()
        from mnemosyne.engine.hot_path import HotPath, PoisonedExtractor  # imports this module

        if config.test_poison_marker:
            self.extractor = PoisonedExtractor(self.extractor, config.test_poison_marker)
        try:
            self.hot_path = HotPath(self)
            self.hot_path.start()
        except BaseException:
            self._helper.shutdown()
            self.pool.close()  # release the directory lock for the next attempt
            raise

    def close(self) -> None:
        self.hot_path.stop()
        self._helper.shutdown()
        if self._extract_pool is not None:
            self._extract_pool.shutdown()
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

    def retain_conversation(
        self,
        tenant: str,
        messages: Sequence[Message],
        *,
        scope: str = "global",
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        fast: bool = False,
    ) -> RetainOutcome:
        """Retain a conversation as ONE operation: one memory (its transcript), one fingerprint,
        one idempotency unit, one extraction call (engine/conversation.py). Submitting the same
        conversation again is a DUPLICATE of the first and costs no model call."""
        item = self._validate_item(conversation_item(messages, scope, metadata or {}, self.limits))
        return self._retain(
            tenant, [item], request_id=request_id, method="retain_conversation", per_item_errors=False, fast=fast
        )[0]

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
            scope = item.scope or "global"  # validated just above
            item = RetainItem(item.text, scope, dict(item.metadata))
            prepared.append(
                PreparedItem(position, item, fingerprint(scope, item.text), ledger.canonical_json(item.metadata))
            )
        if not prepared:  # every item is invalid: nothing to write, and no file to make for it
            return [o for o in outcomes if o is not None]
        payload_hash = ledger.sha256_hex(
            ledger.canonical_json([method, [[i.text, i.scope or "global", i.metadata] for i in items]])
        )
        with self.pool.tenant(tenant, create=True) as store:
            assert store is not None
            if fast and prepared:  # the enqueue answers a known request id itself
                enqueued = self.hot_path.enqueue(tenant, store, prepared, outcomes, request_id, method, payload_hash)
                if enqueued is not None:
                    return enqueued
            if request_id:  # before extracting: a retry is answered without that work
                prior = self._prior_anywhere(store, request_id, method, payload_hash)
                if prior is not None:
                    return prior
            with self.in_flight.claim(tenant, [p.fingerprint for p in prepared]):
                for _attempt in range(3):
                    self.extract_missing(store, prepared)
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

    def prior_result(
        self, txn: ReadTxn | InboxTxn, request_id: str, method: str, payload_hash: str
    ) -> list[RetainOutcome] | None:
        result_json = replayed_result(txn, request_id, method, payload_hash)
        return None if result_json is None else [RetainOutcome.from_json(o) for o in json.loads(result_json)]

    def _prior_anywhere(self, store: TenantStore, request_id: str, method: str, payload_hash: str) -> list[RetainOutcome] | None:
        """An earlier result of this request id, in the tenant file or, for a fast write not yet
        taken by a worker, in its inbox (read first: a key moving meanwhile is then still found)."""
        inbox = store.inbox(create=False)
        if inbox is not None:
            with inbox.read() as inbox_txn:
                prior = self.prior_result(inbox_txn, request_id, method, payload_hash)
            if prior is not None:
                return prior
        with store.read() as txn:
            return self.prior_result(txn, request_id, method, payload_hash)

    def extract_missing(
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
                known = set(txn.find_by_fingerprints([p.fingerprint for p in prepared]))
        batch_seen: set[str] = set()
        todo = []
        new = []
        for p in prepared:
            if errors is not None and p.position in errors:
                continue
            if not force and (p.fingerprint in known or p.fingerprint in batch_seen):
                continue
            batch_seen.add(p.fingerprint)
            new.append(p)
            if p.extraction is None:
                todo.append(p)
        if len(todo) < _OVERLAP_MIN_ITEMS:
            extracted = self._extract(todo, errors)
            self._embed(extracted)
            if errors:
                new = [p for p in new if p.position not in errors]
            # DEDUP: near duplicates of every new item (also one whose extraction and vector were
            # restored, e.g. from an operation log), looked up here outside the write transaction.
            self._find_near_duplicates(store, new)
            return
        # A large batch: embed first, then look for near duplicates on a helper thread (its matrix
        # products run without the GIL, on another core) while this thread extracts. Outcomes are
        # the sequential ones: an item whose extraction fails (hot path) is never written, and
        # apply_prepared names only items of the batch that were created.
        self._embed(todo)
        lookup = self._helper.submit(self._find_near_duplicates, store, new)
        try:
            self._extract(todo, errors)
        finally:
            futures.wait([lookup])  # never leave the helper reading a store we may release
        lookup.result()

    def _extract(self, todo: Sequence[PreparedItem], errors: dict[int, Exception] | None) -> list[PreparedItem]:
        """Extract each item; with ``errors``, a failure is recorded and the others go on;
        without, the first failing item's error is raised (after every call made has ended).

        A remote model's calls for several items run on a pool of ``extractor.concurrency``
        threads shared by every write: they mostly wait on the network, and one after the other a
        batch of 500 would take 500 round trips."""
        texts = [p.item.text for p in todo]
        if self.extractor.concurrency > 1 and len(todo) > 1:
            with self._extract_pool_lock:
                if self._extract_pool is None:
                    self._extract_pool = futures.ThreadPoolExecutor(
                        max_workers=self.extractor.concurrency, thread_name_prefix="extract",
                        initializer=background.request_thread,
                    )
            calls = [self._extract_pool.submit(self.extractor.extract, text) for text in texts]
            futures.wait(calls)
            answers: list[Extraction | Exception] = [_outcome(call) for call in calls]
        else:
            answers = []
            for text in texts:
                try:
                    answers.append(self.extractor.extract(text))
                except Exception as exc:  # the model failed on this item
                    if errors is None:
                        raise
                    answers.append(exc)
        extracted = []
        for p, answer in zip(todo, answers):
            if isinstance(answer, Exception):
                if errors is None:
                    raise answer
                errors[p.position] = answer  # the others go on
                continue
            p.extraction = answer
            extracted.append(p)
        return extracted

    def _embed(self, items: Sequence[PreparedItem]) -> None:
        if items:
            vectors = self.embedder.embed([p.item.text for p in items])
            for p, vector in zip(items, vectors):
                p.vector = np.ascontiguousarray(vector, dtype="<f4").tobytes()

    def _find_near_duplicates(self, store: TenantStore, prepared: Sequence[PreparedItem]) -> None:
        """Name, for each prepared item with a vector, the stored memories of its scope with cosine
        >= the threshold and the same atoms (engine/dedup.py). Outside any write transaction: one
        matrix product against the tenant's vector cache, atoms only for the candidates found.
        Items committed together (a batch, or a worker's group of operations) are also compared
        with the earlier ones among them; those are named once their ids exist, in the commit."""
        threshold = self.config.near_duplicate_threshold
        todo = [p for p in prepared if p.vector is not None]
        if not todo or threshold > 1.0:
            return
        vectors = np.frombuffer(b"".join(p.vector for p in todo), dtype="<f4").reshape(len(todo), -1)  # type: ignore[misc]
        index = self._vector_index(store)
        with store.read() as txn:
            self.check_embedder(txn, write=False)  # another embedder's vectors are not comparable
            ids, matrix = index.sync(txn)
            similar = dedup.similar_rows(vectors, ids, matrix, threshold)
            wanted = sorted({memory_id for hits in similar for memory_id, _ in hits})
            rows = txn.memories_by_ids(wanted, with_details=False) if wanted else {}
        known = {i: dedup.Candidate(r.scope, r.body) for i, r in rows.items() if not r.forgotten and not r.merged_into}
        # One Candidate per item, compared with the stored memories and with the items before it:
        # its atoms are read once however many it is compared with.
        items = [dedup.Candidate(p.item.scope, p.item.text) for p in todo]
        for p, item, hits in zip(todo, items, similar):
            p.near_duplicate_of = dedup.same_atoms_filter(item, [i for i, _ in hits], known)
        if len(todo) > 1:
            batch = dict(enumerate(items))
            for p, item, hits in zip(todo, items, dedup.similar_earlier(vectors, threshold)):
                p.near_batch = [todo[i] for i in dedup.same_atoms_filter(item, hits, batch)]

    def _vector_index(self, store: TenantStore) -> VectorIndex:
        index = store.cache.get(_VECTOR_CACHE)
        if index is None:
            index = store.cache.setdefault(_VECTOR_CACHE, VectorIndex(self.embedder.dim))
        return index

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
        # With a request id, the inbox lock too, held until this commit has ended (taken before
        # the tenant's: store/inbox.py's order), so a fast write of the same id cannot be
        # accepted between this check and this commit.
        inbox = store.inbox(create=False) if request_id else None
        with inbox.lock if inbox is not None else nullcontext(), store.write() as txn:
            if request_id:
                prior = self.prior_result(txn, request_id, method, payload_hash)
                if prior is None and inbox is not None:
                    with inbox.read() as inbox_txn:
                        prior = self.prior_result(inbox_txn, request_id, method, payload_hash)
                if prior is not None:
                    return prior
            self.check_embedder(txn, write=True)
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
        self.observer.retained(
            created=created, duplicates=duplicates, model_calls=len(extracted), embed_calls=1 if extracted else 0
        )
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
        each new memory (body, facts, triples, embedding, full-text row, audit entry, conflict
        adjudication, near duplicates). Fills ``results[p.position]``; returns (created,
        duplicates). Counters are the caller's, so each path counts its own work in its own
        transaction.

        The outcome is that of inserting the items one by one, each in its own savepoint (an item
        that fails with ``per_item_errors`` is INVALID and the others go on), but the work is done
        in runs: consecutive new memories are inserted with one statement per table. A run ends at
        an item with attribute triples (conflict adjudication must see exactly the memories
        before it) or before an item repeating a pending one's content. If anything in the runs
        fails, the whole attempt is rolled back to a savepoint and redone item by item, so a
        failure has exactly its one-by-one effect."""
        stored = txn.find_by_fingerprints([p.fingerprint for p in prepared])
        check_memory_quota(txn, self.limits, (p.fingerprint for p in prepared), stored=stored)
        # DEDUP: named only if still live now (a forget or merge may have raced us); nothing in
        # this write forgets or merges, so one look serves every item.
        named = sorted({i for p in prepared for i in p.near_duplicate_of})
        live = set(self._still_live(txn, named))
        if not per_item_errors:
            # One failure fails the whole transaction anyway: no savepoint needed.
            counts = self._apply_runs(txn, prepared, results, stored, live, one_by_one=False)
        else:
            try:
                with txn.savepoint("runs"):
                    counts = self._apply_runs(txn, prepared, results, stored, live, one_by_one=False)
            except apsw.FullError:
                raise  # the disk is full: no later item fits either; the whole write fails
            except (apsw.Error, InjectedFault):
                if not txn.alive:
                    raise
                counts = self._apply_runs(txn, prepared, results, stored, live, one_by_one=True)
        check_bytes_quota(txn, self.limits)
        return counts

    def _apply_runs(
        self,
        txn: WriteTxn,
        prepared: Sequence[PreparedItem],
        results: list[RetainOutcome | None],
        stored: Mapping[str, int],
        live: set[int],
        *,
        one_by_one: bool,
    ) -> tuple[int, int]:
        created = duplicates = 0
        created_ids: dict[int, int] = {}  # id(PreparedItem) -> memory id created in this commit
        known = dict(stored)  # fingerprint -> memory id, as a one-by-one find_by_fingerprint sees it
        run: list[PreparedItem] = []
        pending: set[str] = set()

        def flush() -> None:
            nonlocal created
            if not run:
                return
            now = time.time()
            memories = [
                NewMemory(
                    scope=p.item.scope,
                    body=p.item.text,
                    metadata_json=p.metadata_json,
                    fingerprint=p.fingerprint,
                    facts=p.extraction.facts,  # type: ignore[union-attr]
                    triples=p.extraction.triples,  # type: ignore[union-attr]
                    embedding=p.vector,  # type: ignore[arg-type]
                    fts_text=p.item.text,
                    created_at=now,
                )
                for p in run
            ]
            last = run[-1]
            try:
                with txn.savepoint() if one_by_one else nullcontext():
                    ids = txn.insert_memories(memories)
                    # CONFLICTS: the newer fact supersedes older ones in this same transaction. Only
                    # a run's last item can have attribute triples, so it sees exactly the memories
                    # inserted before it.
                    supersedes = conflicts.adjudicate(
                        txn, memory_id=ids[-1], scope=last.item.scope, triples=last.extraction.triples, at=now  # type: ignore[union-attr]
                    )
            except apsw.FullError:
                raise
            except (apsw.Error, InjectedFault) as exc:
                if not one_by_one or not txn.alive:
                    raise
                results[last.position] = RetainOutcome(
                    RetainStatus.INVALID,
                    error_reason="ITEM_NOT_STORED",
                    error_message=f"this item could not be stored ({type(exc).__name__}); the others were",
                )
                run.clear()
                pending.clear()
                return
            for p, memory_id in zip(run, ids):
                created_ids[id(p)] = memory_id
                known[p.fingerprint] = memory_id
                results[p.position] = RetainOutcome(
                    RetainStatus.CREATED,
                    memory_id=memory_id,
                    near_duplicate_of=tuple(
                        [i for i in p.near_duplicate_of if i in live]
                        + [created_ids[id(q)] for q in p.near_batch if id(q) in created_ids]
                    ),
                    supersedes=tuple(supersedes) if p is last else (),
                )
            created += len(run)
            run.clear()
            pending.clear()

        for p in prepared:
            if p.fingerprint in pending:
                flush()  # it repeats a memory of the run: name that memory's id
            existing = known.get(p.fingerprint)
            if existing is not None:
                results[p.position] = RetainOutcome(RetainStatus.DUPLICATE, memory_id=existing)
                duplicates += 1
                continue
            if p.extraction is None or p.vector is None:
                raise ExtractionMissing()  # the whole attempt fails (rolled back) and is retried
            run.append(p)
            pending.add(p.fingerprint)
            if one_by_one or any(conflicts.is_attribute(t) for t in p.extraction.triples):
                flush()
        flush()
        return created, duplicates

    @staticmethod
    def _still_live(txn: ReadTxn, ids: Sequence[int]) -> list[int]:
        if not ids:
            return []
        rows = txn.memories_by_ids(list(ids), with_details=False)
        return [i for i in ids if i in rows and not rows[i].forgotten and not rows[i].merged_into]

    def check_embedder(self, txn: ReadTxn, *, write: bool) -> None:
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
                    prior = replayed_result(txn, request_id, "forget", payload_hash)
                    if prior is not None:
                        return bool(json.loads(prior))
                if not txn.memories_by_ids([memory_id], with_details=False):
                    raise NotFound(f"memory {memory_id} does not exist", reason="MEMORY_NOT_FOUND")
                forgotten = txn.forget_memory(memory_id)
                # Memories Dedup merged into this one hold the same content: forget them too.
                for merged_id in txn.merged_into_ids(memory_id):
                    txn.forget_memory(merged_id)
                if request_id:
                    txn.save_request(request_id, "forget", payload_hash, json.dumps(forgotten))
        return forgotten

    def dedup(
        self, tenant: str, *, merge: bool = False, threshold: float = 0.0, request_id: str | None = None
    ) -> DedupReport:
        """Report near-duplicate groups (same scope, cosine >= threshold, same atoms; see
        engine/dedup.py) and, with ``merge``, retire each group's duplicates into its kept (oldest)
        memory: one ``merge`` ledger entry per group, in one write transaction that re-checks every
        member is still live. Similarity is computed before that transaction, never inside it.
        A request id makes a retried merge return the first call's groups."""
        request_id = check.validate_request_id(request_id)
        threshold = float(threshold or self.config.near_duplicate_threshold)
        if not 0.0 < threshold <= 1.0:
            raise InvalidArgument(
                f"threshold {threshold} is out of range; give a cosine similarity in (0, 1], or 0 for the "
                f"server default ({self.config.near_duplicate_threshold})",
                reason="THRESHOLD_INVALID",
            )
        payload_hash = ledger.sha256_hex(ledger.canonical_json(["dedup", merge, threshold]))
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return DedupReport([], False, threshold)
            if merge and request_id:
                with store.read() as txn:
                    prior = self._prior_dedup(txn, request_id, payload_hash, threshold)
                if prior is not None:
                    return prior
            index = self._vector_index(store)
            with store.read() as txn:
                self.check_embedder(txn, write=False)
                ids, matrix = index.sync(txn)
                pairs = dedup.similar_pairs(ids, matrix, threshold)
                involved = sorted({a for a, _, _ in pairs} | {b for _, b, _ in pairs})
                rows = txn.memories_by_ids(involved, with_details=False) if involved else {}
            # Superseded memories are history, never a merge target nor merged into a current one.
            known = {
                i: dedup.Candidate(r.scope, r.body)
                for i, r in rows.items()
                if not r.forgotten and not r.merged_into and not r.superseded_by
            }
            groups = dedup.group_pairs(pairs, known)
            if not merge:
                return DedupReport(groups, False, threshold)
            with store.write() as txn:
                if request_id:
                    prior = self._prior_dedup(txn, request_id, payload_hash, threshold)
                    if prior is not None:
                        return prior
                applied: list[DedupGroup] = []
                now = time.time()
                for group in groups:
                    current = txn.memories_by_ids([group.keep, *group.duplicates], with_details=False)

                    def live(i: int) -> bool:
                        r = current.get(i)
                        return r is not None and not r.forgotten and not r.merged_into

                    members = tuple(d for d in group.duplicates if live(d))
                    if not live(group.keep) or not members:
                        continue  # a forget or another merge got there first
                    txn.merge_memories(group.keep, members, at=now)
                    applied.append(DedupGroup(group.keep, members))
                txn.add_counters({"merged": sum(len(g.duplicates) for g in applied)})
                report = DedupReport(applied, True, threshold)
                if request_id:
                    result = [[g.keep, list(g.duplicates)] for g in applied]
                    txn.save_request(request_id, "dedup", payload_hash, json.dumps(result))
        return report

    @staticmethod
    def _prior_dedup(txn: ReadTxn, request_id: str, payload_hash: str, threshold: float) -> DedupReport | None:
        prior = txn.find_request(request_id)
        if prior is None:
            return None
        if prior[0] != "dedup" or prior[1] != payload_hash:
            raise Conflict(
                f"request_id {request_id!r} was already used for a different request; use a new request_id",
                reason="IDEMPOTENCY_KEY_REUSED",
            )
        groups = [DedupGroup(int(keep), tuple(int(d) for d in dups)) for keep, dups in json.loads(prior[2])]
        return DedupReport(groups, True, threshold)

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
    ) -> Recalled:
        check.validate_query(query, self.limits)
        k = check.validate_k(k, self.limits)
        scopes = sorted({check.validate_scope(s) for s in scopes})
        filters = check.validate_metadata(metadata_equals or {}, self.limits, field="metadata_equals")
        query_vector = self.embedder.embed([query])[0]
        terms = query_terms(query)
        match = match_expression(terms)
        # Coordination needs at least two terms; past six, hardly any memory holds them all.
        match_all = match_expression(terms, operator="AND") if 2 <= len(terms) <= 6 else None
        depth = max(4 * k, 50)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return Recalled([])
            index = self._vector_index(store)
            with store.read() as txn:
                self.check_embedder(txn, write=False)
                ids = np.zeros(0, dtype=np.int64)
                vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)
                scores: np.ndarray | None = None
                vector_rows = np.zeros(0, dtype=np.int64)
                text_hits: list[tuple[int, float]] = []
                if mode is not RecallMode.TEXT:
                    ids, matrix, vectors = index.sync_view(txn)
                    allowed = None
                    if scopes or filters:
                        allowed = np.isin(ids, np.array(txn.filtered_ids(scopes, filters), dtype=np.int64))
                    scores = vector_scores(query_vector, matrix, allowed)
                    vector_rows = top_rows(scores, depth)
                if mode is not RecallMode.VECTOR and match:
                    text_hits = soften_length_normalisation(
                        txn.fts_search(match, limit=depth, scopes=scopes, metadata_equals=filters)
                    )
                    # Coordination matters only when more memories match than BM25's cut keeps
                    # (then its clamped IDF decides which get in); it costs a second query.
                    if match_all and len(text_hits) >= depth:
                        text_hits = coordinate(
                            text_hits,
                            soften_length_normalisation(
                                txn.fts_search(match_all, limit=depth, scopes=scopes, metadata_equals=filters)
                            ),
                        )
                fused = fuse(
                    query_vector, ids, vectors, scores, vector_rows, text_hits,
                    text_weight=self.embedder.text_weight, feedback=self.embedder.feedback, limit=2 * depth,
                )
                # Read the first k memories; widen the window (CONFLICTS) only until it holds k
                # current ones (superseded ones rank after them, merged and forgotten ones never
                # appear, rows newer than this snapshot are invisible) or the candidates run out.
                window, fetched, rows = k, 0, {}
                while True:
                    rows.update(txn.memories_by_ids([c.memory_id for c in fused[fetched:window]]))
                    fetched = window
                    current = sum(1 for r in rows.values() if conflicts.is_current(r))
                    if current >= k or window >= len(fused):
                        break
                    window *= 2
                ranked = fused[:window]
        hits = []
        for candidate in ranked:
            row = rows.get(candidate.memory_id)
            # Newer than this snapshot, forgotten, or merged away by Dedup.
            if row is None or row.forgotten or row.merged_into:
                continue
            score = candidate.score
            if row.superseded_by:  # CONFLICTS: current facts rank before superseded ones
                score *= conflicts.SUPERSEDED_WEIGHT
            hits.append(Hit(_memory(row), score, candidate.vector_score, candidate.text_score))
        hits.sort(key=lambda h: (-h.score, h.memory.id))
        hits = hits[:k]
        kept = check.within_budget([check.memory_bytes(h.memory) for h in hits])
        return Recalled(hits[:kept], tuple(h.memory.id for h in hits[kept:]))

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
        """Memories in id order, a page at a time: ``page_size`` of them at most, fewer when their
        encoded size would pass the response budget (check.RESPONSE_BUDGET_BYTES)."""
        page_size = check.validate_page_size(page_size, self.limits)
        scope = check.validate_scope(scope) if scope else ""
        query = f"memories\x1f{scope}\x1f{int(include_forgotten)}"
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                page_tokens.decode(None, tenant, query, page_token)  # any token is one we never issued
                return MemoryPage([], "")
            with store.read() as txn:
                secret = txn.page_token_secret()
                after_id = page_tokens.decode_int(secret, tenant, query, page_token)
                ids = txn.list_memory_ids(
                    scope=scope or None, after_id=after_id, limit=page_size + 1, include_forgotten=include_forgotten
                )
                rows = txn.memories_by_ids(ids[:page_size])
        memories = [_memory(rows[i]) for i in ids[:page_size]]
        kept = check.within_budget([check.memory_bytes(m) for m in memories])
        more = kept < len(memories) or len(ids) > page_size
        memories = memories[:kept]
        token = page_tokens.encode(secret, tenant, query, str(memories[-1].id)) if more and memories else ""
        return MemoryPage(memories, token)

    def verify_integrity(self, tenant: str) -> IntegrityReport:
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return IntegrityReport(True, 0, 0, ledger.GENESIS_HASH, [])
            with store.read() as txn:
                verdict = ledger.verify(
                    txn.ledger_rows(), txn.stored_memories(), records=txn.stored_records(), generations=txn.scope_generations()
                )
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
                return self._stats(txn, tenant)

    def _stats(self, txn: ReadTxn, tenant: str) -> TenantStats:
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
            file_bytes=self.pool.file_bytes(tenant),
        )

    # -- operations: live figures and cross-tenant administration -------------------------------

    def open_tenants(self) -> int:
        """Tenant files open right now (the LRU's size)."""
        return self.pool.open_count

    def queue_depth(self) -> int:
        """Accepted asynchronous writes not yet applied, summed over tenants (hot_path.py keeps
        the figures; read on every scrape, so it opens no file)."""
        return self.hot_path.queue_depth()[0]

    def oldest_pending_seconds(self) -> float:
        """Age in seconds of the oldest accepted-but-unapplied write (0 when none)."""
        return self.hot_path.queue_depth()[1]

    def list_tenants(self, *, page_size: int = 0, page_token: str = "") -> TenantPage:
        """Tenant ids with a file, in lexical order, one page at a time."""
        page_size = check.validate_page_size(page_size, check.Limits(max_page_size=10_000), default=1_000)
        after = page_tokens.decode(self.pool.secret, "", "tenants", page_token) or ""
        # Listing the directory is cheap next to opening files; 10,000 names are a few hundred KB.
        names = [t for t in self.pool.tenant_ids() if t > after]
        page = names[:page_size]
        token = page_tokens.encode(self.pool.secret, "", "tenants", page[-1]) if len(names) > page_size else ""
        return TenantPage(page, token, self.pool.damaged(page))

    def aggregate_stats(self, *, chunk_size: int = 0) -> Iterator[AggregateChunk]:
        """Stats of every tenant, ``chunk_size`` tenants per chunk, then a total in the last one.

        NOT a snapshot: N files read in N separate transactions while writes go on. Tenants are
        read AGGREGATE_CONCURRENCY at a time, each through a connection of its own unless it is
        open already (so an aggregate never pushes the busy tenants out of the pool of open
        files). A tenant that cannot be read (a damaged file) is a row with its error reason,
        left out of the total; it never stops the aggregate."""
        if chunk_size < 0 or chunk_size > 1_000:
            raise InvalidArgument(f"chunk_size is {chunk_size}; give 1-1000, or 0 for 100", reason="CHUNK_SIZE_INVALID")
        chunk_size = chunk_size or 100
        tenants = self.pool.tenant_ids()  # the list as of now; a tenant made later is not included
        totals = dict.fromkeys(TenantStats.__dataclass_fields__, 0)
        files_read = unreadable = 0
        with futures.ThreadPoolExecutor(AGGREGATE_CONCURRENCY, thread_name_prefix="aggregate") as readers:
            for start in range(0, max(len(tenants), 1), chunk_size):
                rows = list(readers.map(self._aggregate_row, tenants[start : start + chunk_size]))
                files_read += len(rows)
                for _tenant, stats, error in rows:
                    if error:
                        unreadable += 1
                        continue
                    for name in totals:
                        totals[name] += getattr(stats, name)
                last = start + chunk_size >= len(tenants)
                yield AggregateChunk(rows, TenantStats(**totals) if last else None, files_read, unreadable)

    def _aggregate_row(self, tenant: str) -> tuple[str, TenantStats, str]:
        try:
            with self.pool.glance(tenant) as txn:
                return tenant, self._stats(txn, tenant), ""
        except FileNotFoundError:
            return tenant, TenantStats(), ""  # removed since the listing
        except MnemosyneError as exc:
            return tenant, TenantStats(), exc.reason
        except Exception:  # a fault of ours in one tenant must not end everyone's aggregate
            log.exception("aggregate: reading tenant %s failed", tenant)
            return tenant, TenantStats(), "INTERNAL"


def replayed_result(txn: ReadTxn | InboxTxn, request_id: str, method: str, payload_hash: str) -> str | None:
    """The stored result JSON of an earlier call with this request id, or None if there was none.

    The same id with another method or payload is a client bug, not a retry: refuse it."""
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
    return result_json
