"""The names of recall's steps, defined once: the pipeline's steps carry them, a test switches a
step off by its name (``MNEMOSYNE_TEST_RECALL_OFF``, ``Seams.recall_steps_off``), and
``bench.locomo --off`` and docs/recall-quality.md use the same names.

A recall runs its steps in this order (``pipeline.py`` builds the list for each mode and
embedder; a step whose weight is 0 for the embedder is left out of it).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class RecallStep(StrEnum):
    # Outside the read transaction: the query's vector.
    EMBED = "embed"  # the query's vector, as written
    SPEAKER_QUERY = "speaker_query"  # in place of embed: blended with the query without the speakers it names
    # In one read snapshot: the candidates and their fused scores.
    CANDIDATES = "candidates"  # the vector path's best rows and BM25's best hits
    POSTINGS = "postings"  # the candidates' BM25 from the postings cache (off: FTS5's own, the same hits)
    FUSE = "fuse"  # one score from BM25 and the cosine, pseudo-relevance feedback
    PASSAGES = "passages"  # a long text hit's cosine also from its sentence holding the question's words
    CONTEXT = "context"  # the best candidates' thread neighbours join (for neighbours and window)
    NEIGHBOURS = "neighbours"  # each candidate gains part of its best thread neighbour's score
    WINDOW = "window"  # the cosine of each candidate's context window is added
    RANK = "rank"  # best first, ties by the lower id; the best two paths' worth kept
    # Lifts of the ranked candidates by what the question names.
    DATES = "dates"  # the candidates dated inside the question's day, month or year
    SPEAKER = "speaker"  # the candidates said by a speaker the question names
    THREADS = "threads"  # the candidates of threads holding several good matches
    # The memories read for the response, and the priors over them.
    READ = "read"  # the rows of the best candidates: k current ones, more when a prior follows
    LENGTH = "length"  # the longer of two close matches first
    LISTS = "lists"  # the length prior of a list or count question, in place of length's
    NAMES = "names"  # the memories naming more places, people and works first
    ANSWERS = "answers"  # for a when, why or how-much question, the memories holding a time, cause or number first
    QUESTIONS = "questions"  # a memory that ends by asking a question lower
    SELECT = "select"  # the best k, superseded ones after current ones
    # At write time (engine/write_path.py), not at recall: "yesterday" resolved against occurred_at.
    RELATIVE_TIME = "relative_time"


# What a recall cannot do without (no ranking is left), or what runs only for another step.
ESSENTIAL = frozenset(
    {
        RecallStep.EMBED,
        RecallStep.CANDIDATES,
        RecallStep.FUSE,
        RecallStep.CONTEXT,
        RecallStep.RANK,
        RecallStep.READ,
        RecallStep.SELECT,
    }
)
# The steps a test may switch off (the ablation), in the order they run.
SWITCHABLE = tuple(step for step in RecallStep if step not in ESSENTIAL)


def switched_off(names: Iterable[str]) -> frozenset[RecallStep]:
    """The steps named (e.g. the ``MNEMOSYNE_TEST_RECALL_OFF`` seam's), refusing a name that is no
    switchable step: a misspelt ablation fails the test that set it instead of doing nothing."""
    steps = set()
    for name in names:
        if name not in SWITCHABLE:
            raise ValueError(f"{name!r} is no recall step that can be switched off; the steps: {', '.join(SWITCHABLE)}")
        steps.add(RecallStep(name))
    return frozenset(steps)
