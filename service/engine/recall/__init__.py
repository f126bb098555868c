"""Recall: hybrid vector and BM25 search, then a list of named steps that re-weigh the candidates.

A recall runs its mode's pipeline (``pipeline.py``), each step a small unit with its own test
(tests/test_recall_steps.py), its name defined once (``steps.RecallStep``: the names the
``MNEMOSYNE_TEST_RECALL_OFF`` seam, ``bench.locomo --off`` and docs/recall-quality.md use):

* outside the transaction, the query's vector: ``embed``, or ``speaker_query`` (``query.py``);
* in one read snapshot: ``candidates`` from both paths (``candidates.py``, the full-text path
  in ``text.py``, ``postings`` its cache), ``fuse`` (``fusion.py``), ``context``,
  ``neighbours`` and ``window`` (``context.py``), ``rank`` (``fusion.py``);
* the lifts by what the question names: ``dates``, ``speaker``, ``threads`` (``lifts.py``);
* ``read`` the best rows (``select.py``), the priors over them: ``length``, ``lists``,
  ``names``, ``questions`` (``priors.py``), and ``select`` the best ``k`` (``select.py``).

Every weight and depth is in the embedder's ``RecallSettings`` (``settings.py``); what each step
reads and writes is in ``state.py``; ``Recall`` (``recall.py``) validates, runs the list inside
the read transaction, and keeps the response within its budget.
"""

from mnemosyne.engine.recall.recall import Recall
from mnemosyne.engine.recall.settings import HASHING_SETTINGS, MINILM_SETTINGS, RecallSettings, settings_for
from mnemosyne.engine.recall.steps import SWITCHABLE, RecallStep

__all__ = [
    "HASHING_SETTINGS",
    "MINILM_SETTINGS",
    "SWITCHABLE",
    "Recall",
    "RecallSettings",
    "RecallStep",
    "settings_for",
]
