"""The serving set-up: a tenant's concurrent reads each find a pooled read connection (the server
keeps as many as --calls-per-tenant lets run at once), so none opens and closes one of its own."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path

from mnemosyne.engine.config import EngineConfig
from mnemosyne.transport.admission import AdmissionLimits
from mnemosyne.transport.server import ServerConfig, start_server


def _kept_after_concurrent_reads(calls_per_tenant: int, tmp_path: Path) -> tuple[int, int]:
    """(connections a tenant's ``calls_per_tenant`` reads at once took, idle readers kept after)."""

    async def run() -> tuple[int, int]:
        config = ServerConfig(
            EngineConfig(data_dir=tmp_path / "data"),
            port=0,
            metrics_port=0,
            http_port=0,
            admission=AdmissionLimits(calls_per_tenant=calls_per_tenant),
        )
        running = await start_server(config)
        try:
            with running.engine.pool.tenant("t", create=True) as store, ExitStack() as reads:
                assert store is not None
                taken = {id(reads.enter_context(store.read()).connection) for _ in range(calls_per_tenant)}
                reads.close()
                return len(taken), len(store._readers)
        finally:
            await running.stop()

    return asyncio.run(run())


def test_a_tenant_keeps_a_read_connection_for_each_call_it_may_run_at_once(tmp_path: Path) -> None:
    assert _kept_after_concurrent_reads(8, tmp_path / "a") == (8, 8)  # the default --calls-per-tenant
    assert _kept_after_concurrent_reads(12, tmp_path / "b") == (12, 12)
