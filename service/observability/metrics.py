"""Prometheus metrics of one server, in a registry of its own (several servers may share a
process, e.g. in tests).

Every label takes values from a small fixed set: gRPC method names of the services this server
registered, status code names, error reasons, the member names of the operator's list. No label ever takes a tenant id, a request id or
any other client-chosen value (unbounded cardinality, and a leak of tenant names).

Figures the engine owns (open tenant files, queue depth, oldest pending write, the data
directory's filesystem) are read on each scrape through callbacks bound by ``read_gauges_from``
(the server binds them to Engine methods: ``open_tenants``, ``queue_depth``,
``oldest_pending_seconds``, ``data_volume_size``, ``data_volume_free``); the engine never sets a gauge.
The approximate indexes' figures (``mnemosyne_ann_*``) are read the same way, from the process's
``engine.ann.FIGURES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    gc_collector,
    platform_collector,
    process_collector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from mnemosyne.engine.ann import FIGURES as ANN_FIGURES
from mnemosyne.engine.ann import AnnFigures
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.observability.call_latency import CallLatency
from mnemosyne.runtime import model_passes, read_priority

# gRPC latency buckets: from sub-millisecond reads to multi-second batches with a real model.
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# name -> help of the gauges read from the engine on each scrape.
GAUGES = {
    "mnemosyne_open_tenants": "Tenant files open now (bounded by --max-open-tenants).",
    "mnemosyne_queue_depth": "Accepted asynchronous writes not yet applied, summed over tenants.",
    "mnemosyne_oldest_pending_seconds": "Age of the oldest accepted but not yet applied write (0 when none).",
    "mnemosyne_worker_threads_busy": "Worker threads running a call's blocking work now (of --worker-threads).",
    "mnemosyne_reader_threads_busy": "Reader threads running a short read (Recall, Get, List) now (of --reader-threads).",
    "mnemosyne_queued_calls": "Calls waiting for a thread (their tenant at its share, or every thread busy).",
    "mnemosyne_open_streams": "Server streams open now (WatchEvents, AggregateStats).",
    "mnemosyne_waiting_calls": "Flush and Disable calls waiting for their tenant's queue now.",
    "mnemosyne_mcp_sessions": "MCP sessions open now over HTTP (counted until they end or idle out).",
    # Replication to object storage (docs/replication.md): aggregates only, no tenant label.
    "mnemosyne_replication_lag_seconds": "Age of the oldest commit not yet confirmed in object storage (0 when none).",
    "mnemosyne_replication_lag_bytes": "WAL bytes written since the last confirmed sync, summed over tenants.",
    "mnemosyne_replication_active_tenants": "Tenants in Litestream now (unreplicated or recent writes; of --replica-active-limit).",
    "mnemosyne_replication_sync_failures": "Syncs to object storage that failed since the start (retried).",
    "mnemosyne_litestream_restarts": "Times the Litestream child died and was restarted since the start.",
    "mnemosyne_sqlite_memory_bytes": "Memory SQLite holds now (page caches, schemas, statements; near --page-cache-mib at most).",
    "mnemosyne_data_volume_size_bytes": "Size of the filesystem holding the data directory.",
    "mnemosyne_data_volume_free_bytes": "Bytes of the data directory's filesystem this process may still write.",
    "mnemosyne_members": "Members in this member's list (1 for a single server).",
}


class ServerMetrics(EngineObserver):
    """The metrics of one server and the engine observer that feeds its counters."""

    def __init__(self) -> None:
        # No `*_created` series (one more series per counter, of no use to Prometheus' rate()).
        # The switch is process-wide; the server process only holds our registries.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
        self.registry = CollectorRegistry(auto_describe=True)
        process_collector.ProcessCollector(registry=self.registry)
        platform_collector.PlatformCollector(registry=self.registry)
        gc_collector.GCCollector(registry=self.registry)
        self.rpc_duration = CallLatency(
            "mnemosyne_rpc_duration_seconds",
            "Time to answer a gRPC call, by method and final status code.",
            RPC_BUCKETS,
            self.registry,
        )
        # Every call's one observation (the method of our services, gRPC's code name, seconds).
        self.observe_rpc = self.rpc_duration.observe
        self._count_engine_work()
        # A deployment of many members (transport/cluster/forwarding.py): the clients that route by the
        # member list never make a member forward (the tests read these).
        self.forwarded = Counter(
            "mnemosyne_forwarded_calls", "Calls this member forwarded to the tenant's owner.", registry=self.registry
        )
        self.forwarded_linked = Counter(
            "mnemosyne_forwarded_calls_linked",
            "Calls this member forwarded over the member link (of mnemosyne_forwarded_calls; the others as gRPC calls).",
            registry=self.registry,
        )
        self.forwarded_in = Counter(
            "mnemosyne_forwarded_calls_received",
            "Calls that reached this member by another member's forwarding hop.",
            registry=self.registry,
        )
        self.fanout_unanswered = Counter(
            "mnemosyne_fanout_unanswered",
            "Admin fan-outs (ListTenants, AggregateStats) a member did not answer, by member.",
            ["member"],
            registry=self.registry,
        )
        self._read_on_scrape()

    def _count_engine_work(self) -> None:
        """The counters the engine observer feeds (``EngineObserver``'s methods below)."""
        self.writes = Counter(
            "mnemosyne_writes", "Memories written (committed, not duplicates).", registry=self.registry
        )
        self.model_calls = Counter(
            "mnemosyne_model_calls", "Extraction (model) calls made for committed writes.", registry=self.registry
        )
        self.consolidation_model_calls = Counter(
            "mnemosyne_consolidation_model_calls",
            "Session consolidation (model) calls made for journaled proposals.",
            registry=self.registry,
        )
        self.consolidation_proposals = Counter(
            "mnemosyne_consolidation_proposals",
            "Session consolidation proposals journaled (one per receipt).",
            registry=self.registry,
        )
        self.embed_calls = Counter(
            "mnemosyne_embed_calls", "Embedding calls made for committed writes.", registry=self.registry
        )
        self.duplicates = Counter(
            "mnemosyne_duplicates", "Writes answered as exact duplicates of a stored memory.", registry=self.registry
        )
        self.cas_rejections = Counter(
            "mnemosyne_cas_rejections",
            "Compare-and-set writes rejected (stale workspace generation), by reason.",
            ["reason"],
            registry=self.registry,
        )
        # No reason label: a series that appears at 1 shows no increase() to an alert (ListEvents
        # with status failed names each failure's reason).
        self.events_failed = Counter(
            "mnemosyne_events_failed",
            "Hot-path operations that failed for good after their bounded attempts.",
            registry=self.registry,
        )
        self.integrity_checks = Counter(
            "mnemosyne_integrity_checks",
            "Audits of a tenant's file (VerifyIntegrity), by verdict: valid or broken.",
            ["verdict"],
            registry=self.registry,
        )
        for verdict in ("valid", "broken"):  # each series from 0: an alert's increase() sees the first
            self.integrity_checks.labels(verdict=verdict)

    def _read_on_scrape(self) -> None:
        """The figures read from their owners on each scrape: the gauges of ``GAUGES`` (0 until
        bound), the admission refusals, where short reads ran, the approximate indexes, the reads
        that gave way."""
        self._gauges = {name: Gauge(name, help_text, registry=self.registry) for name, help_text in GAUGES.items()}
        for gauge in self._gauges.values():
            gauge.set_function(lambda: 0.0)
        self._refusals = _LabelledCounts(
            "mnemosyne_admission_refusals", "Calls refused by an admission limit, by reason.", "reason"
        )
        self.registry.register(self._refusals)
        self._reads = _LabelledCounts(
            "mnemosyne_short_reads",
            "Snapshot reads answered (Recall, GetMemory, ListMemories...), by where they ran: the event loop or a reader thread.",
            "ran_on",
        )
        self.registry.register(self._reads)
        self.registry.register(_AnnIndexes(ANN_FIGURES))
        self.registry.register(_GivenWay())

    def read_gauges_from(self, sources: Mapping[str, Callable[[], float]]) -> None:
        """Bind gauges of ``GAUGES`` to zero-argument functions, called on every scrape (so
        they must be cheap and thread-safe). Unbound gauges read 0."""
        for name, source in sources.items():
            self._gauges[name].set_function(source)

    def count_refusals_from(self, counts: Mapping[str, int]) -> None:
        """``mnemosyne_admission_refusals{reason}``: calls refused by an admission limit, read
        from ``counts`` (reason -> calls) on each scrape."""
        self._refusals.counts = counts

    def count_reads_from(self, counts: Mapping[str, int]) -> None:
        """``mnemosyne_short_reads{ran_on}``: short reads answered on the event loop
        (``event_loop``) or a reader thread (``reader_thread``), read from ``counts`` on each scrape."""
        self._reads.counts = counts

    # -- EngineObserver -------------------------------------------------------------------------

    def retained(self, *, created: int, duplicates: int, model_calls: int, embed_calls: int) -> None:
        self.writes.inc(created)
        self.duplicates.inc(duplicates)
        self.model_calls.inc(model_calls)
        self.embed_calls.inc(embed_calls)

    def consolidation_proposed(self, *, model_calls: int) -> None:
        self.consolidation_proposals.inc()
        self.consolidation_model_calls.inc(model_calls)

    def cas_rejected(self, reason: str) -> None:
        self.cas_rejections.labels(reason=reason).inc()

    def event_failed(self, reason: str) -> None:
        self.events_failed.inc()

    def integrity_checked(self, *, valid: bool) -> None:
        self.integrity_checks.labels(verdict="valid" if valid else "broken").inc()

    # -- transport ------------------------------------------------------------------------------

    def members_asked(self, members: Iterable[str]) -> None:
        """The members an admin fan-out asks, each counted from 0 (an alert's increase() then sees
        the first miss)."""
        for member in members:
            self.fanout_unanswered.labels(member=member)

    def member_unanswered(self, member: str) -> None:
        """A member of the list did not answer its part of an admin fan-out. Member names are the
        operator's (the member list), never a client's: a bounded label."""
        self.fanout_unanswered.labels(member=member).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _LabelledCounts(Collector):
    """A counter with one label, read from a mapping (label value -> count) on each scrape."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.counts: Mapping[str, int] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, count in sorted(dict(self.counts).items()):
            family.add_metric([value], count)
        yield family


class _GivenWay(Collector):
    """How often long writes gave way to the reads running beside them (read_priority), and a
    model's passes over them waited for a core (model_passes)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        steps, seconds = read_priority.given_way()
        yield CounterMetricFamily(
            "mnemosyne_write_steps_given_way",
            "Steps at which a long write (a batch's extraction, embedding or near-duplicate check) waited for running reads.",
            value=steps,
        )
        yield CounterMetricFamily(
            "mnemosyne_write_seconds_given_way",
            "Seconds long writes waited for running reads, in all.",
            value=seconds,
        )
        passes, pass_seconds = model_passes.waited()
        yield CounterMetricFamily(
            "mnemosyne_model_passes_given_way",
            "A model's passes over a write's texts that waited for a core the reads kept.",
            value=passes,
        )
        yield CounterMetricFamily(
            "mnemosyne_model_seconds_given_way",
            "Seconds a model's passes over writes' texts waited for a core the reads kept, in all.",
            value=pass_seconds,
        )


class _AnnIndexes(Collector):
    """The approximate indexes of large tenants (engine/ann.py), read from the process's
    figures on each scrape: rows their graphs hold, graphs made by kind and the seconds taken."""

    def __init__(self, figures: AnnFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "mnemosyne_ann_rows",
            "Rows held by the approximate indexes (HNSW graphs) of the tenants open now.",
            value=self.figures.rows(),
        )
        made = CounterMetricFamily(
            "mnemosyne_ann_graphs",
            "Approximate index graphs made, by kind: build (from every row), catch_up (new rows), load (a file).",
            labels=["kind"],
        )
        seconds = CounterMetricFamily(
            "mnemosyne_ann_graph_seconds", "Seconds spent making approximate index graphs, by kind.", labels=["kind"]
        )
        for kind, (count, spent) in self.figures.counts().items():
            made.add_metric([kind], count)
            seconds.add_metric([kind], spent)
        yield made
        yield seconds
        legs = CounterMetricFamily(
            "mnemosyne_recall_vector_legs",
            "Recalls' vector legs by where their candidates came from: graph (the approximate index), "
            "every_row (every memory scored), filtered_rows (only the memories a filter keeps).",
            labels=["source"],
        )
        for source, count in self.figures.sources().items():
            legs.add_metric([source], count)
        yield legs
