"""CI's no-skip guard (tests/no_skip.py): under MNEMOSYNE_NO_SKIP=1 a skip fails the run, whether
a test raises it or a module does while it is collected; without it, a skip is a skip. Each case
is a tiny test module run by pytest in a child process with the guard loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "importorskip_at_the_top": "import pytest\n\npytest.importorskip('a_module_nobody_installed')\n\n\n"
    "def test_never_collected():\n    pass\n",
    "skip_at_module_level": "import pytest\n\npytest.skip('not on this machine', allow_module_level=True)\n\n\n"
    "def test_never_collected():\n    pass\n",
    "skip_in_a_test": "import pytest\n\n\ndef test_skips():\n    pytest.skip('not today')\n",
}


def _pytest(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text("[pytest]\n")  # its own root: none of the repository's options
    environment = {k: v for k, v in os.environ.items() if k not in ("MNEMOSYNE_NO_SKIP", "PYTEST_ADDOPTS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.no_skip", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env={**environment, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("case", MODULES)
def test_a_skip_fails_the_run_only_under_no_skip(tmp_path: Path, case: str) -> None:
    (tmp_path / f"test_{case}.py").write_text(MODULES[case])
    (tmp_path / "test_passes.py").write_text("def test_passes():\n    pass\n")
    guarded = _pytest(tmp_path, MNEMOSYNE_NO_SKIP="1")
    assert guarded.returncode != 0, guarded.stdout
    assert "under MNEMOSYNE_NO_SKIP=1" in guarded.stdout and "skipped" not in guarded.stdout.splitlines()[-1]
    plain = _pytest(tmp_path)
    assert plain.returncode == 0 and "1 passed, 1 skipped" in plain.stdout.splitlines()[-1], plain.stdout
