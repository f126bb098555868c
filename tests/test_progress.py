"""The long commands' progress (cli/progress.py) as a command that reports on stdout uses it
(rebalance, drill: ``echo=False``): into a pipe its report lines only, on a terminal the same lines
above a bar of the steps. Backup, restore, export and import are run whole, on a pseudo-terminal
and into a pipe, in tests/test_backup.py and tests/test_export_import.py."""

from __future__ import annotations

import io
import os
import pty
import select
from typing import TextIO

from mnemosyne.cli.progress import Progress


def _report_two_moves(stream: TextIO, report: TextIO) -> None:
    with Progress("rebalance", total=2, unit="tenant", echo=False, stream=stream) as progress:
        for tenant in ("acme", "beta"):
            progress.report(f"  {tenant}: m0 -> m1 epoch 2", report)
            progress(f"{tenant}: moved")


def test_into_a_pipe_only_the_report_lines() -> None:
    stderr, stdout = io.StringIO(), io.StringIO()
    _report_two_moves(stderr, stdout)
    assert stdout.getvalue() == "  acme: m0 -> m1 epoch 2\n  beta: m0 -> m1 epoch 2\n"
    assert stderr.getvalue() == ""


def test_on_a_terminal_the_report_lines_above_a_bar_of_the_steps() -> None:
    controller, terminal = pty.openpty()
    with os.fdopen(terminal, "w", closefd=True) as screen:
        assert screen.isatty()
        _report_two_moves(screen, screen)
        screen.flush()
    received = b""
    while select.select([controller], [], [], 0.5)[0]:
        try:
            received += os.read(controller, 65536)
        except OSError:  # the terminal's other end closed: all is read
            break
    os.close(controller)
    shown = received.decode()
    assert "  acme: m0 -> m1 epoch 2" in shown and "  beta: m0 -> m1 epoch 2" in shown, shown
    assert "rebalance: 100%|" in shown and "2/2 [" in shown and "beta: moved" in shown, shown
