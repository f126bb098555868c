"""The query's vector (every mode but text only), made outside any transaction: the embedder may
be slow. With ``speaker_query`` (MiniLM), a query naming one of the tenant's speakers is embedded
together with itself without the name, in one model call, and its vector is the normalised mean
of the two (``blend``): the name's words otherwise pull toward every memory that calls the
person by name, and the speaker step already carries who."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from mnemosyne.engine.embedder import Embedder, check_tenant_embedder
from mnemosyne.engine.index import vector_index
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.store.pool import TenantPool


def blend(full: np.ndarray, stripped: np.ndarray, share: float) -> np.ndarray:
    """The unit vector along ``(1 - share) x full + share x stripped`` (zero when that is zero):
    a query's vector with the words ``stripped`` lacks (a named speaker's) weighing less."""
    mixed = (1.0 - share) * full.astype(np.float64) + share * stripped.astype(np.float64)
    norm = float(np.sqrt(mixed.dot(mixed)))
    out: np.ndarray = (mixed / norm if norm > 0 else mixed).astype(np.float32)
    return out


class QueryStep(Protocol):
    """The step that makes the query's vector, before the recall's read snapshot."""

    @property
    def name(self) -> RecallStep: ...

    def __call__(self, tenant: str, query: str) -> np.ndarray: ...


class Embed:
    """The query's vector, as written."""

    name = RecallStep.EMBED

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def __call__(self, tenant: str, query: str) -> np.ndarray:
        vector: np.ndarray = self.embedder.embed([query])[0]
        return vector


class EmbedWithoutSpeakers:
    """The query's vector, blended with that of the query without the speakers it names (as
    written when it names none, or the tenant does not exist)."""

    name = RecallStep.SPEAKER_QUERY

    def __init__(self, embedder: Embedder, pool: TenantPool, settings: RecallSettings) -> None:
        self.embedder = embedder
        self.pool = pool
        self.share = settings.speaker_query_mix

    def __call__(self, tenant: str, query: str) -> np.ndarray:
        without = self._without_named_speakers(tenant, query)
        if without is None:
            vector: np.ndarray = self.embedder.embed([query])[0]
            return vector
        full, stripped = self.embedder.embed([query, without])
        return blend(full, stripped, self.share)

    def _without_named_speakers(self, tenant: str, query: str) -> str | None:
        """``query`` without the tenant's speakers it names (``VectorIndex.without_named_speakers``),
        or None when it names none. The names are looked up in a read transaction of their own,
        so a restart or a cache behind the file never changes them."""
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return None
            index = vector_index(store, self.embedder.dim)
            with store.read() as txn:
                check_tenant_embedder(txn, self.embedder, write=False)
                index.sync_view(txn)
            return index.without_named_speakers(query)
