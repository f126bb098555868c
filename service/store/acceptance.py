"""A tenant's acceptance positions: ONE increasing sequence shared by every write of the tenant —
synchronous writes, fast writes (a fast write's event id is its position) and forgets — so
adjudication (engine/conflicts.py, exact and near duplicates) compares the order in which writes
were accepted, never the order in which they were applied (docs/hot-path.md "Read your own
writes").

A position is stored with what it names: an inbox or log row (its event id), a memory
(``memories.acceptance``), and the highest position a synchronous write took
(``ACCEPTANCE_META``, in that write's transaction). So after a restart the sequence resumes above
every position a durable write was given, whichever file holds it. Positions may leave gaps (a
failed write, a write that created nothing); they are never given twice while their writes last.
"""

from __future__ import annotations

import threading

# The highest position a synchronous write of the tenant took (meta table of the tenant file).
ACCEPTANCE_META = "acceptance_through"


class Acceptances:
    """The tenant's sequence, resumed above ``floor`` (the highest position its files hold, read
    once when the store opens). Thread-safe; taking a position never touches a file."""

    def __init__(self, floor: int) -> None:
        self._lock = threading.Lock()
        self._next = floor + 1

    def take(self, count: int = 1) -> int:
        """The first of ``count`` consecutive new positions (a batch's items are contiguous)."""
        with self._lock:
            first = self._next
            self._next += max(1, count)
            return first

    def highest(self) -> int:
        """The highest position given so far (or the floor)."""
        with self._lock:
            return self._next - 1
