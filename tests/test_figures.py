"""A tenant's figures of the last hour (engine/figures.py; AdminService.GetTenantFigures and
ListTenantFigures, docs/console.md#overview): counted where things happen, kept in memory on the
member that owns the tenant (a restart starts them again, the memories over time come from the
file), and the view across tenants read without opening a tenant file."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import InvalidArgumentError, PermissionDeniedError
from mnemosyne.engine.figures import MINUTES, Figures
from tests.support import ServerProcess, gauge, tokens_json

POISON = "FIGURES-POISON"


def test_figures_count_what_happened_and_a_restart_starts_the_hour_again(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        metrics=True,
        env={"MNEMOSYNE_TOKENS": tokens_json({"boss": ["*"], "user": ["t1"]}), "MNEMOSYNE_TEST_POISON_MARKER": POISON},
    ).start()
    try:
        with MemoryClient(server.target, token="boss") as admin:
            admin.retain_batch("t1", [f"note {n}" for n in range(4)])
            admin.retain("t2", "the only note of t2")
            admin.recall("t1", "note")
            admin.recall("t1", "other")
            admin.hot_path("t1", "enable")
            admin.retain("t1", "fast and fine", fast=True)
            admin.retain("t1", f"fast and failing {POISON}", fast=True)
            admin.hot_path("t1", "flush")
            figures = admin.tenant_figures("t1")
            assert len(figures.minutes) == MINUTES
            assert [m.start - figures.minutes[0].start for m in figures.minutes] == [60.0 * i for i in range(MINUTES)]
            assert sum(m.writes for m in figures.minutes) == 6
            assert sum(m.recalls for m in figures.minutes) == 2
            assert sum(m.failed_events for m in figures.minutes) == 1
            sampled = [m for m in figures.minutes if m.hot_path_depth is not None]
            assert sampled and max(m.hot_path_depth or 0 for m in sampled) >= 1
            assert figures.minutes[-1].file_bytes == figures.file_bytes > 0
            assert figures.memories[-1][1] == admin.stats("t1").memories == 5
            assert figures.hot_path_depth == 0
            # Across tenants: the largest, the busiest, the failing.
            across = admin.list_tenant_figures(limit=1)
            assert across.tenants == 2
            assert [r.tenant for r in across.largest] == ["t1"] and [r.tenant for r in across.busiest] == ["t1"]
            assert [(r.tenant, r.failed_events) for r in across.failing] == [("t1", 1)]
            with pytest.raises(InvalidArgumentError) as refused:
                admin.list_tenant_figures(limit=101)
            assert refused.value.reason == "LIMIT_OUT_OF_RANGE"
        with MemoryClient(server.target, token="user") as user:
            assert sum(m.writes for m in user.tenant_figures("t1").minutes) == 6
            with pytest.raises(PermissionDeniedError) as forbidden:
                user.list_tenant_figures()
            assert forbidden.value.reason == "ADMIN_REQUIRED"
            with pytest.raises(PermissionDeniedError):
                user.tenant_figures("t2")
        server.stop()
        server.start()
        with MemoryClient(server.target, token="boss") as admin:
            # The view across tenants opens no tenant file (their sizes are a stat each).
            across = admin.list_tenant_figures()
            assert gauge(server, "mnemosyne_open_tenants") == 0
            assert {r.tenant for r in across.largest} == {"t1", "t2"} and across.busiest == across.failing == []
            # The hour is memory only: empty after the restart; the memories come from the file.
            figures = admin.tenant_figures("t1")
            assert sum(m.writes + m.recalls + m.failed_events for m in figures.minutes) == 0
            assert figures.counting_since > figures.minutes[-1].start - 60
            assert figures.memories[-1][1] == 5
    finally:
        server.stop()


class _Pool:
    """What Figures asks of the pool, for the ring alone: a size and the tenant names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def file_bytes(self, tenant: str) -> int:
        return 1000

    def tenant_ids(self) -> list[str]:
        return self.names


def test_a_minute_ages_out_after_an_hour_and_an_idle_tenant_is_dropped() -> None:
    now = [6_000_000.0]
    pool = _Pool()
    figures = Figures(pool, clock=lambda: now[0])  # type: ignore[arg-type]  # the two methods of the pool it calls
    figures.accepted("busy", 3)
    figures.accepted("idle", 1)
    figures.queue("busy", 4, now[0] - 2.5)
    first = figures.minutes("busy")[-1]
    assert (first.writes, first.hot_path_depth, first.oldest_pending_seconds, first.file_bytes) == (3, 4, 2.5, 1000)
    now[0] += 60 * (MINUTES - 1)
    figures.recalled("busy")
    assert figures.minutes("busy")[0].writes == 3  # 59 minutes on: still in the hour
    now[0] += 60
    figures.recalled("busy")
    minutes = figures.minutes("busy")
    assert sum(m.writes for m in minutes) == 0 and sum(m.recalls for m in minutes) == 2
    # A tenant idle for the hour is dropped: the memory is bounded by the tenants of the last hour.
    assert figures.minutes("idle")[-1].writes == 0 and "idle" not in figures._rings
    pool.names = ["busy", "idle"]
    assert [r.tenant for r in figures.across(10).busiest] == ["busy"]
