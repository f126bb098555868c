"""The hot path as the engine and the transport see it: one object that builds the parts
(the package's __init__ draws them) and passes each call to the part whose job it is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mnemosyne.engine.config import HotPathConfig
from mnemosyne.engine.hot_path.barrier import Barriers
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.commit import RoundCommit
from mnemosyne.engine.hot_path.depths import Depths
from mnemosyne.engine.hot_path.events import Events
from mnemosyne.engine.hot_path.queue import Queue, enqueue_syncs
from mnemosyne.engine.hot_path.recovery import Recovery
from mnemosyne.engine.hot_path.retention import Retention
from mnemosyne.engine.hot_path.scheduler import Scheduler
from mnemosyne.engine.hot_path.state import TenantStates
from mnemosyne.engine.hot_path.worker import Workers
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.engine.requests import RequestKey
from mnemosyne.engine.types import Barrier, Event, EventPage, FlushOutcome, HotPathState, RetainOutcome, Transitions
from mnemosyne.engine.write_path import WritePath
from mnemosyne.errors import DeadlineExceeded
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore


class HotPath:
    """The hot path's parts, built once; each method is one part's."""

    def __init__(
        self,
        *,
        write_path: WritePath,
        pool: TenantPool,
        config: HotPathConfig,
        limits: Limits,
        observer: EngineObserver,
        hold_file: Path | None = None,
    ) -> None:
        """``hold_file``: the test seam MNEMOSYNE_TEST_HOLD_WORKERS (runtime/seams.py)."""
        retention = Retention(config.event_retention_seconds)
        sync_each_enqueue = enqueue_syncs(config.sync)
        scheduler = Scheduler()
        self.changes = changes = Changes()
        self._depths = depths = Depths()
        self._states = states = TenantStates(pool)
        self._scheduler, self._retention = scheduler, retention
        self._recovery = recovery = Recovery(pool=pool, wake=scheduler, retention=retention)
        self.index = recovery.index  # a tenant imported is named before its files are in place
        self._queue = Queue(
            states=states,
            recovery=recovery,
            depths=depths,
            wake=scheduler,
            changes=changes,
            sync_each_enqueue=sync_each_enqueue,
        )
        commit = RoundCommit(write_path=write_path, observer=observer, depths=depths, config=config)
        self._workers = Workers(
            pool=pool,
            scheduler=scheduler,
            commit=commit,
            recovery=recovery,
            retention=retention,
            depths=depths,
            changes=changes,
            config=config,
            sync_each_enqueue=sync_each_enqueue,
            forget_tenant=self.forget_tenant,
            hold_file=hold_file,
        )
        self._barriers = Barriers(pool=pool, states=states, wake=scheduler, changes=changes)
        self._events = Events(pool=pool, limits=limits, retention_seconds=retention.seconds)

    def start(self) -> None:
        self._workers.start()
        self._recovery.resume_all()

    def stop(self) -> None:
        self.changes.end()
        self._workers.stop()
        self._recovery.close()

    @property
    def streams_ended(self) -> bool:
        return self.changes.ended

    def end_streams(self) -> None:
        """Make every WatchEvents stream return (a graceful shutdown must not wait for them)."""
        self.changes.end()

    def forget_tenant(self, tenant: str) -> None:
        """Drop what the hot path knows of a tenant whose files were erased or moved away (a
        move's tombstone): its recovery-index entries, its pending wake-ups, its figures."""
        self._recovery.remove(tenant)
        self._scheduler.forget(tenant)
        self.forget_figures(tenant)

    def forget_figures(self, tenant: str) -> None:
        """Drop the figures kept here of a tenant whose files were replaced (they are the old
        files'); its recovery-index entries stay."""
        self._depths.forget(tenant)
        self._recovery.forget_idle(tenant)
        self._workers.forget(tenant)
        self._retention.forget(tenant)

    def resume(self, tenant: str) -> None:
        """Take the tenant's open operations up, if it has any (a tenant just put in place)."""
        self._scheduler.notify(tenant)

    def queue_depth(self) -> tuple[int, float]:
        return self._depths.total()

    def enqueue(
        self,
        tenant: str,
        store: TenantStore,
        prepared: Sequence[PreparedItem],
        outcomes: list[RetainOutcome | None],
        request: RequestKey | None,
    ) -> list[RetainOutcome] | None:
        return self._queue.enqueue(tenant, store, prepared, outcomes, request)

    def set_enabled(self, tenant: str, enabled: bool) -> bool:
        return self._states.set_enabled(tenant, enabled)

    def status(self, tenant: str) -> HotPathState:
        return self._states.status(tenant)

    def flush_barrier(self, tenant: str) -> Barrier | None:
        return self._barriers.flush_barrier(tenant)

    def disable_barrier(self, tenant: str) -> Barrier | None:
        return self._barriers.disable_barrier(tenant)

    def remaining(self, tenant: str, barrier: Barrier) -> int:
        return self._barriers.remaining(tenant, barrier)

    def flush_outcome(self, tenant: str, barrier: Barrier) -> FlushOutcome:
        return self._barriers.flush_outcome(tenant, barrier)

    @staticmethod
    def gave_up(what: str, seconds: float, remaining: int) -> DeadlineExceeded:
        return Barriers.gave_up(what, seconds, remaining)

    def flush(self, tenant: str, timeout: float) -> FlushOutcome:
        return self._barriers.flush(tenant, timeout)

    def disable(self, tenant: str, timeout: float) -> HotPathState:
        return self._barriers.disable(tenant, timeout)

    def get_event(self, tenant: str, event_id: int) -> Event:
        return self._events.get_event(tenant, event_id)

    def list_events(
        self,
        tenant: str,
        *,
        status: str | None = None,
        accepted_after: float | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> EventPage:
        return self._events.list_events(
            tenant, status=status, accepted_after=accepted_after, page_size=page_size, page_token=page_token
        )

    def transitions(self, tenant: str, *, after_event_id: int = 0, after_sequence: int = 0) -> Transitions:
        return self._events.transitions(tenant, after_event_id=after_event_id, after_sequence=after_sequence)
