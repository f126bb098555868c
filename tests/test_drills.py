"""The five recovery drills of the specification (§9.6, docs/seed-mapping.md): the exact code ``mnemosyne drill`` runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_five_drills_pass(tmp_path: Path) -> None:
    """``mnemosyne drill`` runs the five drills, one line each, PASS for every one, exit 0 (the drills
    start servers and kill them: run once, as a user runs them)."""
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


def test_a_directory_no_drill_made_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A careless ``drill --data-dir`` pointed at a server's data directory (or any directory with
    files of its own) is refused in one line before a server starts: the drills would add their
    tenants to it and SIGKILL the server they start on it."""
    data = tmp_path / "data"
    (data / "tenants").mkdir(parents=True)
    (data / "tenants" / "acme.sqlite").write_bytes(b"a tenant")
    before = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
    done = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "drill", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("[DRILL_DIR_NOT_OURS]"), done.stderr
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*")) == before
