"""The engine's clock, for expiry and the webhook worker's retries and pauses: the wall clock, or
a test's (the seam MNEMOSYNE_TEST_CLOCK_FILE, runtime/seams.py), so a test moves time past an
expiry or a day of failed deliveries without sleeping until it."""

from __future__ import annotations

import time
from pathlib import Path

# With a test's clock, a wake-up for a time on it is never further than this in real time: the
# test may move its clock forward at any moment.
TEST_CLOCK_RECHECK_SECONDS = 0.2


class Clock:
    """``now()``: unix seconds. ``offset_file``: a test's file holding seconds added to the wall
    clock (None in production: the wall clock itself)."""

    def __init__(self, offset_file: Path | None = None) -> None:
        self._offset_file = offset_file

    def _offset(self) -> float:
        if self._offset_file is None:
            return 0.0
        try:
            return float(self._offset_file.read_text().strip() or 0)
        except (OSError, ValueError):  # not written yet, or mid-write: no offset
            return 0.0

    @property
    def jumps(self) -> bool:
        """A test's clock, which may jump ahead at any moment."""
        return self._offset_file is not None

    def now(self) -> float:
        return time.time() + self._offset()

    def wall_time_of(self, at: float) -> float:
        """The wall-clock time at which this clock reaches ``at`` (for a scheduler that sleeps by
        the wall clock); with a test's clock, no later than a recheck from now."""
        wall = at - self._offset()
        if self.jumps:
            return min(wall, time.time() + TEST_CLOCK_RECHECK_SECONDS)
        return wall
