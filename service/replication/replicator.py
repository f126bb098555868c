"""The replication of one member's tenants (docs/replication.md): the store's ``Replicas``
(store/replicas.py) on Litestream's control socket.

Only the **active set** is in Litestream: a tenant is registered at its first commit not yet in
object storage, synced about every ``TICK_SECONDS`` while it has such commits, and unregistered
once a sync confirmed them all and it was idle for ``idle_seconds`` (bounded: ``active_limit``).
A sync is **shared**: every caller that joined before it started is answered by it; it runs on
this module's own event loop and thread, awaited holding no thread (``replicated``) or blocked on
by a store thread (``swapping``). Files replicate under ``PREFIX/<tenant>/<generation>/``
(replication/generations.py: a file behind the bucket's highest is a stale copy, never replicated).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from mnemosyne.errors import FailedPrecondition, ResourceExhausted, Unavailable
from mnemosyne.replication import restore
from mnemosyne.replication.bucket import UNREACHABLE, Bucket, ForgottenMemory
from mnemosyne.replication.control import SYNC_TIMEOUT_SECONDS, ControlError
from mnemosyne.replication.forgotten_outbox import ForgottenOutbox
from mnemosyne.replication.generations import STALE, Generations
from mnemosyne.replication.litestream import Litestream
from mnemosyne.replication.sweeps import Sweeps
from mnemosyne.replication.tenant_state import ActiveTenant, Figures
from mnemosyne.replication.url import DATABASE_REPLICA, INBOX_REPLICA, ReplicaUrl
from mnemosyne.runtime.seams import Seams
from mnemosyne.store import data_dir as layout  # its file names and suffixes

log = logging.getLogger("mnemosyne.replication")

T = TypeVar("T")
TICK_SECONDS = 1.0  # how often the tenants with unreplicated commits are synced
SYNCS_AT_ONCE = 16  # control calls in flight at once (each mostly waits for object storage)
CALL_SECONDS = 120.0  # the longest a thread of the store waits for the loop (a swap: an erasure's deletions)
SWAP_WAIT_SECONDS = 5  # the longest a swap waits for a sync under way, and for its own last sync
# Litestream's /sync failing at its local stage (the WAL into its local LTX files, no object storage
# involved: its db.go ``SyncAndWait``): its local state no longer matches the file (a file of it
# gone), and every later sync fails the same until it starts over.
LOCAL_SYNC_FAILED = "db sync:"
RETRY_SECONDS, RETRY_MAX_SECONDS = 0.2, 2.0  # a caller's wait tries a failed sync again after these, doubling


class Replicator:
    """A member's replication. ``start`` it; ``stop`` it after the pool closed."""

    def __init__(
        self,
        url: str,
        data_dir: Path,
        *,
        idle_seconds: float,
        active_limit: int,
        retention_seconds: float,
        seams: Seams,
    ) -> None:
        """``seams``: a test's (runtime/seams.py); production's hold none."""
        self.url = ReplicaUrl.parse(url)
        self._hold_database_file = seams.hold_replica_database_file
        self._call_seconds = seams.replica_call_seconds or CALL_SECONDS
        self.bucket = Bucket(self.url)
        self._tenants_dir = data_dir / layout.TENANTS_DIR_NAME
        self._inbox_dir = data_dir / layout.INBOX_DIR_NAME
        self._idle_seconds = idle_seconds
        self._limit = max(1, active_limit)
        self._retention_seconds = retention_seconds
        self._states: dict[str, ActiveTenant] = {}
        self._refused: dict[str, FailedPrecondition] = {}  # the stale copies' refusals, once out of the set
        self._listed: set[str] | None = None  # the bucket's tenants at start (``holds``)
        self._current: set[str] = set()  # tenants whose file here is the newest copy (``newer_than``)
        self._sweeps = Sweeps(data_dir, self.bucket, retention_seconds)
        self._generations = Generations(self.bucket, self._sweeps)
        self.outbox = ForgottenOutbox(data_dir, self.bucket)
        self._guard = threading.Lock()  # of ``_states`` and what each holds, for the store's threads
        self._sync_failures = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="replication", daemon=True)
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start Litestream and the tick; the tenants Litestream replicated when this member
        last stopped (their local state is still here) are taken up again."""
        self._thread.start()
        self._call(self._begin())
        try:
            self._listed = set(self.bucket.tenants())
        except Unavailable as exc:
            log.warning("the tenants object storage holds are not known yet: %s", exc.message)
        now = time.time()
        for directory in (self._tenants_dir, self._inbox_dir):
            for state_dir in directory.glob(f".*{layout.LOCAL_STATE_SUFFIX}"):
                tenant = self._tenant_of(state_dir.name[1 : -len(layout.LOCAL_STATE_SUFFIX)])
                if tenant is not None:
                    self._mark_written(tenant, now)

    async def _begin(self) -> None:
        self._wake = asyncio.Event()
        self._calls = asyncio.Semaphore(SYNCS_AT_ONCE)
        self.litestream = Litestream(on_start=self._litestream_started, retention_seconds=self._retention_seconds)
        self._tasks = [asyncio.create_task(self.litestream.run()), asyncio.create_task(self._tick())]
        try:
            async with asyncio.timeout(15):
                await self.litestream.ready.wait()
        except TimeoutError:
            log.error("Litestream is not ready; replication waits for it (its log says why)")

    def stop(self) -> None:
        """Stop the tick and Litestream (its last syncs), then the loop. Idempotent."""
        if not self._thread.is_alive():
            return
        self._call(self._end())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _end(self) -> None:
        for task in self._tasks[1:]:
            task.cancel()
        await self.litestream.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _litestream_started(self) -> None:
        """A (re)started Litestream replicates nothing: every tenant it had is registered again
        at its next tick, and catches up from its local state."""
        now = time.time()
        with self._guard:
            for state in self._states.values():
                state.registered.clear()
                state.dirty_since = state.dirty_since or now
        self._wake.set()

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` run on the loop for a thread of the store: cancelled on the loop if it takes
        longer than ``CALL_SECONDS``, so its own cleanup runs (a swap's ``_leave`` undoes its
        pause: a swap given up never leaves its tenant unreplicated) and the caller gets
        UNAVAILABLE; never left running unseen."""
        return asyncio.run_coroutine_threadsafe(self._within(work), self._loop).result()

    async def _within(self, work: Coroutine[Any, Any, T]) -> T:
        try:
            async with asyncio.timeout(self._call_seconds):
                return await work
        except TimeoutError:
            raise Unavailable(
                f"object storage did not answer within {self._call_seconds:.0f} s; retry once it answers",
                reason=UNREACHABLE,
                retry_after_seconds=1.0,
            ) from None

    # -- the store's hooks (store/replicas.py) -------------------------------------------------------

    def written(self, tenant: str) -> None:
        if self._mark_written(tenant, time.time()):
            self._loop.call_soon_threadsafe(self._wake.set)

    def _mark_written(self, tenant: str, now: float) -> bool:
        """Note a commit; True when the tenant is to be registered (it was not in the set)."""
        with self._guard:
            state = self._states.get(tenant)
            if state is None:  # a stale copy that left the set comes back refused the same way
                state = self._states[tenant] = ActiveTenant(refused=self._refused.pop(tenant, None))
            state.last_write = now
            if state.dirty_since is None:
                state.dirty_since = now
                return not state.registered
            return False

    def replicating(self, tenant: str) -> bool:
        """In the active set from the commit that marks it (``written``, inside that commit: before
        the store asks for a checkpoint) until it is retired; a refused stale copy never is."""
        with self._guard:
            state = self._states.get(tenant)
            return state is not None and state.refused is None

    def admit_write(self, tenant: str) -> None:
        with self._guard:
            if tenant in self._states or len(self._states) < self._limit:
                return
        raise ResourceExhausted(
            f"this member replicates {self._limit} tenants with recent writes, the most it takes "
            "(--replica-active-limit); retry once one of them is idle",
            reason="REPLICATION_FULL",
            retry_after_seconds=max(1.0, self._idle_seconds / 2),
        )

    def holds(self, tenant: str) -> bool:
        """From the listing of the bucket's tenants made at start (made again here while it could
        not be); a tenant created elsewhere since is found by ``fetch`` at its first write."""
        with self._guard:
            listed = self._listed
        if listed is None:
            try:
                listed = set(self.bucket.tenants())
            except Unavailable:
                return True  # unknown: ``fetch`` asks, and says why it cannot
            with self._guard:
                self._listed = listed
        return tenant in listed

    def holder(self, tenant: str) -> str | None:
        return self.bucket.holder(tenant) if self.holds(tenant) else None

    def floor(self, tenant: str, *, new: bool) -> int | None:
        if new:  # the pool found none held: this process's new file is the newest copy
            self._mark_current(tenant)
            return 0
        try:
            return self.bucket.newest_held(tenant)
        except Unavailable as exc:
            log.warning("tenant %s: installed without a floor (its copies not judged): %s", tenant, exc.message)
            return None

    def newer_than(self, tenant: str, generation: int) -> tuple[int, str] | None:
        if tenant in self._current:  # asked at every cold open: no lock (changed only under it)
            return None
        try:
            newer = self.bucket.newer_than(tenant, generation)
        except Unavailable as exc:
            log.warning("tenant %s: whether its file is the newest copy is not known: %s", tenant, exc.message)
            return None
        if newer is None:
            self._mark_current(tenant)
        return newer

    def _mark_current(self, tenant: str) -> None:
        """Remember (a bound) while this process runs that the tenant's file here is the newest."""
        with self._guard:
            if len(self._current) < 65_536:
                self._current.add(tenant)

    def fetch(
        self, tenant: str, into: Path, judge: Callable[[Path], bool] | None = None
    ) -> tuple[Path, Path | None] | None:
        self.admit_write(tenant)
        fetched = restore.fetch(self.bucket, tenant, into, judge=judge)
        return None if fetched is None else (fetched.database, fetched.inbox)

    def forgotten(self, tenant: str, memories: Callable[[], list[ForgottenMemory]], *, quick: bool = True) -> None:
        self.outbox.send(tenant, memories(), quick=quick)

    def replicated_since(self, tenant: str) -> float:
        with self._guard:
            state = self._states.get(tenant)
            return time.time() if state is None or state.dirty_since is None else state.dirty_since

    @contextmanager
    def swapping(self, tenant: str, *, fresh: bool, gone: bool = False) -> Iterator[None]:
        self._call(self._leave(tenant, gone=gone))
        try:
            yield
        finally:
            self._call(self._come_back(tenant, fresh=fresh, gone=gone))

    async def _leave(self, tenant: str, *, gone: bool) -> None:
        """Before a swap: what the tenant committed confirmed (a best effort), its files out of
        Litestream, their local state gone; ``gone``: its replicas deleted (UNAVAILABLE, the
        tenant left as it was, when object storage cannot be reached)."""
        with self._guard:
            state = self._states.setdefault(tenant, ActiveTenant())
            state.paused += 1
            state.swaps += 1
        deleting = False
        try:
            # A sync begun before: its registration (a generation chosen, the old file registered)
            # ends before the files change; one object storage holds up longer is dropped when it
            # answers (``_register``).
            waited_until = time.monotonic() + SWAP_WAIT_SECONDS
            while state.in_flight and time.monotonic() < waited_until:
                await asyncio.sleep(0.02)
            if state.registered:
                try:
                    await self._sync_files(state, SWAP_WAIT_SECONDS)
                except Exception as exc:  # the swap goes on: it must not wait for object storage
                    log.warning(
                        "tenant %s: its last commits were not confirmed replicated before a swap: %s", tenant, exc
                    )
                await self._unregister(tenant, state)
            if gone:
                deleting = True
                given_up = threading.Event()
                try:
                    await self._loop.run_in_executor(None, self.bucket.delete_tenant, tenant, given_up)
                except asyncio.CancelledError:  # past the store's limit: it stops, recording no erasure
                    given_up.set()
                    raise
                self.outbox.drop(tenant)
        except BaseException:
            # A deletion begun may have taken some of the generation's objects: a whole new one next.
            await self._come_back(tenant, fresh=deleting, gone=False)
            raise

    async def _come_back(self, tenant: str, *, fresh: bool, gone: bool) -> None:
        now = time.time()
        with self._guard:
            state = self._states.setdefault(tenant, ActiveTenant())
            state.paused -= 1
            if fresh:
                state.generation, state.refused, state.fresh = None, None, True
            if fresh or gone:  # a new file, or none: judged again
                self._refused.pop(tenant, None)
            if gone:
                state.dirty_since = None
                if self._listed is not None:
                    self._listed.discard(tenant)
                if not state.paused:
                    del self._states[tenant]
                return
        self._mark_written(tenant, now)
        self._wake.set()

    # -- waiting for object storage -------------------------------------------------------------------

    async def replicated(self, tenant: str) -> float:
        """Wait until every commit of ``tenant`` made before this call is in object storage, on
        the caller's event loop and holding no thread; the time before which its commits are
        all replicated. Concurrent callers share one sync (the module's docstring). A sync that
        Litestream failed (killed and restarting, object storage slow past its wait) is tried
        again until the caller's deadline cancels the wait: never an error of the caller's."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._settled(tenant), self._loop))

    async def _settled(self, tenant: str) -> float:
        delay = RETRY_SECONDS
        while True:
            try:
                began = await self._join(tenant)
                await self._still_newest(tenant)
                return began
            except (ControlError, Unavailable) as exc:
                level = logging.INFO if delay == RETRY_SECONDS else logging.DEBUG  # once a wait
                log.log(
                    level,
                    "tenant %s: a sync a caller waits for (or the look at its generation after it) failed; tried again until "
                    "its deadline: %s",
                    tenant,
                    exc,
                )
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_SECONDS, delay * 2)

    async def _still_newest(self, tenant: str) -> None:
        """At the barrier, its sync confirmed: the tenant's generation must still be the highest,
        or what it confirmed is in one a restore passes over (another server on the prefix started
        one above it). Then the caller is refused, and the file is the stale copy it now is: out
        of Litestream, never registered again, judged again at its next open (``newer_than``)."""
        with self._guard:
            registered = state.generation if (state := self._states.get(tenant)) else None
        if registered is None:  # not replicating under a generation of its own (a move's source)
            return
        database = self._files(tenant)[0][0]
        refusal = await self._loop.run_in_executor(None, self._generations.overtaken, tenant, database, registered)
        if refusal is None:
            return
        log.error("tenant %s: a REPLICATED wait was refused: %s", tenant, refusal.message)
        with self._guard:
            state = self._states.setdefault(tenant, ActiveTenant())
            state.refused = refusal
            state.paused += 1  # no sync registers or syncs it meanwhile
            self._current.discard(tenant)
        try:
            await self._unregister(tenant, state)
        finally:
            with self._guard:
                state.paused -= 1
        raise refusal

    async def _join(self, tenant: str) -> float:
        with self._guard:
            state = self._states.get(tenant)
            if state is None or state.dirty_since is None:
                return time.time()
            if state.next_sync is None:
                state.next_sync = self._loop.create_future()
            joined = state.next_sync  # before a launch: it takes the callers so far off ``next_sync``
            if not state.syncing:
                self._launch(tenant, state)
        return await asyncio.shield(joined)

    def _launch(self, tenant: str, state: ActiveTenant) -> None:
        """Start the sync the tenant's callers joined (``next_sync``); the callers that join from
        now on wait for the one after it."""
        joined, state.next_sync = state.next_sync, None
        assert joined is not None
        task = state.syncing = self._loop.create_task(self._sync(tenant, state))

        def finished(done: asyncio.Task[float]) -> None:
            with self._guard:
                state.syncing = None
                if state.next_sync is not None:
                    self._launch(tenant, state)
            failure = done.exception()
            if failure is not None:
                joined.set_exception(failure)
                joined.exception()  # retrieved: a sync no caller waits for fails quietly (counted, retried)
            else:
                joined.set_result(done.result())

        task.add_done_callback(finished)

    async def _sync(self, tenant: str, state: ActiveTenant) -> float:
        """One sync of the tenant's files; their commits before it began are then replicated."""
        while True:  # a swap pauses it: the files come back (or go) after it
            while state.paused:
                await asyncio.sleep(0.02)
            await self._calls.acquire()
            if not state.paused:  # from here a swap waits for this sync (``_leave``), not for a slot
                break
            self._calls.release()
        began = time.time()
        state.in_flight += 1
        try:
            await self._register(tenant, state)
            held = self._wal_bytes(tenant)
            await self._sync_files(state)
        except Exception as exc:
            self._sync_failures += 1
            if isinstance(exc, ControlError) and exc.status == 500 and LOCAL_SYNC_FAILED in str(exc):
                log.warning(
                    "tenant %s: Litestream cannot turn its file's commits into its local state (%s); taken out of "
                    "Litestream, its local state removed: registered again, it goes on from object storage",
                    tenant,
                    exc,
                )
                await self._unregister(tenant, state)
            raise
        finally:
            state.in_flight -= 1
            self._calls.release()
        with self._guard:
            if state.refused is not None:
                # A new error each time, with the first one's message and metadata (an error raised
                # again would carry every earlier raise's traceback).
                refused = state.refused
                raise FailedPrecondition(refused.message, reason=refused.reason, metadata=refused.metadata)
            state.confirmed_bytes = held
            # Every commit before ``began`` is in object storage now; a later one may not be.
            state.dirty_since = None if state.last_write < began else max(began, state.dirty_since or began)
        return began

    def _database_held(self) -> bool:
        return self._hold_database_file is not None and self._hold_database_file.exists()

    async def _sync_files(self, state: ActiveTenant, timeout: int = SYNC_TIMEOUT_SECONDS) -> None:
        if self._database_held():
            raise ControlError(0, "the tenant databases' replication is held (a test seam)")
        for path in list(state.registered):
            try:
                await self.litestream.control.sync(path, timeout)
            except ControlError as exc:
                if exc.status == 404 and path in state.registered:  # a restarted Litestream: registered again next
                    state.registered.remove(path)
                raise

    # -- the active set -------------------------------------------------------------------------------

    async def _tick(self) -> None:
        """About every ``TICK_SECONDS``, or when a tenant enters the set: sync the tenants with
        unreplicated commits, and let go of those idle since their last one was confirmed."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):
                    await self._wake.wait()
            self._wake.clear()
            if not self.litestream.ready.is_set():
                continue
            now = time.time()
            with self._guard:
                dirty = [t for t, s in self._states.items() if not s.settled and not s.paused]
                idle = [
                    t
                    for t, s in self._states.items()
                    if s.settled and not s.paused and now - s.last_write >= self._idle_seconds
                ]
            await asyncio.gather(*(self._join(t) for t in dirty), return_exceptions=True)
            for tenant in idle:
                await self._retire(tenant)
            if self._sweeps:
                await self._loop.run_in_executor(None, self._sweeps.run, self._confirmed)
            for tenant in self.outbox.waiting():
                await self._loop.run_in_executor(None, functools.partial(self.outbox.send, tenant, [], quick=False))

    async def _retire(self, tenant: str) -> None:
        """An idle tenant whose commits are all replicated leaves the set (and Litestream)."""
        with self._guard:
            state = self._states.get(tenant)
            if state is None or not state.settled or state.paused or state.syncing:
                return
            state.paused += 1
        try:
            await self._unregister(tenant, state)
        finally:
            with self._guard:
                state.paused -= 1
                if state.settled and not state.paused and not state.syncing:
                    if (refused := self._states.pop(tenant).refused) is not None:
                        self._refused[tenant] = refused  # taken up again by its next write

    async def _register(self, tenant: str, state: ActiveTenant) -> None:
        """Register those of the tenant's files Litestream does not replicate yet."""
        files = [(path, name) for path, name in self._files(tenant) if path.exists() and path not in state.registered]
        if self._database_held():
            files = [(path, name) for path, name in files if name != DATABASE_REPLICA]
        if not files or state.refused is not None:
            return
        swaps = state.swaps
        if state.generation is None:
            database = self._files(tenant)[0][0]
            generation = await self._loop.run_in_executor(None, self._generations.choose, tenant, database, state.fresh)
            if state.swaps != swaps:
                return  # a swap began meanwhile: the file it leaves chooses again, at the next sync
            if isinstance(generation, str):
                state.refused = FailedPrecondition(generation, reason=STALE)
                log.error("%s", generation)  # a stale copy never starts a generation, even after a forget
                await self._unregister(tenant, state)  # its local state (of a run before) goes now
            if not isinstance(generation, int):
                return
            state.generation, state.fresh = generation, False
        for path, name in files:
            await self.litestream.control.register(path, self.url.of(tenant, state.generation, name))
            state.registered.append(path)
            if state.swaps != swaps:  # the swap did not wait for this registration: undone now
                await self._unregister(tenant, state)
                return

    def _confirmed(self, tenant: str) -> bool:
        """Whether every commit of the tenant's files is confirmed in object storage."""
        with self._guard:
            return tenant not in self._states or self._states[tenant].dirty_since is None

    async def _unregister(self, tenant: str, state: ActiveTenant) -> None:
        for path in list(state.registered):
            try:
                # Its last sync short: a swap synced first, an idle tenant has nothing left.
                await self.litestream.control.unregister(path, SWAP_WAIT_SECONDS)
            except ControlError as exc:  # a Litestream down has nothing registered
                log.warning("tenant %s: Litestream did not unregister %s: %s", tenant, path.name, exc)
            if path in state.registered:  # a restart of Litestream meanwhile cleared them all
                state.registered.remove(path)
        for path, _name in self._files(tenant):
            shutil.rmtree(layout.local_state(path), ignore_errors=True)

    # -- paths and figures ----------------------------------------------------------------------------

    def _files(self, tenant: str) -> list[tuple[Path, str]]:
        return [
            (self._tenants_dir / f"{tenant}{layout.TENANT_FILE_SUFFIX}", DATABASE_REPLICA),
            (self._inbox_dir / f"{tenant}{layout.INBOX_FILE_SUFFIX}", INBOX_REPLICA),
        ]

    def _tenant_of(self, file_name: str) -> str | None:
        for suffix in (layout.INBOX_FILE_SUFFIX, layout.TENANT_FILE_SUFFIX):
            if file_name.endswith(suffix):
                return file_name[: -len(suffix)]
        return None

    def _wal_bytes(self, tenant: str) -> int:
        total = 0
        for path, _name in self._files(tenant):
            try:
                total += os.stat(f"{path}-wal").st_size
            except FileNotFoundError:
                pass
        return total

    def lag(self, tenant: str) -> tuple[float, int]:
        """How far the tenant's replica is behind: the age of its oldest commit not confirmed in
        object storage (0: none) and the WAL bytes written since the last confirmed sync began."""
        with self._guard:
            state = self._states.get(tenant)
            if state is None or state.dirty_since is None:
                return 0.0, 0
            since, confirmed = state.dirty_since, state.confirmed_bytes
        held = self._wal_bytes(tenant)
        return max(0.0, time.time() - since), held - confirmed if held >= confirmed else held

    def figures(self) -> Figures:
        with self._guard:
            tenants = [t for t, s in self._states.items() if s.dirty_since is not None]
            registered = sum(len(s.registered) for s in self._states.values())
            active = len(self._states)
        lags = [self.lag(t) for t in tenants]
        return Figures(
            lag_seconds=max((seconds for seconds, _ in lags), default=0.0),
            lag_bytes=sum(held for _, held in lags),
            active_tenants=active,
            registered_databases=registered,
            litestream_restarts=self.litestream.restarts,
            sync_failures=self._sync_failures,
        )
