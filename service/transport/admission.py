"""Admission of calls during shutdown, and the count of calls in flight.

gRPC's own ``server.stop(grace)`` cancels calls that reach the server at the very moment it
stops (the client sees CANCELLED, not knowing whether its write happened). So shutdown first
closes admission here: new calls get UNAVAILABLE with reason SHUTTING_DOWN (safe to retry
elsewhere or after the restart, and the write was certainly not made), in-flight ones finish,
and only then is the gRPC server stopped — once no call has arrived for a short quiet period
(calls matched by gRPC but whose handler has not started yet are not "active" here; the quiet
period lets them reach ``enter`` and be refused cleanly).
"""

from __future__ import annotations

import threading
import time

from mnemosyne.errors import Unavailable


class Admission:
    def __init__(self) -> None:
        self._open = True
        self._active = 0
        self._last_arrival = 0.0
        self._changed = threading.Condition()

    def note_arrival(self) -> None:
        """A call was matched to a handler (its handler will run soon)."""
        self._last_arrival = time.monotonic()  # a plain store: no lock on the hot path

    def enter(self) -> None:
        """Admit a call (pair with ``leave``) or raise Unavailable when closed."""
        with self._changed:
            if not self._open:
                raise Unavailable(
                    "the server is shutting down; retry (the call was not executed)", reason="SHUTTING_DOWN"
                )
            self._active += 1

    def leave(self) -> None:
        with self._changed:
            self._active -= 1
            self._changed.notify_all()

    @property
    def active(self) -> int:
        with self._changed:
            return self._active

    def close_and_wait(self, timeout: float, quiet: float = 0.25) -> bool:
        """Refuse new calls; wait up to ``timeout`` s until no admitted call is left and none has
        arrived for ``quiet`` s. True when that happened within the timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._open = False
            while True:
                now = time.monotonic()
                calm_in = self._last_arrival + quiet - now
                if not self._active and calm_in <= 0:
                    return True
                if now >= deadline:
                    return False
                self._changed.wait(min(deadline - now, max(calm_in, 0.01)))
