"""The write path of memories, shared by Retain, RetainBatch, conversations and the hot path.

``prepare`` validates each item once, applies the defaults once and computes what the write
needs of it (its fingerprint, its canonical metadata): a ``PreparedItem`` (engine/prepared_item.py),
which then travels with the item — to the synchronous commit, or through the hot path's inbox and
log to a worker — and is never computed again. Then, for the items that are not known duplicates:

1. ``extract_missing``: extraction (the "model call") and embedding OUTSIDE any transaction, and
   the near duplicates among the stored memories (engine/dedup.py), read outside it too;
2. ``apply``, inside the caller's ONE write transaction: the request id and every fingerprint are
   checked again (exact dedup: the store's unique fingerprint decides, across processes too), then
   each new memory is inserted — body, facts, triples, embedding, full-text row, audit entry —
   with conflict adjudication and the near duplicates still live.

``write`` is the synchronous commit built from them; the hot path (engine/hot_path/commit.py) builds
its own commit from the same two steps, marking its log in the same transaction.
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager, nullcontext

import numpy as np

from mnemosyne.engine import changers, conflicts, dedup
from mnemosyne.engine import limits as check
from mnemosyne.engine.embedder import Embedder, check_tenant_embedder
from mnemosyne.engine.embedders import TenantEmbedders
from mnemosyne.engine.extractor import Extraction, Extractor
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.near_duplicates import find_near_duplicates
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.prepared_item import PreparedItem, fingerprint, placement
from mnemosyne.engine.quotas import check_bytes_quota, check_memory_quota
from mnemosyne.engine.reembed import write_next_vectors
from mnemosyne.engine.requests import RequestKey, prior_outcomes, prior_outcomes_anywhere
from mnemosyne.engine.types import RetainItem, RetainOutcome, RetainStatus
from mnemosyne.errors import Conflict, InvalidArgument
from mnemosyne.runtime import background, read_priority, tracing
from mnemosyne.store import ledger
from mnemosyne.store.bookkeeping import NotStored
from mnemosyne.store.tenant_store import TenantStore, WriteTxn

# From this many items to extract, a write looks for near duplicates on a helper thread while it
# extracts (extract_missing); below it, the thread would cost more than it hides.
_OVERLAP_MIN_ITEMS = 32
# An embedder that holds the interpreter embeds a batch in slices of about this many characters,
# with a turn between them for reads and other long writes (read_priority): its C-level loops keep
# the interpreter for the whole call. A slice's vectors are those of the whole call (each text is
# embedded alone).
_EMBED_SLICE_CHARS = 65_536


def payload_hash(method: str, items: Sequence[RetainItem], prepared: Sequence[PreparedItem]) -> str:
    """What a request id stands for: the method and every item, with the defaults applied.

    The canonical JSON of ``[method, [[text, scope, metadata], ...]]``, assembled from what
    ``prepare`` computed once (scope with its default, canonical metadata); an item that failed
    validation counts as it was sent. The bytes are those of hashing that list directly, so request
    ids stored by earlier versions still match (tests/test_idempotency.py)."""
    parts = [
        f"[{ledger.canonical_json(i.text)},{ledger.canonical_json(i.scope)},{ledger.canonical_json(i.metadata)}"
        f"{_placed(i)}]"
        for i in items
    ]
    for p in prepared:
        parts[p.position] = (
            f"[{ledger.canonical_json(p.item.text)},{ledger.canonical_json(p.item.scope)},{p.metadata_json}"
            f"{_placed(p.item)}]"
        )
    return ledger.sha256_hex(f"[{ledger.canonical_json(method)},[{','.join(parts)}]]")


def _placed(item: RetainItem) -> str:
    """An item's time, thread and speaker as a fourth element of its payload-hash entry, or nothing
    when it has none (so request ids stored before these fields existed still match)."""
    if item.occurred_at is None and item.thread is None and not item.speaker and item.expires_at is None:
        return ""
    return "," + ledger.canonical_json(placement(item))


class ExtractionMissing(Exception):
    """A memory believed duplicate vanished before the write, or its vector is by the embedder a
    re-embedding just replaced: extract (and embed) it and try again."""


def _slices_of_text(items: Sequence[PreparedItem]) -> list[Sequence[PreparedItem]]:
    """``items`` cut in order into runs of at most _EMBED_SLICE_CHARS characters of text (an item
    longer than that alone)."""
    slices: list[Sequence[PreparedItem]] = []
    start, chars = 0, 0
    for end, p in enumerate(items):
        if chars and chars + len(p.item.text) > _EMBED_SLICE_CHARS:
            slices.append(items[start:end])
            start, chars = end, 0
        chars += len(p.item.text)
    if start < len(items):
        slices.append(items[start:])
    return slices


def _answer(call: futures.Future[Extraction]) -> Extraction | Exception:
    """A finished extraction call's answer, or its error as a value."""
    failure = call.exception()
    if failure is None:
        return call.result()
    if isinstance(failure, Exception):
        return failure
    raise failure


class WritePath:
    def __init__(
        self,
        *,
        extractor: Extractor,
        embedders: TenantEmbedders,
        limits: Limits,
        observer: EngineObserver,
        near_duplicate_threshold: float,
        request_ttl_seconds: float,
        resolve_relative_time: bool = True,
    ) -> None:
        self.extractor = extractor
        self.resolve_relative_time = resolve_relative_time  # off only in recall's ablation (a test seam)
        self.embedders = embedders
        self.limits = limits
        self.observer = observer
        self._threshold = near_duplicate_threshold
        self._request_ttl = request_ttl_seconds
        self.in_flight = dedup.InFlight()  # DEDUP: one extraction for racing identical writes
        # Threads start on first use (extract_missing; a remote model's calls, _extract).
        self._helper = futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="near-duplicates", initializer=background.request_thread
        )
        self._extract_pool: futures.ThreadPoolExecutor | None = None
        self._extract_pool_lock = threading.Lock()

    def close(self) -> None:
        self._helper.shutdown()
        if self._extract_pool is not None:
            self._extract_pool.shutdown()

    # -- preparing -------------------------------------------------------------------------------

    def prepare(
        self, items: Sequence[RetainItem], *, per_item_errors: bool
    ) -> tuple[list[RetainOutcome | None], list[PreparedItem]]:
        """Validate every item once (an invalid one is an INVALID outcome with
        ``per_item_errors``, else the call's error) and prepare the others."""
        outcomes: list[RetainOutcome | None] = [None] * len(items)
        prepared: list[PreparedItem] = []
        # Checking each item: Python over every text.
        with tracing.span("write.prepare", items=len(items)), read_priority.bulk_work():
            for position, item in enumerate(items):
                read_priority.give_way()
                try:
                    prepared.append(self._prepared(position, item))
                except InvalidArgument as exc:
                    if not per_item_errors:
                        raise
                    outcomes[position] = RetainOutcome(
                        status=RetainStatus.INVALID, error_reason=exc.reason, error_message=exc.message
                    )
        return outcomes, prepared

    def _prepared(self, position: int, item: RetainItem) -> PreparedItem:
        """``item`` validated (InvalidArgument if it is not), with its defaults applied."""
        check.validate_text(item.text, self.limits)
        scope = check.validate_scope(item.scope)
        metadata = check.validate_metadata(item.metadata, self.limits)
        return PreparedItem(
            position=position,
            item=RetainItem(
                text=item.text,
                scope=scope,
                metadata=metadata,
                occurred_at=check.validate_occurred_at(item.occurred_at),
                thread=check.validate_thread(item.thread),
                speaker=check.validate_speaker(item.speaker),
                expires_at=check.validate_expires_at(item.expires_at),
            ),
            fingerprint=fingerprint(scope, item.text),
            metadata_json=ledger.canonical_json(metadata),
        )

    # -- the synchronous write -------------------------------------------------------------------

    def write(
        self,
        tenant: str,
        store: TenantStore,
        prepared: list[PreparedItem],
        outcomes: list[RetainOutcome | None],
        *,
        request: RequestKey | None,
        per_item_errors: bool,
        claimed: bool = False,
    ) -> list[RetainOutcome]:
        """Extract, then commit, the prepared items in one transaction; a known request id
        answers its first result without that work. ``claimed``: the caller holds the items'
        in-flight claim (``extracted_for_new_tenant``)."""
        if request:
            prior = prior_outcomes_anywhere(store, request)
            if prior is not None:
                return prior
        fingerprints = [p.fingerprint for p in prepared]
        with nullcontext() if claimed else self.in_flight.claim(tenant, fingerprints):
            for _attempt in range(3):
                self.extract_missing(store, prepared)
                try:
                    return self._commit(store, prepared, outcomes, request, per_item_errors)
                except ExtractionMissing:
                    continue
        raise Conflict(
            "the memory (or the tenant's embedder) changed repeatedly during the write; retry", reason="WRITE_CONTENDED"
        )  # pragma: no cover

    def _commit(
        self,
        store: TenantStore,
        prepared: list[PreparedItem],
        outcomes: list[RetainOutcome | None],
        request: RequestKey | None,
        per_item_errors: bool,
    ) -> list[RetainOutcome]:
        # With a request id, the inbox lock too, held until this commit has ended (taken before
        # the tenant's: store/inbox.py's order), so a fast write of the same id cannot be
        # accepted between this check and this commit.
        inbox = store.inbox(create=False) if request else None
        with (
            tracing.span("write.commit", items=len(prepared)),
            inbox.lock if inbox is not None else nullcontext(),
            store.write() as txn,
        ):
            if request:
                prior = prior_outcomes(txn, request)
                if prior is None and inbox is not None:
                    with inbox.read() as inbox_txn:
                        prior = prior_outcomes(inbox_txn, request)
                if prior is not None:
                    return prior
            self.check_vectors(txn, store, prepared)
            # Accepted now, in its commit: after every write accepted before, queued ones too.
            first = store.acceptances.take(len(prepared))
            for offset, p in enumerate(prepared):
                p.acceptance = first + offset
            txn.note_acceptance(first + len(prepared) - 1)
            results = list(outcomes)
            created, duplicates = self.apply(txn, prepared, results, per_item_errors=per_item_errors)
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
            if request:
                txn.save_request(
                    request.request_id, request.method, request.payload_hash, json.dumps([r.to_json() for r in final])
                )
                txn.prune_requests(time.time() - self._request_ttl)
        for p in extracted:
            p.counted = True
        self.observer.retained(
            created=created, duplicates=duplicates, model_calls=len(extracted), embed_calls=1 if extracted else 0
        )
        return final

    def check_vectors(self, txn: WriteTxn, store: TenantStore, prepared: Sequence[PreparedItem]) -> None:
        """Inside a write's transaction: the items' vectors are by the tenant's embedder, which the
        write records if it is the tenant's first. When a re-embedding switched the tenant since
        they were embedded (engine/reembed.py), they are dropped and ExtractionMissing raised: the
        attempt is rolled back and retried, embedded by the new one."""
        recorded = txn.meta("embedder")
        stale = [p for p in prepared if recorded is not None and p.vector is not None and p.vector_by != recorded]
        if recorded is not None and stale:
            for p in stale:
                p.vector = None
            self.embedders.follow(store, recorded)
            raise ExtractionMissing()
        mine = self.embedders.of(store)
        if recorded is not None and recorded != mine.recorded:
            # Switched since this store cached its embedder, and no vector here is the old one's
            # (a re-embedding's write brought the new one's): the file's record is the truth.
            self.embedders.follow(store, recorded)
        check_tenant_embedder(txn, self.embedders.of(store), write=True)

    # -- outside the transaction: extraction, embedding, near duplicates ---------------------------

    @contextmanager
    def extracted_for_new_tenant(
        self, tenant: str, prepared: list[PreparedItem], exists: Callable[[str], bool]
    ) -> Iterator[None]:
        """Around a tenant's first write, before it makes the tenant's file: extract and embed each
        distinct item with the embedder new tenants get (the first failure raises), so the write
        finds them done. The items' contents stay claimed until the block ends (the write then
        runs ``write(claimed=True)``): racing writes of the same text still make one extraction,
        the racer finding the tenant made and its text a duplicate. If another write made the
        tenant with another embedder, ``check_vectors`` has the items embedded again."""
        with self.in_flight.claim(tenant, [p.fingerprint for p in prepared]):
            if not exists(tenant):
                new = list({p.fingerprint: p for p in reversed(prepared)}.values())  # one of each text
                self._extract([p for p in new if p.extraction is None], None)
                self._embed(self.embedders.default, new)
            yield

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
        embedder, target = self.embedders.of(store), self.embedders.moving_to(store)
        if len(todo) < _OVERLAP_MIN_ITEMS:
            self._extract(todo, errors)
            # Every new item without a vector: one extracted now, or one whose vector a
            # re-embedding's switch dropped (check_vectors; the operation log's too).
            self._embed(embedder, [p for p in new if p.extraction is not None], target)
            if errors:
                new = [p for p in new if p.position not in errors]
            # DEDUP: near duplicates of every new item (also one whose extraction and vector were
            # restored, e.g. from an operation log), looked up here outside the write transaction.
            self._find_near_duplicates(store, new)
            return
        # A large batch: embed first, then look for near duplicates on a helper thread (its matrix
        # products run without the GIL, on another core) while this thread extracts. Outcomes are
        # the sequential ones: an item whose extraction fails (hot path) is never written, and
        # apply names only items of the batch that were created.
        self._embed(embedder, new, target)
        # In this call's context (its trace span: the lookup is its step too).
        lookup = self._helper.submit(contextvars.copy_context().run, self._find_near_duplicates, store, new)
        try:
            self._extract(todo, errors)
        finally:
            futures.wait([lookup])  # never leave the helper reading a store we may release
        lookup.result()

    def _extract(self, todo: Sequence[PreparedItem], errors: dict[int, Exception] | None) -> None:
        """Extract each item; with ``errors``, a failure is recorded and the others go on;
        without, the first failing item's error is raised (after every call made has ended).

        A remote model's calls for several items run on a pool of ``extractor.concurrency``
        threads shared by every write: they mostly wait on the network, and one after the other a
        batch of 500 would take 500 round trips."""
        if todo:
            with tracing.span("write.extract", items=len(todo)):
                self._extract_each(todo, errors)

    def _extract_each(self, todo: Sequence[PreparedItem], errors: dict[int, Exception] | None) -> None:
        texts = [p.item.text for p in todo]
        if self.extractor.concurrency > 1 and len(todo) > 1:
            with self._extract_pool_lock:
                if self._extract_pool is None:
                    self._extract_pool = futures.ThreadPoolExecutor(
                        max_workers=self.extractor.concurrency,
                        thread_name_prefix="extract",
                        initializer=background.request_thread,
                    )
            calls = [self._extract_pool.submit(self.extractor.extract, text) for text in texts]
            futures.wait(calls)
            answers: list[Extraction | Exception] = [_answer(call) for call in calls]
        else:
            answers = []
            with read_priority.bulk_work(self.extractor.holds_interpreter):
                for text in texts:
                    read_priority.give_way()
                    try:
                        answers.append(self.extractor.extract(text))
                    except Exception as exc:  # the model failed on this item
                        if errors is None:
                            raise
                        answers.append(exc)
        for p, answer in zip(todo, answers):
            if isinstance(answer, Exception):
                if errors is None:
                    raise answer
                errors[p.position] = answer  # the others go on
                continue
            p.extraction = answer

    def _embed(self, embedder: Embedder, items: Sequence[PreparedItem], target: Embedder | None = None) -> None:
        """Embed the items that have no vector yet (a failed extraction's item too: harmless) and,
        while a re-embedding moves the tenant to ``target``, those without a vector by that one
        (the move's, written with the memory: engine/reembed.py ``write_next_vectors``)."""
        self._embed_by(embedder, [p for p in items if p.vector is None], next_vector=False)
        if target is not None:
            made = target.recorded
            self._embed_by(target, [p for p in items if p.next_vector_by != made], next_vector=True)

    def _embed_by(self, embedder: Embedder, todo: Sequence[PreparedItem], *, next_vector: bool) -> None:
        """Each item's vector by ``embedder``: its vector, or its ``next_vector``."""
        if not todo:
            return
        made = embedder.recorded
        in_turns = embedder.holds_interpreter  # else a model's embedding: one call for the batch
        with tracing.span("write.embed", items=len(todo)), read_priority.bulk_work(in_turns):
            for part in _slices_of_text(todo) if in_turns else [todo]:
                read_priority.give_way()
                vectors = embedder.embed([p.item.text for p in part])
                for p, vector in zip(part, vectors):
                    made_vector = np.ascontiguousarray(vector, dtype="<f4").tobytes()
                    if next_vector:
                        p.next_vector, p.next_vector_by = made_vector, made
                    else:
                        p.vector, p.vector_by = made_vector, made

    def _find_near_duplicates(self, store: TenantStore, prepared: Sequence[PreparedItem]) -> None:
        """The near duplicates of each item, in acceptance order (engine/near_duplicates.py)."""
        with tracing.span("write.near_duplicates", items=len(prepared)):
            find_near_duplicates(store, self.embedders.of(store), self._threshold, prepared)

    # -- inside the transaction ----------------------------------------------------------------

    def apply(
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
        failure has exactly its one-by-one effect. A full disk fails the whole write (DISK_FULL):
        no later item fits either."""
        stored = txn.find_by_fingerprints([p.fingerprint for p in prepared])
        check_memory_quota(txn, self.limits, (p.fingerprint for p in prepared), stored=stored)
        # DEDUP: named only if still live now (a forget or merge may have raced us); nothing in
        # this write forgets or merges, so one look serves every item.
        named = sorted({i for p in prepared for i in [*p.near_duplicate_of, *(i for i, _ in p.near_later)]})
        live = txn.live_ids(named)

        def attempt(*, one_by_one: bool) -> tuple[int, int]:
            runs = _Runs(txn, results, stored, live, one_by_one=one_by_one, resolve=self.resolve_relative_time)
            return runs.apply(prepared)

        if not per_item_errors:
            # One failure fails the whole transaction anyway: no savepoint needed.
            counts = attempt(one_by_one=False)
        else:
            try:
                with txn.savepoint("runs"):
                    counts = attempt(one_by_one=False)
            except NotStored:
                if not txn.alive:
                    raise
                counts = attempt(one_by_one=True)
        check_bytes_quota(txn, self.limits)
        if any(p.next_vector is not None for p in prepared):  # a re-embedding runs (engine/reembed.py)
            created = [
                (r.memory_id, p) for p in prepared if (r := results[p.position]) and r.status is RetainStatus.CREATED
            ]
            write_next_vectors(txn, created)
        return counts


class _Runs:
    """One attempt at ``WritePath.apply``'s items: consecutive new memories inserted together, in
    runs (``one_by_one``: each item alone, in its own savepoint, an item that cannot be stored
    INVALID and the others going on)."""

    def __init__(
        self,
        txn: WriteTxn,
        results: list[RetainOutcome | None],
        stored: Mapping[str, int],
        live: set[int],
        *,
        one_by_one: bool,
        resolve: bool,
    ) -> None:
        self._txn = txn
        self._results = results
        self._live = live
        self._one_by_one = one_by_one
        self._resolve_relative_time = resolve  # WritePath.resolve_relative_time
        self._known = dict(stored)  # fingerprint -> memory id, as a one-by-one find_by_fingerprint sees it
        self._created_ids: dict[int, int] = {}  # id(PreparedItem) -> memory id created in this commit
        self._run: list[PreparedItem] = []
        self._pending: set[str] = set()  # the run's fingerprints
        self._created = 0

    def apply(self, prepared: Sequence[PreparedItem]) -> tuple[int, int]:
        """Fill ``results`` for every item; (created, duplicates)."""
        duplicates = 0
        for p in prepared:
            if p.fingerprint in self._pending:
                self._insert_run()  # it repeats a memory of the run: name that memory's id
            existing = self._known.get(p.fingerprint)
            if existing is not None:
                self._results[p.position] = RetainOutcome(status=RetainStatus.DUPLICATE, memory_id=existing)
                duplicates += 1
                continue
            if p.extraction is None or p.vector is None:
                raise ExtractionMissing()  # the whole attempt fails (rolled back) and is retried
            self._run.append(p)
            self._pending.add(p.fingerprint)
            if self._one_by_one or any(conflicts.is_attribute(t) for t in p.extraction.triples):
                self._insert_run()
        self._insert_run()
        return self._created, duplicates

    def _insert_run(self) -> None:
        """Insert the run's memories with one statement per table, then start a new run."""
        run, self._run, self._pending = self._run, [], set()
        if not run:
            return
        now = time.time()
        # Extracted and embedded: checked when the run was formed.
        memories = [p.new_memory(now, resolve_relative_time=self._resolve_relative_time) for p in run]
        last = run[-1]
        try:
            with self._txn.savepoint() if self._one_by_one else nullcontext():
                ids = self._txn.insert_memories(memories)
                # CONFLICTS: the newer fact supersedes older ones in this same transaction. Only a
                # run's last item can have attribute triples, so it sees exactly the memories
                # inserted before it.
                assert last.acceptance is not None  # taken in the commit, or the operation's event id
                with changers.changes_by(last.changer):  # a supersession is by whoever wrote the newer fact
                    supersedes = conflicts.adjudicate(
                        self._txn,
                        memory_id=ids[-1],
                        acceptance=last.acceptance,
                        scope=last.item.scope,
                        triples=memories[-1].triples,
                        at=now,
                    )
                for p, memory_id in zip(run, ids):
                    for later_id, later_event in p.near_later:
                        if later_id in self._live:
                            self._txn.oplog_amend_near_duplicates(later_id, later_event, [memory_id])
        except NotStored as exc:
            if not self._one_by_one or not self._txn.alive:
                raise
            self._results[last.position] = RetainOutcome(
                status=RetainStatus.INVALID,
                error_reason="ITEM_NOT_STORED",
                error_message=f"this item could not be stored ({exc.cause}); the others were",
            )
            return
        for p, memory_id in zip(run, ids):
            self._created_ids[id(p)] = memory_id
            self._known[p.fingerprint] = memory_id
            self._results[p.position] = RetainOutcome(
                status=RetainStatus.CREATED,
                memory_id=memory_id,
                near_duplicate_of=tuple(
                    [i for i in p.near_duplicate_of if i in self._live]
                    + [self._created_ids[id(q)] for q in p.near_batch if id(q) in self._created_ids]
                ),
                supersedes=tuple(supersedes) if p is last else (),
            )
        self._created += len(run)
