"""MemoryBrain: the specification's §9.2 snippet (docs/seed-mapping.md) runs unchanged in process, and against a server with only
the constructor changed (same Engine code underneath, same results and errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import FailedPreconditionError, InvalidArgumentError

# Seed 001 §9.2, verbatim.
SEED_SNIPPET = """
from mnemosyne import MemoryBrain

brain = MemoryBrain("./mem")
brain.ensure_init()

# Turn on asynchronous writing: the hot path only enqueues
brain.hot_path(action="enable")

brain.retain("The customer requested a refund, ticket number RF-88213", fast=True)
hits = brain.recall("refund ticket", k=3)          # may be empty: not yet on disk
brain.hot_path(action="flush")                    # consistency barrier
hits = brain.recall("refund ticket", k=3)          # now guaranteed readable
"""


def _run(snippet: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "seed-9.2", "exec"), namespace)
    return namespace


def _check(namespace: dict[str, Any]) -> None:
    brain = namespace["brain"]
    try:
        texts = [h.memory.text for h in namespace["hits"]]
        assert "The customer requested a refund, ticket number RF-88213" in texts
        status = brain.hot_path(action="status")
        assert status.enabled and status.queue_depth == 0 and status.accepted == 1 and status.succeeded == 1
        report = brain.verify_integrity()
        assert report.valid and report.first_broken_at == 0
    finally:
        brain.close()


def test_seed_snippet_runs_unchanged_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _check(_run(SEED_SNIPPET))
    assert (tmp_path / "mem" / "tenants" / "default.sqlite").exists()


def test_seed_snippet_runs_against_a_server_with_only_the_constructor_changed(target: str, tenant: str) -> None:
    snippet = SEED_SNIPPET.replace('MemoryBrain("./mem")', f'MemoryBrain("{target}", tenant="{tenant}")')
    assert snippet != SEED_SNIPPET
    _check(_run(snippet))


def test_in_process_brain_owns_its_directory(tmp_path: Path) -> None:
    from mnemosyne import MemoryBrain

    with MemoryBrain(str(tmp_path / "mem")) as brain:
        with pytest.raises(FailedPreconditionError) as caught:
            MemoryBrain(str(tmp_path / "mem"))
        assert caught.value.reason == "DATA_DIR_LOCKED"
        # Domain errors surface as the client's typed errors, as in the remote mode.
        with pytest.raises(InvalidArgumentError):
            brain.retain("")
        result = brain.retain("Synchronous when the hot path is off", fast=True)
        assert result.status == "created"
        batch = brain.retain_batch(["one item", "two items", ""])
        assert [r.status for r in batch] == ["created", "created", "invalid"]
