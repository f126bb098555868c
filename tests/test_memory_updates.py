"""UpdateMemory, ListMemoryVersions, ForgetMemories and metadata filters on ListMemories, over
gRPC against a real server: same id, new content everywhere a recall looks, the versions kept
and erased with the memory, the audit chain after updates, and an update cut by SIGKILL."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import apsw
import pytest

from mnemosyne.client import (
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryClient,
    NotFoundError,
    UnavailableError,
    UpdateResult,
)
from mnemosyne.engine.updates import MAX_FORGET_MEMORIES
from mnemosyne.store.transactions import WAL_TRUNCATE_TIMEOUT_SECONDS
from mnemosyne.v1 import memory_pb2
from tests.test_erasure import _traces


def test_an_update_replaces_the_memory_under_its_id(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "Ada lives in Lyon near the river", metadata={"user": "ada"}).memory_id
    before = time.time()
    result = client.update_memory(tenant, memory_id, "Ada lives in Porto by the sea")
    assert result.updated and result.memory.id == memory_id
    assert result.memory.text == "Ada lives in Porto by the sea"
    assert result.memory.metadata == {"user": "ada"}  # metadata kept when none is given
    assert result.memory.updated_at >= before
    got = client.get_memory(tenant, memory_id)
    assert got.text == "Ada lives in Porto by the sea" and got.updated_at == result.memory.updated_at
    # Every recall path finds the new text and none the old one.
    for mode in ("vector", "text"):
        hits = client.recall(tenant, "Porto sea", k=3, mode=mode)
        assert hits and hits[0].memory.id == memory_id, mode
    assert not client.recall(tenant, "Lyon river", k=3, mode="text")
    # Metadata alone, then the same content again: nothing written the second time.
    result = client.update_memory(tenant, memory_id, metadata={"user": "ada", "city": "porto"})
    assert result.updated and result.memory.metadata == {"user": "ada", "city": "porto"}
    again = client.update_memory(tenant, memory_id, "Ada lives in Porto by the sea")
    assert not again.updated
    assert client.stats(tenant).memories == 1


def test_versions_list_every_text_with_its_time(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "The launch is on Monday").memory_id
    created = client.get_memory(tenant, memory_id).created_at
    client.update_memory(tenant, memory_id, "The launch is on Tuesday")
    client.update_memory(tenant, memory_id, "The launch is on Friday", metadata={"by": "ops"})
    versions = client.list_memory_versions(tenant, memory_id)
    assert [(v.version, v.text, v.current) for v in versions] == [
        (1, "The launch is on Monday", False),
        (2, "The launch is on Tuesday", False),
        (3, "The launch is on Friday", True),
    ]
    assert versions[0].at == pytest.approx(created) and versions[0].at < versions[1].at < versions[2].at
    assert versions[2].metadata == {"by": "ops"} and versions[1].metadata == {}
    assert client.get_memory(tenant, memory_id).updated_at == pytest.approx(versions[2].at)


def test_the_audit_chain_replays_updates_and_catches_an_edit(server_factory, tenant: str) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, "Bo's locker code is 4411").memory_id
        client.update_memory(tenant, memory_id, "Bo's locker code is 9022")
        client.update_memory(tenant, memory_id, metadata={"kind": "code"})
        report = client.verify_integrity(tenant)
        assert report.valid, report.problems
        assert report.checked == 3  # one retain, two updates
    server.stop()
    # The old text edited back into the row: the update entry no longer matches.
    connection = apsw.Connection(str(server.tenant_file(tenant)))
    connection.execute("UPDATE memories SET body = 'Bo''s locker code is 4411' WHERE id = ?", (memory_id,))
    connection.close()
    server.start()
    with MemoryClient(server.target) as client:
        report = client.verify_integrity(tenant)
        assert not report.valid
        assert report.problems[0].kind == "CONTENT_MISMATCH" and report.first_broken_at == 3


def test_forget_erases_every_version(server_factory, tenant: str) -> None:
    secret = "Vault9Kx7QzpWm"
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        memory_id = client.retain(tenant, f"The first vault word is {secret}").memory_id
        client.update_memory(tenant, memory_id, "The vault word was changed")
        assert secret in client.list_memory_versions(tenant, memory_id)[0].text
        assert client.forget(tenant, memory_id)
        with pytest.raises(NotFoundError):
            client.list_memory_versions(tenant, memory_id)
        assert client.verify_integrity(tenant).valid
        needles = {secret.encode(), secret.lower().encode(), secret.encode("utf-16-le")}
        assert _traces(server.data_dir, needles) == []


def test_concurrent_updates_of_one_memory_each_keep_what_the_others_changed(client: MemoryClient, tenant: str) -> None:
    """Three writers change one memory at once: its text, its metadata, its expiry. Each update was
    prepared from a read of the memory and wrote back what it did not change as read, so the last
    to commit undid the others' acknowledged changes (30 of 60 texts, 27 metadata and 38 cleared
    expiries lost in the probe); now a memory changed since the read is prepared again."""
    for n in range(20):
        memory_id = client.retain(
            tenant, f"Parcel {n} weighs {n} kg", metadata={"v": "0"}, expires_at=time.time() + 30 * 86400
        ).memory_id
        start = threading.Barrier(3)
        changes = [
            lambda: client.update_memory(tenant, memory_id, f"Parcel {n} weighs {n + 1000} kg now"),
            lambda: client.update_memory(tenant, memory_id, metadata={"v": "1"}),
            lambda: client.update_memory(tenant, memory_id, clear_expires_at=True),
        ]
        answers: list[bool] = []

        def write(change: Callable[[], UpdateResult]) -> None:
            start.wait()
            answers.append(change().updated)

        writers = [threading.Thread(target=write, args=(change,)) for change in changes]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        memory = client.get_memory(tenant, memory_id)
        assert answers == [True, True, True]
        assert (memory.text, memory.metadata, memory.expires_at) == (
            f"Parcel {n} weighs {n + 1000} kg now",
            {"v": "1"},
            None,
        )
        assert len(client.list_memory_revisions(tenant, memory_id)) == 4
    assert client.verify_integrity(tenant).valid


def test_update_rules_as_for_a_new_write(client: MemoryClient, tenant: str) -> None:
    kept = client.retain(tenant, "Cy prefers green tea in the morning").memory_id
    memory_id = client.retain(tenant, "Cy drives a blue van").memory_id
    # Another memory's content: refused, naming it.
    with pytest.raises(FailedPreconditionError) as refused:
        client.update_memory(tenant, memory_id, "cy prefers green tea in the MORNING")
    assert refused.value.reason == "MEMORY_DUPLICATE" and refused.value.metadata["memory_id"] == str(kept)
    # Conflicts: the updated fact supersedes the older one about the same thing.
    old = client.retain(tenant, "ticket RF-7 status: awaiting review").memory_id
    other = client.retain(tenant, "Cy owns a kayak").memory_id
    result = client.update_memory(tenant, other, "ticket RF-7 status: refunded")
    assert result.supersedes == [old]
    assert client.get_memory(tenant, old).superseded_by == other
    # Near duplicates are named (not the memory itself).
    near = client.update_memory(tenant, memory_id, "Cy prefers green tea in the morning!")
    assert near.near_duplicate_of == [kept]
    assert client.verify_integrity(tenant).valid


def test_update_refusals(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "Di collects stamps").memory_id
    with pytest.raises(NotFoundError):
        client.update_memory(tenant, 999_999, "x")
    with pytest.raises(NotFoundError):
        client.update_memory(f"{tenant}-none", memory_id, "x")
    with pytest.raises(InvalidArgumentError) as empty:
        client.update_memory(tenant, memory_id)
    assert empty.value.reason == "UPDATE_EMPTY"
    with pytest.raises(InvalidArgumentError) as big:
        client.update_memory(tenant, memory_id, "x" * 100_000)
    assert big.value.reason == "TEXT_TOO_LONG"
    with pytest.raises(InvalidArgumentError):
        client.update_memory(tenant, memory_id, metadata={"": "empty key"})
    client.forget(tenant, memory_id)
    with pytest.raises(NotFoundError) as unknown:
        client.update_memory(tenant, 999_999, "x")
    assert "does not exist" in str(unknown.value)
    # A forgotten memory is still listed (GetMemory shows it forgotten): the refusal says which.
    for change in (
        lambda: client.update_memory(tenant, memory_id, "Di collects coins"),
        lambda: client.revert_memory(tenant, memory_id, 1),
        lambda: client.list_memory_versions(tenant, memory_id),
    ):
        with pytest.raises(NotFoundError) as forgotten:
            change()
        assert forgotten.value.reason == "MEMORY_NOT_FOUND"
        assert f"memory {memory_id} was forgotten" in str(forgotten.value), forgotten.value


@pytest.mark.parametrize("missing", ["memory", "tenant"])
def test_an_update_over_a_limit_is_refused_before_the_memory_is_looked_up(
    client: MemoryClient, tenant: str, missing: str
) -> None:
    """What the request alone shows is refused as INVALID_ARGUMENT whether or not the memory
    exists: a retain's limits, checked first (docs/operations.md: nothing is looked up)."""
    memory_id = client.retain(tenant, "Ed repairs clocks").memory_id
    target = (tenant, 999_999) if missing == "memory" else (f"{tenant}-none", memory_id)
    too_many = {f"key{i}": "v" for i in range(100)}
    for text, metadata, reason in [
        ("x" * 100_000, None, "TEXT_TOO_LONG"),
        ("", too_many, "METADATA_TOO_LARGE"),
        ("", {"k": "v" * 5_000}, "METADATA_INVALID"),
    ]:
        with pytest.raises(InvalidArgumentError) as refused:
            client.update_memory(*target, text, metadata=metadata)
        assert refused.value.reason == reason, refused.value


def test_metadata_without_replace_metadata_is_refused_not_dropped(client: MemoryClient, tenant: str) -> None:
    """An update replaces the whole metadata only when replace_metadata is set; metadata sent
    without it would be dropped without a word (it is never merged), so it is refused."""
    memory_id = client.retain(tenant, "Fay bakes rye bread", metadata={"topic": "baking"}).memory_id
    request = memory_pb2.UpdateMemoryRequest(tenant=tenant, memory_id=memory_id, metadata={"topic": "bread"})
    with pytest.raises(InvalidArgumentError) as refused:
        client.call(client.memory.UpdateMemory, request, retry=False)
    assert refused.value.reason == "METADATA_WITHOUT_REPLACE" and "replace_metadata" in refused.value.message
    assert client.get_memory(tenant, memory_id).metadata == {"topic": "baking"}
    request.replace_metadata = True
    client.call(client.memory.UpdateMemory, request, retry=False)
    assert client.get_memory(tenant, memory_id).metadata == {"topic": "bread"}


def test_list_filters_by_metadata_with_pages_bound_to_the_filter(client: MemoryClient, tenant: str) -> None:
    for i in range(7):
        client.retain(
            tenant, f"note number {i} about gardening", metadata={"user": "ada" if i % 2 else "bo", "n": str(i)}
        )
    seen: list[str] = []
    page = client.list_memories(tenant, page_size=2, metadata_equals={"user": "bo"})
    while True:
        seen += [m.metadata["n"] for m in page.memories]
        if not page.next_page_token:
            break
        token = page.next_page_token
        with pytest.raises(InvalidArgumentError):  # a token of one filter does not serve another
            client.list_memories(tenant, page_size=2, page_token=token, metadata_equals={"user": "ada"})
        page = client.list_memories(tenant, page_size=2, page_token=token, metadata_equals={"user": "bo"})
    assert seen == ["0", "2", "4", "6"]
    both = client.list_memories(tenant, metadata_equals={"user": "ada", "n": "3"}).memories
    assert [m.metadata["n"] for m in both] == ["3"]
    assert client.list_memories(tenant, metadata_equals={"user": "nobody"}).memories == []


def test_forget_memories_by_filter(client: MemoryClient, tenant: str) -> None:
    ids = {
        user: [
            client.retain(tenant, f"{user} fact {i} about the harbour", metadata={"user": user}).memory_id
            for i in range(3)
        ]
        for user in ("ada", "bo")
    }
    assert client.forget_memories(tenant, {"user": "ada"}) == 3
    assert client.forget_memories(tenant, {"user": "ada"}) == 0
    left = client.list_memories(tenant).memories
    assert sorted(m.id for m in left) == ids["bo"]
    assert all(client.get_memory(tenant, i).forgotten for i in ids["ada"])
    with pytest.raises(InvalidArgumentError) as empty:
        client.forget_memories(tenant, {})
    assert empty.value.reason == "FILTER_EMPTY"
    assert client.forget_memories(f"{tenant}-none", {"user": "bo"}) == 0
    report = client.verify_integrity(tenant)
    assert report.valid, report.problems
    assert MAX_FORGET_MEMORIES >= 1000


@pytest.mark.parametrize("step", ["update_after_body", "update_after_fts", "update_after_ledger"])
def test_an_update_killed_midway_is_all_or_nothing(server_factory, tenant: str, step: str) -> None:
    """SIGKILL inside the update's transaction, at each of its steps: after a restart the memory
    is exactly its old version (text, recall, versions, chain), never a mix."""
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": f"kill@{step}:KILLME"}).start()
    with MemoryClient(server.target, retries=0) as client:
        memory_id = client.retain(tenant, "Eve keeps bees on the roof").memory_id
        with pytest.raises(UnavailableError):
            client.update_memory(tenant, memory_id, "Eve keeps goats KILLME in the yard")
    server.process.wait(timeout=10)
    server.env.pop("MNEMOSYNE_TEST_FAULTS")
    server.start()
    with MemoryClient(server.target) as client:
        memory = client.get_memory(tenant, memory_id)
        assert memory.text == "Eve keeps bees on the roof" and memory.updated_at == 0.0
        assert [v.text for v in client.list_memory_versions(tenant, memory_id)] == [memory.text]
        assert client.recall(tenant, "bees roof", k=1, mode="text")[0].memory.id == memory_id
        assert not client.recall(tenant, "goats yard", k=1, mode="text")
        report = client.verify_integrity(tenant)
        assert report.valid and report.checked == 1, report.problems
        # And the same update, without the fault, succeeds afterwards.
        assert client.update_memory(tenant, memory_id, "Eve keeps goats in the yard").updated


def test_updates_racing_forgets_on_a_tenant_with_an_inbox_never_hold_up_their_erasure(server_factory) -> None:
    """An update carrying a request id (every client's does) read the tenant file, then waited
    for the inbox lock to look for its id among the queued fast writes. A forget emptying the WAL
    under the tenant's write lock waited for that reader, and a write holding the inbox lock waited
    for the forget: the forget took 10 s, was refused ERASURE_BUSY and sent again, and every write
    of the tenant waited with it (a race probe: 4 forgets in 30 s, each over 10 s). The update now
    takes the inbox lock before it reads (store/inbox.py's order)."""
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        client.hot_path("t", "enable")
        client.retain("t", "a fast note, so that the tenant has an inbox", fast=True)
        ids = [r.memory_id for r in client.retain_batch("t", [f"keeper {i} of the valve" for i in range(150)])]
    to_forget, took, stop = ids[:100], [], threading.Event()

    def forget() -> None:
        with MemoryClient(server.target) as forgetter:
            while to_forget:
                memory_id = to_forget.pop()
                started = time.monotonic()
                forgetter.forget("t", memory_id)
                took.append(time.monotonic() - started)

    def update(seed: int) -> None:
        rng = random.Random(seed)
        with MemoryClient(server.target) as updater:
            while not stop.is_set():
                try:
                    updater.update_memory("t", rng.choice(ids), text=f"keeper {rng.random()} of the valve")
                except NotFoundError:  # forgotten meanwhile
                    pass

    updaters = [threading.Thread(target=update, args=(seed,)) for seed in range(3)]
    forgetters = [threading.Thread(target=forget) for _ in range(2)]
    for thread in updaters + forgetters:
        thread.start()
    for thread in forgetters:
        thread.join()
    stop.set()
    for thread in updaters:
        thread.join()
    assert len(took) == 100 and max(took) < WAL_TRUNCATE_TIMEOUT_SECONDS, sorted(took)[-3:]
    assert "ERASURE_BUSY" not in server.stderr_path.read_text(errors="replace")
