"""The Node.js client and host (client/node) against the real Python server, run by Node's own
test runner: retain/recall round trip, GENERATION_MISMATCH read from the status details, fail
closed without an observation, and a Python host racing a Node host on one tenant.

Skips only when node/npm are not installed (a failure under MNEMOSYNE_NO_SKIP=1, as in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.node_support import node_package


def test_node_client_and_host_suite() -> None:
    package = node_package()
    env = {**os.environ, "MNEMOSYNE_PYTHON": sys.executable}
    result = subprocess.run(["node", "--test"], cwd=package, env=env, capture_output=True, text=True, timeout=600)
    summary = [line for line in result.stdout.splitlines() if line.startswith("# ")]
    assert result.returncode == 0, f"node --test failed:\n{result.stdout[-12000:]}\n{result.stderr[-4000:]}"
    counts = dict(line[2:].split(" ", 1) for line in summary if line[2:].split(" ", 1)[0] in ("tests", "pass", "fail"))
    assert int(counts["tests"]) >= 10 and counts["fail"] == "0" and counts["pass"] == counts["tests"], summary
