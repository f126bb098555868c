"""The calls that wait — Flush, Disable, WatchEvents, a read given a consistency token — waiting on
the event loop, holding no thread.

Each step that reads the store is a short job through ``Call.run`` (a worker thread in the
tenant's fair share); between steps the call awaits the tenant's next change (the hot path's
``changes``, handed to the loop), its timeout, or its client's deadline — whichever comes first.
A client that cancels or goes away ends the wait at once (the event loop cancels the call).
Surface-independent: the gRPC servicers call these, and so will the HTTP routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence

from mnemosyne.engine import limits as check
from mnemosyne.engine.consistency import Consistency, WritesOpen
from mnemosyne.engine.hot_path import HotPath
from mnemosyne.engine.hot_path.awaited import Span
from mnemosyne.engine.types import Barrier, Event, FlushOutcome, HotPathState
from mnemosyne.errors import DeadlineExceeded, FailedPrecondition, Unavailable
from mnemosyne.transport.call import Call

# A stream with nothing new re-reads the log this often anyway (a change is normally announced).
WATCH_REREAD_SECONDS = 30.0
APPLIED_LATER = "they stay queued and are applied after the restart"


@contextlib.contextmanager
def _changes(hot_path: HotPath, tenant: str) -> Iterator[asyncio.Event]:
    """An asyncio.Event set (on this loop) whenever the tenant's hot path changes."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def wake() -> None:  # on the thread that made the change
        loop.call_soon_threadsafe(changed.set)

    unsubscribe = hot_path.changes.subscribe(tenant, wake)
    try:
        yield changed
    finally:
        unsubscribe()


async def _until(changed: asyncio.Event, seconds: float) -> bool:
    """Whether ``changed`` was set within ``seconds`` (it is cleared either way)."""
    # asyncio.timeout, never asyncio.wait_for: Python 3.11's wait_for returns as if not cancelled
    # when the cancellation (a client that went away) comes as the event is set, and the call then
    # waited on, counted as waiting, for a client that had gone.
    woken = False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            woken = await changed.wait()
    changed.clear()
    return woken


def _unchanged_at(deadline: float, woken: bool) -> bool:
    """A wait that reached its deadline with no change announced answers with what it read last:
    reading the log again then (on a worker thread a loaded machine may be slow to give) made
    the answer late, past the client's own deadline."""
    return not woken and time.monotonic() >= deadline


async def _pass(hot_path: HotPath, call: Call, barrier: Barrier, timeout: float, what: str) -> None:
    """Wait until ``barrier`` is passed; ``timeout`` after the call arrived (or just before the
    client's deadline) raise DEADLINE_EXCEEDED with the remaining depth."""
    deadline = call.answer_by(timeout)
    with _changes(hot_path, call.tenant) as changed:
        while (left := await call.run(hot_path.remaining, call.tenant, barrier)) > 0:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise hot_path.gave_up(what, _waited(call), left)
            woken = await _until(changed, min(1.0, wait))
            _unless_stopped(hot_path, f"{left} operations of the queue, not applied yet ({APPLIED_LATER})")
            if _unchanged_at(deadline, woken):
                raise hot_path.gave_up(what, _waited(call), left)


def _waited(call: Call) -> float:
    """Seconds since the call arrived, as its refusal says them."""
    return round(time.monotonic() - call.started, 1)


async def flush(hot_path: HotPath, call: Call, timeout_seconds: float) -> FlushOutcome:
    timeout = check.validate_wait_seconds(timeout_seconds)
    barrier = await call.run(hot_path.flush_barrier, call.tenant)
    if barrier is None:
        return FlushOutcome(0, 0, 0, [])
    await _pass(hot_path, call, barrier, timeout, "flush")
    return await call.run(hot_path.flush_outcome, call.tenant, barrier)


async def flush_token(
    hot_path: HotPath, tokens: Consistency, call: Call, token: str, timeout_seconds: float
) -> FlushOutcome:
    """Flush of a consistency token: until the writes it names are applied (taken first), not
    the whole queue; what those open at the call did."""
    timeout = check.validate_wait_seconds(timeout_seconds)
    try:
        await call.run(tokens.check, call.tenant, token)
        return FlushOutcome(0, 0, 0, [])
    except WritesOpen as pending:
        deadline = call.answer_by(timeout)
        covered = set(pending.open_ids)
        failed = await token_writes(hot_path, call, pending.spans, pending.open_ids, deadline)
        if pending.replicate:
            await replicated(hot_path, tokens, call, deadline)
    failed = [i for i in failed if i in covered]
    return FlushOutcome(len(covered), len(covered) - len(failed), len(failed), failed)


async def disable(hot_path: HotPath, call: Call, timeout_seconds: float) -> HotPathState:
    timeout = check.validate_wait_seconds(timeout_seconds)
    barrier = await call.run(hot_path.disable_barrier, call.tenant)
    if barrier is not None:
        await _pass(hot_path, call, barrier, timeout, "disable")
    return await call.run(hot_path.status, call.tenant)


async def token_writes(
    hot_path: HotPath, call: Call, spans: Sequence[Span], open_ids: Sequence[int], deadline: float
) -> list[int]:
    """Wait until none of the operations of ``spans`` is open (``open_ids`` are, as last read),
    the workers taking them first meanwhile; DEADLINE_EXCEEDED / CONSISTENCY_DEADLINE_EXCEEDED at
    ``deadline`` (time.monotonic()), never before it and within a second after. Returns the ids
    of those that failed."""
    awaited = hot_path.awaited
    started = time.monotonic()
    still, failed = list(open_ids), list[int]()
    with awaited.waiting(call.tenant, spans), _changes(hot_path, call.tenant) as changed:
        while still:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _gave_up(still, time.monotonic() - started)
            woken = await _until(changed, min(1.0, left))
            _unless_stopped(
                hot_path, f"{len(still)} writes of its consistency token, not applied yet ({APPLIED_LATER})"
            )
            if _unchanged_at(deadline, woken):
                raise _gave_up(still, time.monotonic() - started)
            still, failed = await call.run(awaited.states, call.tenant, spans)
    return failed


async def replicated(hot_path: HotPath, tokens: Consistency, call: Call, deadline: float) -> None:
    """Wait until the tenant's commits so far are in object storage (a sync that begins now,
    shared with the tenant's other waiters); DEADLINE_EXCEEDED / REPLICATION_DEADLINE_EXCEEDED at
    ``deadline`` (time.monotonic()), SHUTTING_DOWN once a shutdown's grace period is over."""
    started = time.monotonic()
    synced = asyncio.ensure_future(tokens.replicated(call.tenant))
    try:
        with _changes(hot_path, call.tenant) as changed:
            while not synced.done():
                if (left := deadline - time.monotonic()) <= 0:
                    raise _not_replicated(call.tenant, time.monotonic() - started)
                woken = asyncio.ensure_future(changed.wait())
                await asyncio.wait((synced, woken), timeout=left, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                changed.clear()
                _unless_stopped(
                    hot_path,
                    f"tenant {call.tenant}'s writes to reach object storage (they replicate after the restart)",
                )
        synced.result()
    finally:
        synced.cancel()


def _not_replicated(tenant: str, waited: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"the call waited {waited:.1f}s, to its deadline, for tenant {tenant}'s writes to reach object storage "
        "(mnemosyne_replication_lag_seconds says how far behind it is); call again later, or with a longer deadline",
        reason="REPLICATION_DEADLINE_EXCEEDED",
    )


def _watched_timeline_ended(tenant: str, sequence: int) -> FailedPrecondition:
    """A watch whose tenant's transitions now end before its own position: the tenant was erased,
    restored or replaced (or moved away) while it ran."""
    return FailedPrecondition(
        f"tenant {tenant} was erased, restored or replaced while this watch ran (its transitions now end before "
        f"sequence {sequence}): the events streamed so far are of its earlier timeline; watch it again with "
        "after_sequence 0",
        reason="TIMELINE_CHANGED",
    )


def _unless_stopped(hot_path: HotPath, awaited: str) -> None:
    """UNAVAILABLE / SHUTTING_DOWN once a shutdown's grace period is over (``HotPath.end_waits``):
    the call answers, rather than being cut without a status when the server stops."""
    if hot_path.waits_ended:
        raise Unavailable(
            f"the server is shutting down: it stopped waiting for {awaited}; call again once it is back",
            reason="SHUTTING_DOWN",
            retry_after_seconds=1.0,
        )


def _gave_up(open_ids: list[int], waited: float) -> DeadlineExceeded:
    shown = ",".join(str(i) for i in open_ids[:100])
    return DeadlineExceeded(
        f"the call waited {waited:.1f}s, to its deadline, for {len(open_ids)} writes of its consistency token that "
        f"are not applied yet (events {shown}); call again later, with a longer deadline, or without the token",
        reason="CONSISTENCY_DEADLINE_EXCEEDED",
        metadata={"open_event_ids": shown},
    )


async def watch(hot_path: HotPath, call: Call, *, after_event_id: int, after_sequence: int) -> AsyncIterator[Event]:
    """Every status transition after ``after_sequence`` of events after ``after_event_id``,
    replayed from the durable log, then live, until the client goes or the server stops."""
    sequence = after_sequence
    read_before = False
    with _changes(hot_path, call.tenant) as changed:
        while not hot_path.streams_ended:
            changed.clear()  # a change from here on is seen by the next read or wakes the wait
            try:
                chunk = await call.run(
                    lambda s=sequence: hot_path.transitions(
                        call.tenant, after_event_id=after_event_id, after_sequence=s
                    )
                )
            except (FailedPrecondition, Unavailable) as refused:
                # After a first read, a point past the tenant's transitions is not the caller's
                # but the tenant's doing: erased (or being erased), restored or replaced.
                if read_before and refused.reason in ("SEQUENCE_AHEAD", "EVENT_AHEAD", "TENANT_ERASING"):
                    raise _watched_timeline_ended(call.tenant, sequence) from None
                raise
            read_before = True
            for event in chunk.events:
                yield event
            sequence = chunk.through_sequence
            if not chunk.more and not hot_path.streams_ended:
                await _until(changed, WATCH_REREAD_SECONDS)
