"""Reads before bulk work: long writes run their Python one at a time, and give way to reads.

The server's Python runs under one interpreter lock (GIL). A recall releases it dozens of times
(every SQLite step, every numpy product) and must take it back each time; while other threads run
Python without pause — batches of large texts being extracted, embedded and compared, seconds of
regular expressions — each of those take-backs waits for the interpreter's switch interval behind
every one of them, and a recall of ~2 ms took 20-50. Measured (docs/fairness.md#reads-before-bulk-work):
with one tenant sending batches of 100 look-alike 32 KB texts from two threads, another tenant's
recalls at 50 a second queued behind one another to a p50 of 480-860 ms, some past their 2 s
deadline; with this module, 5-6 ms (2-3 ms alone).

So the write path marks its stretches of in-process Python (``bulk_work``: checking a batch's
items, extracting them with the rules, embedding them with the hashing embedder, reading their
atoms) and calls ``give_way`` between their steps (an item, a pass of regular expressions over one
text, a slice of the batch):

* **one at a time.** Those stretches take turns, in arrival order: one that has had its turn
  ``TURN_SECONDS`` passes it at its next step. With the GIL, two of them at once run no faster
  than one after the other, but each one more is another thread a read's every take-back of the
  interpreter waits behind. A small write of another tenant waits about a millisecond of each
  stretch before it, not a whole batch.
* **reads first.** At a step, while a read is admitted and not yet answered (``read_running``,
  entered by admission), the stretch sleeps until no read is left, at most ``WAIT_SECONDS``, and
  the read has the interpreter to itself. It cannot starve writes: a stretch runs at least
  ``RUN_SECONDS`` from its start or from when it last gave way before it gives way (again), so a
  small write's stretch never waits, and under a flood of reads a batch still gets about two
  thirds of the interpreter.

Reader threads and the event loop never wait (``never_give_way``). Where nothing is read and no
other stretch waits, a step costs a few attribute reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mnemosyne.runtime import background

# How long a stretch waits for the running reads at most (a 10k-memory recall takes ~1.5 ms of
# CPU here): most reads finish inside it, a longer one shares the interpreter again.
WAIT_SECONDS = 0.002
# How long a stretch runs, from its start or from when it last gave way, before it gives way to
# reads: a small write's whole stretch (an item or a few: microseconds) never waits.
RUN_SECONDS = 0.004
# How long a stretch keeps its turn before it passes it to a stretch waiting: a small stretch ends
# in its turn, a long one lets the others in every millisecond or so.
TURN_SECONDS = 0.001

_change = threading.Condition()
_reads_running = 0
_last_read_ended = float("-inf")  # time.monotonic() of the last read's answer
_turns_taken = 0  # tickets handed out to stretches (one per thread entering or re-entering)
_turn_now = 0  # the ticket whose stretch runs now
_steps_given_way = 0
_seconds_given_way = 0.0
_this_thread = threading.local()


@contextmanager
def read_running() -> Iterator[None]:
    """Around a read call, from its admission to its answer: stretches of bulk work give way to it."""
    global _reads_running, _last_read_ended
    with _change:
        _reads_running += 1
    try:
        yield
    finally:
        with _change:
            _reads_running -= 1
            _last_read_ended = time.monotonic()
            if _reads_running == 0:
                _change.notify_all()


def reads_recent(seconds: float) -> bool:
    """Whether a read is running or one was answered within the last ``seconds``."""
    return _reads_running > 0 or time.monotonic() - _last_read_ended < seconds


def never_give_way() -> None:
    """The calling thread runs reads (a reader thread, the event loop): it never waits for them."""
    _this_thread.exempt = True


def runs_reads() -> bool:
    """Whether the calling thread runs reads (``never_give_way``)."""
    return getattr(_this_thread, "exempt", False)


@contextmanager
def bulk_work(holds_interpreter: bool = True) -> Iterator[None]:
    """Around a stretch of in-process Python of a write (it holds the interpreter while it works):
    it runs when its turn comes, one stretch at a time. Nested stretches are one. Work that does
    not hold the interpreter (``holds_interpreter`` False: a model's call) takes no turn."""
    if not holds_interpreter or getattr(_this_thread, "in_bulk", False):
        yield
        return
    _take_turn()
    _this_thread.in_bulk = True
    _this_thread.resumed = time.monotonic()
    background.lock_taken()  # a background thread holding the turn runs at the normal priority
    try:
        yield
    finally:
        background.lock_released()
        _this_thread.in_bulk = False
        _pass_turn()


def give_way() -> None:
    """Between two steps of bulk work: wait (up to WAIT_SECONDS) while reads are running, unless
    this thread ran less than RUN_SECONDS since its stretch began or it last gave way, or runs
    reads itself; then, inside a stretch that has had its turn TURN_SECONDS, let the stretches
    waiting for theirs run first."""
    global _steps_given_way, _seconds_given_way
    if runs_reads():
        return
    if _reads_running:
        now = time.monotonic()
        if now - getattr(_this_thread, "resumed", 0.0) >= RUN_SECONDS:
            with _change:
                _change.wait_for(lambda: _reads_running == 0, WAIT_SECONDS)
                _this_thread.resumed = time.monotonic()
                _steps_given_way += 1
                _seconds_given_way += _this_thread.resumed - now
    if (
        getattr(_this_thread, "in_bulk", False)
        and _turns_taken - _turn_now > 1
        and time.monotonic() - _this_thread.turn_since >= TURN_SECONDS
    ):
        _pass_turn()
        _take_turn()


def _take_turn() -> None:
    global _turns_taken
    with _change:
        ticket = _turns_taken
        _turns_taken += 1
        _change.wait_for(lambda: _turn_now == ticket)
    _this_thread.turn_since = time.monotonic()


def _pass_turn() -> None:
    global _turn_now
    with _change:
        _turn_now += 1
        _change.notify_all()


def given_way() -> tuple[int, float]:
    """How many times stretches of bulk work gave way to reads, and the seconds they waited in all
    (a metric, read on each scrape)."""
    return _steps_given_way, _seconds_given_way
