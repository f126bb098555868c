"""The serving set-up: a tenant's concurrent reads each find a pooled read connection (the server
keeps as many as --calls-per-tenant and --reader-share let run at once), so none opens and closes
one of its own; and a server with the HTTP port off does not load the HTTP stack."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.cli import server_process
from mnemosyne.cli.server_process import ServerProcess
from mnemosyne.client import MemoryClient
from mnemosyne.engine.config import EngineConfig
from mnemosyne.transport.admission import AdmissionLimits
from mnemosyne.transport.config import ServerConfig
from mnemosyne.transport.server import start_server


def _kept_after_concurrent_reads(calls_per_tenant: int, reader_share: int, tmp_path: Path) -> tuple[int, int]:
    """(connections a tenant's reads at once took, as many as its calls may run at once on both
    the worker and the reader threads; idle readers kept after)."""
    at_once = calls_per_tenant + reader_share

    async def run() -> tuple[int, int]:
        config = ServerConfig(
            EngineConfig(data_dir=tmp_path / "data"),
            port=0,
            metrics_port=0,
            http_port=0,
            admission=AdmissionLimits(calls_per_tenant=calls_per_tenant, reader_threads=4, reader_share=reader_share),
        )
        running = await start_server(config)
        try:
            with running.engine.pool.tenant("t", create=True) as store, ExitStack() as reads:
                assert store is not None
                taken = {id(reads.enter_context(store.read()).connection) for _ in range(at_once)}
                reads.close()
                return len(taken), len(store._readers)
        finally:
            await running.stop()

    return asyncio.run(run())


def test_a_tenant_keeps_a_read_connection_for_each_call_it_may_run_at_once(tmp_path: Path) -> None:
    assert _kept_after_concurrent_reads(8, 1, tmp_path / "a") == (9, 9)  # the defaults
    assert _kept_after_concurrent_reads(12, 3, tmp_path / "b") == (15, 15)


def _loads_mcp_sdk(server: ServerProcess) -> bool:
    """Whether the server process has the MCP SDK's compiled dependency (pydantic-core) mapped."""
    assert server.process is not None
    return "_pydantic_core" in Path(f"/proc/{server.pid}/maps").read_text()


def test_a_server_with_the_http_port_off_never_loads_the_http_stack(
    server_factory: Callable[..., ServerProcess],
) -> None:
    # About a second of a server's start is the MCP SDK's import: a server that serves no HTTP skips it.
    without_http = server_factory().start()
    with_http = server_factory(http=True).start()
    assert not _loads_mcp_sdk(without_http)
    assert _loads_mcp_sdk(with_http)


def test_a_side_port_taken_before_the_server_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The harness picks the metrics port before the server binds it; another process may take it
    # meanwhile (CI saw one such start fail): the server is started again on a new pick.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picks = iter([taken.getsockname()[1]])
        pick = server_process._free_port
        monkeypatch.setattr(server_process, "_free_port", lambda: next(picks, 0) or pick())
        server = ServerProcess(tmp_path / "data", metrics=True).start()
        try:
            assert server.metrics_port not in (0, taken.getsockname()[1])
            assert "cannot listen for metrics" in server.stderr_path.read_text()
        finally:
            server.stop()


def _short_reads(server: ServerProcess) -> dict[str, float]:
    """``mnemosyne_short_reads_total`` by where the reads ran."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name == "mnemosyne_short_reads")
    return {s.labels["ran_on"]: s.value for s in family.samples if s.name.endswith("_total")}


def test_a_tenant_s_quick_snapshot_reads_are_answered_on_the_event_loop(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """The first recall of a tenant runs on a reader thread and measures it; the next ones, quick,
    run on the event loop (no hand-off), over gRPC and HTTP alike; the hot path's reads, which
    take the inbox lock, never do."""
    server = server_factory(metrics=True, http=True).start()
    with MemoryClient(server.target) as client:
        client.retain("quick", "The courier comes on Tuesdays")
        client.recall("quick", "courier", k=3)
        assert _short_reads(server) == {"reader_thread": 1}
        for _ in range(5):
            assert client.recall("quick", "courier", k=3)[0].memory.text == "The courier comes on Tuesdays"
        assert _short_reads(server) == {"reader_thread": 1, "event_loop": 5}
        body = json.dumps({"query": "courier", "k": 3}).encode()
        for _ in range(2):  # the same servicer method over HTTP: its cost is already known
            with urllib.request.urlopen(
                urllib.request.Request(
                    f"{server.http_url}/v1/tenants/quick/memories:recall",
                    data=body,
                    headers={"content-type": "application/json"},
                ),
                timeout=10,
            ) as response:
                assert json.loads(response.read())["hits"][0]["memory"]["text"] == "The courier comes on Tuesdays"
        assert _short_reads(server) == {"reader_thread": 1, "event_loop": 7}
        client.hot_path("quick", "enable")
        for _ in range(3):
            client.hot_path("quick", "status")
        assert _short_reads(server) == {"reader_thread": 1, "event_loop": 7}  # not snapshot reads: not counted
