"""Events (the specification's §9.3, docs/seed-mapping.md): GetEvent, ListEvents pagination and filters, and WatchEvents streams
that deliver every transition and resume from the durable log without missing one."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from mnemosyne.client import Event, MemoryClient
from mnemosyne.client.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from tests.support import serve_args

ORDER = ["pending", "running", "succeeded"]


def _watch_until(
    client: MemoryClient, tenant: str, done, *, after_sequence: int = 0, limit: int | None = None
) -> list[Event]:
    """Collect streamed transitions until ``done(collected)`` or ``limit`` of them (60 s cap)."""
    seen: list[Event] = []
    for event in client.watch_events(tenant, after_sequence=after_sequence, timeout=60):
        seen.append(event)
        if (limit is not None and len(seen) >= limit) or done(seen):
            break
    return seen


def _finished(ids: set[int]):
    return lambda seen: ids <= {e.event_id for e in seen if e.status in ("succeeded", "failed")}


def test_watch_events_delivers_every_transition_of_a_batch(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    results = client.retain_batch(tenant, [f"watched batch item {i}: bin B-{i}" for i in range(20)], fast=True)
    ids = {r.event_id for r in results}
    assert len(ids) == 20
    seen = _watch_until(client, tenant, _finished(ids))
    by_event: dict[int, list[str]] = defaultdict(list)
    for e in seen:
        by_event[e.event_id].append(e.status)
    assert set(by_event) == ids
    assert all(statuses == ORDER for statuses in by_event.values()), by_event
    sequences = [e.sequence for e in seen]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences) == 60
    assert all(e.created_memory_ids for e in seen if e.status == "succeeded")
    assert not any(e.created_memory_ids for e in seen if e.status != "succeeded")


def test_a_resumed_watch_misses_no_transition(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    first = {r.event_id for r in client.retain_batch(tenant, [f"first wave {i}" for i in range(10)], fast=True)}
    head = _watch_until(client, tenant, lambda seen: False, limit=7)  # the stream drops here
    # While nobody watches, more work is accepted and processed.
    second = {r.event_id for r in client.retain_batch(tenant, [f"second wave {i}" for i in range(10)], fast=True)}
    client.hot_path(tenant, "flush")
    tail = _watch_until(client, tenant, _finished(first | second), after_sequence=head[-1].sequence)
    resumed = head + tail
    full = _watch_until(client, tenant, _finished(first | second))  # a replay from the start
    assert [(e.sequence, e.event_id, e.status) for e in resumed] == [(e.sequence, e.event_id, e.status) for e in full]
    assert [e.sequence for e in resumed] == list(range(1, len(resumed) + 1))
    assert len(resumed) == 3 * 20


def _assert_points_ahead_refused(
    client: MemoryClient, tenant: str, last: int, field: str, reason: str, last_key: str
) -> None:
    """A watch from ``field`` past ``last`` (the tenant's), or past 0 of a tenant with nothing, is
    refused at once with ``reason`` and the last point in ``last_key``."""
    for ahead, on in ((last + 1, tenant), (2**63 - 1, tenant), (1, tenant + "-nothing")):
        with pytest.raises(FailedPreconditionError) as refused:
            next(iter(client.watch_events(on, timeout=10, **{field: ahead})))
        assert refused.value.reason == reason, refused.value
        assert int(refused.value.metadata[last_key]) == (last if on == tenant else 0)


def test_a_watch_resuming_after_a_sequence_never_given_is_refused_not_left_waiting(
    client: MemoryClient, tenant: str
) -> None:
    """A resumption point past the last transition the tenant ever recorded (forged, from another
    tenant or server, or from before a restore or an erasure) is refused (SEQUENCE_AHEAD, metadata
    ``last_sequence``): the watch would otherwise wait, silently skipping every transition up to
    it. The last sequence itself resumes."""
    client.hot_path(tenant, "enable")
    ids = {r.event_id for r in client.retain_batch(tenant, ["ahead one", "ahead two"], fast=True)}
    last = _watch_until(client, tenant, _finished(ids))[-1].sequence
    _assert_points_ahead_refused(client, tenant, last, "after_sequence", "SEQUENCE_AHEAD", "last_sequence")
    more = {r.event_id for r in client.retain_batch(tenant, ["ahead three"], fast=True)}
    resumed = _watch_until(client, tenant, _finished(more), after_sequence=last)
    assert resumed[0].sequence == last + 1


def test_a_watch_after_an_event_id_never_given_is_refused_not_left_waiting(client: MemoryClient, tenant: str) -> None:
    """An ``after_event_id`` past the last event id the tenant gave (another tenant's, forged,
    from before a restore or an erasure) is refused (EVENT_AHEAD, metadata ``last_event_id``), as
    a sequence ahead is: the watch would otherwise wait, silently skipping every event up to it.
    The last event id itself, still in the inbox or applied, is watched after."""
    client.hot_path(tenant, "enable")
    last = max(r.event_id for r in client.retain_batch(tenant, ["event ahead one", "event ahead two"], fast=True))
    _assert_points_ahead_refused(client, tenant, last, "after_event_id", "EVENT_AHEAD", "last_event_id")
    more = {r.event_id for r in client.retain_batch(tenant, ["event ahead three"], fast=True)}
    events = client.watch_events(tenant, after_event_id=last, timeout=30)
    assert next(iter(events)).event_id in more


def test_a_watch_of_a_tenant_erased_meanwhile_ends_saying_so(client: MemoryClient, tenant: str) -> None:
    """A watch open while its tenant is erased ends at once with TIMELINE_CHANGED naming the
    erasure, not later with SEQUENCE_AHEAD blaming the caller's resumption point. (Its deadline is
    shorter than the stream's idle re-read: only the erasure's wake-up ends it before.)"""
    client.hot_path(tenant, "enable")
    ids = {r.event_id for r in client.retain_batch(tenant, ["erased soon one", "erased soon two"], fast=True)}
    stream = iter(client.watch_events(tenant, timeout=15))
    seen: list[Event] = []
    for event in stream:
        seen.append(event)
        if _finished(ids)(seen):
            break
    client.erase_tenant(tenant)
    with pytest.raises(FailedPreconditionError) as ended:
        next(stream)
    assert ended.value.reason == "TIMELINE_CHANGED", ended.value
    assert "erased, restored or replaced while this watch ran" in ended.value.message


def test_a_watch_from_a_negative_point_is_refused_not_taken_from_the_start(client: MemoryClient, tenant: str) -> None:
    """A negative ``after_event_id`` or ``after_sequence`` is no point any watch gave: refused
    (RESUME_POINT_INVALID) naming the field, on a tenant with events and one without a file."""
    client.hot_path(tenant, "enable")
    client.retain(tenant, "a note before the negative watch", fast=True)
    for on in (tenant, tenant + "-nothing"):
        for field, value in (("after_event_id", -1), ("after_sequence", -5), ("after_sequence", -(2**63))):
            with pytest.raises(InvalidArgumentError) as refused:
                next(iter(client.watch_events(on, timeout=10, **{field: value})))
            assert refused.value.reason == "RESUME_POINT_INVALID", refused.value
            assert f"{field} is {value}" in str(refused.value), refused.value
            given = {"after_event_id": "or an event_id", "after_sequence": "or a sequence"}[field]
            assert given in str(refused.value), refused.value


def test_list_events_pagination_is_stable_while_new_events_arrive(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    client.retain_batch(tenant, [f"paged event {i}" for i in range(25)], fast=True)
    collected: list[int] = []
    token = ""
    wave = 0
    while True:
        page = client.list_events(tenant, page_size=7, page_token=token)
        collected.extend(e.event_id for e in page.events)
        if wave < 3:  # new events arrive between pages; statuses change as workers run
            wave += 1
            client.retain_batch(tenant, [f"late event {wave}-{i}" for i in range(5)], fast=True)
        token = page.next_page_token
        if not token:
            break
    assert collected == sorted(set(collected)), "an event repeated or went backwards"
    assert collected == list(range(1, 25 + 15 + 1)), "an event was skipped"


def test_list_events_filters_by_status_and_time(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    early = client.retain(tenant, "early event", fast=True).event_id
    client.hot_path(tenant, "flush")
    cut = time.time()
    time.sleep(0.01)
    late = client.retain(tenant, "late event", fast=True).event_id
    client.hot_path(tenant, "flush")
    assert [e.event_id for e in client.list_events(tenant, accepted_after=cut).events] == [late]
    assert [e.event_id for e in client.list_events(tenant, status="succeeded").events] == [early, late]
    assert client.list_events(tenant, status="pending").events == []


def test_get_event_reports_duplicates_with_the_original(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    original = client.retain(tenant, "the same fact twice", fast=True).event_id
    copy = client.retain(tenant, "The  same fact TWICE", fast=True).event_id  # same after normalising
    client.hot_path(tenant, "flush")
    created = client.get_event(tenant, original)
    duplicate = client.get_event(tenant, copy)
    assert duplicate.status == "succeeded" and duplicate.created_memory_ids == ()
    assert duplicate.duplicate_of_memory_ids == created.created_memory_ids
    assert client.hot_path(tenant, "status").duplicates == 1


def test_watch_runs_beside_writers(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    accepted: set[int] = set()

    def produce() -> None:
        for n in range(5):
            accepted.update(
                r.event_id for r in client.retain_batch(tenant, [f"live {n}-{i}" for i in range(8)], fast=True)
            )

    writer = threading.Thread(target=produce)
    writer.start()
    seen = _watch_until(client, tenant, lambda s: len([e for e in s if e.status == "succeeded"]) >= 40)
    writer.join()
    assert {e.event_id for e in seen if e.status == "succeeded"} == accepted


def test_a_near_duplicate_is_named_on_its_event(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    first = client.retain(tenant, "The customer requested a refund for ticket RF-88213", fast=True).event_id
    client.hot_path(tenant, "flush")
    second = client.retain(tenant, "The customer requested a refund for ticket RF-88213 yesterday", fast=True).event_id
    client.hot_path(tenant, "flush")
    original = client.get_event(tenant, first).created_memory_ids
    near = client.get_event(tenant, second)
    assert near.status == "succeeded" and near.created_memory_ids != original
    assert near.near_duplicate_of == original


def test_a_fast_conversation_is_one_operation(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    messages = [("user", "My parcel PX-77 never arrived."), ("assistant", "I reopened claim CL-4410 for parcel PX-77.")]
    events = [client.retain_conversation(tenant, messages, request_id=f"conv-{i}", fast=True) for i in range(2)]
    assert [e.status for e in events] == ["enqueued", "enqueued"]
    client.hot_path(tenant, "flush")
    first, second = (client.get_event(tenant, e.event_id) for e in events)
    assert len(first.created_memory_ids) == 1 and second.duplicate_of_memory_ids == first.created_memory_ids


def test_finished_events_are_deleted_after_the_retention_limit_and_open_ones_never(server_factory, tmp_path) -> None:
    hold = tmp_path / "hold"
    server = server_factory(
        env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}, args=["--event-retention-seconds", "3"]
    ).start()
    with MemoryClient(server.target, timeout=60) as c:
        c.hot_path("kept", "enable")
        hold.touch()  # the old events stay open (never deleted) until a watcher read the first transition
        old = [
            r.event_id for r in c.retain_batch("kept", [f"old event {i}: crate C-{i}" for i in range(30)], fast=True)
        ]
        resume_from = _watch_until(c, "kept", lambda seen: True)[0].sequence  # it stopped at its first
        hold.unlink()
        c.hot_path("kept", "flush", timeout_seconds=30)
        hold.touch()  # this one stays pending, however old it gets
        (pending,) = [r.event_id for r in c.retain_batch("kept", ["open event: crate C-999"], fast=True)]
        time.sleep(3.5)  # past the 3 s limit for the finished ones
        hold.unlink()
        # The worker deletes expired events as it works on the tenant; new writes bring it back.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c.retain_batch("kept", [f"new event {time.monotonic()}"], fast=True)
            c.hot_path("kept", "flush", timeout_seconds=30)
            listed = {e.event_id for e in c.list_events("kept", page_size=1000).events}
            if not listed & set(old):
                break
            time.sleep(0.2)
        assert not listed & set(old), "expired events are still listed"
        assert pending in listed and c.get_event("kept", pending).status == "succeeded"
        with pytest.raises(NotFoundError) as missing:
            c.get_event("kept", old[0])
        assert "kept for 3s" in missing.value.message
        # Resuming a watch below what was deleted would silently skip transitions: refused.
        with pytest.raises(FailedPreconditionError) as refused:
            next(iter(c.watch_events("kept", after_sequence=resume_from, timeout=10)))
        assert refused.value.reason == "EVENTS_PRUNED"
        pruned_through = int(refused.value.metadata["pruned_through_sequence"])
        assert pruned_through > resume_from
        # From where it says, or from 0 (everything kept), the stream works and has no old event.
        replay = _watch_until(c, "kept", lambda seen: False, after_sequence=pruned_through, limit=1)
        assert replay and replay[0].sequence > pruned_through
        assert not {e.event_id for e in _watch_until(c, "kept", lambda seen: False, limit=3)} & set(old)
    # The memories themselves are untouched: only the log's record of how they were written goes.
    with MemoryClient(server.target) as c:
        assert c.recall("kept", "old event 7 crate C-7", k=1)[0].memory.text == "old event 7: crate C-7"


def _listed_within(c: MemoryClient, tenant: str, gone: set[int], seconds: float) -> set[int]:
    """The tenant's listed event ids once none of ``gone`` is among them, or at the deadline.
    Only reads: nothing here gives the workers a reason to look at the tenant."""
    deadline = time.monotonic() + seconds
    while True:
        listed = {e.event_id for e in c.list_events(tenant, page_size=1000).events}
        if not listed & gone or time.monotonic() > deadline:
            return listed
        time.sleep(0.2)


def test_an_idle_tenant_s_events_expire_without_another_write_even_across_a_restart(server_factory) -> None:
    server = server_factory(args=["--event-retention-seconds", "2"]).start()
    with MemoryClient(server.target, timeout=60) as c:
        c.hot_path("idle", "enable")
        first = {
            r.event_id for r in c.retain_batch("idle", [f"idle event {i}: bin I-{i}" for i in range(10)], fast=True)
        }
        c.hot_path("idle", "flush", timeout_seconds=30)
        assert first <= {e.event_id for e in c.list_events("idle", page_size=1000).events}
        assert not _listed_within(c, "idle", first, 20) & first, "an idle tenant kept its expired events"
        second = {
            r.event_id for r in c.retain_batch("idle", [f"second event {i}: bin J-{i}" for i in range(10)], fast=True)
        }
        c.hot_path("idle", "flush", timeout_seconds=30)
    server.stop()  # before they expire: the restarted server must still delete them on time
    server.restart()
    with MemoryClient(server.target, timeout=60) as c:
        assert not _listed_within(c, "idle", second, 20) & second, "expired events survived the restart"
        assert len(c.list_memories("idle", page_size=100).memories) == 20  # only the records went


def test_a_negative_event_retention_is_refused_at_start(tmp_path) -> None:
    from mnemosyne.cli.commands import main

    with pytest.raises(SystemExit) as refused:  # argparse's refusal of the flag's value
        main(serve_args(tmp_path / "d", "--event-retention-seconds", "-1"))
    assert refused.value.code == 2
