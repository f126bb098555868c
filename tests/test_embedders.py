"""Embedders: MiniLM (the default, by meaning, no torch) and the hashing one; a tenant keeps the
embedder it was created with, whatever the server's ``--embedder``, which only chooses the
embedder of new tenants. These tests ask for MiniLM by name (tests/conftest.py pins hashing)."""

from __future__ import annotations

import apsw
import numpy as np
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import InvalidArgumentError
from mnemosyne.engine.embedders import make_embedder
from tests.support import sql_row


@pytest.fixture(scope="module")
def minilm():
    return make_embedder("minilm")


def _recorded_embedder(data_dir, tenant: str) -> str:
    connection = apsw.Connection(str(data_dir / "tenants" / f"{tenant}.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return str(sql_row(connection, "SELECT value FROM meta WHERE key = 'embedder'")[0])
    finally:
        connection.close()


def test_minilm_gives_unit_vectors_of_384_dimensions(minilm) -> None:
    vectors = minilm.embed(["The customer asked for a refund.", "Where is the nearest train station?"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32 and vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    again = minilm.embed(["The customer asked for a refund."])
    np.testing.assert_allclose(again[0], vectors[0], atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


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


def test_a_server_on_its_defaults_recalls_by_meaning(server_factory, tenant: str, monkeypatch) -> None:
    # No --embedder: the default (the test session's MNEMOSYNE_EMBEDDER=hashing taken away).
    monkeypatch.delenv("MNEMOSYNE_EMBEDDER")
    server = server_factory().start(timeout=120)
    with MemoryClient(server.target) as client:
        dog = client.retain(tenant, "Carol's dog is called Rex").memory_id
        tea = client.retain(tenant, "Carol prefers tea over coffee").memory_id
        hits = client.recall(tenant, "What does Carol drink?", k=2)
        assert [h.memory.id for h in hits] == [tea, dog]
    assert _recorded_embedder(server.data_dir, tenant) == "minilm-l6-v2/384"


def test_a_tenant_keeps_the_embedder_it_was_created_with(server_factory, tenant: str, tmp_path) -> None:
    data_dir = tmp_path / "shared-data"
    hashing = server_factory(data_dir, args=["--embedder", "hashing"]).start()
    with MemoryClient(hashing.target) as client:
        old = client.retain(tenant, "the invoice for order 4471 was paid by bank transfer").memory_id
    hashing.terminate()

    minilm_server = server_factory(data_dir, args=["--embedder", "minilm"]).start(timeout=120)
    newcomer = tenant + "-new"
    with MemoryClient(minilm_server.target) as client:
        # The old tenant is read and written with its own (hashing) vectors: no mismatch, no mix.
        assert [h.memory.id for h in client.recall(tenant, "invoice 4471 paid", k=1, mode="vector")] == [old]
        added = client.retain(tenant, "the invoice for order 5120 is still open").memory_id
        hits = client.recall(tenant, "invoice 5120 open", k=1, mode="vector")
        assert [h.memory.id for h in hits] == [added]
        client.retain(newcomer, "a new tenant's first memory")
        assert client.verify_integrity(tenant).valid
    assert _recorded_embedder(data_dir, tenant) == "hashing-v2/384"
    assert _recorded_embedder(data_dir, newcomer) == "minilm-l6-v2/384"


def test_an_unknown_embedder_is_refused_by_name(server_factory) -> None:
    process = server_factory(args=["--embedder", "bert-large"])
    with pytest.raises(RuntimeError, match="bert-large"):  # the server exited, saying why
        process.start(timeout=30)


def test_memory_brain_in_process_uses_the_named_embedder(tmp_path, monkeypatch) -> None:
    from mnemosyne import MemoryBrain

    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", "minilm")
    with MemoryBrain(tmp_path / "mem", "carol") as brain:
        brain.retain("Carol's dog is called Rex")
        tea = brain.retain("Carol prefers tea over coffee").memory_id
        assert brain.recall("What does Carol drink?", k=1)[0].memory.id == tea
    assert _recorded_embedder(tmp_path / "mem", "carol") == "minilm-l6-v2/384"
    monkeypatch.setenv("MNEMOSYNE_EMBEDDER", "word2vec")
    with pytest.raises(InvalidArgumentError):
        MemoryBrain(tmp_path / "other", "carol")
