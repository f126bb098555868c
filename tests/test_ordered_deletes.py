"""Deletes are ordered, and fast (issue 40, docs/hot-path.md "Read your own writes"): a forget is
accepted after every write queued before it, returns at its usual latency whatever the backlog,
and nothing queued before it outlives it — not a write its filter matches, not a later copy of the
content it erased — and no byte of those writes is left in any file, across a SIGKILL in the drain.

Real server processes; the backlog is held by the test seam MNEMOSYNE_TEST_HOLD_BACKLOG (the
workers take nothing unless a read waits for it), never made by load."""

from __future__ import annotations

import secrets
import string
import time
from pathlib import Path

from mnemosyne.client import MemoryClient, RetainItem
from tests.support import ServerProcess
from tests.test_erasure import texts_left

_LETTERS = string.ascii_letters + string.digits


def _secret() -> str:
    return "".join(secrets.choice(_LETTERS) for _ in range(24))


def _held(server_factory, tmp_path: Path, **kwargs: object) -> tuple[ServerProcess, Path]:
    hold = tmp_path / "hold-backlog"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}, **kwargs).start()
    return server, hold


def test_a_forget_by_filter_outruns_the_backlog_and_nothing_queued_resurrects(server_factory, tmp_path: Path) -> None:
    server, hold = _held(server_factory, tmp_path, args=["--hot-path-batch", "32"])
    doomed = {i: _secret() for i in range(200)}
    with MemoryClient(server.target, timeout=120) as c:
        c.hot_path("filtered", "enable")
        kept = c.retain("filtered", "A note the user keeps", metadata={"user": "ann"}).memory_id
        for start in range(0, 2000, 500):
            c.retain_batch(
                "filtered",
                [
                    RetainItem(f"Other note {i} about bay B-{i % 50}", metadata={"user": "bob"})
                    for i in range(start, start + 500)
                ],
                fast=True,
            )
        queued = c.retain_batch(
            "filtered",
            [RetainItem(f"Ann's note {i}: the code is {s}", metadata={"user": "ann"}) for i, s in doomed.items()],
            fast=True,
        )
        # A copy of one doomed text under another user's metadata, queued after it: it would have
        # been the doomed write's duplicate, so it goes with it.
        copy = c.retain("filtered", f"Ann's note 7: the code is {doomed[7]}", metadata={"user": "carl"}, fast=True)
        assert c.hot_path("filtered", "status").queue_depth == 2201
        started = time.monotonic()
        assert c.forget_memories("filtered", {"user": "ann"}) == 1  # the one applied memory
        took = time.monotonic() - started
        assert took < 2.0, took  # it did not wait for the held backlog
        assert c.hot_path("filtered", "status").queue_depth == 2000
        for result in (*queued, copy):
            event = c.get_event("filtered", result.event_id)
            assert event.status == "failed" and event.error_reason == "FORGOTTEN_BEFORE_APPLIED"
        assert c.get_memory("filtered", kept).forgotten
        assert texts_left(server.data_dir, doomed.values()) == {}  # scrubbed at once, every file
        hold.unlink()
        time.sleep(0.3)  # the drain is under way ...
    server.kill()  # ... and the process dies in it
    server.env.pop("MNEMOSYNE_TEST_HOLD_BACKLOG")
    server.start()
    with MemoryClient(server.target, timeout=120) as c:
        assert c.hot_path("filtered", "flush", timeout_seconds=120).failed == 0
        status = c.hot_path("filtered", "status")
        assert status.queue_depth == 0 and status.failed == 201 and status.writes == 2001
        assert c.list_memories("filtered", metadata_equals={"user": "ann"}).memories == []
        for secret in list(doomed.values())[:20]:
            assert all(secret not in h.memory.text for h in c.recall("filtered", f"the code is {secret}", k=5))
        assert len(c.list_memories("filtered", metadata_equals={"user": "bob"}, page_size=1000).memories) == 1000
        assert c.verify_integrity("filtered").valid
    assert texts_left(server.data_dir, doomed.values()) == {}


def test_a_forget_by_id_takes_the_queued_copies_of_its_content(server_factory, tmp_path: Path) -> None:
    """A queued write of the content a forget erases would have been that memory's duplicate: it
    is (DUPLICATE of the forgotten memory), never a new memory holding the content again."""
    server, hold = _held(server_factory, tmp_path)
    secret = _secret()
    with MemoryClient(server.target) as c:
        c.hot_path("by-id", "enable")
        memory_id = c.retain("by-id", f"The vault code is {secret}").memory_id
        c.retain_batch("by-id", [f"filler {i}" for i in range(100)], fast=True)
        again = c.retain("by-id", f"The vault code is {secret}", metadata={"via": "fast"}, fast=True)
        assert c.forget("by-id", memory_id)
        event = c.get_event("by-id", again.event_id)
        assert event.status == "succeeded" and tuple(event.duplicate_of_memory_ids) == (memory_id,)
        assert texts_left(server.data_dir, [secret]) == {}
        hold.unlink()
        c.hot_path("by-id", "flush", timeout_seconds=60)
        assert c.recall("by-id", f"vault code {secret}", k=3) == [] or all(
            secret not in h.memory.text for h in c.recall("by-id", f"vault code {secret}", k=3)
        )
        assert [m.id for m in c.list_memories("by-id", page_size=200).memories if secret in m.text] == []
    assert texts_left(server.data_dir, [secret]) == {}


def test_an_update_takes_the_queued_copies_of_the_text_it_replaces(server_factory, tmp_path: Path) -> None:
    """A queued write of the text an update replaces would have been its duplicate: it is, and no
    second memory brings the old text back."""
    server, hold = _held(server_factory, tmp_path)
    with MemoryClient(server.target) as c:
        c.hot_path("updated", "enable")
        memory_id = c.retain("updated", "The meeting is on Monday").memory_id
        again = c.retain("updated", "The meeting is on Monday", fast=True)
        c.update_memory("updated", memory_id, text="The meeting is on Tuesday")
        event = c.get_event("updated", again.event_id)
        assert event.status == "succeeded" and tuple(event.duplicate_of_memory_ids) == (memory_id,)
        hold.unlink()
        c.hot_path("updated", "flush", timeout_seconds=60)
        assert [m.text for m in c.list_memories("updated").memories] == ["The meeting is on Tuesday"]
