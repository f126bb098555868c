"""What the replication (replication/replicator.py) keeps of each tenant of its active set, and
the aggregates it gives the metrics."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from mnemosyne.errors import FailedPrecondition


@dataclass
class ActiveTenant:
    """What the replicator knows of one tenant of the active set."""

    registered: list[Path] = field(default_factory=list)  # its files Litestream replicates now
    generation: int | None = None
    dirty_since: float | None = None  # its oldest commit not confirmed in object storage
    last_write: float = 0.0
    confirmed_bytes: int = 0  # its WAL bytes when the last confirmed sync began
    paused: int = 0  # swaps under way: not registered meanwhile
    in_flight: int = 0  # syncs begun before a swap paused it (a swap waits for them: ``_leave``)
    swaps: int = 0  # swaps begun: a registration begun before one is dropped (``_register``)
    fresh: bool = False  # its file changed as a file (a swap, an erasure): a new generation next
    refused: FailedPrecondition | None = None  # why it is not replicated (a stale copy): each call's refusal
    next_sync: asyncio.Future[float] | None = None  # the sync to start next, joined by its callers
    syncing: asyncio.Task[float] | None = None  # its sync running (the loop holds tasks only weakly)

    @property
    def settled(self) -> bool:
        """No sync is due: its commits are confirmed, or never will be (a refused stale copy, whose
        every sync raises: it leaves the set once idle like any other, judged again if it comes back)."""
        return self.dirty_since is None or self.refused is not None


@dataclass(frozen=True)
class Figures:
    """The replication's aggregates, for the metrics (no tenant in them)."""

    lag_seconds: float
    lag_bytes: int
    active_tenants: int
    registered_databases: int
    litestream_restarts: int
    sync_failures: int
