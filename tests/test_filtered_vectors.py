"""A filtered recall's vector leg (engine/recall/candidates.py). A filter keeping few of a
tenant's memories scores only theirs; one keeping many asks a large tenant's graph for as many
more neighbours as it keeps fewer rows, and keeps those that pass. Either way every hit passes
the filter (a thread neighbour outside it lends nothing and is never returned), and the
vector-only hits are the best of the memories that pass by exact cosine: all of them from the
filter's own rows, nearly all from the graph. Where the candidates came from is the operator's
metric (``mnemosyne_recall_vector_legs``), read here to know each way was taken. A threshold of a
few hundred memories stands in for the production one, as in tests/test_ann.py."""

from __future__ import annotations

import numpy as np

from mnemosyne.client import MemoryClient, RetainItem, ThreadRef
from mnemosyne.engine.embedder import HashingEmbedder
from tests.support import gauge, wait_until
from tests.test_ann import _queries, _texts

THRESHOLD = 300
MEMORIES = 1600
K = 10


def _group(n: int) -> str:
    """1 in 40 memories is "rare" (few enough to be scored alone), the odd half "odd" (the graph's)."""
    return "rare" if n % 40 == 0 else "odd" if n % 2 else "even"


def _legs(server) -> dict[str, float]:
    return {
        source: gauge(server, "mnemosyne_recall_vector_legs", source=source)
        for source in ("graph", "every_row", "filtered_rows")
    }


def _exact_best(vectors: np.ndarray, query_vector: np.ndarray, members: np.ndarray) -> np.ndarray:
    """The members' K best cosines, best first (those sharing any feature with the query)."""
    cosine = vectors[members] @ query_vector
    return np.sort(cosine[cosine > 1e-6])[::-1][:K]


def test_a_filtered_recall_scores_the_filter_s_rows_or_asks_the_graph_for_more(server_factory, tenant: str) -> None:
    server = server_factory(env={"MNEMOSYNE_ANN_THRESHOLD": str(THRESHOLD)}, metrics=True).start()
    texts = _texts(0, MEMORIES)
    embedder = HashingEmbedder()
    vectors = embedder.embed(texts)
    groups = np.array([_group(n) for n in range(MEMORIES)])
    with MemoryClient(server.target) as client:
        ids: list[int] = []
        for start in range(0, MEMORIES, 400):
            items = [
                RetainItem(text=t, metadata={"group": str(groups[n])})
                for n, t in enumerate(texts[start : start + 400], start)
            ]
            ids += [r.memory_id for r in client.retain_batch(tenant, items)]
        client.recall(tenant, "kabar lodol", k=5)  # the first need: the graph is built
        wait_until(server.tenant_file(tenant).with_suffix(".ann").exists)
        row_of = {memory_id: n for n, memory_id in enumerate(ids)}

        for group, source in (("rare", "filtered_rows"), ("odd", "graph")):
            members = np.flatnonzero(groups == group)
            before = _legs(server)
            found = wanted = 0
            for query in _queries():
                hits = client.recall(tenant, query, k=K, filters={"group": group}, mode="vector")
                assert {groups[row_of[h.memory.id]] for h in hits} <= {group}
                best = _exact_best(vectors, embedder.embed([query])[0], members)
                scores = np.array([h.vector_score for h in hits])
                if group == "rare":  # exact: the same cosines, best first
                    assert np.allclose(scores, best, atol=1e-5), (query, scores, best)
                found += int(np.sum(np.isclose(scores[:, None], best[None, :], atol=1e-5).any(axis=1)))
                wanted += len(best)
            assert wanted > 100 and found >= 0.95 * wanted, (group, found, wanted)
            after = _legs(server)
            assert after[source] - before[source] == len(_queries()), (group, before, after)

        # Hybrid (its graph asked for fewer neighbours than vector-only's), and a filter no memory passes.
        for group, source in (("rare", "filtered_rows"), ("odd", "graph"), ("even", "graph")):
            before = _legs(server)
            for query in _queries():
                hits = client.recall(tenant, query, k=K, filters={"group": group})
                assert hits and {groups[row_of[h.memory.id]] for h in hits} == {group}
            assert _legs(server)[source] - before[source] == len(_queries()), group
        assert client.recall(tenant, _queries()[0], k=K, filters={"group": "none"}, mode="vector") == []


def test_a_thread_neighbour_outside_the_filter_is_never_returned(server_factory, tenant: str) -> None:
    """Every memory's thread neighbours are of the other groups: the context step joins them as
    candidates, and the filter keeps them out, by the filter's rows and by the graph alike."""
    server = server_factory(env={"MNEMOSYNE_ANN_THRESHOLD": str(THRESHOLD)}).start()
    texts = _texts(0, MEMORIES)
    groups = [_group(n) for n in range(MEMORIES)]
    with MemoryClient(server.target) as client:
        for start in range(0, MEMORIES, 400):
            items = [
                RetainItem(text=t, metadata={"group": groups[n]}, thread=ThreadRef(f"thread-{n // 4}", n % 4))
                for n, t in enumerate(texts[start : start + 400], start)
            ]
            client.retain_batch(tenant, items)
        client.recall(tenant, "kabar lodol", k=5)
        wait_until(server.tenant_file(tenant).with_suffix(".ann").exists)
        for group in ("rare", "odd"):
            for mode in ("vector", "hybrid"):
                for query in _queries():
                    hits = client.recall(tenant, query, k=K, filters={"group": group}, mode=mode)
                    assert hits and {h.memory.metadata["group"] for h in hits} == {group}
