"""Who waits for a tenant's hot path to change: a Flush, a Disable, a WatchEvents stream."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class Changes:
    """The tenants whose hot path changed (an operation accepted, taken, finished), told to whoever
    waits for them: a Flush, a WatchEvents stream. Callbacks run on the thread that made the change
    and must only hand the news on (set an event, schedule a wake-up)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[Callable[[], None]]] = {}
        self._ended = False
        self._waits_ended = False

    def subscribe(self, tenant: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on each change of ``tenant`` until the returned function is called."""
        with self._lock:
            self._waiting.setdefault(tenant, set()).add(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._waiting.get(tenant)
                if callbacks is not None:
                    callbacks.discard(callback)
                    if not callbacks:
                        del self._waiting[tenant]

        return unsubscribe

    def notify(self, tenant: str) -> None:
        with self._lock:
            callbacks = list(self._waiting.get(tenant, ()))
        for callback in callbacks:
            callback()

    def notify_all(self) -> None:
        with self._lock:
            callbacks = [c for callbacks in self._waiting.values() for c in callbacks]
        for callback in callbacks:
            callback()

    @contextlib.contextmanager
    def waiter(self, tenant: str) -> Iterator[threading.Event]:
        """A threading.Event set on each change of ``tenant`` while the block lasts."""
        changed = threading.Event()
        unsubscribe = self.subscribe(tenant, changed.set)
        try:
            yield changed
        finally:
            unsubscribe()

    @property
    def ended(self) -> bool:
        """True once every WatchEvents stream must return (the process is stopping)."""
        return self._ended

    def end(self) -> None:
        """Make every WatchEvents stream return (a graceful shutdown must not wait for them)."""
        self._ended = True
        self.notify_all()

    @property
    def waits_ended(self) -> bool:
        """True once a Flush, a Disable or a read waiting for its token's writes must answer now
        (a shutdown's grace period is over)."""
        return self._waits_ended

    def end_waits(self) -> None:
        """Make every Flush, Disable and token read still waiting answer SHUTTING_DOWN."""
        self._waits_ended = True
        self.notify_all()
