"""One order of writes (issue 40): adjudication follows ACCEPTANCE positions, never the order in
which writes are applied. The differential test drains one workload of fast writes (exact
duplicates, same-subject conflicts and supersessions, near duplicates, batches) in acceptance
order on one server and in random jumps on another (the worker-order test seam), and compares
every outcome: the memories, their supersessions (read from the tenant file), the duplicates and
every event. Memory ids differ between the runs, so everything is compared by the event id (the
acceptance position) of the write that created each memory. Real server processes; the backlog
is made by holding it (MNEMOSYNE_TEST_HOLD_BACKLOG), not by load."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.v1 import (
    events_pb2,
    events_pb2_grpc,
    hot_path_pb2,
    hot_path_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
)
from tests.support import ServerProcess

TENANT = "ordered"
SUBJECTS = ["RF-100", "RF-200", "RF-300"]
VALUES = ["open", "refunded", "awaiting review", "closed"]


def _workload(seed: int) -> list[list[memory_pb2.RetainItem] | str]:
    """Calls in order: a list is one fast RetainBatch, a string one fast Retain."""
    rng = random.Random(seed)
    pool = [f"Parcel PX-{n} waits at depot D-{n % 3}" for n in range(12)]
    near = [f"The customer asked for a refund of order {n} on Monday" for n in range(6)]
    calls: list[list[memory_pb2.RetainItem] | str] = []
    for step in range(160):
        kind = rng.random()
        if kind < 0.3:
            text = rng.choice(pool)  # exact duplicates
        elif kind < 0.6:
            text = f"Ticket {rng.choice(SUBJECTS)} status: {rng.choice(VALUES)}."  # same-subject conflicts
            if rng.random() < 0.3:
                text += f" Order {rng.randint(1, 3)} status: {rng.choice(VALUES)}."  # two facts in one memory
        elif kind < 0.8:
            text = rng.choice(near) + rng.choice(["", " please", " again", " as agreed"])  # near duplicates
        else:
            text = f"Plain note number {step} about shelf SH-{rng.randint(1, 5)}"
        if rng.random() < 0.2:
            extra = [memory_pb2.RetainItem(text=rng.choice(pool)), memory_pb2.RetainItem(text=text)]
            calls.append(extra)
        else:
            calls.append(text)
    return calls


def _drained(server: ServerProcess, hold: Path, calls: list[list[memory_pb2.RetainItem] | str]) -> dict[str, Any]:
    """Queue the workload behind the held backlog, release it, wait for the drain; every outcome,
    keyed by acceptance position."""
    with grpc.insecure_channel(server.target) as channel:
        memories = memory_pb2_grpc.MemoryServiceStub(channel)
        hot = hot_path_pb2_grpc.HotPathServiceStub(channel)
        events = events_pb2_grpc.EventsServiceStub(channel)
        hot.Enable(hot_path_pb2.HotPathRequest(tenant=TENANT))
        for call in calls:
            if isinstance(call, str):
                memories.Retain(memory_pb2.RetainRequest(tenant=TENANT, text=call, fast=True))
            else:
                memories.RetainBatch(memory_pb2.RetainBatchRequest(tenant=TENANT, items=call, fast=True))
        assert hot.Status(hot_path_pb2.HotPathRequest(tenant=TENANT)).queue_depth > 100  # all of it held
        hold.unlink()
        assert hot.Flush(hot_path_pb2.FlushRequest(tenant=TENANT, timeout_seconds=120)).failed == 0
        listed = list(events.ListEvents(events_pb2.ListEventsRequest(tenant=TENANT, page_size=1000)).events)
        made = {e.created_memory_ids[0]: e.event_id for e in listed if e.created_memory_ids}
        by_id = {}
        token = ""
        while True:
            page = memories.ListMemories(
                memory_pb2.ListMemoriesRequest(tenant=TENANT, page_size=1000, page_token=token, include_forgotten=True)
            )
            by_id.update({m.id: m for m in page.memories})
            token = page.next_page_token
            if not token:
                break

    def key(memory_id: int) -> int:
        return made[memory_id] if memory_id else 0

    outcome: dict[str, Any] = {
        "events": {
            e.event_id: (
                e.status,
                e.error_reason,
                sorted(key(i) for i in e.created_memory_ids),
                sorted(key(i) for i in e.duplicate_of_memory_ids),
                sorted(key(i) for i in e.near_duplicate_of),
            )
            for e in listed
        },
        "memories": {
            key(m.id): (m.text, m.scope, dict(m.metadata), m.forgotten, key(m.superseded_by), key(m.merged_into))
            for m in by_id.values()
        },
    }
    with sqlite3.connect(f"file:{server.data_dir / 'tenants' / (TENANT + '.sqlite')}?mode=ro", uri=True) as db:
        outcome["supersessions"] = sorted(
            (key(m), s, p, o, key(by), new) for m, s, p, o, by, new in db.execute(
                "SELECT memory_id, subject, predicate, object, superseded_by, new_object FROM supersessions"
            )
        )  # fmt: skip
    return outcome


@pytest.mark.parametrize("seed", [3, 11])
def test_any_order_of_application_gives_the_outcomes_of_acceptance_order(
    server_factory,
    tmp_path: Path,
    seed: int,
) -> None:
    calls = _workload(seed)
    runs = []
    for name, order in (("fifo", ""), ("jumps", f"random:{seed * 7 + 1}")):
        hold = tmp_path / f"hold-{name}"
        hold.touch()
        env = {"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}
        if order:
            env["MNEMOSYNE_TEST_WORKER_ORDER"] = order
        server = server_factory(tmp_path / name, env=env, args=["--hot-path-batch", "8"]).start()
        runs.append(_drained(server, hold, calls))
    fifo, jumps = runs
    assert len(fifo["events"]) > 150 and fifo["supersessions"], "the workload has writes and conflicts"
    assert sum(1 for e in fifo["events"].values() if e[3]) > 20, "and exact duplicates"
    assert sum(1 for e in fifo["events"].values() if e[4]) > 5, "and near duplicates"
    assert sum(1 for m in fifo["memories"].values() if m[4]) > 5, "and superseded memories"
    assert jumps["events"] == fifo["events"]
    assert jumps["memories"] == fifo["memories"]
    assert jumps["supersessions"] == fifo["supersessions"]


def test_a_synchronous_write_accepted_after_a_queued_one_is_not_superseded_by_it(
    server_factory,
    tmp_path: Path,
) -> None:
    """Latest ACCEPTED fact wins: a synchronous write after a queued fast write of the same
    subject stays current when the queued one lands later (on main it lost to it)."""
    hold = tmp_path / "hold"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    with MemoryClient(server.target) as c:
        c.hot_path("sync", "enable")
        queued = c.retain("sync", "Ticket RF-88213 status: awaiting review.", fast=True)
        now = c.retain("sync", "Ticket RF-88213 status: refunded.")
        assert now.status == "created"
        hold.unlink()
        c.hot_path("sync", "flush", timeout_seconds=60)
        older = c.get_event("sync", queued.event_id).created_memory_ids[0]
        assert c.get_memory("sync", now.memory_id).superseded_by == 0
        assert c.get_memory("sync", older).superseded_by == now.memory_id
        top = c.recall("sync", "ticket RF-88213 status", k=2)
        assert top[0].memory.id == now.memory_id
        assert c.verify_integrity("sync").valid


def test_a_synchronous_write_of_queued_content_is_its_duplicate(
    server_factory,
    tmp_path: Path,
) -> None:
    """The earliest accepted duplicate survives: a synchronous write of content still queued waits
    for the queued write (taken ahead of the held backlog) and is its duplicate (on main the
    synchronous write's memory survived and the queued one became its duplicate)."""
    hold = tmp_path / "hold"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}).start()
    with MemoryClient(server.target, session_consistency=False) as c:  # its reads must not take the backlog first
        c.hot_path("dup", "enable")
        backlog = c.retain_batch("dup", [f"backlog entry {i}" for i in range(50)], fast=True)
        queued = c.retain("dup", "Locker L-77 holds the spare keys", metadata={"from": "fast"}, fast=True)
        again = c.retain("dup", "Locker L-77 holds the spare keys", metadata={"from": "sync"})
        first = c.get_event("dup", queued.event_id)
        assert first.status == "succeeded" and again.status == "duplicate"
        assert again.memory_id == first.created_memory_ids[0]
        assert c.get_memory("dup", again.memory_id).metadata == {"from": "fast"}  # the first accepted
        assert c.get_event("dup", backlog[0].event_id).status == "pending"  # the backlog was not applied
