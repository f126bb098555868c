"""Near duplicates named at write time, in acceptance order (engine/dedup.py has the rule: similar
embeddings AND the same atoms).

A write names the stored memories of its scope it is a near duplicate of — those accepted BEFORE
it (store/acceptance.py), as applying the writes one by one in acceptance order would have found
them. When a write is applied after a similar memory accepted later (the worker took that one
ahead of the backlog), it does not name that one; the later one's event names it instead, amended
in the commit that creates it (``WritePath.apply``), so the events say what acceptance order says
whatever order the writes were applied in.

Looked up outside any write transaction: one matrix product against the tenant's vector cache,
atoms only for the candidates found. Items committed together (a batch, or a worker's group of
operations, in acceptance order) are also compared with the earlier ones among them; those are
named once their ids exist, in the commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mnemosyne.engine import dedup
from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.index import vector_index
from mnemosyne.engine.prepared_item import PreparedItem
from mnemosyne.runtime import read_priority
from mnemosyne.store.tenant_store import TenantStore

# Candidates looked at per item whose acceptance is known (a queued write): some of them may be
# later-accepted memories, named the other way round, so more than the MAX_NAMED kept.
_CANDIDATES_OUT_OF_ORDER = 4 * dedup.MAX_NAMED


def find_near_duplicates(
    store: TenantStore, embedder: Embedder, threshold: float, prepared: Sequence[PreparedItem]
) -> None:
    """Fill ``near_duplicate_of``, ``near_later`` and ``near_batch`` of each prepared item with a
    vector. An item without an acceptance yet (a synchronous write: it takes one in its commit,
    above every stored memory's) names every similar stored memory."""
    todo = [p for p in prepared if p.vector is not None]
    if not todo or threshold > 1.0:
        return
    vectors = np.frombuffer(b"".join(p.vector for p in todo if p.vector is not None), dtype="<f4").reshape(
        len(todo), -1
    )
    ordered = any(p.acceptance is not None for p in todo)
    limit = _CANDIDATES_OUT_OF_ORDER if ordered else dedup.MAX_NAMED
    index = vector_index(store, embedder.dim)
    with store.read() as txn:
        if txn.meta("embedder") not in (None, embedder.recorded):
            # A re-embedding switched the tenant since its store cached ``embedder``: these vectors
            # are not comparable with its rows; the commit finds them stale and the write is
            # embedded again (engine/write_path.py ``check_vectors``), its near duplicates with it.
            return
        ids, matrix = index.sync(txn)
        similar = dedup.similar_rows(vectors, ids, matrix, threshold, limit=limit)
        wanted = sorted({memory_id for hits in similar for memory_id, _ in hits})
        rows = txn.memories_by_ids(wanted, with_details=False) if wanted else {}
    known = {
        i: dedup.Candidate(r.scope, r.body, embedder) for i, r in rows.items() if not r.forgotten and not r.merged_into
    }
    accepted = {i: r.acceptance for i, r in rows.items()}
    # One Candidate per item, compared with the stored memories and with the items before it:
    # its atoms are read once however many it is compared with.
    items = [dedup.Candidate(p.item.scope, p.item.text, embedder) for p in todo]
    earlier_alike = dedup.similar_earlier(vectors, threshold) if len(todo) > 1 else []
    with read_priority.bulk_work():  # the atoms: regular expressions over every text compared
        for p, item, hits in zip(todo, items, similar):
            alike = dedup.same_atoms_filter(item, [i for i, _ in hits], known)
            if p.acceptance is None:
                p.near_duplicate_of = alike
                continue
            p.near_duplicate_of = [i for i in alike if accepted[i] < p.acceptance][: dedup.MAX_NAMED]
            p.near_later = [(i, accepted[i]) for i in alike if accepted[i] > p.acceptance]
        batch = dict(enumerate(items))
        for p, item, earlier in zip(todo, items, earlier_alike):
            p.near_batch = [todo[i] for i in dedup.same_atoms_filter(item, earlier, batch)]
