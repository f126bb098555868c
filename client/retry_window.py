"""When the Python client tries a call again, and for how long: the waits between its tries and
the window they are bounded by (client/node/src/client.js keeps the same rules and numbers).

A call safe to repeat (a read, a write carrying a request id) that fails UNAVAILABLE is tried again
until it succeeds or its retry window is over: a server's restart (a Kubernetes pod's, a SIGKILL
and start again) takes seconds, and a call in flight across it is answered by the server back.
The window is time, not a count, so a short outage is ridden out whatever the backoff; and it
ends, so a call to a server that is gone fails ``UnavailableError`` within it. Never past the
call's own deadline: the tries share it.

Between tries a backoff from 0.1 s, doubling, at most 1 s, each wait a random part of it (half to
all): the clients of a restarted server do not come back in step, and one finds it within about
a second of its return (the channel itself tries to connect every 0.5 s at most: memory_client.py
``_CHANNEL_OPTIONS``).

A refusal the server names (an UNAVAILABLE with its ErrorInfo reason) is the server's word on
whether waiting can clear it: tried again only when it names a retry delay (google.rpc.RetryInfo:
TENANT_MOVING, OWNER_UNAVAILABLE, FILE_LIMIT, SHUTTING_DOWN, TENANT_BUSY, MEMBERS_CHANGING,
REPLICA_UNREACHABLE while object storage does not answer, an admission limit), after that delay
(at most ``MAX_RETRY_DELAY_SECONDS``) and within the same window; one without (REPLICA_UNREACHABLE
for a replica URL or keys that are wrong, a model that failed the server's own tries) is raised
at once, since no wait clears it. Only a failure without ErrorInfo (nothing answered: the server
down or restarting) is tried with the backoff above, and the reasons of ``CLEARED_BY_WAITING``
without a delay: servers up to 0.1.0 sent them so.
"""

from __future__ import annotations

import math
import random
import time

import grpc

from mnemosyne.client.errors import MnemosyneClientError

# How long a call safe to repeat is tried again after UNAVAILABLE, by default (``retry_window``).
RETRY_WINDOW_SECONDS = 15.0
# The longest retry window a client takes: more only keeps a caller waiting on a server that is gone.
MAX_RETRY_WINDOW_SECONDS = 3600.0
# The longest wait a server's RetryInfo may impose before a call is repeated.
MAX_RETRY_DELAY_SECONDS = 5.0
# The most retries a client takes (its ``retries``, when it bounds them by a count too).
MAX_RETRIES = 100
FIRST_BACKOFF_SECONDS = 0.1
MAX_BACKOFF_SECONDS = 1.0
# UNAVAILABLE reasons that waiting clears, which servers up to 0.1.0 sent without a retry delay
# (later ones send one): tried with the backoff, as a restart, so a client newer than its server
# still rides out a shutdown or a tenant busy (client/node/src/retry_window.js keeps the same).
CLEARED_BY_WAITING = frozenset(
    {"SHUTTING_DOWN", "TENANT_BUSY", "ERASURE_BUSY", "FILE_LIMIT", "TENANT_ERASING", "TENANT_MOVING"}
)


class RetryBudget:
    """The tries of one call: the time left of its deadline (``timeout`` seconds from now, None:
    none) and the waits before its next try, within ``window`` seconds from now and at most
    ``retries`` of them (None: as many as the window holds)."""

    def __init__(self, window: float, retries: int | None, timeout: float | None) -> None:
        now = time.monotonic()
        self._ends = now + timeout if timeout is not None else math.inf
        self._window_ends = min(now + window, self._ends)
        self._retries = retries
        self._tried = 0
        self._backoff = FIRST_BACKOFF_SECONDS

    def left(self) -> float | None:
        """The seconds left of the call's deadline, for its next try's (None: no deadline)."""
        return None if math.isinf(self._ends) else max(self._ends - time.monotonic(), 0.0)

    def wait_after(self, error: MnemosyneClientError) -> float | None:
        """The seconds to wait before the call is tried again after ``error``, or None: not again
        (another failure, the retries or the window spent). The caller knows the call is safe to
        repeat."""
        delay = error.retry_after_seconds
        named = error.reason != error.code.name  # the server's ErrorInfo: not a connection that failed
        if (
            error.code == grpc.StatusCode.UNAVAILABLE
            and not delay
            and (not named or error.reason in CLEARED_BY_WAITING)
        ):
            wait = random.uniform(self._backoff / 2, self._backoff)
            self._backoff = min(2 * self._backoff, MAX_BACKOFF_SECONDS)
        elif error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED) and delay is not None:
            wait = min(MAX_RETRY_DELAY_SECONDS, delay)
        else:
            return None
        if self._tried == self._retries or time.monotonic() + wait >= self._window_ends:
            return None
        self._tried += 1
        return wait


def window_problem(window: object) -> str:
    """Why ``window`` cannot be a client's retry window, or "" when it can."""
    if isinstance(window, int | float) and 0 <= window <= MAX_RETRY_WINDOW_SECONDS:  # False for NaN too
        return ""
    return f"MemoryClient: retry_window is {window!r} seconds; it takes 0 to {MAX_RETRY_WINDOW_SECONDS:.0f}"
