"""What a servicer knows of, and may do to, the call it answers — the same for every surface.

A servicer method is one of three kinds, and the edge runs each its way:

* a plain function ``(request, call) -> response``: validates, converts, calls the engine. The
  engine blocks (SQLite, numpy), so it runs on a worker thread, through admission's fair share;
  marked ``@reading`` (a short read: Status, GetEvent...), on a reader thread, and marked
  ``@snapshot_read`` (a short read of one snapshot: Recall, GetMemory...) on the event loop when
  it is the server's only call and its tenant's such reads are quick, else on a reader thread;
* ``async def`` marked ``@waiting``: waits on the event loop for something (a flush), holding no
  thread; its blocking steps go through ``call.run``. Counted as a waiting call;
* an ``async def`` generator: a server stream, on the event loop, counted as an open stream.

``async def`` without ``@waiting`` answers on the event loop directly: only for work that never
blocks (Ping).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from mnemosyne.transport.admission import Admission

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# How much earlier than the client's deadline a wait gives up, so that its own answer (with the
# remaining depth) reaches the client before the client's deadline fires.
_ANSWER_MARGIN_SECONDS = 0.25


def metadata_value(metadata: Sequence[tuple[str, str]], key: str) -> str | None:
    """The first value of ``key`` in a call's metadata (None without one)."""
    for name, value in metadata:
        if name == key:
            return value
    return None


def reading(method: F) -> F:
    """Mark a plain servicer method as a short read: it runs on admission's reader threads. Only
    for reads bounded by their request (a page, a top k), never for a write, a batch, an export
    or a backup (those wait for the disk or run long: the worker threads')."""
    method.reading = True  # type: ignore[attr-defined]  # a mark on the function object, read by the edge
    return method


def snapshot_read(method: F) -> F:
    """Mark a plain servicer method as a short read of one read transaction that never waits for
    a lock another thread may hold across a commit (a write lock, the hot path's inbox): it runs
    on the event loop when it is the server's only call and its tenant's such reads lately were
    quick (transport/admission.py), else on a reader thread. Bounded by its request, as ``@reading``; never an offset paging."""
    method.reading = True  # type: ignore[attr-defined]  # marks on the function object, read by the edge
    method.on_loop = True  # type: ignore[attr-defined]  # a mark on the function object, read by the edge
    return method


def waiting(method: F) -> F:
    """Mark an ``async def`` servicer method as one that waits (Flush, Disable)."""
    method.waiting = True  # type: ignore[attr-defined]  # a mark on the function object, read by the edge
    return method


class Call:
    def __init__(
        self,
        metadata: Sequence[tuple[str, str]],
        *,
        tenant: str,
        admission: Admission,
        deadline: float | None,
        principal: str = "",
        reaches: frozenset[str] = frozenset({"*"}),
    ) -> None:
        self.metadata = metadata
        self.tenant = tenant
        self.principal = principal  # the name of the caller's token ("" without authentication)
        self.reaches = reaches  # the tenants its token names; {"*"} for an admin or without authentication
        self.initial_metadata: list[tuple[str, str]] = []
        self.trailing_metadata: list[tuple[str, str]] = []
        self._admission = admission
        self._deadline = deadline  # time.monotonic() value, None without a deadline
        # When the call arrived: a wait's timeout (a Flush's timeout_seconds) counts from here.
        self.started = time.monotonic()
        # Set by the edge for a stream or a waiting call, counted (and bounded) as such: its steps
        # are never refused for a full queue (admission.run ``admitted``).
        self.holds_place = False
        # Set after the first step that succeeded, when someone waits for it: the HTTP API starts
        # a server stream's response only then, so a bad request still gets its error status.
        self.stepped: asyncio.Event | None = None
        # The method's path, and the member owning the call's tenant when that is another member
        # (the edge forwards the call there: transport/cluster/forwarding.py).
        self.method = ""
        self.forward_to: str | None = None
        # Set by the edge: the tenant's file here is a copy a move brought, not active yet.
        self.move_pending = False
        # Set by gRPC's edge: the response may be the owner's serialized bytes (HTTP needs messages).
        self.answers_bytes = False
        # Seconds the call waited for the writes of its consistency token (transport/consistency.py).
        self.consistency_waited = 0.0
        # A read of a token at REPLICATED waited for a sync after its writes were visible.
        self.replicated = False

    def metadata_values(self, key: str) -> list[str]:
        return [value for k, value in self.metadata if k == key]

    def send_initial_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        """Sent before the response (or the first streamed message)."""
        self.initial_metadata.extend(metadata)

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.trailing_metadata.extend(metadata)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Blocking work for this call, on a worker thread in the tenant's fair share."""
        result = await self._admission.run(self.tenant, work, *args, admitted=self.holds_place)
        if self.stepped is not None:
            self.stepped.set()
        return result

    def waiting_on_members(self) -> AbstractContextManager[None]:
        """For a block that waits on other members without forwarding the call (an admin fan-out,
        a move's steps): UNAVAILABLE / SHUTTING_DOWN should a shutdown's grace period end first
        (admission's ``cut_when_calls_end``), where the server's stop would cut it bare."""
        return self._admission.cut_when_calls_end()

    def steps(self, parts: Iterator[T]) -> Steps[T]:
        """The items of ``parts``, each made on a worker thread (as ``run``); use it in
        ``contextlib.aclosing``, which closes ``parts`` however the stream ends."""
        return Steps(self, parts)

    @property
    def deadline(self) -> float | None:
        """The client's deadline (a time.monotonic() value), None without one."""
        return self._deadline

    def seconds_to_answer(self, wanted: float) -> float:
        """How long a wait may last: ``wanted``, or less so that its answer arrives before the
        client's deadline."""
        if self._deadline is None:
            return wanted
        left = self._deadline - time.monotonic()
        return max(0.0, min(wanted, left - min(_ANSWER_MARGIN_SECONDS, left / 4)))

    def answer_by(self, timeout: float) -> float:
        """When a wait its request gives ``timeout`` seconds (a Flush's ``timeout_seconds``) ends,
        a time.monotonic() value: that long after the call arrived, the steps before the wait
        (slow on a loaded machine) and any wait before it counted in, or sooner so that its answer
        arrives before the client's deadline."""
        return time.monotonic() + self.seconds_to_answer(max(0.0, self.started + timeout - time.monotonic()))


class Steps(Generic[T]):
    """A blocking iterator's items for a call, each made on a worker thread. Closed before the
    iterator ended (its client left), a generator is closed at once, not when garbage is collected,
    so its ``finally`` (a scratch copy removed, readers stopped) runs now: on a thread of its own,
    once a step still running on a worker thread is done."""

    def __init__(self, call: Call, parts: Iterator[T]) -> None:
        self._call = call
        self._parts = parts
        self._lock = threading.Lock()  # a step and the close never run at once
        self._started = False
        self._ended = False

    def __aiter__(self) -> Steps[T]:
        return self

    async def __anext__(self) -> T:
        part = await self._call.run(self._step)
        if part is None:
            self._ended = True
            raise StopAsyncIteration
        return part

    def _step(self) -> T | None:
        with self._lock:
            self._started = True
            return next(self._parts, None)

    async def aclose(self) -> None:
        close = getattr(self._parts, "close", None)
        if self._ended or close is None:
            return
        self._ended = True
        if not self._started:
            close()  # a generator that never ran has no finally to run: closing it does nothing else
            return
        threading.Thread(target=self._close, args=(close,), name="close-stream", daemon=True).start()

    def _close(self, close: Callable[[], None]) -> None:
        with self._lock:
            close()
