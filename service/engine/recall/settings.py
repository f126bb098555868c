"""Every weight and depth that shapes a recall's ranking, in one frozen object per embedder.

The values were chosen on LoCoMo dev (``python -m bench.locomo``); the sweeps behind each are in
docs/decisions.md ("Recall settings") and docs/recall-quality.md. A weight of 0 leaves its step out
of the pipeline (``pipeline.py``). An embedder with no settings of its own gets the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnemosyne.engine.ann import DEFAULT_THRESHOLD as SPARSE_ANN_THRESHOLD
from mnemosyne.engine.embedder import Embedder, HashingEmbedder
from mnemosyne.engine.sentence_embedder import MiniLMEmbedder


@dataclass(frozen=True)
class RecallSettings:
    """The weights and depths of one embedder's ranking, each read by one step (steps.py); the
    defaults are those of an embedder with no settings of its own."""

    # -- candidates
    # Memories in a tenant from which the vector candidates come from its approximate index
    # (engine/ann.py; the exact scan below), unless the operator sets --ann-threshold.
    ann_threshold: int = SPARSE_ANN_THRESHOLD
    # Each path's candidates, at least: deeper lists found no more evidence.
    min_candidates: int = 50
    # Each path's candidates per hit asked for, when k is large.
    candidates_per_k: int = 4
    # The share of a hybrid recall's candidates it asks a large tenant's approximate index for
    # (engine/ann.py; 0: all of them and ANN_SLACK more). The full-text leg finds the memories
    # holding the query's words: with the hashing embedder a graph searched for 32 neighbours
    # instead of 66 gives the same fused top 10 at 1M memories, 0.5 ms sooner
    # (docs/performance.md, "Large tenants").
    graph_share: float = 0.0
    # BM25's length normalisation (FTS5 fixes 0.75): a longer memory holds more, it is not padded.
    bm25_b: float = 0.4
    # Memories holding every query term rank above those holding some, up to this many terms:
    # past it hardly any memory holds them all (and it needs at least two).
    max_coordinated_terms: int = 6
    # -- fuse
    # BM25's share of the fused score (BM25 / its best), the cosine's the rest.
    text_weight: float = 0.5
    # BM25's best is divided by at least this: a best hit on words found in most memories (FTS5
    # clamps their IDF to nearly 0) is no match, not a full-weight one; 0 divides by the best alone.
    text_floor: float = 0.0
    # The query vector moves toward the best candidates' mean by this (pseudo-relevance feedback):
    # a bag of features gains by it, a sentence model does not; 0 leaves it out.
    feedback: float = 0.0
    # The candidates whose mean the feedback uses.
    feedback_candidates: int = 3
    # -- context
    # The best candidates whose thread neighbours join: two index seeks each, no gain past 20.
    context_depth: int = 20
    # A candidate gains this share of its best thread neighbour's score: the answer beside a
    # matching question shares few words with it.
    neighbour_weight: float = 0.4
    # The cosine of a candidate's context window is added with this weight: a sentence vector
    # gains by its neighbours' meaning, a bag of features loses; 0 leaves it out.
    window_weight: float = 0.0
    # The best full-text hits the model read only in part whose sentence holding the question's
    # words is embedded (recall/passages.py: a model call); 0 leaves the step out.
    passages: int = 0
    # A context window's vector: the candidate's own plus this share of each neighbour's.
    window_neighbours: float = 0.5
    # -- lifts
    # A candidate dated inside the question's day, month or year gains this share of the best score.
    date_boost: float = 0.2
    # A candidate said by a speaker the question names gains this share of the best score: a
    # question about a person is mostly answered by what that person said.
    speaker_boost: float = 0.2
    # This share of the query's vector is that of the query without the speakers it names, whose
    # words pull toward every memory calling them by name; 0 embeds the query as written.
    speaker_query_mix: float = 0.0
    # A candidate gains this share of the best score times its thread's share of the best
    # candidates' summed score: a session of several matches is about the question.
    thread_weight: float = 0.1
    # The best candidates thread support sums and lifts.
    thread_depth: int = 50
    # -- the memories read, the priors over them, the selection
    # The memories read for the response when a prior runs, at least (else k).
    read_depth: int = 20
    # A read memory gains this share of the best score times ln(its length / the mean): of two
    # close matches the longer says more; 0 leaves it out.
    length_prior: float = 0.0
    # The length prior's share for a list or count question, whose answers are spread over
    # several memories; 0 leaves such questions to length_prior.
    list_length_prior: float = 0.0
    # A read memory gains this share of the best score times ln(1 + the names it holds):
    # questions ask for particulars; 0 leaves it out.
    names_prior: float = 0.0
    # For a question asking for a time, a cause or a number, a read memory holding one gains this
    # share of the best score (engine/answer_kinds.py); 0 leaves it out.
    answer_prior: float = 0.0
    # A read memory that ends by asking a question scores times (1 - this): it seldom holds an
    # answer; 0 leaves it out.
    question_penalty: float = 0.0
    # A superseded memory's score is multiplied by this: current facts first, the history
    # still reachable.
    superseded_weight: float = 0.5


# The default embedder's: a bag of hashed features, weak alone, strong with BM25 beside it.
HASHING_SETTINGS = RecallSettings(
    graph_share=0.64,  # 32 neighbours of the graph for 50 candidates
    text_weight=0.5,  # BM25 and the cosine weigh the same
    feedback=1.0,  # the best hits' wording completes a bag of features
    length_prior=0.15,
    list_length_prior=0.25,
    speaker_boost=0.5,  # its vector carries less of who is asked about than a sentence model's
    question_penalty=0.2,
    names_prior=0.2,
    answer_prior=0.1,  # its bag of words sees the topic, not whether a memory says when or why
)

# A dense vector's exact scan reads all its dimensions of every row (a hashed query's reads a few):
# its graph pays from far fewer memories (docs/performance.md, "The graph for a dense embedder").
DENSE_ANN_THRESHOLD = 5_000

# MiniLM's: a sentence model, strong alone.
MINILM_SETTINGS = RecallSettings(
    ann_threshold=DENSE_ANN_THRESHOLD,
    text_weight=0.3,  # BM25 weighs less beside a strong vector
    text_floor=2.0,  # a paraphrase shares only the name found in every memory
    feedback=0.0,  # a sentence model does not gain by it
    window_weight=0.3,  # its vectors carry the neighbours' meaning
    passages=3,  # it reads a text's first 254 word pieces
    length_prior=0.0,  # it lowered recall (list questions keep theirs)
    list_length_prior=0.2,
    speaker_boost=0.3,
    speaker_query_mix=0.5,
    question_penalty=0.05,  # more lowered temporal recall
    names_prior=0.2,
    answer_prior=0.1,  # it matches the topic, not whether a memory says when or why
)

_BY_EMBEDDER = {HashingEmbedder.name: HASHING_SETTINGS, MiniLMEmbedder.name: MINILM_SETTINGS}


def settings_for(embedder: Embedder) -> RecallSettings:
    """The settings of the embedder that made the tenant's vectors (one per server: a tenant made
    by another is refused, ``check_tenant_embedder``); the defaults for one without its own."""
    return _BY_EMBEDDER.get(embedder.name, RecallSettings())
