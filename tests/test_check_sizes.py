"""scripts/check-sizes (run by scripts/lint): it names every module past 600 lines and every
function past 60, skips generated code, and passes a folder within the limits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check-sizes"


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines, its ``def`` included."""
    return f"{indent}def {name}() -> None:\n" + f"{indent}    pass\n" * (lines - 1)


def _check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=60)


def test_each_offender_is_named_and_generated_code_is_not(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("\n".join(f"X{i} = {i}" for i in range(601)) + "\n")
    method = _function("too_long", 61, indent="    ")  # a method counts as a function
    (tmp_path / "steps.py").write_text(_function("fits", 60) + "\n\nclass C:\n" + method)
    (tmp_path / "made_pb2.py").write_text("\n".join(f"Y{i} = {i}" for i in range(700)) + "\n" + _function("huge", 200))
    result = _check(tmp_path)
    assert result.returncode == 1, result
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'long.py'}:1: module (601 lines, limit 600)",
        f"{tmp_path / 'steps.py'}:64: function too_long (61 lines, limit 60)",
    ], result.stdout


def test_a_folder_within_the_limits_passes(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("\n".join(f"X{i} = {i}" for i in range(598)) + "\n" + _function("fits", 2))
    result = _check(tmp_path)
    assert (result.returncode, result.stdout) == (0, ""), result
