"""RetainBatch writes its items in runs (one statement per table for consecutive new memories) and
looks for near duplicates of large batches on a helper thread; none of that may change a result.

A batch must give what the same items retained one by one give: the same statuses, ids, named
near duplicates (stored and within the batch), superseded memories, stored rows and the same
audit chain, entry for entry (the hashes keyed per memory aside). Against real servers.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from mnemosyne.client import MemoryClient, RetainItem, RetainResult
from mnemosyne.store import ledger
from tests.support import ServerProcess, sql_row

REFUND = "The customer requested a refund for ticket RF-88213"
REFUND_YESTERDAY = "The customer requested a refund for ticket RF-88213 yesterday"
FIVE_DAYS = "The refund takes 5 days to process"
FIVE_DAYS_NOW = "The refund takes 5 days to process now"
FIFTEEN_DAYS = "The refund takes 15 days to process"
OLD_STATUS = "ticket RF-88213 status: awaiting review"
NEW_STATUS = "ticket RF-88213 status: refunded"
STORED_STATUS = "ticket RF-7 status: open"
_WORDS = "amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lantern meadow nickel".split()


def _filler(i: int) -> str:
    # Distinct words and a distinct number (an atom): never a near duplicate of anything else.
    return f"Filler {_WORDS[i % len(_WORDS)]} {_WORDS[(i * 5 + 3) % len(_WORDS)]} entry {i} of the list"


def _stored_first(client: MemoryClient, tenant: str) -> dict[str, int]:
    return {text: client.retain(tenant, text).memory_id for text in (FIVE_DAYS, STORED_STATUS, _filler(900))}


def _mixed_items() -> list[RetainItem]:
    items = [RetainItem(_filler(i)) for i in range(12)]
    items += [
        RetainItem(REFUND),
        RetainItem(OLD_STATUS),
        RetainItem(REFUND_YESTERDAY),  # near duplicate of an earlier item of the batch
        RetainItem("  the CUSTOMER requested a refund   for ticket rf-88213 "),  # exact duplicate of REFUND
        RetainItem(NEW_STATUS),  # supersedes OLD_STATUS, an earlier item of the batch
        RetainItem(_filler(900)),  # exact duplicate of a stored memory
        RetainItem(FIVE_DAYS_NOW),  # near duplicate of a stored memory
        RetainItem(FIFTEEN_DAYS),  # close in words, other atoms: not a near duplicate
        RetainItem("ticket RF-7 status: closed"),  # supersedes a stored memory
        RetainItem(REFUND, scope="workspace/ops", metadata={"source": "mail"}),  # another scope: new
        RetainItem(_filler(3)),  # exact duplicate of an earlier filler
    ]
    items += [RetainItem(_filler(i)) for i in range(100, 130)]  # past the helper-thread threshold
    return items


def _ledger_without_keyed_hashes(tenant_file: Path) -> list[dict[str, object]]:
    """The tenant's ledger entries without the hashes keyed per memory (each memory has a random
    key of its own, so two files never share them); what is left must be the same."""
    keyed = {"body", "metadata", "facts", "triples", "embedding", "fingerprint"}
    connection = apsw.Connection(str(tenant_file), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        entries = [json.loads(row[0]) for row in connection.execute("SELECT entry FROM ledger ORDER BY seq")]
    finally:
        connection.close()
    return [{k: v for k, v in e.items() if not (e.get(ledger.KEYED_FIELD) and k in keyed)} for e in entries]


def test_batch_equals_the_same_items_one_by_one(client: MemoryClient, server: ServerProcess, tenant: str) -> None:
    batch_tenant, single_tenant = f"{tenant}-batch", f"{tenant}-single"
    assert _stored_first(client, batch_tenant) == _stored_first(client, single_tenant)
    items = _mixed_items()
    batch = client.retain_batch(batch_tenant, items)
    single = [client.retain(single_tenant, i.text, i.scope, i.metadata) for i in items]

    assert batch == single
    by_text: dict[str, RetainResult] = {}
    for item, result in zip(items, batch):
        by_text.setdefault(item.text, result)  # the first of each text (REFUND is there twice)
    assert by_text[REFUND_YESTERDAY].near_duplicate_of == (by_text[REFUND].memory_id,)
    assert by_text["  the CUSTOMER requested a refund   for ticket rf-88213 "].status == "duplicate"
    assert by_text[NEW_STATUS].supersedes == (by_text[OLD_STATUS].memory_id,)
    assert by_text[FIVE_DAYS_NOW].near_duplicate_of != () and by_text[FIFTEEN_DAYS].near_duplicate_of == ()
    assert by_text["ticket RF-7 status: closed"].supersedes != ()
    assert sum(r.status == "duplicate" for r in batch) == 3

    def stored(t: str) -> list[tuple[object, ...]]:
        page = client.list_memories(t, page_size=1000)
        return [(m.id, m.scope, m.text, m.metadata, m.facts, m.triples, m.superseded_by) for m in page.memories]

    assert stored(batch_tenant) == stored(single_tenant)
    # The same ledger entries in the same order (each valid chain's keyed hashes match the same
    # stored content, compared above; the keys themselves differ).
    batch_report, single_report = client.verify_integrity(batch_tenant), client.verify_integrity(single_tenant)
    assert batch_report.valid and single_report.valid, (batch_report.problems, single_report.problems)
    assert batch_report.checked == single_report.checked
    assert _ledger_without_keyed_hashes(server.tenant_file(batch_tenant)) == _ledger_without_keyed_hashes(
        server.tenant_file(single_tenant)
    )
    # Recallable the moment the batch returned, through the vector index and the full-text index.
    filler = by_text[_filler(120)].memory_id
    assert client.recall(batch_tenant, _filler(120), k=1, mode="vector")[0].memory.id == filler
    assert client.recall(batch_tenant, "entry 120", k=1, mode="text")[0].memory.id == filler


def test_large_batch_keeps_a_valid_chain_and_counts(client: MemoryClient, tenant: str) -> None:
    texts = [_filler(i) for i in range(1000, 1500)]
    first = client.retain_batch(tenant, texts)
    assert [r.status for r in first] == ["created"] * 500
    ids = [r.memory_id for r in first]
    assert ids == list(range(ids[0], ids[0] + 500))
    # A second batch over the same texts and 100 new ones: duplicates name the first batch's ids.
    second = client.retain_batch(tenant, texts[:400] + [_filler(i) for i in range(2000, 2100)])
    assert [r.memory_id for r in second[:400]] == ids[:400] and {r.status for r in second[:400]} == {"duplicate"}
    assert [r.memory_id for r in second[400:]] == list(range(ids[-1] + 1, ids[-1] + 101))
    report = client.verify_integrity(tenant)
    assert report.valid and report.checked == 600, report.problems
    stats = client.stats(tenant)
    assert (stats.memories, stats.writes, stats.duplicates, stats.ledger_entries) == (600, 600, 400, 600)


def test_failing_item_in_a_large_batch_is_redone_one_by_one(server_factory) -> None:
    """An item failing half-way in a run rolls the runs back; redone item by item, only it is lost."""
    server = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "after_fts:POISON"}).start()
    items = [_filler(i) for i in range(60)]
    items[30] = "a POISON item that cannot be stored"
    items[45] = NEW_STATUS
    items.insert(10, OLD_STATUS)
    with MemoryClient(server.target, retries=0) as c:
        results = c.retain_batch("acme", items)
        assert [r.status for r in results].count("created") == len(items) - 1
        poisoned = results[items.index("a POISON item that cannot be stored")]
        assert (poisoned.status, poisoned.error_reason) == ("invalid", "ITEM_NOT_STORED")
        assert results[items.index(NEW_STATUS)].supersedes == (results[10].memory_id,)
        # Ids stay dense: the rolled-back attempt used none of them.
        created = [r.memory_id for r in results if r.status == "created"]
        assert created == list(range(1, len(items)))
        assert c.verify_integrity("acme").valid
        assert c.recall("acme", "POISON", mode="text") == []
    connection = apsw.Connection(str(server.tenant_file("acme")), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts = [sql_row(connection, f"SELECT count(*) FROM {t}")[0] for t in ("memories", "embeddings", "ledger")]
    finally:
        connection.close()
    assert counts == [len(items) - 1, len(items) - 1, len(items) - 1 + 1]  # + the supersede entry


def test_hot_path_group_with_a_poison_item_names_only_written_memories(server_factory) -> None:
    """A worker group large enough for the helper thread, with an item whose extraction fails:
    the others are written, and a near duplicate of the failed item is not named."""
    server = server_factory(env={"MNEMOSYNE_TEST_POISON_MARKER": "POISON", "MNEMOSYNE_HOT_PATH_BATCH": "64"}).start()
    texts = [_filler(i) for i in range(40)]
    texts[5] = "The customer requested a refund for ticket RF-88213 POISON"
    texts[20] = REFUND_YESTERDAY  # near duplicate of the poisoned text, not written
    texts[25] = REFUND  # near duplicate of texts[20]: named
    with MemoryClient(server.target, timeout=120) as c:
        c.hot_path("hot", "enable")
        enqueued = c.retain_batch("hot", texts, fast=True)
        assert {r.status for r in enqueued} == {"enqueued"}
        c.hot_path("hot", "flush", timeout_seconds=60)
        events = [c.get_event("hot", r.event_id) for r in enqueued]
        assert [e.status for e in events].count("succeeded") == 39
        assert events[5].status == "failed" and events[5].error_reason == "EXTRACTION_FAILED"
        assert events[20].near_duplicate_of == ()
        assert events[25].near_duplicate_of == events[20].created_memory_ids
        assert c.verify_integrity("hot").valid
