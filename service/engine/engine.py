"""The engine: the memory service's operations, wired from its parts.

Each part receives what it uses, not the engine:

* ``write_path`` (engine/write_path.py): prepare, extract, embed and commit memories;
* ``hot_path`` (engine/hot_path/): asynchronous writes through a durable operation log;
* ``recall`` (engine/recall/): the whole recall algorithm, a list of named steps;
* ``memories`` (engine/memories.py): read, list, forget; the audit chain's verdict;
* ``updates`` (engine/updates.py): memories updated in place (with their versions), reverted
  to a revision, and forgotten by filter;
* ``expiry`` (engine/expiry.py): a tenant's expiry policy, and the sweep the hot path's workers
  run to erase expired memories;
* ``dedup`` (engine/dedup.py): near-duplicate groups, and their merge;
* ``workspaces`` (engine/workspace.py): records under host-owned generations;
* ``consolidator`` (engine/consolidator.py): sessions (threads) consolidated into records, exactly once;
* ``consistency`` (engine/consistency.py): the consistency tokens of writes, and where a read's stands;
* ``tenants`` (engine/tenants.py): per-tenant counters, the tenant list, aggregates;
* ``figures`` (engine/figures.py): each tenant's last hour, counted in memory, for the console;
* ``erasure`` (engine/erasure.py): a whole tenant erased, with its receipt;
* ``backups`` (engine/backup.py): consistent copies of tenants, streamed (backup, export);
* ``imports`` (engine/tenant_import.py): a tenant installed from an export;
* ``moves`` (engine/moves.py): the steps of a tenant moving between members;
* ``webhooks`` (engine/webhooks/): a tenant's subscriptions, and ``deliveries``, the worker that
  sends what each change wrote to its outbox.

The writes of memories start here, because they choose between two parts: ``retain`` prepares
the items once, then a fast write on a tenant whose hot path is enabled is only enqueued and every
other is committed at once (write_path). The engine knows nothing of gRPC; the transport converts
its values and maps its errors.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext

from mnemosyne.engine import ann
from mnemosyne.engine import limits as check
from mnemosyne.engine.backup import Backups
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.consistency import Consistency
from mnemosyne.engine.consolidator import SessionConsolidator, proposer_for
from mnemosyne.engine.conversation import conversation_item
from mnemosyne.engine.cut_short_erasures import CutShortErasures
from mnemosyne.engine.dedup import Deduplicator
from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.embedders import TenantEmbedders
from mnemosyne.engine.erasure import TenantErasure
from mnemosyne.engine.expiry import Expiry
from mnemosyne.engine.extractor import Extractor, RulesExtractor
from mnemosyne.engine.figures import Figures
from mnemosyne.engine.hot_path import HotPath, PoisonedExtractor
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.fences import Fences
from mnemosyne.engine.lost_tenants import LostTenants
from mnemosyne.engine.memories import Memories
from mnemosyne.engine.moves import Moves
from mnemosyne.engine.observer import EngineObserver, SafeObserver
from mnemosyne.engine.recall import Recall, RecallStep
from mnemosyne.engine.reembed import Reembedding
from mnemosyne.engine.requests import RequestKey
from mnemosyne.engine.tenant_import import TenantImports
from mnemosyne.engine.tenants import Tenants
from mnemosyne.engine.types import (
    GLOBAL_SCOPE,
    Message,
    RetainItem,
    RetainOutcome,
    TenantFigures,
    TenantsFigures,
    ThreadRef,
)
from mnemosyne.engine.updates import Updates
from mnemosyne.engine.webhooks import DeliveryWorker, Subscriptions
from mnemosyne.engine.workspace import Workspaces
from mnemosyne.engine.write_path import WritePath, payload_hash
from mnemosyne.errors import InvalidArgument
from mnemosyne.replication.replicator import Replicator
from mnemosyne.runtime.clock import Clock
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.connections import limit_page_caches, sqlite_memory
from mnemosyne.store.copies import StreamedCopies
from mnemosyne.store.data_dir import volume_bytes
from mnemosyne.store.maintenance import wal_limit_pages
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.replicas import NO_REPLICAS
from mnemosyne.store.tenantless_requests import TenantlessRequests

log = logging.getLogger("mnemosyne.engine")

# How long a close waits for an approximate index build to reach its next chunk (engine/ann.py
# BUILD_CHUNK rows: about 2 s into a 1M-memory graph here).
ANN_BUILD_STOP_SECONDS = 30.0


def _replicator(config: EngineConfig, seams: Seams) -> Replicator | None:
    """The member's replication to object storage, started (Litestream up) before the pool opens
    a file; None without ``--replica-url``."""
    settings = config.replication
    if settings.url is None:
        return None
    replicator = Replicator(
        settings.url,
        config.data_dir,
        idle_seconds=settings.idle_seconds,
        active_limit=settings.active_limit,
        retention_seconds=settings.retention_seconds,
        seams=seams,
    )
    replicator.start()
    return replicator


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        extractor: Extractor | None = None,
        embedder: Embedder | None = None,
        observer: EngineObserver | None = None,
        seams: Seams | None = None,
    ) -> None:
        """``seams``: a test's (runtime/seams.py), None in production."""
        self.config = config
        self.seams = seams = seams or Seams()
        self.limits = config.limits
        observer = SafeObserver(observer or EngineObserver())
        extractor = extractor or RulesExtractor()
        proposer = proposer_for(extractor)
        if seams.poison_marker:
            extractor = PoisonedExtractor(extractor, seams.poison_marker)
        # ``embedder``: the one new tenants get instead of the configured one (a benchmark's).
        embedders = TenantEmbedders(embedder or config.embedder)
        self.replicator = _replicator(config, seams)
        limit_page_caches(config.page_cache_mib)
        self.tenantless_requests = TenantlessRequests(
            config.data_dir,
            ttl_seconds=config.request_ttl_seconds,
            kept_per_tenant=config.tenantless_requests_per_tenant,
            kept_in_all=config.tenantless_requests_in_all,
        )
        try:
            self.pool = TenantPool(
                config.data_dir,
                max_open=config.max_open_tenants,
                synchronous=config.synchronous,
                max_readers=config.readers_per_tenant,
                faults=seams.store_faults,
                membership=config.membership,
                replicas=self.replicator or NO_REPLICAS,
                tenantless=self.tenantless_requests,
                wal_limit_pages=wal_limit_pages(config.limits.max_tenant_bytes),
            )
        except BaseException:
            if self.replicator is not None:
                self.replicator.stop()
            raise
        self.figures = Figures(self.pool)
        self._wire_requests(extractor, embedders, observer)
        self.consolidator = SessionConsolidator(
            pool=self.pool, workspaces=self.workspaces, proposer=proposer, observer=observer, config=config, seams=seams
        )
        try:
            self._start_background(observer)
        except BaseException:
            self.consolidator.stop()
            self.write_path.close()
            self.pool.close()  # release the directory lock for the next attempt
            if self.replicator is not None:
                self.replicator.stop()
            raise

    def _wire_requests(self, extractor: Extractor, embedders: TenantEmbedders, observer: EngineObserver) -> None:
        """The parts that answer requests on the caller's thread."""
        config, seams = self.config, self.seams
        # Expiry's clock (a test's may run ahead); its erasures are due in the hot path's index.
        self.clock = Clock(seams.clock_file)
        self.copies = StreamedCopies()  # of tenants being sent: the backups' and the sweep's
        self.expiry = Expiry(
            pool=self.pool,
            clock=self.clock,
            naming=lambda tenant, due: self.hot_path.naming_sweep(tenant, due),
            copies=self.copies,
        )
        self.write_path = WritePath(
            extractor=extractor,
            embedders=embedders,
            limits=config.limits,
            observer=observer,
            near_duplicate_threshold=config.near_duplicate_threshold,
            request_ttl_seconds=config.request_ttl_seconds,
            resolve_relative_time=RecallStep.RELATIVE_TIME not in seams.recall_steps_off,
        )
        self.recall = Recall(
            pool=self.pool,
            embedders=embedders,
            limits=config.limits,
            steps_off=seams.recall_steps_off,
            ann_threshold=config.ann_threshold,
            clock=self.clock,
            figures=self.figures,
        )
        # Forgets and updates fence the queued writes; the hot path's waiters hear of it.
        self.changes = Changes()
        fences = Fences(self.changes)
        self.memories = Memories(
            pool=self.pool,
            limits=config.limits,
            committed=seams.committed,
            fences=fences,
            observer=observer,
            clock=self.clock,
        )
        self.updates = Updates(
            pool=self.pool,
            write_path=self.write_path,
            committed=seams.committed,
            fences=fences,
            settle=lambda tenant, fingerprints: self.hot_path.settle(tenant, fingerprints),
            expiry=self.expiry,
            tenantless=self.tenantless_requests,
        )
        self.dedup = Deduplicator(
            pool=self.pool,
            embedders=embedders,
            default_threshold=config.near_duplicate_threshold,
            tenantless=self.tenantless_requests,
            limits=config.limits,
        )
        self.workspaces = Workspaces(pool=self.pool, recall=self.recall, observer=observer, config=config, seams=seams)
        self.tenants = Tenants(pool=self.pool, limits=config.limits)
        self.reembedding = Reembedding(pool=self.pool, embedders=embedders)

    def _start_background(self, observer: EngineObserver) -> None:
        """The background workers (the hot path's, the consolidator's) started, and the parts that
        stop or drain the hot path (erasure, imports, moves)."""
        config, seams = self.config, self.seams
        self.hot_path = HotPath(
            write_path=self.write_path,
            pool=self.pool,
            config=config.hot_path,
            limits=config.limits,
            observer=observer,
            seams=seams,
            changes=self.changes,
            clock=self.clock,
            sweep=self.expiry.sweep,
            figures=self.figures,
        )
        self.hot_path.commit.note_expiries = self.expiry.note_applied  # the erasures a round's writes bring
        self.hot_path.start()
        for tenant in self.pool.recovered:  # installs a kill interrupted, finished before anyone watched
            self.expiry.installed(tenant)
        self.consistency = Consistency(
            pool=self.pool,
            hot_path=self.hot_path,
            replicated=self.replicator.replicated if self.replicator is not None else None,
        )
        self.consolidator.start()
        self.erasure = TenantErasure(pool=self.pool, hot_path=self.hot_path)
        self.lost_tenants = LostTenants(self.pool, self.replicator) if self.replicator is not None else None
        self.backups = Backups(pool=self.pool, copies=self.copies, lost_tenants=self.lost_tenants)
        self.imports = TenantImports(
            pool=self.pool, hot_path=self.hot_path, backups=self.backups, faults=seams.store_faults
        )
        self.moves = Moves(
            pool=self.pool,
            hot_path=self.hot_path,
            backups=self.backups,
            imports=self.imports,
            lost_tenants=self.lost_tenants,
        )
        if self.lost_tenants is not None:
            self.lost_tenants.start()
        self.deliveries = DeliveryWorker(pool=self.pool, config=config.webhooks, seams=seams, clock=self.clock)
        self.webhooks = Subscriptions(
            pool=self.pool,
            limits=config.limits,
            allow_private=config.webhooks.allow_private_addresses,
            subscribed=self.deliveries.subscribed,
        )
        self.deliveries.start()
        self.cut_short_erasures = CutShortErasures(self.pool)  # last: nothing after it fails the start
        self.cut_short_erasures.start()

    def replication_gauges(self) -> dict[str, Callable[[], float]]:
        """The replication's metrics (no tenant in them), read on each scrape; none without it."""
        replicator = self.replicator
        if replicator is None:
            return {}
        return {
            "mnemosyne_replication_lag_seconds": lambda: replicator.figures().lag_seconds,
            "mnemosyne_replication_lag_bytes": lambda: replicator.figures().lag_bytes,
            "mnemosyne_replication_active_tenants": lambda: replicator.figures().active_tenants,
            "mnemosyne_replication_sync_failures": lambda: replicator.figures().sync_failures,
            "mnemosyne_litestream_restarts": lambda: replicator.figures().litestream_restarts,
        }

    def close(self) -> None:
        self.consolidator.stop()
        self.deliveries.stop()
        self.hot_path.stop()
        self.cut_short_erasures.stop()
        self.write_path.close()
        self.tenantless_requests.close()
        if self.lost_tenants is not None:
            self.lost_tenants.stop()
        self.pool.close()
        if self.replicator is not None:
            self.replicator.stop()  # after the pool: Litestream's last syncs see every commit
        if not ann.wait_for_builds(ANN_BUILD_STOP_SECONDS):
            log.warning("an approximate index build did not stop within %ss of the close", ANN_BUILD_STOP_SECONDS)

    # -- writes of memories ---------------------------------------------------------------------

    def retain(
        self, tenant: str, item: RetainItem, *, request_id: str | None = None, fast: bool = False
    ) -> RetainOutcome:
        """Retain one item. Synchronous (on return it is committed and recallable) unless
        ``fast`` is set and the tenant's hot path is enabled: then it is only appended to the
        durable operation log and the outcome is ENQUEUED with an event id."""
        return self._retain(tenant, [item], request_id=request_id, method="retain", per_item_errors=False, fast=fast)[0]

    def retain_batch(
        self, tenant: str, items: Sequence[RetainItem], *, request_id: str | None = None, fast: bool = False
    ) -> list[RetainOutcome]:
        """Retain items independently in one transaction; each gets its own outcome."""
        if not items:
            raise InvalidArgument("items is empty; send at least one item", reason="BATCH_EMPTY")
        if len(items) > self.limits.max_batch_items:
            raise InvalidArgument(
                f"batch has {len(items)} items; the limit is {self.limits.max_batch_items} items "
                f"({check.set_by('max_batch_items')})",
                reason="BATCH_TOO_LARGE",
            )
        return self._retain(
            tenant, items, request_id=request_id, method="retain_batch", per_item_errors=True, fast=fast
        )

    def retain_conversation(
        self,
        tenant: str,
        messages: Sequence[Message],
        *,
        scope: str = GLOBAL_SCOPE,
        metadata: Mapping[str, str] | None = None,
        request_id: str | None = None,
        fast: bool = False,
        occurred_at: int | None = None,
        thread: ThreadRef | None = None,
        speaker: str | None = None,
        expires_at: float | None = None,
    ) -> RetainOutcome:
        """Retain a conversation as ONE operation: one memory (its transcript), one fingerprint,
        one idempotency unit, one extraction call (engine/conversation.py). Submitting the same
        conversation again is a DUPLICATE of the first and costs no model call. ``occurred_at``,
        ``thread``, ``speaker`` and ``expires_at`` are the whole conversation's."""
        item = conversation_item(
            messages, scope, metadata or {}, self.limits, occurred_at=occurred_at, thread=thread, speaker=speaker
        )
        item = dataclasses.replace(item, expires_at=expires_at)
        return self._retain(
            tenant, [item], request_id=request_id, method="retain_conversation", per_item_errors=False, fast=fast
        )[0]

    def _retain(
        self,
        tenant: str,
        items: Sequence[RetainItem],
        *,
        request_id: str | None,
        method: str,
        per_item_errors: bool,
        fast: bool,
    ) -> list[RetainOutcome]:
        request_id = check.validate_request_id(request_id)
        outcomes, prepared = self.write_path.prepare(items, per_item_errors=per_item_errors)
        if not prepared:  # every item is invalid: nothing to write, and no file to make for it
            return [o for o in outcomes if o is not None]
        request = RequestKey(request_id, method, payload_hash(method, items, prepared)) if request_id else None
        # A tenant's first write makes its file under the tenant's opening lock, which the tenant's
        # other writes wait for: the model's work on it is done before, not under it.
        first = not fast and not self.pool.exists(tenant)
        with (
            self.write_path.extracted_for_new_tenant(tenant, prepared, self.pool.exists) if first else nullcontext(),
            self.pool.tenant(tenant, create=True) as store,
        ):
            assert store is not None
            with self.expiry.stamped(tenant, store, prepared):  # the default expiry, named until the write commits
                enqueued = self.hot_path.enqueue(tenant, store, prepared, outcomes, request) if fast else None
                if enqueued is not None:  # the enqueue answers a known request id itself
                    self.figures.accepted(tenant, len(prepared))
                    return enqueued
                # Queued writes of the same content were accepted first: this one is their duplicate.
                self.hot_path.settle(tenant, [p.fingerprint for p in prepared])
                result = self.write_path.write(
                    tenant, store, prepared, outcomes, request=request, per_item_errors=per_item_errors, claimed=first
                )
        self.seams.committed(method)
        self.figures.accepted(tenant, len(prepared))
        return result

    # -- figures ------------------------------------------------------------------------------------

    def tenant_figures(self, tenant: str) -> TenantFigures:
        """The tenant's own figures for its charts: its last hour, its memories over its life."""
        return self.figures.of(tenant, self.hot_path.depth_of(tenant))

    def tenants_figures(self, limit: int) -> TenantsFigures:
        """The largest, busiest and failing tenants of this member (no tenant file opened)."""
        return self.figures.across(check.validate_figures_rows(limit))

    # -- live figures, read by the metrics on every scrape (they open no file) -------------------

    def open_tenants(self) -> int:
        """Tenant files open right now (the LRU's size)."""
        return self.pool.open_count

    def queue_depth(self) -> int:
        """Accepted asynchronous writes not yet applied, summed over tenants."""
        return self.hot_path.queue_depth()[0]

    def oldest_pending_seconds(self) -> float:
        """Age in seconds of the oldest accepted-but-unapplied write (0 when none)."""
        return self.hot_path.queue_depth()[1]

    def sqlite_memory(self) -> int:
        """Bytes SQLite holds in this process now: page caches, schemas, statements."""
        return sqlite_memory()

    def data_volume_size(self) -> int:
        """Bytes of the filesystem holding the data directory."""
        return volume_bytes(self.config.data_dir)[0]

    def data_volume_free(self) -> int:
        """Bytes of the data directory's filesystem this process may still write."""
        return volume_bytes(self.config.data_dir)[1]
