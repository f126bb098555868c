"""Recall quality: the right memory first among distractors that share its words."""

from __future__ import annotations

import random

from mnemosyne.client import MemoryClient, RetainItem

TARGET = "The customer requested a refund, ticket number RF-88213"


def _distractors(n: int) -> list[str]:
    rng = random.Random(7)
    templates = [
        "Our refund policy allows returns within {d} days",
        "The ticket booth opens at {h} am on weekdays",
        "Ticket number RF-{n} was closed after review",
        "A refund of ${d} was issued for order {n}",
        "Customer {n} asked about the ticket price",
        "Refund requests go to the finance queue {d}",
        "The support ticket RF-{n} mentions a delayed parcel",
        "Number {n} is the customer's loyalty card",
    ]
    out: set[str] = set()
    while len(out) < n:
        out.add(rng.choice(templates).format(d=rng.randint(1, 90), h=rng.randint(6, 11), n=rng.randint(10000, 99999)))
    return sorted(out)


def test_refund_ticket_is_first_among_1000_distractors(client: MemoryClient, tenant: str) -> None:
    distractors = _distractors(1000)
    client.retain_batch(tenant, [RetainItem(t) for t in distractors[:500]])
    target_id = client.retain(tenant, TARGET).memory_id
    client.retain_batch(tenant, [RetainItem(t) for t in distractors[500:]])
    for query in ("refund ticket", "customer requested a refund", "RF-88213", '"refund" (ticket*):'):
        hits = client.recall(tenant, query, k=5)
        assert hits[0].memory.id == target_id, (query, [h.memory.text for h in hits])


def test_vector_and_text_paths_each_find_it(client: MemoryClient, tenant: str) -> None:
    client.retain_batch(tenant, [RetainItem(t) for t in _distractors(200)])
    target_id = client.retain(tenant, TARGET).memory_id
    assert client.recall(tenant, "RF-88213 refund", k=1, mode="text")[0].memory.id == target_id
    assert (
        client.recall(tenant, "customer requested refund ticket number", k=1, mode="vector")[0].memory.id == target_id
    )


def test_ranking_is_the_same_after_a_restart(server_factory) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        client.retain_batch("acme", [RetainItem(t) for t in _distractors(300)])
        client.retain("acme", TARGET)
        before = [(h.memory.id, round(h.score, 9)) for h in client.recall("acme", "refund ticket booth policy", k=10)]
    server.kill()
    server.restart()
    with MemoryClient(server.target) as client:
        after = [(h.memory.id, round(h.score, 9)) for h in client.recall("acme", "refund ticket booth policy", k=10)]
    assert after == before and len(before) == 10


def test_memories_holding_every_query_word_rank_first_in_text_mode(client: MemoryClient, tenant: str) -> None:
    # "ticket" is in most distractors, so BM25 alone gives it no weight (FTS5 clamps the IDF of a
    # term found in over half the rows); coordination still ranks the memory with both words first.
    client.retain_batch(tenant, [RetainItem(t) for t in _distractors(400)])
    target_id = client.retain(tenant, TARGET).memory_id
    assert client.recall(tenant, "refund ticket", k=1, mode="text")[0].memory.id == target_id
