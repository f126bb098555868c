"""Conflict adjudication against a real server: a newer value for the same subject and predicate
supersedes the older memory (kept, with its history) in the same write, and Recall prefers the
current fact."""

from __future__ import annotations

import sqlite3

import apsw

from mnemosyne.client import MemoryClient, RetainItem
from mnemosyne.store.schema import _V2_CONSOLIDATION, APPLICATION_ID, MIGRATIONS

OLD = "ticket RF-88213 status: awaiting review"
NEW = "ticket RF-88213 status: refunded"


def test_newer_status_supersedes_older_and_recall_prefers_it(client: MemoryClient, tenant: str) -> None:
    old = client.retain(tenant, OLD)
    assert old.supersedes == ()
    new = client.retain(tenant, NEW)
    assert new.status == "created" and new.supersedes == (old.memory_id,)

    kept = client.get_memory(tenant, old.memory_id)
    assert kept.superseded_by == new.memory_id and kept.superseded_at >= kept.created_at
    assert kept.text == OLD and not kept.forgotten  # kept whole, with its history
    assert client.get_memory(tenant, new.memory_id).superseded_by == 0

    # The current fact first, although the query words favour the old one; the old one is still
    # reachable further down.
    hits = client.recall(tenant, "ticket RF-88213 status awaiting review", k=5)
    assert [h.memory.id for h in hits] == [new.memory_id, old.memory_id]
    assert client.recall(tenant, "RF-88213 status", k=1)[0].memory.id == new.memory_id
    report = client.verify_integrity(tenant)
    assert report.valid and report.first_broken_at == 0, report.problems


def test_what_is_not_a_conflict(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, OLD)
    # Same value restated: nothing superseded.
    assert client.retain(tenant, "Ticket RF-88213 status: Awaiting review.").supersedes == ()
    # Another subject, another scope: independent facts.
    assert client.retain(tenant, "ticket RF-99999 status: refunded").supersedes == ()
    assert client.retain(tenant, NEW, scope="workspace/other").supersedes == ()
    # "X is Y" is not an attribute with one value: both stay current.
    a = client.retain(tenant, "Alice is a doctor")
    assert client.retain(tenant, "Alice is a runner").supersedes == ()
    assert client.get_memory(tenant, a.memory_id).superseded_by == 0
    assert client.get_memory(tenant, first.memory_id).superseded_by == 0


def test_a_memory_is_superseded_only_when_all_its_facts_are(client: MemoryClient, tenant: str) -> None:
    both = client.retain(tenant, "ticket RF-1 status: open. ticket RF-1 owner: dana").memory_id
    assert client.retain(tenant, "ticket RF-1 status: closed").supersedes == ()
    assert client.get_memory(tenant, both).superseded_by == 0  # its owner is still current
    last = client.retain(tenant, "ticket RF-1 owner: lee")
    assert last.supersedes == (both,)
    assert client.get_memory(tenant, both).superseded_by == last.memory_id
    assert client.verify_integrity(tenant).valid


def test_conflict_inside_one_batch_follows_item_order(client: MemoryClient, tenant: str) -> None:
    results = client.retain_batch(tenant, [RetainItem(OLD), RetainItem(NEW)])
    assert [r.status for r in results] == ["created", "created"]
    assert results[1].supersedes == (results[0].memory_id,)
    assert client.get_memory(tenant, results[0].memory_id).superseded_by == results[1].memory_id
    # A later write of the old value supersedes in turn: the latest write wins.
    back = client.retain(tenant, "Ticket RF-88213 status: awaiting review again")
    assert back.supersedes == (results[1].memory_id,)
    assert client.recall(tenant, "RF-88213 status", k=1)[0].memory.id == back.memory_id
    assert client.verify_integrity(tenant).valid


def test_verify_catches_a_supersession_the_ledger_never_recorded(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        old = client.retain("t1", OLD).memory_id
        new = client.retain("t1", NEW).memory_id
        assert client.verify_integrity("t1").valid
    server.stop()
    # Make the old fact current again behind the ledger's back.
    with sqlite3.connect(server.tenant_file("t1")) as db:
        db.execute("UPDATE memories SET superseded_by = NULL WHERE id = ?", (old,))
    server.restart()
    with MemoryClient(server.target) as client:
        report = client.verify_integrity("t1")
    assert not report.valid and new != old
    assert [(p.memory_id, p.kind) for p in report.problems] == [(old, "SUPERSEDE_MISMATCH")]


def test_a_file_from_before_consolidation_is_migrated(server_factory, tmp_path) -> None:
    data = tmp_path / "data"
    (data / "tenants").mkdir(parents=True)
    # A tenant file with the schema as it was before the consolidation migration.
    connection = apsw.Connection(str(data / "tenants" / "t1.sqlite"))
    connection.pragma("journal_mode", "wal")
    before = MIGRATIONS.index(_V2_CONSOLIDATION)
    for step in MIGRATIONS[:before]:
        connection.execute(step)
    connection.pragma("user_version", before)
    connection.pragma("application_id", APPLICATION_ID)
    connection.close()
    server = server_factory(data).start()
    with MemoryClient(server.target) as client:
        old = client.retain("t1", OLD).memory_id
        assert client.retain("t1", NEW).supersedes == (old,)
        assert client.verify_integrity("t1").valid
