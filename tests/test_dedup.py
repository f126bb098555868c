"""Exact and near duplicates, the Dedup admin call and merging, against a real server.

Only exact fingerprints are duplicates at write time; a near duplicate (cosine >= threshold AND the
same atoms: numbers, dates, identifiers) is stored and named; Dedup reports groups and merges them
only when asked, with one ledger entry per merge and a chain that still verifies.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time

import pytest

from mnemosyne.client import AbortedError, FailedPreconditionError, InvalidArgumentError, MemoryClient, RetainItem

REFUND = "The customer requested a refund for ticket RF-88213"
REFUND_YESTERDAY = "The customer requested a refund for ticket RF-88213 yesterday"
REFUND_TODAY = "The customer requested a refund for ticket RF-88213 today"
OTHER_TICKET = "The customer requested a refund for ticket RF-88214"
FIVE_DAYS = "The refund takes 5 days to process"
FIFTEEN_DAYS = "The refund takes 15 days to process"
FIVE_DAYS_NOW = "The refund takes 5 days to process now"


def _vector_score(client: MemoryClient, tenant: str, query: str, memory_id: int) -> float:
    """The cosine between ``query``'s embedding and a stored memory's, as the server computes it."""
    hits = client.recall(tenant, query, k=20, mode="vector")
    return next(h.vector_score for h in hits if h.memory.id == memory_id)


def test_five_days_never_near_duplicate_of_fifteen_days(server_factory) -> None:
    # A low threshold, so only the atoms rule can keep "5 days" and "15 days" apart.
    server = server_factory(args=["--near-duplicate-threshold", "0.5"]).start()
    with MemoryClient(server.target) as client:
        five = client.retain("t1", FIVE_DAYS)
        fifteen = client.retain("t1", FIFTEEN_DAYS)
        assert _vector_score(client, "t1", FIFTEEN_DAYS, five.memory_id) >= 0.5  # similar vectors...
        assert fifteen.status == "created" and fifteen.near_duplicate_of == ()  # ...different atoms
        other = client.retain("t1", OTHER_TICKET)
        refund = client.retain("t1", REFUND)
        assert _vector_score(client, "t1", REFUND, other.memory_id) >= 0.5
        assert refund.near_duplicate_of == ()  # RF-88213 is not RF-88214
        # The same atoms and similar text IS a near duplicate on the same server.
        five_now = client.retain("t1", FIVE_DAYS_NOW)
        assert five_now.status == "created" and five_now.near_duplicate_of == (five.memory_id,)
        report = client.dedup("t1", threshold=0.5)
        grouped = {m for g in report.groups for m in (g.keep, *g.duplicates)}
        assert {g.keep: g.duplicates for g in report.groups} == {five.memory_id: (five_now.memory_id,)}
        assert fifteen.memory_id not in grouped and other.memory_id not in grouped


def test_near_duplicate_named_at_write_time_not_merged(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, REFUND)
    second = client.retain(tenant, REFUND_YESTERDAY)
    assert second.status == "created" and second.memory_id != first.memory_id
    assert second.near_duplicate_of == (first.memory_id,)
    # Another scope is another namespace: never named across it.
    elsewhere = client.retain(tenant, REFUND_TODAY, scope="workspace/other")
    assert elsewhere.status == "created" and elsewhere.near_duplicate_of == ()
    # Stored, not merged: both are there and both are recallable.
    assert client.get_memory(tenant, second.memory_id).merged_into == 0
    recalled = {h.memory.id for h in client.recall(tenant, "refund ticket RF-88213", k=10, scopes=["global"])}
    assert {first.memory_id, second.memory_id} <= recalled
    # An exact duplicate is still a duplicate, never a near duplicate.
    again = client.retain(tenant, REFUND_YESTERDAY)
    assert again.status == "duplicate" and again.memory_id == second.memory_id


def test_near_duplicates_within_one_batch_are_named(client: MemoryClient, tenant: str) -> None:
    results = client.retain_batch(
        tenant, [RetainItem(REFUND), RetainItem(FIVE_DAYS), RetainItem(REFUND_YESTERDAY), RetainItem(FIFTEEN_DAYS)]
    )
    assert [r.status for r in results] == ["created"] * 4
    assert [r.near_duplicate_of for r in results] == [(), (), (results[0].memory_id,), ()]


def test_dedup_reports_then_merges_with_valid_chain(client: MemoryClient, tenant: str) -> None:
    keep = client.retain(tenant, REFUND).memory_id
    dup1 = client.retain(tenant, REFUND_YESTERDAY).memory_id
    dup2 = client.retain(tenant, REFUND_TODAY).memory_id
    other = client.retain(tenant, OTHER_TICKET).memory_id
    five = client.retain(tenant, FIVE_DAYS).memory_id
    fifteen = client.retain(tenant, FIFTEEN_DAYS).memory_id

    report = client.dedup(tenant)
    assert not report.merged
    assert [(g.keep, g.duplicates) for g in report.groups] == [(keep, (dup1, dup2))]
    assert all(client.get_memory(tenant, m).merged_into == 0 for m in (dup1, dup2))  # report only
    before = client.stats(tenant)

    merged = client.dedup(tenant, merge=True, request_id="merge-1")
    assert merged.merged and [(g.keep, g.duplicates) for g in merged.groups] == [(keep, (dup1, dup2))]
    after = client.stats(tenant)
    assert after.ledger_entries == before.ledger_entries + 1  # ONE entry for the merge
    assert after.memories == before.memories - 2
    integrity = client.verify_integrity(tenant)
    assert integrity.valid and integrity.first_broken_at == 0, integrity.problems

    # Recall never returns merged-away memories, through either path.
    for mode in ("hybrid", "vector", "text"):
        ids = {h.memory.id for h in client.recall(tenant, REFUND_YESTERDAY, k=10, mode=mode)}
        assert keep in ids and not ids & {dup1, dup2}, mode
    # Kept as history, naming what they were merged into; the unrelated ones are untouched.
    retired = client.get_memory(tenant, dup1)
    assert retired.merged_into == keep and retired.text == REFUND_YESTERDAY
    assert all(client.get_memory(tenant, m).merged_into == 0 for m in (other, five, fifteen))
    # Their text is still known: retaining it again is a duplicate of the kept memory.
    again = client.retain(tenant, REFUND_TODAY)
    assert again.status == "duplicate" and again.memory_id == keep
    assert client.dedup(tenant).groups == []


def test_merge_is_idempotent_with_request_id(client: MemoryClient, tenant: str) -> None:
    keep = client.retain(tenant, REFUND).memory_id
    dup = client.retain(tenant, REFUND_YESTERDAY).memory_id
    first = client.dedup(tenant, merge=True, request_id="merge-once")
    entries = client.stats(tenant).ledger_entries
    retried = client.dedup(tenant, merge=True, request_id="merge-once")
    assert retried == first and [(g.keep, g.duplicates) for g in first.groups] == [(keep, (dup,))]
    assert client.stats(tenant).ledger_entries == entries  # nothing applied twice
    # A fresh request finds nothing left to merge.
    assert client.dedup(tenant, merge=True, request_id="merge-twice").groups == []
    assert client.stats(tenant).ledger_entries == entries
    with pytest.raises(AbortedError) as info:
        client.dedup(tenant, merge=True, threshold=0.5, request_id="merge-once")
    assert info.value.reason == "IDEMPOTENCY_KEY_REUSED"
    assert client.verify_integrity(tenant).valid


def test_forgetting_the_kept_memory_forgets_what_was_merged_into_it(client: MemoryClient, tenant: str) -> None:
    keep = client.retain(tenant, REFUND).memory_id
    dup = client.retain(tenant, REFUND_YESTERDAY).memory_id
    client.dedup(tenant, merge=True)
    assert client.forget(tenant, keep)
    merged = client.get_memory(tenant, dup)
    assert merged.forgotten and merged.text == ""
    assert client.verify_integrity(tenant).valid
    # The content is gone everywhere, so it can be retained anew.
    assert client.retain(tenant, REFUND_YESTERDAY).status == "created"


def test_a_merge_never_retires_a_memory_into_one_that_expires_before_it(client: MemoryClient, tenant: str) -> None:
    """The kept memory's expiry erases what was merged into it (docs/expiry.md): a memory that never
    expires, merged into an expired near duplicate in its grace, vanished from recall at once and was
    erased with it. A memory that would outlive the kept one is left out of its group."""
    now = time.time()
    expired = client.retain(tenant, REFUND, expires_at=now - 1).memory_id
    never = client.retain(tenant, REFUND_YESTERDAY).memory_id
    assert client.dedup(tenant).groups == [] and client.dedup(tenant, merge=True).groups == []
    assert [h.memory.id for h in client.recall(tenant, "refund ticket RF-88213", k=5)] == [never]
    assert client.get_memory(tenant, expired).expires_at == pytest.approx(now - 1, abs=1e-3)
    other = f"{tenant}-b"
    keep = client.retain(other, REFUND, expires_at=now + 3600).memory_id
    later = client.retain(other, REFUND_YESTERDAY, expires_at=now + 7200).memory_id
    sooner = client.retain(other, REFUND_TODAY, expires_at=now + 60).memory_id
    (group,) = client.dedup(other, merge=True).groups
    assert (group.keep, group.duplicates) == (keep, (sooner,))
    assert client.get_memory(other, later).merged_into == 0
    assert client.verify_integrity(other).valid


def test_dedup_rejects_a_bad_threshold(client: MemoryClient, tenant: str) -> None:
    client.retain(tenant, REFUND)
    for bad in (1.5, -0.2):
        with pytest.raises(InvalidArgumentError) as info:
            client.dedup(tenant, threshold=bad)
        assert info.value.reason == "THRESHOLD_INVALID"


def test_concurrent_same_text_creates_exactly_one(client: MemoryClient, tenant: str) -> None:
    text = "Eight writers, one memory: order 4471 ships on 2026-12-01"
    barrier = threading.Barrier(8)
    results = []
    lock = threading.Lock()

    def write() -> None:
        barrier.wait(timeout=30)
        result = client.retain(tenant, text)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 8
    assert sorted(r.status for r in results) == ["created"] + ["duplicate"] * 7
    assert len({r.memory_id for r in results}) == 1
    stats = client.stats(tenant)
    assert stats.memories == 1 and stats.writes == 1 and stats.duplicates == 7
    assert stats.model_calls == 1  # the racers waited for the first instead of extracting again
    assert client.verify_integrity(tenant).valid


def test_verify_catches_a_merge_the_ledger_never_recorded(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        keep = client.retain("t1", REFUND).memory_id
        dup = client.retain("t1", REFUND_YESTERDAY).memory_id
        client.dedup("t1", merge=True)
        assert client.verify_integrity("t1").valid
    server.stop()
    # Undo the merge behind the ledger's back: the file no longer matches its merge entry.
    with sqlite3.connect(server.tenant_file("t1")) as db:
        db.execute("UPDATE memories SET merged_into = NULL WHERE id = ?", (dup,))
    server.restart()
    with MemoryClient(server.target) as client:
        report = client.verify_integrity("t1")
    assert not report.valid
    assert [(p.memory_id, p.kind) for p in report.problems] == [(dup, "MERGE_NOT_APPLIED")]
    assert keep != dup


# Texts the default embedder (MiniLM) cannot read: their word pieces are all [UNK] (emoji, scripts
# its vocabulary lacks) or none at all (combining marks alone), so the model
# gives them one and the same vector (cosine 1.0) whatever they say.
UNREADABLE = [
    "🎂🎉",
    "🍕🍕🍕",
    "ሰላም ነው",  # Amharic
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ",  # Cherokee
    "\u0301\u0302\u0303",
    "\u0300\u0304",
]
# Sentences that differ only in a word the model reads as [UNK].
ONLY_AN_EMOJI_APART = ["We ate 🍰 at the party", "We ate 🍮 at the party"]


def test_texts_the_model_cannot_read_are_never_near_duplicates(server_factory) -> None:
    server = server_factory(args=["--embedder", "minilm"]).start(timeout=120)
    with MemoryClient(server.target) as client:
        ids = []
        for text in [*UNREADABLE, *ONLY_AN_EMOJI_APART]:
            result = client.retain("t1", text)
            assert result.status == "created" and result.near_duplicate_of == (), (text, result)
            ids.append(result.memory_id)
        assert client.dedup("t1").groups == []
        merged = client.dedup("t1", merge=True)
        assert merged.groups == [] and client.stats("t1").memories == len(ids)
        assert all(client.get_memory("t1", m).merged_into == 0 for m in ids)
        # Readable near duplicates are still found on the same server.
        keep = client.retain("t1", REFUND).memory_id
        assert client.retain("t1", REFUND_YESTERDAY).near_duplicate_of == (keep,)


def test_a_merge_leaves_out_a_memory_updated_forgotten_or_merged_since_it_was_found_similar(server_factory) -> None:
    """Merges run from two clients while each pair's second memory is updated to an unrelated
    text (even pairs) or forgotten (odd pairs). A merge re-checked only that a group's members were
    live, so one updated between the similarity pass and the merge's transaction was merged away
    with its new text (retired from recall: the update lost). Each member must still hold the text
    it was found similar by; in the audit ledger's order no merge takes in a memory forgotten or
    merged before it (the calls race, so the ledger, not the calls' answers, gives the order)."""
    server = server_factory().start()
    tenant = "dedup-race"
    with MemoryClient(server.target) as client:
        client.retain_batch(tenant, [RetainItem(f"Filler note {i} on topic {i * 7} and {i * 13}") for i in range(600)])
        pairs = [
            (
                client.retain(tenant, f"Pair {i}: the blue shed key hangs by the back door").memory_id,
                client.retain(tenant, f"Pair {i}: the blue shed key hangs by the back door!").memory_id,
            )
            for i in range(40)
        ]
        changed = threading.Event()

        def change() -> None:
            try:
                for i, (_, second) in enumerate(pairs):
                    with contextlib.suppress(FailedPreconditionError):  # MEMORY_MERGED: the merge came first
                        if i % 2:
                            client.forget(tenant, second)
                        else:
                            client.update_memory(
                                tenant, second, text=f"Unrelated {second}: tomato seedlings need water"
                            )
            finally:
                changed.set()

        def merge() -> None:
            while not changed.is_set():
                client.dedup(tenant, merge=True)

        threads = [threading.Thread(target=change), threading.Thread(target=merge)]
        for thread in threads:
            thread.start()
        merge()
        for thread in threads:
            thread.join()
        for _, second in pairs[::2]:
            memory = client.get_memory(tenant, second)
            assert "Unrelated" not in memory.text or memory.merged_into == 0, (second, memory.merged_into, memory.text)
    with sqlite3.connect(f"file:{server.tenant_file(tenant)}?mode=ro", uri=True) as ledger:
        entries = [json.loads(entry) for (entry,) in ledger.execute("SELECT entry FROM ledger ORDER BY seq")]
    gone: set[int] = set()  # forgotten or merged away, in the ledger's order
    merges = 0
    for entry in entries:
        if entry["op"] == "merge":
            merges += 1
            taken = {entry["memory_id"], *entry["merged"]}
            assert not taken & gone, (entry, sorted(taken & gone))
            gone |= set(entry["merged"])
        elif entry["op"] == "forget":
            gone.add(entry["memory_id"])
    assert merges, "no merge ran while the changes did: the race was not reached"
