"""The gate of a tenant's pooled read transactions, which an erasure's WAL truncation closes.

A TRUNCATE checkpoint (store/transactions.py ``truncate_wal``) can only cut the WAL once no
reader uses it, and SQLite's busy handler looks for that moment between sleeps growing to 100 ms:
under recalls that overlap without a pause it rarely finds one, and it waits holding the
tenant's write lock, so every write of the tenant waits with it. Closed, the gate lets no new
read transaction of the store's pool begin (nor a copy's snapshot: ``wait_open``); the
truncation waits only for those already under way, then runs with no reader in its way, and
the gate opens again. A read that finds it closed waits for it (the length of the truncation).

A thread already inside a read transaction goes through a closed gate (a read nested in another
must not wait for a truncation that waits for the outer one), and so does a read on the server's
event loop (a lone short read runs there, transport/admission.py): waiting, it would hold up every
tenant's calls; the truncation waits for it as for a read under way. The gate stays closed at most the
time its closer gives: should a reader inside wait for something held by a reader at the gate, the
gate opens then and the truncation waits for readers as SQLite does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadGate:
    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._inside = 0  # read transactions under way
        self._closed = False
        self._copies_held_back = 0  # erasures under way, from their revocation of the copies being sent
        self._depth = threading.local()  # this thread's read transactions under way

    def reading(self) -> ReadGate:
        """Around one read transaction (``with gate.reading():``): waits while the gate is closed,
        unless this thread is already inside one or runs an event loop. The gate is its own
        context manager: no generator made per read."""
        return self

    def __enter__(self) -> None:
        depth: int = getattr(self._depth, "n", 0)
        with self._changed:
            if not depth and asyncio.events._get_running_loop() is None:  # not on an event loop
                self._changed.wait_for(lambda: not self._closed)
            self._inside += 1
        self._depth.n = depth + 1

    def __exit__(self, *exc_info: object) -> None:
        self._depth.n -= 1
        with self._changed:
            self._inside -= 1
            if self._closed:
                self._changed.notify_all()

    def wait_open(self) -> None:
        """Wait while the gate is closed or copies are held back, for a read it does not count: a
        copy's snapshot, held for as long as its copy takes, begins after the truncation rather
        than hold it up."""
        if not getattr(self._depth, "n", 0):
            with self._changed:
                self._changed.wait_for(lambda: not self._closed and not self._copies_held_back)

    @contextmanager
    def copies_held_back(self) -> Iterator[None]:
        """No copy's snapshot begins while the block runs: an erasure's, from its revocation of the
        copies being sent to the end of its truncation. A copy begun in between holds nothing
        erased but holds up the truncation for as long as it takes, and copies begun back to back
        kept it waiting to its bound."""
        with self._changed:
            self._copies_held_back += 1
        try:
            yield
        finally:
            with self._changed:
                self._copies_held_back -= 1
                self._changed.notify_all()

    @contextmanager
    def closed(self, seconds: float) -> Iterator[bool]:
        """Closed to new read transactions while the block runs, entered once those under way
        (but the calling thread's own) have ended: True; or once ``seconds`` have passed: False,
        the gate open again."""
        mine: int = getattr(self._depth, "n", 0)
        with self._changed:
            self._closed = True
            drained = self._changed.wait_for(lambda: self._inside <= mine, timeout=seconds)
            if not drained:
                self._open()
        try:
            yield drained
        finally:
            with self._changed:
                self._open()

    def _open(self) -> None:
        self._closed = False
        self._changed.notify_all()
