"""A reply lost after the commit: the retry with the same request_id returns the first result."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from mnemosyne.client import (
    AbortedError,
    MemoryClient,
    RecordChange,
    RetainItem,
    RetainResult,
    UnavailableError,
    UpdateResult,
)
from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.types import RetainItem as EngineItem
from mnemosyne.engine.write_path import payload_hash
from mnemosyne.errors import Conflict
from mnemosyne.store import ledger
from mnemosyne.v1 import memory_pb2


@pytest.mark.parametrize("method", ["retain", "retain_batch"])
def test_retry_after_reply_lost_post_commit_returns_first_result(server_factory, method: str) -> None:
    server = server_factory(env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": method}).start()
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(UnavailableError):  # the server died between commit and reply
            if method == "retain":
                client.retain("acme", "Ticket RF-88213 awaits finance review", request_id="lost-reply-1")
            else:
                client.retain_batch(
                    "acme", [RetainItem("batch one"), RetainItem("batch two")], request_id="lost-reply-1"
                )
    assert server.wait_exit() != 0
    server.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    server.restart()
    with MemoryClient(server.target) as client:
        if method == "retain":
            retry = client.retain("acme", "Ticket RF-88213 awaits finance review", request_id="lost-reply-1")
            assert retry.status == "created" and retry.memory_id == 1
            expected = 1
        else:
            retried = client.retain_batch(
                "acme", [RetainItem("batch one"), RetainItem("batch two")], request_id="lost-reply-1"
            )
            assert [(r.status, r.memory_id) for r in retried] == [("created", 1), ("created", 2)]
            expected = 2
        stats = client.stats("acme")
        assert stats.memories == expected and stats.writes == expected and stats.duplicates == 0
        assert stats.ledger_entries == expected
        assert client.verify_integrity("acme").valid


def test_request_ids_are_per_tenant(client: MemoryClient, tenant: str) -> None:
    a = client.retain(tenant, "same key, tenant a", request_id="shared-key")
    b = client.retain(tenant + "b", "same key, tenant b", request_id="shared-key")
    assert a.status == b.status == "created"


def _hash_as_earlier_versions_did(method: str, items: list[EngineItem]) -> str:
    # The formula request ids were stored with before the hash was assembled from prepared items:
    # a retry across an upgrade must still match (request ids are remembered for a day).
    return ledger.sha256_hex(
        ledger.canonical_json([method, [[i.text, i.scope or "global", i.metadata] for i in items]])
    )


@pytest.mark.parametrize(
    "items",
    [
        [EngineItem("Ticket RF-88213 awaits finance review")],
        [EngineItem("naïve café ☕ 𝄞", "", {"b": "2", "a": "ü"}), EngineItem("two", "workspace/ops", {})],
        [EngineItem('quotes " and \\ and \n newlines', "global", {"k": 'v"\\'})],
    ],
)
def test_the_request_hash_is_the_one_earlier_versions_stored(tmp_path: Path, items: list[EngineItem]) -> None:
    engine = Engine(EngineConfig(data_dir=tmp_path))
    try:
        _, prepared = engine.write_path.prepare(items, per_item_errors=True)
    finally:
        engine.close()
    assert len(prepared) == len(items)
    for method in ("retain", "retain_batch"):
        assert payload_hash(method, items, prepared) == _hash_as_earlier_versions_did(method, items)


def test_a_retry_naming_the_default_scope_is_the_same_request(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, "Ticket RF-1 closed", scope="global", request_id="scope-spelling")
    # The same request with the scope left out (the server applies the default): not a reuse.
    raw = client.memory.Retain(
        memory_pb2.RetainRequest(tenant=tenant, text="Ticket RF-1 closed", request_id="scope-spelling")
    )
    assert raw.result.memory_id == first.memory_id
    assert client.stats(tenant).writes == 1


def _queued_fast_write(client: MemoryClient, tenant: str, request_id: str) -> RetainResult:
    """A tenant with a memory and a workspace record, and a fast write of ``request_id`` queued
    (the backlog held: it stays in the tenant's inbox)."""
    client.retain(tenant, "one memory to merge")
    client.update_workspace(tenant, "w1", [RecordChange("put", "notes.md", "plan")], 0)
    client.hot_path(tenant, "enable")
    queued = client.retain(tenant, "queued while workers hold", request_id=request_id, fast=True)
    assert queued.status == "enqueued"
    return queued


KEYED_WRITES: dict[str, Callable[[MemoryClient, str], object]] = {
    "dedup": lambda client, t: client.dedup(t, merge=True, request_id="shared"),
    "update_global": lambda client, t: client.update_global(t, "# Global\n", 0, request_id="shared"),
    "update_workspace": lambda client, t: client.update_workspace(
        t, "w1", [RecordChange("put", "b.md", "x")], 1, request_id="shared"
    ),
    "edit_records": lambda client, t: client.edit_records(
        t, "workspace/w1", [RecordChange("put", "c.md", "y")], 1, request_id="shared"
    ),
    "revert_record": lambda client, t: client.revert_record(t, "workspace/w1", "notes.md", 1, 1, request_id="shared"),
    "expiry": lambda client, t: client.update_memory(t, 1, expires_at=time.time() + 86_400, request_id="shared"),
}


def test_a_request_id_held_by_a_queued_fast_write_is_refused_to_every_other_write(
    server_factory, tmp_path: Path
) -> None:
    """A fast write's request id waits in the tenant's inbox until a worker applies it: a write of
    another method with that id is refused then too (IDEMPOTENCY_KEY_REUSED, as once it was
    applied), and the fast write's own retry answers its first result once it was applied."""
    hold = tmp_path / "hold"
    hold.touch()
    server = server_factory(env={"MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)}).start()
    with MemoryClient(server.target, retries=0) as client:
        queued = {
            name: _queued_fast_write(client, f"queued-{name}".replace("_", "-"), "shared") for name in KEYED_WRITES
        }
        accepted = []
        for name, write in KEYED_WRITES.items():
            try:
                write(client, f"queued-{name}".replace("_", "-"))
                accepted.append(name)
            except AbortedError as error:
                assert error.reason == "IDEMPOTENCY_KEY_REUSED", (name, error)
        assert accepted == [], f"a request id held by a queued fast write was taken by {accepted}"
        hold.unlink()
        for name, first in queued.items():
            tenant = f"queued-{name}".replace("_", "-")
            client.hot_path(tenant, "flush", timeout_seconds=20)
            retry = client.retain(tenant, "queued while workers hold", request_id="shared", fast=True)
            assert retry.event_id == first.event_id
            assert client.list_records(tenant, "workspace/w1").generation == 1


def test_a_retried_update_revert_or_expiry_change_answers_its_first_result(client: MemoryClient, tenant: str) -> None:
    """The retry of an update whose reply was lost finds the memory already changed: it answered
    "nothing changed" (updated False, over HTTP revision 0), not the first result, and an id used for
    another request was refused only when that request changed something."""
    memory_id = client.retain(tenant, "The violet box holds 8 keys").memory_id
    calls: list[Callable[[], UpdateResult]] = [
        lambda: client.update_memory(tenant, memory_id, text="The violet box holds 9 keys", request_id="retried-1"),
        lambda: client.revert_memory(tenant, memory_id, 1, request_id="retried-2"),
        lambda: client.update_memory(tenant, memory_id, expires_at=4_000_000_000.0, request_id="retried-3"),
    ]
    for call in calls:
        first, retry = call(), call()
        assert first.updated, first
        assert (retry.updated, retry.memory.text) == (first.updated, first.memory.text), retry
    # The same id for another request that would change nothing: refused, as one that changes something is.
    reused_ids: list[Callable[[], UpdateResult]] = [
        lambda: client.update_memory(tenant, memory_id, text="The violet box holds 8 keys", request_id="retried-1"),
        lambda: client.revert_memory(tenant, memory_id, 4, request_id="retried-1"),
    ]
    for reused in reused_ids:
        with pytest.raises(AbortedError) as refused:
            reused()
        assert refused.value.reason == "IDEMPOTENCY_KEY_REUSED"
    assert [r.revision for r in client.list_memory_revisions(tenant, memory_id)] == [1, 2, 3, 4]


def test_a_retried_update_or_revert_answers_its_first_result_whatever_changed_since(
    client: MemoryClient, tenant: str
) -> None:
    """A retry carries what the first request asked; the memory may have changed since. Its
    payload was hashed with the memory's content (a metadata-only update's with the text it then
    had), so a retry after another writer's change was refused as IDEMPOTENCY_KEY_REUSED, and one
    after the memory's forget answered NOT_FOUND: each now answers the first result."""
    memory_id = client.retain(tenant, "The amber crate holds 3 lamps", metadata={"shelf": "1"}).memory_id
    retried: list[tuple[Callable[[], UpdateResult], Callable[[], object]]] = [
        (  # metadata alone, then the text changes
            lambda: client.update_memory(tenant, memory_id, metadata={"shelf": "2"}, request_id="since-1"),
            lambda: client.update_memory(tenant, memory_id, text="The amber crate holds 4 lamps"),
        ),
        (  # text alone, then the metadata changes
            lambda: client.update_memory(tenant, memory_id, text="The amber crate holds 5 lamps", request_id="since-2"),
            lambda: client.update_memory(tenant, memory_id, metadata={"shelf": "3"}),
        ),
        (  # the expiry alone, then the text changes
            lambda: client.update_memory(tenant, memory_id, expires_at=4_000_000_000.0, request_id="since-3"),
            lambda: client.update_memory(tenant, memory_id, text="The amber crate holds 6 lamps"),
        ),
        (  # a revert, then the metadata changes
            lambda: client.revert_memory(tenant, memory_id, 1, request_id="since-4"),
            lambda: client.update_memory(tenant, memory_id, metadata={"shelf": "4"}),
        ),
    ]
    for call, change in retried:
        first = call()
        change()
        retry = call()
        assert first.updated and retry.updated and retry.memory.id == memory_id, retry
    revisions = len(client.list_memory_revisions(tenant, memory_id))
    client.forget(tenant, memory_id)
    for call, _ in retried:
        retry = call()  # the first result stands; nothing is written again
        assert retry.updated and retry.memory.forgotten, retry
    assert revisions == 9 and client.list_memory_revisions(tenant, memory_id) == []


def test_a_retried_update_that_changed_nothing_answers_unchanged_after_another_writers_change(
    client: MemoryClient, tenant: str
) -> None:
    """An update asking for what the memory already holds changes nothing; its retry, after
    another writer changed the memory, answers that first result. It kept no result, so the retry
    applied itself then and wrote over the other writer's text, metadata or expiry."""
    memory_id = client.retain(
        tenant, "The teal kettle is on shelf 2", metadata={"room": "attic"}, expires_at=4_000_000_000.0
    ).memory_id
    asked: list[tuple[Callable[[str], UpdateResult], Callable[[], object]]] = [
        (  # the text it holds, then the text changes
            lambda key: client.update_memory(tenant, memory_id, text="The teal kettle is on shelf 2", request_id=key),
            lambda: client.update_memory(tenant, memory_id, text="The teal kettle is on shelf 7"),
        ),
        (  # the metadata it holds, then the metadata changes
            lambda key: client.update_memory(tenant, memory_id, metadata={"room": "attic"}, request_id=key),
            lambda: client.update_memory(tenant, memory_id, metadata={"room": "cellar"}),
        ),
        (  # the expiry it holds, then the expiry is cleared
            lambda key: client.update_memory(tenant, memory_id, expires_at=4_000_000_000.0, request_id=key),
            lambda: client.update_memory(tenant, memory_id, clear_expires_at=True),
        ),
    ]
    for number, (call, change) in enumerate(asked):
        before = client.get_memory(tenant, memory_id)
        first = call(f"unchanged-{number}")
        assert not first.updated and first.memory.text == before.text, first
        change()
        changed = client.get_memory(tenant, memory_id)
        retry = call(f"unchanged-{number}")
        assert not retry.updated, (number, retry)
        now = client.get_memory(tenant, memory_id)
        assert (now.text, dict(now.metadata), now.expires_at) == (
            changed.text,
            dict(changed.metadata),
            changed.expires_at,
        ), number


def test_a_retried_forget_by_filter_or_merge_of_a_tenant_without_a_file_answers_its_first_result(
    server_factory,
) -> None:
    """A forget by filter or a Dedup merge of a tenant that has no file changes nothing and makes
    no file; its result is kept all the same, durably (the server is killed before the retries), so
    a retry after another client wrote the tenant's first memories answers that result instead of
    forgetting or merging them."""
    server = server_factory().start()
    tenant = "newcomer"
    with MemoryClient(server.target, retries=0) as client:
        assert client.forget_memories(tenant, {"user": "carol"}, request_id="forget-1") == 0
        assert client.dedup(tenant, merge=True, request_id="merge-1").groups == []
        assert not server.tenant_file(tenant).exists()
    server.kill()
    server.restart()
    with MemoryClient(server.target) as client:
        kept = [
            client.retain(tenant, text, metadata={"user": "carol"}).memory_id
            for text in ("Carol prefers tea over coffee", "Carol prefers tea over coffee!")
        ]
        assert client.dedup(tenant).groups, "the two memories are near duplicates"
        assert client.forget_memories(tenant, {"user": "carol"}, request_id="forget-1") == 0
        assert client.dedup(tenant, merge=True, request_id="merge-1").groups == []
        listed = client.list_memories(tenant).memories
        assert [m.id for m in listed] == kept and not any(m.forgotten for m in listed)
        with pytest.raises(AbortedError) as reused:  # the same id with another filter is not a retry
            client.forget_memories(tenant, {"user": "dave"}, request_id="forget-1")
        assert reused.value.reason == "IDEMPOTENCY_KEY_REUSED"
        assert client.forget_memories(tenant, {"user": "carol"}, request_id="forget-2") == 2


def test_a_request_id_past_its_time_on_a_tenant_without_a_file_is_a_new_request(tmp_path: Path) -> None:
    """A request id kept for a tenant without a file is forgotten after the request ids' time: the
    same id again is a new call (its row replaced), not an error of the store."""
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", embedder="hashing", request_ttl_seconds=0.05))
    try:
        filters = {"user": "carol"}
        assert engine.updates.forget_matching("nobody", metadata_equals=filters, request_id="kept-1") == 0
        time.sleep(0.1)
        assert engine.updates.forget_matching("nobody", metadata_equals={"user": "dave"}, request_id="kept-1") == 0
    finally:
        engine.close()


def test_a_tenant_without_a_file_keeps_a_bounded_number_of_request_ids_and_never_drops_another_tenants(
    tmp_path: Path,
) -> None:
    """The shared file of request ids of tenants without a file is in no quota: one tenant sending
    no-op forgets with new ids without end keeps only its latest ones there (its oldest dropped in
    the same transaction), and another tenant's kept id is not dropped by them."""
    data_dir = tmp_path / "data"
    engine = Engine(EngineConfig(data_dir=data_dir, embedder="hashing", tenantless_requests_per_tenant=3))
    forget = engine.updates.forget_matching
    try:
        assert forget("bystander", metadata_equals={"user": "carol"}, request_id="mine-1") == 0
        for number in range(10):
            assert forget("hostile", metadata_equals={"user": "carol"}, request_id=f"new-{number}") == 0
        with apsw.Connection(str(data_dir / "requests_without_file.sqlite")) as kept:
            rows = [
                (str(tenant), str(request_id))
                for tenant, request_id in kept.execute("SELECT tenant, request_id FROM requests ORDER BY 1, 2")
            ]
        assert rows == [("bystander", "mine-1"), ("hostile", "new-7"), ("hostile", "new-8"), ("hostile", "new-9")]
        for tenant, request_id in rows:  # still retries: the same id with another filter is refused
            with pytest.raises(Conflict):
                forget(tenant, metadata_equals={"user": "dave"}, request_id=request_id)
        assert forget("hostile", metadata_equals={"user": "dave"}, request_id="new-0") == 0  # dropped: a new call
    finally:
        engine.close()


def test_tenants_without_a_file_keep_a_bounded_number_of_request_ids_in_all_whatever_their_names(
    tmp_path: Path,
) -> None:
    """A caller allowed on every tenant sent no-op forgets with new ids to 12,000 new tenant names:
    the shared file grew by a row each (2 MB, without end). It keeps at most its bound in all: the
    oldest rows go, and the latest calls are still retries."""
    data_dir = tmp_path / "data"
    config = EngineConfig(data_dir=data_dir, embedder="hashing", tenantless_requests_in_all=4)
    engine = Engine(config)
    forget = engine.updates.forget_matching
    try:
        assert forget("bystander", metadata_equals={"user": "carol"}, request_id="mine-1") == 0
        with pytest.raises(Conflict):  # its retry seconds later: the first call's
            forget("bystander", metadata_equals={"user": "dave"}, request_id="mine-1")
        for number in range(10):
            assert forget(f"ghost-{number}", metadata_equals={"user": "carol"}, request_id="new") == 0
        with apsw.Connection(str(data_dir / "requests_without_file.sqlite")) as kept:
            rows = [str(tenant) for (tenant,) in kept.execute("SELECT tenant FROM requests ORDER BY 1")]
        assert rows == ["ghost-6", "ghost-7", "ghost-8", "ghost-9"]
        with pytest.raises(Conflict):
            forget("ghost-9", metadata_equals={"user": "dave"}, request_id="new")
        assert forget("bystander", metadata_equals={"user": "dave"}, request_id="mine-1") == 0  # dropped: new
    finally:
        engine.close()
