"""Admission: which calls run, when and on which thread — the one module every surface calls (the
gRPC edge; the HTTP routes to come).

The server answers on one asyncio event loop. A call that waits (a Flush, a stream between its
events) waits there and holds no thread; the engine's blocking work (SQLite, numpy) runs on a
fixed pool of worker threads, and only through ``run``, which shares the pool fairly:

* a tenant has at most ``calls_per_tenant`` jobs on the workers at once (its fair share); its
  further calls queue in arrival order, and when a worker frees up the tenants with queued calls
  take turns (round robin), so a flood from one tenant is served at its share while another
  tenant's call goes in at the next free worker;
* a tenant may queue ``queued_per_tenant`` calls and the server ``queued_total``; past either, the
  call is refused at once with RESOURCE_EXHAUSTED, a reason naming the limit, and a retry delay
  (``google.rpc.RetryInfo``) that the Python and Node clients honour;
* open server streams (``stream``) and calls waiting for the hot path (``waiting``: Flush,
  Disable) are counted per tenant and in total, with the same kind of refusal.

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
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from mnemosyne import background
from mnemosyne.errors import InvalidArgument, ResourceExhausted, Unavailable

T = TypeVar("T")
log = logging.getLogger("mnemosyne.admission")


@dataclass(frozen=True)
class AdmissionLimits:
    """What a tenant, and the server, may hold at once. Each is a ``serve`` flag (the field name
    with dashes) and ``MNEMOSYNE_`` variable; all are logged at start."""

    worker_threads: int = 16  # threads running the engine's blocking work, shared by every tenant
    calls_per_tenant: int = 8  # of those, how many one tenant's calls may occupy at once
    queued_calls_per_tenant: int = 64  # one tenant's calls waiting for a worker thread
    queued_calls: int = 1024  # every tenant's together
    streams_per_tenant: int = 100  # open server streams (WatchEvents, AggregateStats) of one tenant
    streams: int = 10_000  # of every tenant
    waiting_calls_per_tenant: int = 16  # Flush and Disable calls of one tenant waiting for its queue
    waiting_calls: int = 4_096  # of every tenant

    def __post_init__(self) -> None:
        for spec in fields(self):
            if getattr(self, spec.name) < 1:
                raise InvalidArgument(f"--{spec.name.replace('_', '-')} must be at least 1", reason="CONFIG_INVALID")


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

    def __init__(self, threads: int) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"worker-{n}", daemon=True) for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        background.request_thread()
        while (job := self._jobs.get()) is not None:
            job()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=10)


class _Tenant:
    __slots__ = ("running", "queue", "streams", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self.streams = 0
        self.waiting = 0

    @property
    def idle(self) -> bool:
        return not (self.running or self.queue or self.streams or self.waiting)


class Admission:
    def __init__(
        self, limits: AdmissionLimits | None = None, *, park_tenant: str = "", park_file: Path | None = None
    ) -> None:
        """``park_tenant``/``park_file``: a test seam; the jobs of that tenant wait on their worker
        thread while the file exists (so they provably occupy the workers)."""
        self.limits = limits or AdmissionLimits()
        self._pool = WorkerPool(self.limits.worker_threads)
        self._tenants: dict[str, _Tenant] = {}
        self._turns: collections.deque[str] = collections.deque()  # tenants with queued calls, in turn
        self.running = self.queued = self.open_streams = self.waiting_calls = 0  # read by the gauges
        self.refusals: collections.Counter[str] = collections.Counter()
        self._open = True
        self._active = 0
        self._last_arrival = 0.0
        self._park = (park_tenant, park_file) if park_tenant and park_file else None

    def describe(self) -> str:
        return ", ".join(
            f"{spec.name.replace('_', '-')}={getattr(self.limits, spec.name)}" for spec in fields(self.limits)
        )

    # -- the shutdown gate: every call enters and leaves ----------------------------------------

    def enter(self) -> None:
        """Admit a call (pair with ``leave``), or raise Unavailable when shutting down."""
        self._last_arrival = time.monotonic()
        if not self._open:
            raise Unavailable("the server is shutting down; retry (the call was not executed)", reason="SHUTTING_DOWN")
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

    def stop(self) -> None:
        """Stop the worker threads (after the server stopped)."""
        self._pool.stop()

    # -- blocking work, shared fairly ---------------------------------------------------------

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
        return state

    def _forget_if_idle(self, tenant: str, state: _Tenant) -> None:
        if state.idle:
            self._tenants.pop(tenant, None)

    async def run(self, tenant: str, work: Callable[..., T], *args: Any, admitted: bool = False) -> T:
        """``work(*args)`` on a worker thread once the tenant's turn comes; its result or its
        exception. A caller cancelled meanwhile (its client went away) stops waiting at once;
        work already running finishes on its thread and only then frees its place.

        ``admitted``: the step of a call already counted as a stream or a waiting call (bounded
        by those limits): it waits its turn like any call, but is never refused for a full queue."""
        loop = asyncio.get_running_loop()
        state = self._tenant(tenant)
        await self._take_place(tenant, state, loop, admitted)
        answer: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()  # the call's request id reaches the engine's logs
        park = self._park if self._park and self._park[0] == tenant else None

        def finish(ok: bool, value: Any) -> None:
            self._give_back(tenant, state)
            if not answer.cancelled():
                if ok:
                    answer.set_result(value)
                else:
                    answer.set_exception(value)

        def job() -> None:
            while park is not None and park[1].exists():
                time.sleep(0.02)
            value: Any
            try:
                value, ok = context.run(work, *args), True
            except BaseException as exc:  # handed to the caller, whatever it is
                value, ok = exc, False
            loop.call_soon_threadsafe(finish, ok, value)

        self._pool.submit(job)
        return await answer

    async def _take_place(self, tenant: str, state: _Tenant, loop: asyncio.AbstractEventLoop, admitted: bool) -> None:
        limits = self.limits
        if not state.queue and state.running < limits.calls_per_tenant and self.running < limits.worker_threads:
            state.running += 1
            self.running += 1
            return
        if not admitted and len(state.queue) >= limits.queued_calls_per_tenant:
            self._refuse(
                tenant,
                state,
                _refusal(
                    "this tenant has as many calls waiting for a worker as it may",
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
                    "the server has as many calls waiting for a worker as it may",
                    "queued-calls",
                    limits.queued_calls,
                    QUEUE_RETRY_SECONDS,
                ),
            )
        turn: asyncio.Future[None] = loop.create_future()
        state.queue.append(turn)
        self.queued += 1
        if tenant not in self._turns:  # a few tenants at most wait at a time: a short scan
            self._turns.append(tenant)
        try:
            await turn  # _dispatch counted the place for us when it set the result
        except asyncio.CancelledError:
            if not turn.cancelled():
                self._give_back(tenant, state)  # the place was given just as we were cancelled
            elif turn in state.queue:  # (else _dispatch already dropped it)
                state.queue.remove(turn)
                self.queued -= 1
                self._forget_if_idle(tenant, state)
            raise

    def _give_back(self, tenant: str, state: _Tenant) -> None:
        state.running -= 1
        self.running -= 1
        self._dispatch()
        self._forget_if_idle(tenant, state)

    def _dispatch(self) -> None:
        """Give free worker places to queued calls, one tenant at a time in turn."""
        skipped = 0
        while self._turns and self.running < self.limits.worker_threads and skipped < len(self._turns):
            tenant = self._turns.popleft()
            state = self._tenants.get(tenant)
            if state is None or not state.queue:
                continue
            if state.running >= self.limits.calls_per_tenant:
                self._turns.append(tenant)  # at its share: the next tenant's turn
                skipped += 1
                continue
            skipped = 0
            turn = state.queue.popleft()
            self.queued -= 1
            if turn.cancelled():  # its caller was cancelled and has not run yet: no place for it
                self._turns.appendleft(tenant)
                continue
            state.running += 1
            self.running += 1
            turn.set_result(None)
            if state.queue:
                self._turns.append(tenant)

    def _refuse(self, tenant: str, state: _Tenant, error: ResourceExhausted) -> NoReturn:
        self.refusals[error.reason] += 1
        self._forget_if_idle(tenant, state)
        raise error

    # -- calls that hold a place while they wait ------------------------------------------------

    @contextmanager
    def stream(self, tenant: str) -> Iterator[None]:
        """An open server stream of the tenant, for as long as the block lasts."""
        with self._hold(
            tenant,
            ("streams", "open_streams"),
            self.limits.streams_per_tenant,
            self.limits.streams,
            "open streams",
            "streams-per-tenant",
            "streams",
        ):
            yield

    @contextmanager
    def waiting(self, tenant: str) -> Iterator[None]:
        """A call of the tenant waiting for its hot path (Flush, Disable), while the block lasts."""
        with self._hold(
            tenant,
            ("waiting", "waiting_calls"),
            self.limits.waiting_calls_per_tenant,
            self.limits.waiting_calls,
            "calls waiting for the hot path",
            "waiting-calls-per-tenant",
            "waiting-calls",
        ):
            yield

    @contextmanager
    def _hold(
        self,
        tenant: str,
        counters: tuple[str, str],
        per_tenant: int,
        total: int,
        what: str,
        tenant_flag: str,
        total_flag: str,
    ) -> Iterator[None]:
        """Count one more of ``counters`` (the tenant's, the server's) while the block lasts."""
        mine, everyone = counters
        state = self._tenant(tenant)
        if getattr(state, mine) >= per_tenant:
            self._refuse(
                tenant,
                state,
                _refusal(f"this tenant has as many {what} as it may", tenant_flag, per_tenant, HOLD_RETRY_SECONDS),
            )
        if getattr(self, everyone) >= total:
            self._refuse(
                tenant,
                state,
                _refusal(f"the server has as many {what} as it may", total_flag, total, HOLD_RETRY_SECONDS),
            )
        setattr(state, mine, getattr(state, mine) + 1)
        setattr(self, everyone, getattr(self, everyone) + 1)
        try:
            yield
        finally:
            setattr(state, mine, getattr(state, mine) - 1)
            setattr(self, everyone, getattr(self, everyone) - 1)
            self._forget_if_idle(tenant, state)
