"""Recall's query vector with MiniLM when the query names a speaker (issue 25, multi-hop): half of
it is the vector of the query without the name (``speaker_query_mix``), so a reply that only
addresses the person by name no longer outranks what that person said; the speaker step still
carries who. ``MNEMOSYNE_TEST_RECALL_OFF=speaker_query`` switches it off; a query naming no speaker
ranks exactly as without it. Through a real MiniLM server (the default embedder: installed with
the service)."""

from __future__ import annotations

from mnemosyne.client import MemoryClient, RetainItem

TURNS = [
    ("Melanie", "Caroline, that was lovely tonight, Caroline! Thanks, Caroline."),
    ("Caroline", "I play the violin in a small orchestra every weekend"),
    ("Melanie", "The weather was cold all week"),
    ("Melanie", "Sam cooked paella for the whole family"),
    ("Caroline", "My pottery class starts again soon"),
    ("Melanie", "We drove to the lake on Sunday"),
]


def _recalled(
    server_factory, off: str, queries: tuple[str, ...], tenant: str
) -> tuple[list[int], list[list[tuple[int, float]]]]:
    """The memory ids of TURNS and each query's hits (id, score) on a MiniLM server with ``off``."""
    env = {"MNEMOSYNE_TEST_RECALL_OFF": off} if off else {}
    server = server_factory(args=["--embedder", "minilm"], env=env).start(timeout=120)
    with MemoryClient(server.target) as client:
        ids = [r.memory_id for r in client.retain_batch(tenant, [RetainItem(t, speaker=s) for s, t in TURNS])]
        return ids, [[(h.memory.id, h.score) for h in client.recall(tenant, q, k=3)] for q in queries]


def test_what_the_named_speaker_said_ranks_above_a_reply_calling_them_by_name(server_factory, tenant: str) -> None:
    query = ("What music does Caroline play?",)
    ids, (hits,) = _recalled(server_factory, "speaker_query", query, tenant)
    assert [i for i, _ in hits[:2]] == [ids[0], ids[1]]  # without the step: the name pulls the reply up
    ids, (hits,) = _recalled(server_factory, "", query, tenant)
    assert [i for i, _ in hits[:2]] == [ids[1], ids[0]]


def test_a_query_naming_no_speaker_ranks_as_without_the_step(server_factory, tenant: str) -> None:
    queries = ("Who plays the violin?", "What did Sam cook?", "Carol, what music?")  # "Carol" names nobody
    off, on = (_recalled(server_factory, step, queries, tenant)[1] for step in ("speaker_query", ""))
    assert off == on and all(off)  # the same hits, scores included


def test_a_speaker_first_written_after_the_last_recall_is_cut_from_the_query(server_factory, tenant: str) -> None:
    # The query's vector is made from the names the tenant's cache knows before the recall's read
    # transaction; a name written since (Dana's: the write does not teach the cache) is found by
    # that transaction's sync and the vector made again. So the hits are those of a tenant whose
    # cache learnt every name before its first vector.
    dana = RetainItem("I restore old bicycles in my garage", speaker="Dana")
    query = "What does Dana restore?"
    server = server_factory(args=["--embedder", "minilm"]).start(timeout=120)
    with MemoryClient(server.target) as client:
        client.retain_batch(tenant, [RetainItem(t, speaker=s) for s, t in TURNS])
        assert client.recall(tenant, "What music does Caroline play?", k=1)  # the cache synced: no Dana
        client.retain_batch(tenant, [dana])
        late = [(h.memory.id, h.score) for h in client.recall(tenant, query, k=3)]
        other = f"{tenant}-b"
        client.retain_batch(other, [*(RetainItem(t, speaker=s) for s, t in TURNS), dana])
        known = [(h.memory.id, h.score) for h in client.recall(other, query, k=3)]
    assert late == known and late[0][0] == len(TURNS) + 1  # Dana's turn first
