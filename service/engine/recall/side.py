"""A recall's work beside it: a call that spends its time outside the interpreter (a model's
inference, which releases the GIL) runs on a helper thread while the recall's own thread does
its part (the full-text leg), and the recall takes its result when it needs it.

Never queued: when every helper is busy (many recalls at once, the cores are busy anyway) the
call runs at once on the caller's thread, as it would without helpers. The helpers are few and
shared by the process (``side_threads``), started on first use; a helper runs the call in the
caller's context (its trace span, its context variables).
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

# Helpers per process: one per core, at most this many (a helper waits on a model's call; more
# than the cores would only take turns).
MAX_HELPERS = 4
# How long the caller waits for the helper to take the call: the helper runs the call's first
# Python before its model releases the interpreter, and the caller's own work would hold the
# interpreter it needs (with both waiting on each other, the call started only after the caller's
# work: no gain). A helper not running by then (a busy machine) leaves the call to the caller.
START_SECONDS = 0.0002


class Pending(Generic[T]):
    """A call's result, once it is made (on a helper) or made already (on the caller's thread)."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._done = threading.Lock()
        self._done.acquire()  # released when the call returned or raised
        self._taken = threading.Lock()  # held by the thread that makes the call (once)
        self._started = threading.Lock()
        self._started.acquire()  # released when a helper took the call
        self._value: T | None = None
        self._error: BaseException | None = None

    @classmethod
    def made_now(cls, call: Callable[[], T]) -> Pending[T]:
        """The call made at once on this thread (its error raised by ``result``, as a helper's is)."""
        pending = cls(call)
        pending.take()
        pending.run()
        return pending

    def take(self) -> bool:
        """Whether this thread makes the call (no other took it)."""
        return self._taken.acquire(blocking=False)

    def run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised by result()
            self._error = error
        finally:
            self._done.release()

    def result(self) -> T:
        """The call's value (raising its error), waiting for a helper still making it."""
        with self._done:
            pass
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by run() when it did not raise


class SideThreads:
    """Up to ``helpers`` threads, each running one call at a time (``start``)."""

    def __init__(self, helpers: int) -> None:
        self._helpers = helpers
        self._started = 0
        self._idle: queue.SimpleQueue[_Helper] = queue.SimpleQueue()
        self._lock = threading.Lock()

    def start(self, call: Callable[[], T]) -> Pending[T]:
        """``call`` made on an idle helper, or at once here when none is idle."""
        helper = self._idle_helper()
        if helper is None:
            return Pending.made_now(call)
        context = contextvars.copy_context()
        pending = Pending(lambda: context.run(call))
        helper.give(pending)
        if not pending._started.acquire(timeout=START_SECONDS) and pending.take():
            pending.run()  # the helper was not running yet: made here, at once
        return pending

    def _idle_helper(self) -> _Helper | None:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._started >= self._helpers:
                return None
            self._started += 1
            return _Helper(self._idle, f"recall-side-{self._started}")


class _Helper:
    """One helper thread: waits for a call, makes it, and is idle again."""

    def __init__(self, idle: queue.SimpleQueue[_Helper], name: str) -> None:
        self._idle = idle
        self._work: Pending[object] | None = None
        self._given = threading.Lock()
        self._given.acquire()  # released by give(): the cheapest wake-up between two threads
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def give(self, pending: Pending[T]) -> None:
        self._work = pending  # type: ignore[assignment]  # run() ignores the value's type
        self._given.release()

    def _run(self) -> None:
        while True:
            self._given.acquire()
            work, self._work = self._work, None
            assert work is not None
            if work.take():
                work._started.release()
                work.run()
            self._idle.put(self)


_shared: SideThreads | None = None
_shared_lock = threading.Lock()


def side_threads() -> SideThreads:
    """The process's helpers (one per core, at most ``MAX_HELPERS``)."""
    global _shared
    if _shared is not None:
        return _shared
    with _shared_lock:
        if _shared is None:
            _shared = SideThreads(min(os.cpu_count() or 1, MAX_HELPERS))
        return _shared
