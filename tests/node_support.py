"""Running the Node package in client/node from the tests.

The Node tests and checks skip only when node or npm are absent (MNEMOSYNE_NO_SKIP=1 in CI turns
the skip into a failure). Dependencies come from the committed lockfile via ``npm ci`` when
node_modules is missing, so a fresh checkout works with one test command.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_PACKAGE = ROOT / "client" / "node"


def node_package() -> Path:
    """client/node with its dependencies installed; skips when Node.js or npm is not installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the Node.js host (install Node.js >= 20)")
    if not (NODE_PACKAGE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_PACKAGE, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"npm ci failed in {NODE_PACKAGE}:\n{result.stdout}\n{result.stderr}"
    return NODE_PACKAGE
