"""The five recovery drills of the specification (§9.6, docs/seed-mapping.md): the exact code ``mnemosyne drill`` runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mnemosyne.cli.drills import run_drills


def test_the_five_drills_pass(tmp_path: Path) -> None:
    lines: list[str] = []
    results = run_drills(tmp_path / "drills", out=lines.append)
    assert [r.number for r in results] == [1, 2, 3, 4, 5], lines
    failed = [r.line() for r in results if not r.passed]
    assert not failed, "\n".join(lines)
    assert all(line.startswith("PASS drill ") for line in lines)


def test_drill_command_prints_one_line_per_drill_and_exits_zero(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "drill", "--data-dir", str(tmp_path / "cmd")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[:3] for line in lines] == [["PASS", "drill", str(n)] for n in range(1, 6)]
    # The offline reader of the log, on what the drill left: nothing open after recovery.
    server_dir = tmp_path / "cmd" / "server"
    tenant = next(p.stem for p in (server_dir / "tenants").glob("drill2-*.sqlite"))
    shown = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "oplog", "--data-dir", str(server_dir), "--tenant", tenant],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["open"] == [] and len(view["committed"]) == len(view["accepted"]) == 50
