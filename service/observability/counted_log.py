"""A log of events any client can cause (a request refused unread, a connection dropped): one
WARNING line for the first, then at most one every few seconds, counting by reason those since
the last. A line each would let a client write the server's log at will."""

from __future__ import annotations

import collections
import logging


class CountedLog:
    """Counts by reason, written as one line (``"<what>: 2 reason, 5 other (logged at most every
    60 s)"``) when the interval since the last line has ended. The caller keeps the clock and
    calls ``write_due`` at ``due()`` (a timer, a selector's timeout), so that no count is lost
    when no event follows; not thread-safe (one event loop's)."""

    def __init__(self, logger: logging.Logger, what: str, seconds: float) -> None:
        self.seconds = seconds
        self._logger, self._what = logger, what
        self._unlogged: collections.Counter[str] = collections.Counter()
        self._next = float("-inf")  # the caller's time before which no line is written

    def count(self, reason: str, now: float) -> None:
        self._unlogged[reason] += 1
        self.write_due(now)

    def due(self) -> float | None:
        """When the counts not written yet are (None: there are none)."""
        return self._next if self._unlogged else None

    def write_due(self, now: float) -> None:
        if self._unlogged and now >= self._next:
            self._write(now)

    def close(self) -> None:
        """Write the counts still waiting for their time (the server stops)."""
        if self._unlogged:
            self._write(float("-inf"))

    def _write(self, now: float) -> None:
        counts = ", ".join(f"{count} {reason}" for reason, count in sorted(self._unlogged.items()))
        self._unlogged.clear()
        self._next = now + self.seconds
        self._logger.warning("%s: %s (logged at most every %g s)", self._what, counts, self.seconds)
