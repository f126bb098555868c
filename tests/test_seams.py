"""Test seams live in one object that only a test's environment makes (runtime/seams.py): no
configuration field, flag or method carries one, a production environment makes none, and a
misspelt seam is refused instead of silently doing nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mnemosyne.engine.config import ConsolidationConfig, EngineConfig, HotPathConfig
from mnemosyne.runtime.seams import Seams
from mnemosyne.transport.config import ServerConfig


def test_no_configuration_carries_a_seam() -> None:
    seam_fields = {field.name for field in dataclasses.fields(Seams)}
    for config in (EngineConfig, HotPathConfig, ConsolidationConfig, ServerConfig):
        names = {field.name for field in dataclasses.fields(config)}
        assert not {n for n in names if n.startswith("test") or n in seam_fields}, config
        assert not hasattr(config, "committed"), f"{config.__name__} has the crash-after-commit seam"


def test_a_production_environment_makes_no_seams() -> None:
    assert Seams.from_environment({"PATH": "/usr/bin", "MNEMOSYNE_PORT": "50051"}) is None
    # The test harness's own variables are not seams of the process.
    assert Seams.from_environment({"MNEMOSYNE_TEST_TARGET": "127.0.0.1:1"}) is None


def test_each_variable_sets_its_seam() -> None:
    seams = Seams.from_environment(
        {
            "MNEMOSYNE_TEST_FAULTS": "kill@after_commit,file_bytes=10",
            "MNEMOSYNE_TEST_HOLD_WORKERS": "/tmp/hold",
            "MNEMOSYNE_TEST_GENERATION_BASE": "9000000",
            "MNEMOSYNE_TEST_COMMIT_DURING_ASSEMBLE": "1",
            "MNEMOSYNE_TEST_OPEN_FILES": "192:4096",
            "MNEMOSYNE_TEST_RECALL_OFF": "dates,names",
        }
    )
    assert seams == Seams(
        store_faults=frozenset({"kill@after_commit", "file_bytes=10"}),
        hold_workers_file=Path("/tmp/hold"),
        generation_base=9_000_000,
        commit_during_assemble=True,
        open_files=(192, 4096),
        recall_steps_off=frozenset({"dates", "names"}),
    )


def test_a_misspelt_seam_is_refused() -> None:
    with pytest.raises(ValueError, match="MNEMOSYNE_TEST_HOLD_WORKER"):
        Seams.from_environment({"MNEMOSYNE_TEST_HOLD_WORKER": "/tmp/hold"})
