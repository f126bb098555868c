"""A recall's work beside it (engine/recall/side.py): a call made on a helper thread gives its value
or raises its error on the caller's thread, in the caller's context; with every helper busy it is
made at once on the caller's thread; and a recall whose query vector was made beside its full-text
leg has the same hits as one whose vector was made first."""

from __future__ import annotations

import contextvars
import threading
from pathlib import Path

import pytest

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.engine import Engine
from mnemosyne.engine.recall.side import SideThreads, side_threads
from mnemosyne.engine.types import RecallMode, RetainItem

_ASKED = contextvars.ContextVar("asked", default="")


def test_a_call_beside_gives_its_value_in_the_callers_context_or_raises_its_error() -> None:
    helpers = SideThreads(1)
    _ASKED.set("recall 7")
    pending = helpers.start(lambda: (threading.get_ident(), _ASKED.get()))
    thread, asked = pending.result()
    assert thread != threading.get_ident() and asked == "recall 7"

    def fails() -> None:
        raise LookupError("no such tenant")

    failing = helpers.start(fails)
    with pytest.raises(LookupError, match="no such tenant"):
        failing.result()
    # The helper is free again: the next call is made on it too.
    assert helpers.start(threading.get_ident).result() == thread


def test_with_every_helper_busy_the_call_is_made_at_once_on_the_callers_thread() -> None:
    helpers = SideThreads(2)
    release = threading.Event()
    busy = [helpers.start(release.wait) for _ in range(2)]
    assert helpers.start(threading.get_ident).result() == threading.get_ident()
    release.set()
    assert all(pending.result() for pending in busy)


def test_a_vector_made_beside_the_text_leg_gives_the_same_hits(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(data_dir=tmp_path, embedder="minilm"))
    try:
        engine.retain_batch(
            "t",
            [
                RetainItem(text)
                for text in (
                    "Caroline went to the pottery class on Saturday",
                    "Melanie painted a sunrise over the lake",
                    "The support ticket about the refund was closed",
                    "Caroline said the adoption agency called her back",
                    "We booked the campsite near the river for July",
                )
            ],
        )
        queries = ["what did Caroline do on Saturday", "refund ticket", "painting by the lake"]
        beside = {q: _hits(engine, q) for q in queries}
        # Every helper busy: the vector is made first, on the recall's thread, as before side.py.
        release, me, inline = threading.Event(), threading.get_ident(), []

        def hold() -> bool:
            return inline.append(True) is None if threading.get_ident() == me else release.wait()

        busy = []
        while not inline:  # until a call found no idle helper
            busy.append(side_threads().start(hold))
        try:
            assert {q: _hits(engine, q) for q in queries} == beside
        finally:
            release.set()
            for pending in busy:
                pending.result()
    finally:
        engine.close()


def _hits(engine: Engine, query: str) -> list[tuple[int, float, float, float]]:
    recalled = engine.recall("t", query, k=5, mode=RecallMode.HYBRID)
    return [(h.memory.id, h.score, h.vector_score, h.text_score) for h in recalled.hits]
