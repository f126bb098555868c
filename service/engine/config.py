"""The engine's configuration: one object (``EngineConfig``) nesting the hot path's, each default
given once, here. The server's configuration nests this one (transport/config.py); a field made
with ``option`` is also a ``serve`` flag and variable, its help written here (engine/options.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemosyne.engine.dedup import DEFAULT_THRESHOLD
from mnemosyne.engine.embedders import DEFAULT_EMBEDDER, EMBEDDERS
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.options import option, required_option
from mnemosyne.engine.requests import REQUEST_TTL_SECONDS
from mnemosyne.store.membership import Membership
from mnemosyne.store.tenantless_requests import KEPT_IN_ALL as TENANTLESS_KEPT_IN_ALL
from mnemosyne.store.tenantless_requests import KEPT_PER_TENANT as TENANTLESS_KEPT_PER_TENANT

HOT_PATH_SYNC_CHOICES = ("round", "enqueue")


@dataclass(frozen=True)
class HotPathConfig:
    """The hot path (asynchronous writes, engine/hot_path/)."""

    # Each a thread: past a few thousand the process cannot start them (a traceback at start).
    workers: int = option(
        2,
        "background workers shared by all tenants for asynchronous (fast) writes",
        name="hot-path-workers",
        minimum=1,
        maximum=1024,
    )
    batch: int = option(16, "queued operations a worker applies per transaction", name="hot-path-batch", minimum=1)
    # Failed attempts before an operation is failed for good, and the backoff after the first
    # (doubling each time).
    max_failures: int = 3
    retry_seconds: float = 0.5
    sync: str = option(
        "round",
        "with --synchronous full, fsync an accepted fast write after the worker applies it "
        "(round: enqueues take no fsync) or before the enqueue returns (enqueue)",
        name="hot-path-sync",
        choices=HOT_PATH_SYNC_CHOICES,
    )
    # Open operations are never deleted, whatever their age.
    event_retention_seconds: float = option(
        7 * 24 * 3600.0, "delete finished hot-path events this long after they finished (0: keep forever)"
    )


@dataclass(frozen=True)
class ConsolidationConfig:
    """Background consolidation (opt-in per tenant) and its idle time."""

    idle_seconds: float = option(
        900.0,
        "a session (thread) is finished once its newest memory is this old (0: at once)",
        name="consolidate-idle-seconds",
    )
    # Consolidated in the background, every ``interval_seconds``.
    tenants: tuple[str, ...] = option(
        (), "consolidate this tenant's finished sessions in the background", name="consolidate-tenant"
    )

    @property
    def interval_seconds(self) -> float:
        return max(0.2, min(60.0, self.idle_seconds / 4))


@dataclass(frozen=True)
class ReplicationConfig:
    """Replication of every tenant's files to object storage (service/replication/,
    docs/replication.md): off without ``url``."""

    url: str | None = option(
        None,
        "replicate every tenant's files to object storage with Litestream: s3://BUCKET/PREFIX?endpoint=URL "
        "(credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; docs/replication.md)",
        name="replica-url",
        unset="off",
    )
    idle_seconds: float = option(
        30.0,
        "a replicating tenant whose writes are all in object storage and that was not written for this long "
        "leaves Litestream (it comes back at its next write; 0: as soon as its writes are)",
        name="replica-idle-seconds",
    )
    active_limit: int = option(
        1000,
        "tenants replicating at once (each with unreplicated writes or written in the idle time); past it a write "
        "to another tenant is refused RESOURCE_EXHAUSTED REPLICATION_FULL",
        name="replica-active-limit",
        minimum=1,
        maximum=4000,
    )
    retention_seconds: float = option(
        24 * 3600.0,
        "how long object storage keeps a tenant's replaced generation (after an erasure, an import, a move) for "
        "point-in-time restore; then its objects are deleted (0: at once; docs/replication.md#erasure)",
        name="replica-retention",
    )


@dataclass(frozen=True)
class WebhookConfig:
    """Webhook deliveries (engine/webhooks/, docs/webhooks.md)."""

    workers: int = option(
        4,
        "delivery workers shared by all tenants for webhooks (one tenant holds at most one at a time)",
        name="webhook-workers",
        minimum=1,
        maximum=64,
    )
    allow_private_addresses: bool = option(
        False,
        "deliver webhooks to loopback, private, link-local, shared (100.64/10), unspecified and cloud "
        "metadata addresses (refused by default: a subscription must not reach into this network)",
        name="webhook-allow-private-addresses",
    )
    # A delivery attempt's whole time (connect, send, the answer's head); a receiver that takes
    # longer is an attempt that failed.
    timeout_seconds: float = 10.0
    # The backoff after a delivery's first failed attempt, doubling each time up to the cap.
    retry_seconds: float = 5.0
    retry_cap_seconds: float = 3600.0
    # A subscription whose deliveries fail this long without one success is paused.
    pause_after_seconds: float = 24 * 3600.0
    # Delivered rows stay this long as the subscription's delivery log.
    log_retention_seconds: float = 7 * 24 * 3600.0


@dataclass(frozen=True)
class EngineConfig:
    data_dir: Path = field(
        metadata=required_option("directory of tenant files", command_line_default="./mnemosyne-data")
    )
    # A tenant keeps the embedder it was created with (engine/embedders.py).
    embedder: str = option(
        DEFAULT_EMBEDDER,
        "embedder of new tenants: minilm (all-MiniLM-L6-v2, by meaning, installed with the package) "
        "or hashing (no model: words, not meaning)",
        choices=EMBEDDERS,
    )
    max_open_tenants: int = option(
        1024, "tenant files kept open at most (LRU; fewer when the open-file limit cannot hold them)", minimum=1
    )
    # Idle read connections kept per open tenant. The server raises it to --calls-per-tenant
    # (transport/server.py): a tenant's concurrent reads past it each opened and closed a
    # connection of their own (a cold page cache): at 16 concurrent recalls 2.28 against 1.94 ms
    # of CPU per recall (docs/performance.md#serving-many-callers).
    readers_per_tenant: int = 4
    page_cache_mib: int = option(
        256,
        "memory for SQLite's page caches of all tenant files together, MiB (a soft bound: a reader "
        "connection of a large tenant keeps up to 64 MiB of pages while the total stays under it; 0: no bound)",
    )
    synchronous: str = option(
        "FULL",
        "SQLite synchronous setting: full survives power loss, normal only process kills",
        choices=("full", "normal"),
    )
    limits: Limits = field(default_factory=Limits)
    near_duplicate_threshold: float = option(
        DEFAULT_THRESHOLD,
        "embedding cosine at or above which a memory with the same numbers, dates and identifiers is named "
        "a near duplicate (and Dedup's default); above 1 = off",
    )
    request_ttl_seconds: float = REQUEST_TTL_SECONDS
    # The most request ids one tenant without a file keeps (store/tenantless_requests.py).
    tenantless_requests_per_tenant: int = TENANTLESS_KEPT_PER_TENANT
    # The most request ids all tenants without a file keep together (the same file).
    tenantless_requests_in_all: int = TENANTLESS_KEPT_IN_ALL
    ann_threshold: int = option(
        0,
        "memories in a tenant from which recall uses an approximate vector index (exact scan below; "
        "0: the embedder's own, 50,000 for hashing and 5,000 for minilm; docs/performance.md#large-tenants)",
    )
    hot_path: HotPathConfig = field(default_factory=HotPathConfig)
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    webhooks: WebhookConfig = field(default_factory=WebhookConfig)
    # The members of a deployment of many (store/membership.py); None: this server holds every tenant.
    membership: Membership | None = None
