"""Admission: which calls run, when and on which thread — the one module every surface calls (the
gRPC edge, the HTTP routes, the mem0 endpoints).

The server answers on one asyncio event loop. A call that waits (a Flush, a stream between its
events) waits there and holds no thread; the engine's blocking work (SQLite, numpy) runs on one of
two fixed sets of threads, and only through ``run``, which shares them fairly:

* **reader threads** (``reader_threads``, 2) run the short reads servicers mark ``@reading``
  (Recall, GetMemory, ListMemories...): CPU-bound work in the interpreter, for which more threads
  than cores add only contention for the GIL (at 16 callers on 2 cores, 16 threads running recalls
  cost ~30% more CPU per call than one); a tenant's reads occupy at most ``reader_share`` of them;
* **worker threads** (``worker_threads``, 16) run everything else (writes that wait for the disk,
  batches, exports, backups); a tenant's calls occupy at most ``calls_per_tenant`` of them. A slow
  call therefore never holds a reader thread, and a flood of reads never holds a worker.

A short read of one snapshot, which never waits for a lock another thread holds across a commit
(servicers mark it ``@snapshot_read``: Recall, GetMemory, ListMemories...), runs on the event loop
itself when it is alone — no other call admitted (open streams and waiting calls aside: they wait
on the loop), no thread of either set busy, nothing queued — and its tenant's such reads lately
took at most ``INLINE_READ_SECONDS`` of CPU. The hand-off to a reader thread and back (thread
wake-ups and GIL hand-offs: ~0.3 ms of a 10k-memory recall's ~2.3 ms end to end here, and as much
CPU) is then skipped. A call arriving meanwhile waits for the loop at most that long; under any
concurrency the reads take the threads and their turns, as above (running them all on the loop,
in the same turns, was measured: no more calls per second at 16 callers and a worse tail,
docs/decisions.md#serving-model).

On either set, a tenant's further calls queue in arrival order, and when a thread frees up the
tenants with queued calls take turns (round robin), so a flood from one tenant is served at its
share while another tenant's call goes in at the next free thread. Beyond that:

* a tenant may queue ``queued_calls_per_tenant`` calls and the server ``queued_calls`` (on both
  sets together); past either, the call is refused at once with RESOURCE_EXHAUSTED, a reason
  naming the limit, and a retry delay (``google.rpc.RetryInfo``) that the Python and Node clients
  honour;
* open server streams (``stream``), calls waiting for the hot path (``waiting``: Flush,
  Disable) and open MCP sessions (``hold_session``) are counted per tenant and in total, with the
  same kind of refusal.

Shutdown closes admission first: new calls get UNAVAILABLE with reason SHUTTING_DOWN (safe to
retry elsewhere or after the restart, and the call certainly did nothing), in-flight ones finish,
and ``close_and_wait`` returns once none is left and none has arrived for a short quiet period.

Everything here runs on the event loop's thread (no locks), except the jobs themselves and the
gauges' reads (single integer reads).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

from mnemosyne.engine.options import check_bounds, option
from mnemosyne.errors import InvalidArgument, ResourceExhausted, Unavailable
from mnemosyne.runtime import background, read_priority

T = TypeVar("T")
log = logging.getLogger("mnemosyne.admission")


# The largest value of a limit: threads are made up front (each with its stack), so a number far
# past any machine's would only stall the start; a count (calls, streams, sessions, seconds) past
# a million is a typo, not a setting.
MOST_THREADS = 1_024
MOST_COUNTED = 1_000_000


def _threads(default: int, help: str) -> int:
    return option(default, help, minimum=1, maximum=MOST_THREADS)


def _counted(default: int, help: str) -> int:
    return option(default, help, minimum=1, maximum=MOST_COUNTED)


@dataclass(frozen=True)
class AdmissionLimits:
    """What a tenant, and the server, may hold at once. Each is a ``serve`` flag (the field name
    with dashes) and ``MNEMOSYNE_`` variable; all are logged at start."""

    worker_threads: int = _threads(16, "threads running the engine's blocking work, shared by every tenant")
    calls_per_tenant: int = _counted(
        8, "of the worker threads, how many one tenant's calls may occupy at once (its fair share)"
    )
    reader_threads: int = _threads(
        2, "threads running the short reads (Recall, GetMemory, ListMemories...), shared by every tenant"
    )
    reader_share: int = _counted(
        1, "of the reader threads, how many one tenant's reads may occupy at once (at most --reader-threads)"
    )
    queued_calls_per_tenant: int = _counted(
        64, "calls of one tenant waiting for a thread (of either set); past it RESOURCE_EXHAUSTED"
    )
    queued_calls: int = _counted(1024, "calls of every tenant waiting for a thread; past it RESOURCE_EXHAUSTED")
    streams_per_tenant: int = _counted(100, "open server streams (WatchEvents, AggregateStats) of one tenant")
    streams: int = _counted(10_000, "open server streams of every tenant")
    waiting_calls_per_tenant: int = _counted(16, "Flush and Disable calls of one tenant waiting for its queue")
    waiting_calls: int = _counted(4_096, "Flush and Disable calls of every tenant waiting")
    mcp_sessions_per_tenant: int = _counted(100, "open MCP sessions (over HTTP, at /mcp) of one tenant")
    mcp_sessions: int = _counted(10_000, "open MCP sessions of every tenant")
    mcp_session_idle_seconds: int = _counted(1_800, "an MCP session with no request in flight for this long ends")

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.reader_share > self.reader_threads:
            raise InvalidArgument("--reader-share must be at most --reader-threads", reason="CONFIG_INVALID")


# A lone snapshot read runs on the event loop when its tenant's such reads lately took at most this
# much CPU (about the longest a call arriving meanwhile waits for the loop); estimates kept, most
# recent first.
INLINE_READ_SECONDS = 0.004
READ_COSTS_KEPT = 4096

# Suggested waits before retrying a refused call: a queue drains in milliseconds, a stream or a
# waiting call frees its place when another ends.
QUEUE_RETRY_SECONDS = 0.25
HOLD_RETRY_SECONDS = 1.0


def _refusal(what: str, flag: str, limit: int, retry: float) -> ResourceExhausted:
    return ResourceExhausted(
        f"{what} ({limit}, --{flag}); retry after {retry:g}s, or raise the limit",
        reason=flag.upper().replace("-", "_") + "_REACHED",
        metadata={"limit": flag, "value": str(limit)},
        retry_after_seconds=retry,
    )


class WorkerPool:
    """A fixed set of threads started up front (their number never changes with the load)."""

    def __init__(self, threads: int, name: str, *, runs_reads: bool = False) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._runs_reads = runs_reads
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True) for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        background.request_thread()
        if self._runs_reads:
            read_priority.never_give_way()
        while (job := self._jobs.get()) is not None:
            job()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=10)


class Lane(enum.Enum):
    """Which set of threads a call's blocking work runs on (the module's docstring). A snapshot
    read asks for the LOOP: it runs there when alone and quick, else on the READERS."""

    WORKERS = 0
    READERS = 1
    LOOP = 2

    @property
    def thread_name(self) -> str:
        return "worker" if self is Lane.WORKERS else "reader"


class _Places:
    """A tenant's calls on one lane: running, and waiting in arrival order."""

    __slots__ = ("running", "queue")

    def __init__(self) -> None:
        self.running = 0
        self.queue: collections.deque[asyncio.Future[None]] = collections.deque()


class _Tenant:
    __slots__ = ("lanes", "queued", "streams", "waiting", "sessions")

    def __init__(self) -> None:
        self.lanes = (_Places(), _Places())  # indexed by Lane.value
        self.queued = 0  # on both lanes
        self.streams = 0
        self.waiting = 0
        self.sessions = 0

    @property
    def idle(self) -> bool:
        busy = any(places.running or places.queue for places in self.lanes)
        return not (busy or self.streams or self.waiting or self.sessions)


class _LaneThreads:
    """One lane's threads, how many of them one tenant may occupy, and whose turn it is."""

    def __init__(self, lane: Lane, threads: int, share: int) -> None:
        self.lane = lane
        self.threads = threads
        self.share = share
        self.pool = WorkerPool(threads, lane.thread_name, runs_reads=lane is Lane.READERS)
        self.running = 0
        self.turns: collections.deque[str] = collections.deque()  # tenants with queued calls, in turn


class _Held(NamedTuple):
    """What a tenant holds while it lasts (not a thread): its counters (the tenant's, the
    server's), its limits' flags (per tenant, in total) and what it is called in a refusal."""

    counters: tuple[str, str]
    per_tenant: str
    total: str
    what: str


_STREAMS = _Held(("streams", "open_streams"), "streams-per-tenant", "streams", "open streams")
_WAITING = _Held(
    ("waiting", "waiting_calls"), "waiting-calls-per-tenant", "waiting-calls", "calls waiting for the hot path"
)
_SESSIONS = _Held(("sessions", "mcp_sessions"), "mcp-sessions-per-tenant", "mcp-sessions", "open MCP sessions")


class Admission:
    def __init__(
        self, limits: AdmissionLimits | None = None, *, park_tenant: str = "", park_file: Path | None = None
    ) -> None:
        """``park_tenant``/``park_file``: a test seam; the jobs of that tenant wait on their
        thread while the file exists (so they provably occupy it)."""
        self.limits = limits = limits or AdmissionLimits()
        self._lanes = (
            _LaneThreads(Lane.WORKERS, limits.worker_threads, limits.calls_per_tenant),
            _LaneThreads(Lane.READERS, limits.reader_threads, limits.reader_share),
        )
        self._tenants: dict[str, _Tenant] = {}
        self.queued = self.open_streams = self.waiting_calls = self.mcp_sessions = 0  # read by the gauges
        self.refusals: collections.Counter[str] = collections.Counter()
        self._open = True
        self._active = 0
        self._last_arrival = 0.0
        self._park = (park_tenant, park_file) if park_tenant and park_file else None
        # What calls await here (a turn at a thread, a job's answer): ``end_calls`` answers them.
        self._awaited: set[asyncio.Future[Any]] = set()
        # Calls' tasks in a block that waits on neither (a forwarded hop, a stream's write): ``end_calls``
        # cancels them, and the block answers SHUTTING_DOWN; ``_cut_tasks``: those it cancelled.
        self._cuttable: set[asyncio.Task[Any]] = set()
        self._cut_tasks: set[asyncio.Task[Any]] = set()
        self._calls_ended = False
        # Snapshot reads answered, by where they ran ("event_loop", "reader_thread"): a metric.
        self.reads: collections.Counter[str] = collections.Counter()
        # (tenant, read) -> the CPU such reads take lately (seconds; rises at once, falls slowly),
        # by recency: one not seen lately starts again on a reader thread.
        self._read_costs: dict[tuple[str, str], float] = {}

    @property
    def running(self) -> int:
        """Worker threads running a call now (a gauge)."""
        return self._lanes[Lane.WORKERS.value].running

    @property
    def reading(self) -> int:
        """Reader threads running a call now (a gauge)."""
        return self._lanes[Lane.READERS.value].running

    def describe(self) -> str:
        return ", ".join(
            f"{spec.name.replace('_', '-')}={getattr(self.limits, spec.name)}" for spec in fields(self.limits)
        )

    # -- the shutdown gate: every call enters and leaves ----------------------------------------

    def enter(self) -> None:
        """Admit a call (pair with ``leave``), or raise Unavailable when shutting down."""
        self._last_arrival = time.monotonic()
        if not self._open:
            raise _shutting_down("the server is shutting down; retry (the call was not executed)")
        self._active += 1

    def leave(self) -> None:
        self._active -= 1

    async def close_and_wait(self, timeout: float, quiet: float = 0.25) -> bool:
        """Refuse new calls; wait up to ``timeout`` s until no admitted call is left and none has
        arrived for ``quiet`` s. True when that happened within the timeout."""
        self._open = False
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if not self._active and now - self._last_arrival >= quiet:
                return True
            if now >= deadline:
                return False
            await asyncio.sleep(min(0.02, deadline - now))

    def end_calls(self) -> None:
        """A shutdown's grace period is over: every call still waiting for a thread or for its
        job's answer, and any that asks for one from now on, answers UNAVAILABLE / SHUTTING_DOWN
        at once (a job already running finishes on its thread unseen). Else the server's stop
        would cut it without a status (HTTP: a bare 500, gRPC: UNAVAILABLE with no reason)."""
        self._calls_ended = True
        for future in self._awaited:
            if not future.done():
                future.set_exception(_cut())
        self._awaited.clear()
        for task in self._cuttable:
            self._cut_tasks.add(task)
            task.cancel()

    @contextmanager
    def cut_when_calls_end(self) -> Iterator[None]:
        """The block (a forwarded hop, a server stream: what waits on another member or on its
        client, not here) raises UNAVAILABLE / SHUTTING_DOWN when ``end_calls`` comes first: the
        client of a stream learns it is incomplete, rather than seeing it cut with no reason."""
        task = asyncio.current_task()
        if task is None or task in self._cuttable:  # an outer block of the call's task answers
            yield
            return
        if self._calls_ended:
            raise _cut()
        self._cuttable.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if task not in self._cut_tasks:
                raise
            task.uncancel()
            raise _cut() from None
        finally:
            self._cuttable.discard(task)
            self._cut_tasks.discard(task)

    def stop(self) -> None:
        """Stop the threads (after the server stopped)."""
        for lane in self._lanes:
            lane.pool.stop()

    # -- blocking work, shared fairly ---------------------------------------------------------

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
        return state

    def _forget_if_idle(self, tenant: str, state: _Tenant) -> None:
        if state.idle:
            self._tenants.pop(tenant, None)

    async def run(
        self, tenant: str, work: Callable[..., T], *args: Any, admitted: bool = False, lane: Lane = Lane.WORKERS
    ) -> T:
        """``work(*args)`` on a thread of ``lane`` once the tenant's turn comes; its result or its
        exception. A caller cancelled meanwhile (its client went away) stops waiting at once;
        work already running finishes on its thread and only then frees its place.

        ``admitted``: the step of a call already counted as a stream or a waiting call (bounded
        by those limits): it waits its turn like any call, but is never refused for a full queue.

        A read (``Lane.READERS`` or ``Lane.LOOP``) is counted as running from here to its answer:
        long writes give way to it meanwhile (read_priority)."""
        if lane is Lane.WORKERS:
            return await self._run(tenant, work, args, admitted, lane)
        with read_priority.read_running():
            return await self._run(tenant, work, args, admitted, lane)

    async def _run(self, tenant: str, work: Callable[..., T], args: tuple[Any, ...], admitted: bool, lane: Lane) -> T:
        read = (tenant, getattr(work, "__qualname__", "")) if lane is Lane.LOOP else None
        if read is not None:
            if not admitted and self._alone(tenant, read):
                self.reads["event_loop"] += 1
                started = time.thread_time()
                try:
                    return work(*args)
                finally:
                    self._note_read_cost(read, time.thread_time() - started)
            lane = Lane.READERS
        if self._calls_ended:
            raise _cut()
        loop = asyncio.get_running_loop()
        state = self._tenant(tenant)
        threads = self._lanes[lane.value]
        await self._take_place(tenant, state, threads, loop, admitted)
        answer: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()  # the call's request id reaches the engine's logs
        park = self._park if self._park and self._park[0] == tenant else None
        took = 0.0

        def finish(ok: bool, value: Any) -> None:
            self._give_back(tenant, state, threads)
            if read is not None:
                self.reads["reader_thread"] += 1
                self._note_read_cost(read, took)
            if not answer.done():  # neither cancelled (its caller left) nor cut (end_calls)
                if ok:
                    answer.set_result(value)
                else:
                    answer.set_exception(value)

        def job() -> None:
            nonlocal took
            while park is not None and park[1].exists():
                time.sleep(0.02)
            value: Any
            started = time.thread_time()
            try:
                value, ok = context.run(work, *args), True
            except BaseException as exc:  # handed to the caller, whatever it is
                value, ok = exc, False
            took = time.thread_time() - started
            loop.call_soon_threadsafe(finish, ok, value)

        threads.pool.submit(job)
        return await self._awaiting(answer)

    async def _awaiting(self, future: asyncio.Future[T]) -> T:
        """``future``'s result, or SHUTTING_DOWN should ``end_calls`` come first."""
        self._awaited.add(future)
        try:
            return await future
        finally:
            self._awaited.discard(future)

    def _alone(self, tenant: str, read: tuple[str, str]) -> bool:
        """Whether a snapshot read may run on the event loop now: no other call is admitted (but
        open streams and waiting calls, which wait on the loop), no thread of either set is busy,
        nothing is queued, such reads of the tenant lately took at most INLINE_READ_SECONDS of CPU
        (one not measured yet runs on a reader thread first), and no test seam parks the tenant."""
        return (
            self._active - self.open_streams - self.waiting_calls == 1
            and not self.queued
            and not any(threads.running for threads in self._lanes)
            and self._read_costs.get(read, INLINE_READ_SECONDS + 1) <= INLINE_READ_SECONDS
            and (self._park is None or self._park[0] != tenant)
        )

    def _note_read_cost(self, read: tuple[str, str], seconds: float) -> None:
        costs = self._read_costs
        previous = costs.pop(read, seconds)
        costs[read] = max(seconds, 0.75 * previous + 0.25 * seconds)
        if len(costs) > READ_COSTS_KEPT:
            del costs[next(iter(costs))]  # the one not seen the longest

    async def _take_place(
        self, tenant: str, state: _Tenant, threads: _LaneThreads, loop: asyncio.AbstractEventLoop, admitted: bool
    ) -> None:
        limits = self.limits
        places = state.lanes[threads.lane.value]
        if not places.queue and places.running < threads.share and threads.running < threads.threads:
            places.running += 1
            threads.running += 1
            return
        if not admitted and state.queued >= limits.queued_calls_per_tenant:
            self._refuse(
                tenant,
                state,
                _refusal(
                    "this tenant has as many calls waiting for a thread as it may",
                    "queued-calls-per-tenant",
                    limits.queued_calls_per_tenant,
                    QUEUE_RETRY_SECONDS,
                ),
            )
        if not admitted and self.queued >= limits.queued_calls:
            self._refuse(
                tenant,
                state,
                _refusal(
                    "the server has as many calls waiting for a thread as it may",
                    "queued-calls",
                    limits.queued_calls,
                    QUEUE_RETRY_SECONDS,
                ),
            )
        turn: asyncio.Future[None] = loop.create_future()
        places.queue.append(turn)
        state.queued += 1
        self.queued += 1
        if tenant not in threads.turns:  # a few tenants at most wait at a time: a short scan
            threads.turns.append(tenant)
        try:
            await self._awaiting(turn)  # _dispatch counted the place for us when it set the result
        except BaseException:  # cancelled (the caller left) or cut (end_calls)
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self._give_back(tenant, state, threads)  # the place was given just as we were cancelled
            elif turn in places.queue:  # (else _dispatch already dropped it)
                places.queue.remove(turn)
                state.queued -= 1
                self.queued -= 1
                self._forget_if_idle(tenant, state)
            raise

    def _give_back(self, tenant: str, state: _Tenant, threads: _LaneThreads) -> None:
        state.lanes[threads.lane.value].running -= 1
        threads.running -= 1
        self._dispatch(threads)
        self._forget_if_idle(tenant, state)

    def _dispatch(self, threads: _LaneThreads) -> None:
        """Give the lane's free places to queued calls, one tenant at a time in turn."""
        skipped = 0
        turns = threads.turns
        while turns and threads.running < threads.threads and skipped < len(turns):
            tenant = turns.popleft()
            state = self._tenants.get(tenant)
            if state is None or not state.lanes[threads.lane.value].queue:
                continue
            places = state.lanes[threads.lane.value]
            if places.running >= threads.share:
                turns.append(tenant)  # at its share: the next tenant's turn
                skipped += 1
                continue
            skipped = 0
            turn = places.queue.popleft()
            state.queued -= 1
            self.queued -= 1
            if turn.done():  # its caller was cancelled or cut and has not run yet: no place for it
                turns.appendleft(tenant)
                continue
            places.running += 1
            threads.running += 1
            turn.set_result(None)
            if places.queue:
                turns.append(tenant)

    def _refuse(self, tenant: str, state: _Tenant, error: ResourceExhausted) -> NoReturn:
        self.refusals[error.reason] += 1
        self._forget_if_idle(tenant, state)
        raise error

    # -- calls that hold a place while they wait ------------------------------------------------

    def stream(self, tenant: str) -> AbstractContextManager[None]:
        """An open server stream of the tenant, for as long as the block lasts."""
        return self._hold(tenant, _STREAMS)

    def waiting(self, tenant: str) -> AbstractContextManager[None]:
        """A call of the tenant waiting for its hot path (Flush, Disable), while the block lasts."""
        return self._hold(tenant, _WAITING)

    def hold_session(self, tenant: str) -> None:
        """Count one more open MCP session of the tenant (pair with ``release_session`` when it
        ends), or refuse it: a session outlives any one call (transport/http/mcp.py)."""
        self._take(tenant, _SESSIONS)

    def release_session(self, tenant: str) -> None:
        self._give(tenant, _SESSIONS)

    @contextmanager
    def _hold(self, tenant: str, held: _Held) -> Iterator[None]:
        """Count one more of ``held`` while the block lasts."""
        self._take(tenant, held)
        try:
            yield
        finally:
            self._give(tenant, held)

    def _take(self, tenant: str, held: _Held) -> None:
        """Count one more of ``held`` (the tenant's and the server's), or refuse at either limit."""
        mine, everyone = held.counters
        state = self._tenant(tenant)
        for whose, count, flag in (
            ("this tenant", getattr(state, mine), held.per_tenant),
            ("the server", getattr(self, everyone), held.total),
        ):
            limit = getattr(self.limits, flag.replace("-", "_"))
            if count >= limit:
                refusal = _refusal(f"{whose} has as many {held.what} as it may", flag, limit, HOLD_RETRY_SECONDS)
                self._refuse(tenant, state, refusal)
        setattr(state, mine, getattr(state, mine) + 1)
        setattr(self, everyone, getattr(self, everyone) + 1)

    def _give(self, tenant: str, held: _Held) -> None:
        mine, everyone = held.counters
        state = self._tenant(tenant)
        setattr(state, mine, getattr(state, mine) - 1)
        setattr(self, everyone, getattr(self, everyone) - 1)
        self._forget_if_idle(tenant, state)


def _cut() -> Unavailable:
    return _shutting_down(
        "the server is shutting down and its grace period ended before this call finished (it may still "
        "take effect); call again once it is back"
    )


def _shutting_down(message: str) -> Unavailable:
    # A restart follows a shutdown within seconds: the client waits a second and calls again.
    return Unavailable(message, reason="SHUTTING_DOWN", retry_after_seconds=1.0)
