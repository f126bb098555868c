"""The slowest test FILES of a run (a pytest plugin, loaded by conftest.py): with ``--durations=N``
(pyproject.toml adds it), after pytest's slowest tests, the N files that took longest, each the sum
of its tests' setup, call and teardown, so a change shows what it added to CI. A session
fixture's start (the shared server) counts in the file of the first test that used it."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from _pytest.terminal import TerminalReporter


@pytest.hookimpl(trylast=True)  # after pytest's slowest tests
def pytest_terminal_summary(terminalreporter: TerminalReporter, config: pytest.Config) -> None:
    shown = config.option.durations
    if shown is None:
        return
    seconds: defaultdict[str, float] = defaultdict(float)
    tests: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                path = report.nodeid.split("::")[0]
                seconds[path] += report.duration
                tests[path] += report.when == "call"
    if not seconds:
        return
    slowest = sorted(seconds.items(), key=lambda item: item[1], reverse=True)[: shown or None]
    terminalreporter.write_sep(
        "=", f"slowest {len(slowest)} test files (of {len(seconds)}, {sum(seconds.values()):.0f}s in all)"
    )
    for path, total in slowest:
        terminalreporter.write_line(f"{total:8.1f}s {path} ({tests[path]} test{'' if tests[path] == 1 else 's'})")
