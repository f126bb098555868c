"""CPU priority of background threads, so request threads win the processor.

On a small machine (two cores is common for a pod) the store's maintenance pass and the hot-path
workers can keep both cores busy; a request thread that wakes up then waits in the kernel's run
queue for a time slice: milliseconds that land directly on a request's p99. Measured
(`bench/hot_path_latency.py --synchronous normal`, enqueues while the workers drain the same
tenant): a reader's BEGIN, microseconds of work, waited up to 4 ms in the run queue while a
full-text merge and a worker ran; the enqueue p99 was 4.9-5.6 ms, a raised nice value only
brought it to 3.5 ms (Linux's EEVDF scheduler lets the running thread finish its slice), and
``SCHED_IDLE`` for the background threads brought it to 0.3-0.6 ms.

So background threads run under ``SCHED_IDLE`` (Linux; no privilege needed to lower one's own
priority): they get every cycle the request threads leave, and a woken request thread preempts
them at once. They must not starve under a load that keeps every core busy, though, so a thread
that has fallen behind (``URGENT_AFTER_SECONDS`` of lag: the hot path's oldest open operation,
a maintenance request's wait) goes back to the normal policy until it has caught up.

Nor may an idle-priority thread be starved while a request waits for it: while it holds a
tenant's write lock (store/locks.py) it runs under the normal policy (a priority ceiling), so a
request queued behind one of its transactions waits for that transaction only, not for a time
slice the busy cores would never give it. Nor while a request waits for what it does (a
hot-path round of a write a read's token names, the restore of a new volume's tenants a backup
waits for): its owner then calls ``keep_up`` as if far behind, or, when the wait began after the
owner decided (a round already embedding), the waiter hurries the thread (``set_hurried``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading

log = logging.getLogger("mnemosyne.runtime.background")

URGENT_AFTER_SECONDS = 2.0
_LINUX = sys.platform.startswith("linux")
_this_thread = threading.local()


@dataclasses.dataclass(eq=False)
class BackgroundThread:
    """A background thread's reasons to run at the normal policy. Its own calls change all but
    ``hurried``, which another thread sets (``set_hurried``): the policy is decided and set under
    ``lock``, so the last decision is the one in force."""

    native_id: int
    urgent: bool = False  # fallen behind (``keep_up``)
    hurried: bool = False  # a request waits for what it does now
    locks_held: int = 0  # locks request threads may wait for (``lock_taken``)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def apply(self) -> None:
        with self.lock:
            self._set_policy()

    def _set_policy(self) -> None:
        _set_policy(self.native_id, normal=self.urgent or self.hurried or self.locks_held > 0)

    def set_hurried(self, hurried: bool) -> None:
        """From any thread: a request waits (True) for what this thread does now, which then runs
        at the normal policy, or no longer (False). The owner's own decision (``keep_up``) may have
        come before the wait began: a hot-path round already embedding."""
        with self.lock:
            if self.hurried != hurried:
                self.hurried = hurried
                self._set_policy()


def become_background_thread() -> None:
    """Run the calling thread at idle priority from now on (until ``keep_up``)."""
    _this_thread.state = BackgroundThread(threading.get_native_id())
    _this_thread.state.apply()


def this_thread() -> BackgroundThread | None:
    """The calling thread, if it is a background thread (for ``set_hurried`` from another)."""
    state: BackgroundThread | None = getattr(_this_thread, "state", None)
    return state


def request_thread() -> None:
    """Thread-pool initializer for threads that serve requests: a new thread inherits its
    creator's policy, and a pool started lazily by a background thread would otherwise idle."""
    _this_thread.state = None
    _set_policy(0, normal=True)


def keep_up(lag_seconds: float) -> None:
    """A background thread reports how far behind it is: past ``URGENT_AFTER_SECONDS`` it
    competes with request threads as an equal, below it goes back to idle priority."""
    state = this_thread()
    urgent = lag_seconds > URGENT_AFTER_SECONDS
    if state is not None and state.urgent != urgent:
        state.urgent = urgent
        state.apply()


def lock_taken() -> None:
    """The calling thread took a lock request threads may wait for (a tenant's write lock)."""
    state = this_thread()
    if state is not None:
        state.locks_held += 1
        if state.locks_held == 1:
            state.apply()


def lock_released() -> None:
    state = this_thread()
    if state is not None:
        state.locks_held -= 1
        if state.locks_held == 0:
            state.apply()


def _set_policy(native_id: int, *, normal: bool) -> None:
    """Set a thread's policy (``native_id`` 0: the calling thread's; the scheduler works on threads)."""
    if not _LINUX:  # SCHED_IDLE is Linux's; elsewhere every thread keeps the default
        return
    try:
        os.sched_setscheduler(native_id, os.SCHED_OTHER if normal else os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # a refusal (a seccomp profile, say) only leaves the default
        log.debug("could not change the scheduling policy of thread %d: %s", native_id, exc)
