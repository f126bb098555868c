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
waits for): its owner then calls ``keep_up`` as if far behind.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("mnemosyne.runtime.background")

URGENT_AFTER_SECONDS = 2.0
_LINUX = sys.platform.startswith("linux")
_this_thread = threading.local()


def become_background_thread() -> None:
    """Run the calling thread at idle priority from now on (until ``keep_up``)."""
    _this_thread.background = True
    _this_thread.urgent = False
    _this_thread.locks_held = 0
    _apply()


def request_thread() -> None:
    """Thread-pool initializer for threads that serve requests: a new thread inherits its
    creator's policy, and a pool started lazily by a background thread would otherwise idle."""
    _this_thread.background = False
    _set_policy(normal=True)


def keep_up(lag_seconds: float) -> None:
    """A background thread reports how far behind it is: past ``URGENT_AFTER_SECONDS`` it
    competes with request threads as an equal, below it goes back to idle priority."""
    urgent = lag_seconds > URGENT_AFTER_SECONDS
    if _this_thread.urgent != urgent:
        _this_thread.urgent = urgent
        _apply()


def lock_taken() -> None:
    """The calling thread took a lock request threads may wait for (a tenant's write lock)."""
    if getattr(_this_thread, "background", False):
        _this_thread.locks_held += 1
        if _this_thread.locks_held == 1:
            _apply()


def lock_released() -> None:
    if getattr(_this_thread, "background", False):
        _this_thread.locks_held -= 1
        if _this_thread.locks_held == 0:
            _apply()


def _apply() -> None:
    _set_policy(normal=_this_thread.urgent or _this_thread.locks_held > 0)


def _set_policy(*, normal: bool) -> None:
    if not _LINUX:  # SCHED_IDLE is Linux's; elsewhere every thread keeps the default
        return
    try:
        # pid 0 is the calling thread on Linux (the scheduler works on threads).
        os.sched_setscheduler(0, os.SCHED_OTHER if normal else os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # a refusal (a seccomp profile, say) only leaves the default
        log.debug("could not change the scheduling policy of %s: %s", threading.current_thread().name, exc)
