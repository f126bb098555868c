"""The engine's configuration: one object (``EngineConfig``) nesting the hot path's, each default
given once, here. The server's configuration nests this one (transport/server.py), and the
``serve`` flags take their defaults from these fields (cli.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemosyne.engine.ann import DEFAULT_THRESHOLD as ANN_THRESHOLD
from mnemosyne.engine.dedup import DEFAULT_THRESHOLD
from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.requests import REQUEST_TTL_SECONDS
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder
from mnemosyne.errors import InvalidArgument
from mnemosyne.store.membership import Membership

HOT_PATH_SYNC_CHOICES = ("round", "enqueue")
EMBEDDERS = ("hashing", "minilm")


def make_embedder(name: str) -> Embedder:
    """The embedder a server runs, by its configuration name (``--embedder``/MNEMOSYNE_EMBEDDER).
    MiniLM needs the ``minilm`` extra, loaded only when chosen (FailedPrecondition without it)."""
    if name == "hashing":
        return HashingEmbedder()
    if name == "minilm":
        return MiniLMEmbedder()
    raise InvalidArgument(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}", reason="EMBEDDER_UNKNOWN")


@dataclass(frozen=True)
class HotPathConfig:
    """The hot path (asynchronous writes, engine/hot_path/)."""

    # Worker threads shared by every tenant, and operations applied per commit.
    workers: int = 2
    batch: int = 16
    # Failed attempts before an operation is failed for good, and the backoff after the first
    # (doubling each time).
    max_failures: int = 3
    retry_seconds: float = 0.5
    # When an accepted fast write becomes durable against power loss (with synchronous=FULL):
    # "round" (the worker's fsync after applying it, or the next Flush) or "enqueue" (before the
    # enqueue returns: an fsync per enqueue).
    sync: str = "round"
    # Finished (succeeded or failed) events are deleted this long after they finished; 0 keeps
    # them forever. Open operations are never deleted.
    event_retention_seconds: float = 7 * 24 * 3600.0


@dataclass(frozen=True)
class ConsolidationConfig:
    """Background consolidation (opt-in per tenant) and its idle time."""

    # A thread is finished once its newest memory is this old (seconds).
    idle_seconds: float = 900.0
    # Tenants consolidated in the background, every ``interval_seconds``.
    tenants: tuple[str, ...] = ()

    @property
    def interval_seconds(self) -> float:
        return max(0.2, min(60.0, self.idle_seconds / 4))


@dataclass(frozen=True)
class EngineConfig:
    data_dir: Path
    max_open_tenants: int = 1024
    # Idle read connections kept per open tenant. The server raises it to --calls-per-tenant
    # (transport/server.py): a tenant's concurrent reads past it each opened and closed a
    # connection of their own (a cold page cache): at 16 concurrent recalls 2.28 against 1.94 ms
    # of CPU per recall (docs/performance.md#serving-many-callers).
    readers_per_tenant: int = 4
    # SQLite's synchronous setting: FULL survives power loss, NORMAL process kills only.
    synchronous: str = "FULL"
    limits: Limits = field(default_factory=Limits)
    # Cosine at or above which a memory with the same atoms is a near duplicate (engine/dedup.py).
    near_duplicate_threshold: float = DEFAULT_THRESHOLD
    request_ttl_seconds: float = REQUEST_TTL_SECONDS
    # Memories in a tenant from which recall's vector candidates come from its approximate
    # nearest-neighbour index instead of an exact scan (engine/ann.py; docs/performance.md).
    ann_threshold: int = ANN_THRESHOLD
    hot_path: HotPathConfig = field(default_factory=HotPathConfig)
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    # The members of a deployment of many (store/membership.py); None: this server holds every tenant.
    membership: Membership | None = None
