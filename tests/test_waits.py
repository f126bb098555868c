"""The waits of waiting calls (transport/waits.py) end when their call is cancelled, whatever else
happens at that moment."""

from __future__ import annotations

import asyncio

from mnemosyne.transport import waits


def test_a_wait_cancelled_as_its_change_comes_ends_cancelled() -> None:
    """A Flush's client goes away (gRPC cancels the call's task) just as the tenant's hot path
    changes (the wait's event is set): the wait must end with the cancellation. With Python
    3.11's asyncio.wait_for it returned as if woken by the change, so the call went on waiting,
    counted as a waiting call, for a client that had gone (tests/test_fair_serving.py's cancelled
    flushes, now and then)."""

    async def scenario(wake_first: bool) -> str:
        changed = asyncio.Event()
        task = asyncio.create_task(waits._until(changed, 30))
        for _ in range(3):
            await asyncio.sleep(0)  # the task waits for the change
        if wake_first:
            changed.set()
        task.cancel()  # in the same turn of the loop as the change
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(scenario(wake_first=True)) == "cancelled"
    assert asyncio.run(scenario(wake_first=False)) == "cancelled"


def test_a_wait_ends_at_its_change_or_its_time() -> None:
    async def scenario() -> tuple[float, bool]:
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, changed.set)
        started = loop.time()
        await waits._until(changed, 30)
        woken = loop.time() - started
        await waits._until(changed, 0.05)  # no change: ends at its time, without an error
        return woken, changed.is_set()

    woken, still_set = asyncio.run(scenario())
    assert woken < 5 and not still_set  # woken by the change, which it cleared
