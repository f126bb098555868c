"""The no-skip guard (a pytest plugin, loaded by conftest.py): with MNEMOSYNE_NO_SKIP=1 (CI) a
skipped test fails the run, so CI can never pass by skipping. A skip raised while a module is
collected (``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)`` at its top) is a
collection error then, as is one raised by a test or its fixtures.

Two tests with one node id fail the collection whatever the variable says: pytest-xdist
(scripts/test) runs a node id once, so the other would never run (schemathesis's own
parametrization named all its tests alike in xdist's workers)."""

from __future__ import annotations

import os
from collections import Counter
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    twice = sorted(nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests sharing a node id (all but one would not run): {', '.join(twice[:5])}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport]]:
    outcome = yield
    report = outcome.get_result()
    if _guarded() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under MNEMOSYNE_NO_SKIP=1: {report.longrepr}"
