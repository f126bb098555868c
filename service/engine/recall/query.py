"""The query's vector (every mode but text only), made outside any transaction: the embedder may
be slow. With ``speaker_query`` (MiniLM), a query naming one of the tenant's speakers is embedded
together with itself without the name, in one model call, and its vector is the normalised mean
of the two (``blend``): the name's words otherwise pull toward every memory that calls the
person by name, and the speaker step already carries who. A query the embedder reads nothing of
(``Embedder.reads``: emoji, a script the model has no pieces for) gets the zero vector instead of
either step's (``unread``; recall.py asks), which matches no memory: its vector would be the one
every unreadable memory has, whatever they say, and the full-text leg still finds its exact words."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from mnemosyne.engine.embedder import Embedder
from mnemosyne.engine.index import VectorIndex
from mnemosyne.engine.recall.settings import RecallSettings
from mnemosyne.engine.recall.steps import RecallStep
from mnemosyne.store.tenant_store import TenantStore


def blend(full: np.ndarray, stripped: np.ndarray, share: float) -> np.ndarray:
    """The unit vector along ``(1 - share) x full + share x stripped`` (zero when that is zero):
    a query's vector with the words ``stripped`` lacks (a named speaker's) weighing less."""
    mixed = (1.0 - share) * full.astype(np.float64) + share * stripped.astype(np.float64)
    norm = float(np.sqrt(mixed.dot(mixed)))
    out: np.ndarray = (mixed / norm if norm > 0 else mixed).astype(np.float32)
    return out


class Embedded(NamedTuple):
    """The query's vector, and the speakers' names it was made knowing."""

    vector: np.ndarray
    # How many speakers' names the tenant's cache knew (``VectorIndex.speaker_count``); -1: the
    # vector does not depend on them.
    speakers: int = -1
    without: str | None = None  # the query without the speakers it names (None: it names none)


def still_current(embedded: Embedded, index: VectorIndex, query: str) -> bool:
    """Whether the query's vector is the one the cache's speakers make now (the recall's read
    transaction has synced it): a name the cache learnt since the vector was made and that the
    query holds makes it stale."""
    if embedded.speakers < 0 or index.speaker_count == embedded.speakers:
        return True
    return index.without_named_speakers(query) == embedded.without


def unread(embedder: Embedder) -> Embedded:
    """The vector of a query the embedder reads nothing of: zero, no memory's match."""
    return Embedded(np.zeros(embedder.dim, dtype=np.float32))


class QueryStep(Protocol):
    """The step that makes the query's vector, before the recall's read snapshot."""

    @property
    def name(self) -> RecallStep: ...

    def __call__(self, store: TenantStore, index: VectorIndex, query: str) -> Embedded: ...


class Embed:
    """The query's vector, as written."""

    name = RecallStep.EMBED

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def __call__(self, store: TenantStore, index: VectorIndex, query: str) -> Embedded:
        return Embedded(self.embedder.embed([query])[0])


class EmbedWithoutSpeakers:
    """The query's vector, blended with that of the query without the speakers it names (as
    written when it names none).

    The names are those the tenant's vector cache knows, read without a transaction: the
    recall's own read transaction then syncs the cache and checks them (``still_current``),
    and the vector is made again in the rare case a name written since changes it. Only a cache
    never synced (the tenant just opened) is synced first, in a read transaction of its own, so
    the first recall after a restart makes its vector once."""

    name = RecallStep.SPEAKER_QUERY

    def __init__(self, embedder: Embedder, settings: RecallSettings) -> None:
        self.embedder = embedder
        self.share = settings.speaker_query_mix

    def __call__(self, store: TenantStore, index: VectorIndex, query: str) -> Embedded:
        if not index.synced:
            with store.read() as txn:
                # Another embedder's vectors since this one was taken (a re-embedding's switch):
                # unsynced, the recall's own transaction finds the switch and asks again.
                if txn.meta("embedder") in (None, self.embedder.recorded):
                    index.sync_view(txn)
        speakers = index.speaker_count
        without = index.without_named_speakers(query)
        if without is None:
            return Embedded(self.embedder.embed([query])[0], speakers)
        full, stripped = self.embedder.embed([query, without])
        return Embedded(blend(full, stripped, self.share), speakers, without)
