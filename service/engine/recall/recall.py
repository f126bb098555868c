"""``Recall``: validates a question, runs its mode's pipeline of steps over one read snapshot of
the tenant, and keeps the response within its budget."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from mnemosyne.engine import limits as check
from mnemosyne.engine.answer_kinds import asked_kind
from mnemosyne.engine.embedder import Embedder, check_tenant_embedder
from mnemosyne.engine.embedders import TenantEmbedders
from mnemosyne.engine.figures import Figures
from mnemosyne.engine.index import VectorIndex, vector_index
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.memories import memory_from_row
from mnemosyne.engine.question_form import asks_for_many
from mnemosyne.engine.recall.pipeline import Pipeline, build_pipeline
from mnemosyne.engine.recall.query import Embedded, still_current, unread
from mnemosyne.engine.recall.settings import RecallSettings, settings_for
from mnemosyne.engine.recall.state import Query, Recalling, Snapshot
from mnemosyne.engine.recall.steps import switched_off
from mnemosyne.engine.recall.text import query_terms
from mnemosyne.engine.types import Hit, Recalled, RecallMode
from mnemosyne.runtime import tracing
from mnemosyne.runtime.clock import Clock
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import TenantStore

# A recall's reads: one, another after a speaker's name or a re-embedding's switch changed its
# vector, and at most one more, should a switch come in between.
_ATTEMPTS = 3


class Recall:
    """The whole recall, start to end: validation, the steps of the mode's pipeline (the query's
    vector, then in ONE read transaction the candidates of both paths, their fusion, the lifts,
    the priors and the selection), and the response budget."""

    def __init__(
        self,
        *,
        pool: TenantPool,
        embedders: TenantEmbedders,
        limits: Limits,
        steps_off: Iterable[str] = (),
        ann_threshold: int = 0,
        clock: Clock | None = None,
        figures: Figures | None = None,
    ) -> None:
        self.pool = pool
        self.clock = clock or Clock()  # expired memories are never hits (engine/expiry.py)
        self.figures = figures
        self.embedders = embedders
        self.limits = limits
        # Steps switched off by name: a test seam, for the ablation (none in production).
        self._off = switched_off(steps_off)
        self._ann_threshold = ann_threshold  # 0: each embedder's own (settings.py)
        # Each embedder's settings and pipelines, made on its first tenant's first recall.
        self._rankings: dict[str, _Ranking] = {}
        self.ranking(embedders.default)

    def ranking(self, embedder: Embedder) -> _Ranking:
        """The settings and the pipeline of each mode of the tenants whose vectors ``embedder`` made."""
        known = self._rankings.get(embedder.name)
        if known is None:
            settings = settings_for(embedder)
            pipelines = {
                mode: build_pipeline(
                    mode,
                    settings,
                    self._off,
                    embedder=embedder,
                    ann_threshold=self._ann_threshold or settings.ann_threshold,
                )
                for mode in RecallMode
            }
            known = self._rankings.setdefault(embedder.name, _Ranking(embedder, settings, pipelines))
        return known

    def __call__(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 0,
        scopes: Sequence[str] = (),
        metadata_equals: Mapping[str, str] | None = None,
        mode: RecallMode = RecallMode.HYBRID,
    ) -> Recalled:
        """The best ``k`` memories for ``query`` (hybrid by default), current facts first, within
        the response budget (what does not fit is named in ``omitted_memory_ids``). One read
        transaction: a memory committed before the call began is a candidate, a forgotten or
        merged one never appears."""
        checked = self._checked(query, k, scopes, metadata_equals)
        with self.pool.tenant(tenant, create=False) as store:
            if store is None:
                return Recalled([])
            recalling = self._recalled(store, checked, mode)
        if self.figures is not None:
            self.figures.recalled(tenant)
        hits = [Hit(memory_from_row(row), score, c.vector_score, c.text_score) for c, row, score in recalling.best]
        kept = check.within_budget([check.memory_bytes(h.memory) for h in hits])
        return Recalled(hits[:kept], tuple(h.memory.id for h in hits[kept:]))

    def _recalled(self, store: TenantStore, checked: _Checked, mode: RecallMode) -> Recalling:
        """The query's vector, then the steps in one read transaction. The vector is made before
        it, by the tenant's embedder and from the speakers' names the cache knows
        (``EmbedWithoutSpeakers``); should the transaction find that a re-embedding's switch
        committed since (another embedder, engine/reembed.py), or its sync bring a name that
        changes the vector (first written meanwhile), the transaction is left and the vector
        made again: by the new embedder, or after a sync that holds every memory committed before
        the call began. The last attempt takes what it finds (a switch again is refused)."""
        speakers_checked = False
        for attempt in range(_ATTEMPTS):
            ranking = self.ranking(self.embedders.of(store))
            index = vector_index(store, ranking.embedder.dim)
            asked, embedded = self._query(ranking, store, index, checked, mode)
            with store.read() as txn:
                if attempt < _ATTEMPTS - 1 and self.embedders.switched(store, txn, ranking.embedder):
                    continue
                check_tenant_embedder(txn, ranking.embedder, write=False)
                snapshot = Snapshot(store, txn, index, txn.index_state())
                if not speakers_checked and attempt < _ATTEMPTS - 1 and embedded is not None and embedded.speakers >= 0:
                    speakers_checked = True
                    index.sync_view(txn, snapshot.state)
                    if not still_current(embedded, index, checked.query):
                        continue
                recalling = Recalling(asked, snapshot)
                _run(ranking.pipelines[mode], recalling)
                return recalling
        raise AssertionError("the last attempt always reads")

    def _checked(
        self, query: str, k: int, scopes: Sequence[str], metadata_equals: Mapping[str, str] | None
    ) -> _Checked:
        """The question validated, before the tenant is opened: a bad one is refused whether the
        tenant exists or not."""
        check.validate_query(query, self.limits)
        return _Checked(
            query,
            check.validate_k(k, self.limits),
            check.validate_scopes(scopes),
            check.validate_metadata(metadata_equals or {}, self.limits, field="metadata_equals"),
        )

    def _query(
        self, ranking: _Ranking, store: TenantStore, index: VectorIndex, checked: _Checked, mode: RecallMode
    ) -> tuple[Query, Embedded | None]:
        """The question with its vector (none for text only: the text path never reads it), made
        before the read transaction by the tenant's embedder."""
        query, k = checked.query, checked.k
        pipeline = ranking.pipelines[mode]
        embedded = None  # text only: none
        if pipeline.embed is not None:
            with tracing.span(f"recall.{pipeline.embed.name.value}"):
                reads = ranking.embedder.reads(query)
                embedded = pipeline.embed(store, index, query) if reads else unread(ranking.embedder)
        depth = max(ranking.settings.candidates_per_k * k, ranking.settings.min_candidates)
        many = pipeline.reads_question_form and asks_for_many(query)
        kind = asked_kind(query) if pipeline.reads_answer_kind else None
        vector = None if embedded is None else embedded.vector
        asked = Query(
            query,
            query_terms(query),
            k,
            depth,
            checked.scopes,
            checked.filters,
            mode,
            vector,
            many,
            kind,
            self.clock.now(),
        )
        return asked, embedded


class _Checked(NamedTuple):
    """A recall's question, validated."""

    query: str
    k: int
    scopes: list[str]
    filters: dict[str, str]


class _Ranking(NamedTuple):
    """One embedder's recall: its settings and its pipeline for each mode."""

    embedder: Embedder
    settings: RecallSettings
    pipelines: dict[RecallMode, Pipeline]


def _run(pipeline: Pipeline, recalling: Recalling) -> None:
    """The pipeline's steps over ``recalling``, each in a span of its own while tracing."""
    if tracing.enabled():
        for step, span in zip(pipeline.steps, pipeline.spans):
            with tracing.span(span):
                step(recalling)
    else:  # no span recorded: no with-statement per step either
        for step in pipeline.steps:
            step(recalling)
