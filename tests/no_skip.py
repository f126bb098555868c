"""The no-skip guard (a pytest plugin, loaded by conftest.py): with MNEMOSYNE_NO_SKIP=1 (CI) a
skipped test fails the run, so CI can never pass by skipping. A skip raised while a module is
collected (``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)`` at its top) is a
collection error then, as is one raised by a test or its fixtures."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest
from pluggy import Result


def _guarded() -> bool:
    return os.environ.get("MNEMOSYNE_NO_SKIP") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Result[pytest.CollectReport]]:
    outcome = yield
    report = outcome.get_result()
    if _guarded() and report.skipped:
        where = report.longrepr  # (path, line, "Skipped: why") for a skip
        if isinstance(where, tuple):
            where = f"{where[0]}:{where[1]}: {where[2]}"
        report.outcome = "failed"
        report.longrepr = f"skipped while collected, under MNEMOSYNE_NO_SKIP=1: {where}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport]]:
    outcome = yield
    report = outcome.get_result()
    if _guarded() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under MNEMOSYNE_NO_SKIP=1: {report.longrepr}"
