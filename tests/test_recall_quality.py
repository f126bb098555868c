"""Recall quality features: stop words out of BM25 queries, score fusion, pseudo-relevance
feedback, and the hashing-v2 embedder. Rankings are checked through the real server and client."""

from __future__ import annotations

import hashlib
import random

import numpy as np

from mnemosyne.client import MemoryClient
from mnemosyne.client.types import RetainItem
from mnemosyne.engine.embedder import HashingEmbedder
from mnemosyne.engine.recall.text import fts_match_expression

DISTRACTOR_WORDS = (
    "budget meeting schedule garden weather invoice printer holiday report coffee train station "
    "project deadline server backup kitchen lunch review dashboard marketing hiring laptop office"
).split()


def distractors(n: int) -> list[str]:
    rng = np.random.default_rng(42)
    return [
        " ".join(rng.choice(DISTRACTOR_WORDS, size=8)) + f" note {i} about the team and what they did" for i in range(n)
    ]


def test_refund_ticket_ranks_first_among_a_thousand_distractors(client: MemoryClient, tenant: str) -> None:
    client.retain_batch(tenant, distractors(500))
    target = client.retain(tenant, "The customer requested a refund, ticket number RF-88213").memory_id
    client.retain_batch(tenant, distractors(1000)[500:])
    for mode in ("hybrid", "text", "vector"):
        for query in ("refund ticket", "What was the refund ticket number?", "RF-88213"):
            hits = client.recall(tenant, query, k=5, mode=mode)
            assert hits and hits[0].memory.id == target, (mode, query)


def test_stop_words_do_not_drown_the_words_that_matter(client: MemoryClient, tenant: str) -> None:
    target = client.retain(tenant, "Customer refund approved by finance").memory_id
    client.retain_batch(
        tenant,
        [
            "What did they do about it, and what was it that they did when they were there?",
            "Where was it and who was with them when it was done?",
        ],
    )
    hits = client.recall(tenant, "What did they do about the refund when it was there?", k=3, mode="text")
    assert hits[0].memory.id == target
    assert hits[0].text_score > 0 and hits[0].vector_score == 0.0


def test_a_query_of_only_stop_words_still_finds_its_memory(client: MemoryClient, tenant: str) -> None:
    target = client.retain(tenant, "to be or not to be").memory_id
    client.retain(tenant, "an unrelated memory about gardening")
    for mode in ("text", "hybrid"):
        assert [h.memory.id for h in client.recall(tenant, "To be, or not to be?", k=1, mode=mode)] == [target]


def test_fused_hits_carry_both_path_scores(client: MemoryClient, tenant: str) -> None:
    client.retain_batch(
        tenant, [RetainItem(t) for t in ["Alice painted a sunrise over the lake", "Bob fixed the printer"]]
    )
    hit = client.recall(tenant, "who painted the sunrise", k=1)[0]
    assert "sunrise" in hit.memory.text
    assert hit.vector_score > 0 and hit.text_score > 0 and hit.score > 0


def test_full_text_query_drops_stop_words_and_keeps_identifiers() -> None:
    assert fts_match_expression("What did Caroline paint?") == '"caroline" OR "paint"'
    assert fts_match_expression("the RF-88213 ticket") == '"rf 88213" OR "ticket"'
    assert fts_match_expression("to be or not") == '"to" OR "be" OR "or" OR "not"'
    assert fts_match_expression('"" () *') is None


def test_hashing_v2_vectors_are_stable_unit_vectors_matching_word_forms() -> None:
    embedder = HashingEmbedder()
    assert embedder.name == "hashing-v2"
    painted, painting, printer, empty = embedder.embed(["She painted it", "her painting", "the printer", ""])
    assert abs(float(np.linalg.norm(painted)) - 1.0) < 1e-5 and not empty.any()
    assert float(painted @ painting) > float(painted @ printer)
    np.testing.assert_array_equal(HashingEmbedder().embed(["She painted it"])[0], painted)


def test_hashing_v2_is_a_fixed_function_of_the_text() -> None:
    """Tenant files store hashing-v2 vectors: a faster implementation must give the very same
    bytes (this digest is of the vectors of the implementation that first shipped), or the
    embedder needs a new name so old tenants fail with EMBEDDER_MISMATCH instead of drifting."""
    texts = [
        "Caroline painted a sunrise over the lake in 2022",
        "ticket RF-88213 status: refunded",
        "Ünïcödé café 東京 naïve",
        "the of and",
        "",
    ]
    digest = hashlib.sha256(HashingEmbedder().embed(texts).tobytes()).hexdigest()
    assert digest == "c4dba5728c98c120a17e6ccd0f167de02fde650daa8fd801973d4c0b028b26eb"
    # A call where no text has any feature at all gives zero rows, not an error.
    nothing = HashingEmbedder().embed(['""', "", "()"])
    assert nothing.shape == (3, 384) and nothing.dtype == np.float32 and not nothing.any()


def test_hashing_v2_builds_many_new_words_at_once_to_the_same_vectors() -> None:
    """Past 32 new words in one call the embedder builds their features with array operations
    instead of word by word: the digest below is of the word-by-word implementation's vectors
    for 300 texts of ~2,500 new words (with a non-ASCII word, taken word by word, in each)."""
    rnd = random.Random(7)
    syllables = ["ka", "lo", "mi", "ru", "te", "sha", "bo", "ne", "vi", "qu", "ing", "ies", "ed", "ly", "s"]

    def word() -> str:
        return "".join(rnd.choice(syllables) for _ in range(rnd.randint(1, 5)))

    texts = [" ".join(word() for _ in range(rnd.randint(3, 20))) + f" CODE-{i} café" for i in range(300)]
    digest = hashlib.sha256(HashingEmbedder().embed(texts).tobytes()).hexdigest()
    assert digest == "31169d9cd966c7b22355b60edd751208d0906903ce543c3442d0f321f9a9e5c1"
