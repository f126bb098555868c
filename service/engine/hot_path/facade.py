"""The hot path as the engine and the transport see it: one object that builds the parts
(the package's __init__ draws them) and passes each call to the part whose job it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from mnemosyne.engine.config import HotPathConfig
from mnemosyne.engine.figures import Figures
from mnemosyne.engine.hot_path.awaited import Awaited
from mnemosyne.engine.hot_path.barrier import Barriers
from mnemosyne.engine.hot_path.changes import Changes
from mnemosyne.engine.hot_path.commit import RoundCommit
from mnemosyne.engine.hot_path.depths import Depths
from mnemosyne.engine.hot_path.events import Events
from mnemosyne.engine.hot_path.queue import Queue, enqueue_syncs
from mnemosyne.engine.hot_path.recovery import Recovery
from mnemosyne.engine.hot_path.retention import Retention
from mnemosyne.engine.hot_path.rounds import Rounds
from mnemosyne.engine.hot_path.scheduler import Scheduler
from mnemosyne.engine.hot_path.state import TenantStates
from mnemosyne.engine.hot_path.worker import Workers
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.observer import EngineObserver
from mnemosyne.engine.types import HotPathState
from mnemosyne.engine.write_path import WritePath
from mnemosyne.runtime.clock import Clock
from mnemosyne.runtime.seams import Seams
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore


class HotPath:
    """The hot path's parts, built once. A call is the method of the part whose job it is; the
    methods here only tell several parts at once (a start, a stop, a tenant forgotten)."""

    def __init__(
        self,
        *,
        write_path: WritePath,
        pool: TenantPool,
        config: HotPathConfig,
        limits: Limits,
        observer: EngineObserver,
        seams: Seams | None = None,
        changes: Changes | None = None,
        clock: Clock | None = None,
        sweep: Callable[[str, TenantStore], float | None] | None = None,
        figures: Figures | None = None,
    ) -> None:
        """``seams``: a test's (runtime/seams.py). ``sweep``: engine/expiry.py's, due on ``clock``.
        ``figures``: the tenants' last hour (engine/figures.py), which ``Depths`` keeps told."""
        seams, scheduler, retention = seams or Seams(), Scheduler(), Retention(config.event_retention_seconds)
        self._scheduler, self._retention = scheduler, retention
        sync_each_enqueue, states = enqueue_syncs(config.sync), TenantStates(pool)
        self.changes = changes = changes or Changes()
        self._depths = depths = Depths(figures)
        self._recovery = recovery = Recovery(pool=pool, wake=scheduler, retention=retention, clock=clock or Clock())
        self.index = recovery.index  # a tenant imported is named before its files are in place
        queue = Queue(
            states=states,
            recovery=recovery,
            depths=depths,
            wake=scheduler,
            changes=changes,
            sync_each_enqueue=sync_each_enqueue,
            limits=limits,
        )
        commit = RoundCommit(write_path=write_path, observer=observer, depths=depths, changes=changes, config=config)
        self.awaited = awaited = Awaited(pool=pool, wake=scheduler, changes=changes)
        least = write_path.extractor.concurrency  # a round's fewest operations: as many as run at once
        self._rounds = rounds = Rounds(awaited=awaited, batch=config.batch, least=least, seams=seams)
        self._workers = Workers(
            pool=pool,
            scheduler=scheduler,
            commit=commit,
            rounds=rounds,
            recovery=recovery,
            retention=retention,
            depths=depths,
            changes=changes,
            config=config,
            sync_each_enqueue=sync_each_enqueue,
            forget_tenant=self.forget_tenant,
            hold_file=seams.hold_workers_file,
            sweep=sweep,
        )
        barriers = Barriers(pool=pool, states=states, wake=scheduler, changes=changes)
        events = Events(pool=pool, limits=limits, retention_seconds=retention.seconds)
        # What the callers call, each the very method of the part whose job it is.
        self.enqueue, self.set_enabled, self._states = queue.enqueue, states.set_enabled, states
        self.flush, self.disable, self.gave_up = barriers.flush, barriers.disable, barriers.gave_up
        self.flush_barrier, self.disable_barrier = barriers.flush_barrier, barriers.disable_barrier
        self.remaining, self.flush_outcome = barriers.remaining, barriers.flush_outcome
        self.get_event, self.list_events, self.transitions = events.get_event, events.list_events, events.transitions
        self.settle, self.naming_sweep, self.commit = awaited.settle, recovery.naming_sweep, commit

    def status(self, tenant: str) -> HotPathState:
        """The tenant's Status: its flag and figures, and the open writes reads wait for."""
        return dataclasses.replace(self._states.status(tenant), awaited=self.awaited.open_count(tenant))

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

    @property
    def waits_ended(self) -> bool:
        return self.changes.waits_ended

    def end_waits(self) -> None:
        """Make the calls still waiting for the hot path (Flush, Disable, a read given a token)
        answer UNAVAILABLE / SHUTTING_DOWN: a shutdown's grace period is over, and a call the
        server stops is cut without a status (HTTP: a 500)."""
        self.changes.end_waits()

    def forget_tenant(self, tenant: str) -> None:
        """Drop what the hot path knows of a tenant whose files were erased or moved away (a
        move's tombstone): its recovery-index entries, its pending wake-ups, its figures."""
        self._recovery.remove(tenant)
        self._scheduler.forget(tenant)
        self.forget_figures(tenant)
        self.changes.notify(tenant)  # a watch of it reads again now, and ends (transport/waits.py)

    def forget_figures(self, tenant: str) -> None:
        """Drop the figures kept here of a tenant whose files were replaced (they are the old
        files'); its recovery-index entries stay."""
        self._depths.forget(tenant)
        self._recovery.forget_idle(tenant)
        self._workers.forget(tenant)
        self._retention.forget(tenant)
        self._rounds.forget(tenant)

    def resume(self, tenant: str) -> None:
        """Take the tenant's open operations up, if it has any (a tenant just put in place)."""
        self._scheduler.notify(tenant)

    def queue_depth(self) -> tuple[int, float]:
        return self._depths.total()

    def depth_of(self, tenant: str) -> tuple[int, float]:
        """The tenant's open fast writes and the oldest's age in seconds, as last counted."""
        return self._depths.of(tenant)
