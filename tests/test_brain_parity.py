"""MemoryBrain in process and against a server give the same values, field by field, for every
one of its public methods (found by introspection: a new method cannot be left out).

The scenario gives every compared field a non-default value at least once: supersedes,
superseded_by, superseded_at, merged_into, near_duplicate_of, events and their transitions.
Only what differs by nature between two runs is compared by presence instead of value: times
(created_at, superseded_at, accepted_at, finished_at, latency_ms, a revision's at), file sizes,
the surface a revision names (in process or gRPC), and the audit chain's head hash (each memory's ledger hashes are keyed with a random key of its own).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemosyne import MemoryBrain
from mnemosyne.client.types import ExpiryPolicy, FlushResult

TIMES = {
    "created_at",
    "superseded_at",
    "accepted_at",
    "finished_at",
    "latency_ms",
    "oldest_pending_seconds",
    "file_bytes",
    "head_hash",
    "at",  # a revision's time
    "surface",  # who made a revision: "in_process" or "grpc", set on both
}
LIFETIME = {"close"}


def _public_methods() -> set[str]:
    return {
        name for name, _ in inspect.getmembers(MemoryBrain, inspect.isfunction) if not name.startswith("_")
    } - LIFETIME


def _scenario(brain: MemoryBrain) -> dict[str, list[Any]]:
    """Every public method on the same inputs; their results by method."""
    results: dict[str, list[Any]] = {}

    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(brain, name)(*args, **kwargs)
        results.setdefault(name, []).append(result)
        return result

    call("ensure_init")
    old = call("retain", "Ticket RF-1 status: awaiting review")
    call("retain", "Ticket RF-1 status: refunded")  # supersedes the first
    first = call("retain", "The customer requested a refund for ticket RF-88213")
    call(
        "retain", "The customer requested a refund for ticket RF-88213 yesterday", metadata={"source": "chat"}
    )  # near duplicate
    call(
        "retain_batch",
        ["The refund takes 5 days to process", "The refund takes 5 days to process now", "", "x" * 40_000],
    )
    call("dedup")  # a report
    call("dedup", merge=True)  # merged_into
    call("get_memory", first.memory_id)
    call("get_memory", old.memory_id)  # superseded_by, superseded_at
    call("get_memory", first.memory_id + 1)  # merged into the first
    call("set_expiry_policy", ExpiryPolicy(default_ttl_seconds=86_400, update_extends=True, grace_seconds=3600))
    call("get_expiry_policy")
    call("list_memory_revisions", first.memory_id)
    call("list_memory_revisions", first.memory_id + 1)  # retained, then merged (related_memory_id)
    call("revert_memory", first.memory_id, 1)  # merging kept its text: nothing to restore
    call("list_memory_revisions", old.memory_id)
    call("set_expiry_policy", ExpiryPolicy())  # the memories below never expire
    call("recall", "refund status ticket", k=10)
    call("recall", "refund", k=3, mode="text")
    call("hot_path", "enable")
    call("consistency_token")  # the last read (a recall) waited for the writes before it: none
    fast = call("retain", "The parcel PX-77 was delivered on Monday", fast=True)
    call("consistency_token")  # the fast write's
    call("hot_path", "flush")
    call("get_event", fast.event_id)
    call("list_events", page_size=10)
    call("list_events", status="succeeded")
    call("hot_path", "status")
    call("hot_path", "disable")
    call("forget", old.memory_id)
    call("forget", old.memory_id)  # already forgotten
    call("verify_integrity")
    call("stats")
    return results


def _shape(value: Any) -> Any:
    """A value with times and sizes replaced by whether they were set, and a Flush's counts by
    whether they agree: how many fast writes were still open when the Flush began depends on
    whether the workers got to them first (0 or 1 here, on either side)."""
    if isinstance(value, FlushResult):
        assert value.flushed == value.succeeded + value.failed and value.flushed <= 1, value
        value = dataclasses.replace(value, flushed=0, succeeded=0)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: (bool(getattr(value, f.name)) if f.name in TIMES else _shape(getattr(value, f.name)))
            for f in dataclasses.fields(value)
        }
    if isinstance(value, (list, tuple)):
        return [_shape(v) for v in value]
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return value


def _non_default(results: dict[str, list[Any]], field: str) -> bool:
    """Whether some result, at any depth, has ``field`` set to something other than its default."""

    def walk(value: Any) -> bool:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return any(
                (f.name == field and bool(getattr(value, f.name))) or walk(getattr(value, f.name))
                for f in dataclasses.fields(value)
            )
        if isinstance(value, (list, tuple)):
            return any(walk(v) for v in value)
        return False

    return any(walk(r) for rs in results.values() for r in rs)


def _sockets() -> int:
    return sum(
        os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


def _run(make: Callable[[], MemoryBrain]) -> dict[str, list[Any]]:
    brain = make()
    try:
        return _scenario(brain)
    finally:
        brain.close()


def test_every_method_gives_the_same_values_in_process_and_against_a_server(
    tmp_path: Path, target: str, tenant: str
) -> None:
    sockets = _sockets()
    local = _run(lambda: MemoryBrain(tmp_path / "mem", tenant=tenant))
    assert _sockets() <= sockets  # in process: no connection was opened
    remote = _run(lambda: MemoryBrain(target, tenant=tenant))
    assert set(local) == set(remote) == _public_methods(), "the scenario must call every public method"
    for field in (
        "supersedes",
        "superseded_by",
        "superseded_at",
        "merged_into",
        "near_duplicate_of",
        "created_memory_ids",
        "event_id",
        "attempts",
        "groups",
        "related_memory_id",
    ):
        assert _non_default(local, field), f"the scenario never sets {field}: the comparison would prove nothing"
    for method in sorted(local):
        if method == "consistency_token":  # opaque, of a timeline of its own on each side: is there one
            assert [bool(t) for t in local[method]] == [bool(t) for t in remote[method]] == [False, True]
            continue
        assert _shape(local[method]) == _shape(remote[method]), method


def test_a_mode_that_does_not_exist_is_refused_the_same_in_process_and_against_a_server(
    tmp_path: Path, target: str, tenant: str
) -> None:
    refusals = []
    for brain in (MemoryBrain(tmp_path / "mem", tenant=tenant), MemoryBrain(target, tenant=tenant)):
        with brain, pytest.raises(ValueError) as refused:
            brain.recall("anything", mode="fuzzy")
        refusals.append(str(refused.value))
    assert (
        refusals == ["INVALID_ARGUMENT RECALL_MODE_INVALID: mode must be one of hybrid, vector, text; got 'fuzzy'"] * 2
    )


def test_errors_are_the_same_in_process_and_against_a_server(tmp_path: Path, target: str, tenant: str) -> None:
    from mnemosyne.client import MnemosyneClientError

    def errors(brain: MemoryBrain) -> list[tuple[str, str]]:
        found = []
        for call in (
            lambda: brain.retain(""),
            lambda: brain.recall("x", k=1000),
            lambda: brain.get_memory(999),
            lambda: brain.get_event(999),
            lambda: brain.list_events(page_token="forged"),
            lambda: brain.hot_path("flush", timeout_seconds=float("nan")),
            lambda: brain.dedup(threshold=7.0),
            lambda: brain.forget(12345),
            lambda: brain.list_events(status="lost"),
            lambda: brain.list_memory_revisions(999),
            lambda: brain.revert_memory(1, 99),
            lambda: brain.set_expiry_policy(ExpiryPolicy(grace_seconds=-1)),
        ):
            try:
                call()
                found.append(("OK", ""))
            except MnemosyneClientError as exc:
                found.append((exc.code.name, exc.reason))
        return found

    local = MemoryBrain(tmp_path / "mem", tenant=tenant)
    remote = MemoryBrain(target, tenant=tenant)
    try:
        local.ensure_init()
        local.retain("one memory")
        remote.retain("one memory")
        assert errors(local) == errors(remote)
        assert ("OK", "") not in errors(local)
    finally:
        local.close()
        remote.close()
