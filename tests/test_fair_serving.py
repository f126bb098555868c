"""Fair serving: a call that waits holds no thread, and no tenant can slow the others.

Real servers on loopback, real clients: thousands of idle or unread streams cost no thread and
leave another tenant's calls answering; a tenant past its limits is refused with a reason and a
retry delay while another is admitted; a tenant whose calls are parked on the worker threads
keeps only its share of them; abandoned flushes free their places; a wait ends at its deadline
with the remaining depth.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import grpc
import pytest

from mnemosyne.client import DeadlineExceededError, MemoryClient, ResourceExhaustedError, UnavailableError
from mnemosyne.client.errors import from_rpc_error, retry_delay
from mnemosyne.v1 import events_pb2, hot_path_pb2, memory_pb2
from tests.http_support import call as http_call
from tests.http_support import request
from tests.support import ServerProcess, gauge, tokens_json, wait_until


def _threads(server: ServerProcess) -> int:
    for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count in /proc")


class _Stream(Protocol):
    """What these tests do with an open WatchEvents call: read its next event, or cancel it."""

    def __next__(self) -> events_pb2.Event: ...
    def cancel(self) -> bool: ...


def _watch(client: MemoryClient, tenant: str, after_event_id: int = 0, timeout: float | None = 120) -> _Stream:
    request = events_pb2.WatchEventsRequest(tenant=tenant, after_event_id=after_event_id)
    stream: _Stream = client.events.WatchEvents(request, timeout=timeout)
    return stream


def test_a_thousand_idle_and_a_hundred_unread_streams_hold_no_thread(server_factory) -> None:
    server: ServerProcess = server_factory(args=["--streams-per-tenant", "2000"], metrics=True).start()
    with MemoryClient(server.target) as client, MemoryClient(server.target) as other:
        client.hot_path("noisy", "enable")
        client.retain_batch("noisy", [f"event backlog {i}" for i in range(400)], fast=True)
        client.hot_path("noisy", "flush")
        newest = max(e.event_id for e in client.list_events("noisy", page_size=1000).events)
        other.recall("quiet", "warm up")
        before = _threads(server)
        idle = [_watch(client, "noisy", after_event_id=newest) for _ in range(1000)]  # nothing to send yet
        unread = [_watch(client, "noisy") for _ in range(100)]  # ~1,200 transitions each, never read
        wait_until(lambda: gauge(server, "mnemosyne_open_streams") == 1100)
        assert _threads(server) <= before + 2
        for i in range(200):
            other.retain("quiet", f"quiet memory {i}", request_id=f"quiet-{i}")
        with MemoryClient(server.target, timeout=10, retries=0) as deadline_10s:
            for i in range(200):
                assert deadline_10s.recall("quiet", f"quiet memory {i}", k=1)[0].memory.text == f"quiet memory {i}"
        assert _threads(server) <= before + 2
        for call in idle + unread:
            call.cancel()
        wait_until(lambda: gauge(server, "mnemosyne_open_streams") == 0)


def test_a_stream_past_a_tenant_s_limit_is_refused_with_a_retry_delay_while_another_tenant_s_is_admitted(
    server_factory,
) -> None:
    server: ServerProcess = server_factory(metrics=True).start()  # the default: 100 streams per tenant
    with MemoryClient(server.target) as client:
        streams = [_watch(client, "noisy") for _ in range(100)]
        wait_until(lambda: gauge(server, "mnemosyne_open_streams") == 100)
        refused = _watch(client, "noisy", timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            next(refused)
        error = from_rpc_error(info.value)
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STREAMS_PER_TENANT_REACHED")
        assert error.metadata == {"limit": "streams-per-tenant", "value": "100"}
        assert retry_delay(info.value) == 1.0
        accepted = _watch(client, "quiet", timeout=3)
        with pytest.raises(grpc.RpcError) as ended:  # nothing to send: it stays open until its deadline
            next(accepted)
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        streams[0].cancel()  # a place frees up: the client's own retry gets in after the delay
        wait_until(lambda: gauge(server, "mnemosyne_open_streams") == 99)
        with pytest.raises(DeadlineExceededError):  # admitted this time: open until its deadline
            list(client.watch_events("noisy", timeout=2))
        for call in streams[1:]:
            call.cancel()


def test_a_tenant_parked_on_the_threads_keeps_only_its_share_of_each(server_factory, tmp_path: Path) -> None:
    park = tmp_path / "park"
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_PARK_TENANT": "noisy", "MNEMOSYNE_TEST_PARK_FILE": str(park)},
        metrics=True,
    ).start()
    with MemoryClient(server.target) as client:
        client.retain("noisy", "a memory of the noisy tenant")
        client.retain("quiet", "a memory of the quiet tenant")
        park.touch()
        with ThreadPoolExecutor(80) as pool:
            # Its reads park on the reader threads, its writes on the worker threads.
            parked: list[Future[object]] = [pool.submit(client.recall, "noisy", "memory") for _ in range(20)]
            parked += [pool.submit(client.retain, "noisy", f"parked write {n}") for n in range(20)]
            wait_until(lambda: gauge(server, "mnemosyne_queued_calls") == 19 + 12)
            assert gauge(server, "mnemosyne_reader_threads_busy") == 1  # --reader-share of 2
            assert gauge(server, "mnemosyne_worker_threads_busy") == 8  # --calls-per-tenant of 16
            with MemoryClient(server.target, timeout=5, retries=0) as quiet:
                for n in range(25):
                    assert quiet.recall("quiet", "memory")[0].memory.text == "a memory of the quiet tenant"
                    assert quiet.retain("quiet", f"quiet write {n}").memory_id > 0
            # Past its queue (64 calls waiting), the noisy tenant is refused, not queued without end.
            flood = [pool.submit(client.recall, "noisy", "memory") for _ in range(40)]
            wait_until(lambda: gauge(server, "mnemosyne_queued_calls") >= 64)
            with MemoryClient(server.target, timeout=5, retries=0) as once:
                with pytest.raises(ResourceExhaustedError) as info:
                    once.recall("noisy", "memory")
            assert info.value.reason == "QUEUED_CALLS_PER_TENANT_REACHED" and info.value.retry_after_seconds == 0.25
            park.unlink()
            assert all(f.result(timeout=60) for f in parked + flood)  # the client's retries got the rest in
        wait_until(lambda: gauge(server, "mnemosyne_worker_threads_busy") == 0)
        wait_until(lambda: gauge(server, "mnemosyne_reader_threads_busy") == 0)
        assert len(client.list_memories("noisy", page_size=100).memories) == 21  # every parked write landed


def test_flushes_whose_clients_cancel_are_all_released(server_factory, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()  # the workers hold: the queue never drains while the flushes wait
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)},
        args=["--waiting-calls-per-tenant", "200"],
        metrics=True,
    ).start()
    try:
        with MemoryClient(server.target) as client:
            client.hot_path("busy", "enable")
            client.retain_batch("busy", [f"backlog {i}" for i in range(300)], fast=True)
            before = _threads(server)
            request = hot_path_pb2.FlushRequest(tenant="busy", timeout_seconds=600)
            flushes = [client.hot_path_stub.Flush.future(request, timeout=600) for _ in range(100)]
            wait_until(lambda: gauge(server, "mnemosyne_waiting_calls") == 100)
            assert _threads(server) <= before + 2
            for flush in flushes:
                flush.cancel()
            wait_until(lambda: gauge(server, "mnemosyne_waiting_calls") == 0)
            wait_until(lambda: gauge(server, "mnemosyne_worker_threads_busy") == 0)
            assert client.hot_path("busy", "status").queue_depth == 300  # nothing was lost either
    finally:
        hold.unlink()


@pytest.mark.parametrize("action", ["flush", "disable"])
def test_a_wait_ends_at_its_deadline_with_the_remaining_depth(server_factory, tmp_path: Path, action: str) -> None:
    hold, park = tmp_path / "hold", tmp_path / "park"
    hold.touch()
    env = {"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold), "MNEMOSYNE_TEST_PARK_TENANT": "busy"}
    server: ServerProcess = server_factory(env={**env, "MNEMOSYNE_TEST_PARK_FILE": str(park)}).start()
    try:
        with MemoryClient(server.target) as client:
            client.hot_path("busy", "enable")
            for start in range(0, 3000, 1000):
                client.retain_batch("busy", [f"backlog {i}" for i in range(start, start + 1000)], fast=True)
            method = client.hot_path_stub.Flush if action == "flush" else client.hot_path_stub.Disable
            request_type = hot_path_pb2.FlushRequest if action == "flush" else hot_path_pb2.HotPathRequest
            # The client's deadline first, then its timeout. What is promised (docs/fairness.md,
            # docs/hot-path.md): the server's own answer, with the depth, before the client's
            # deadline (never gRPC's bare one), given up a quarter of a second at most before that
            # deadline, or at the timeout, never before. How much later than the timeout a loaded
            # machine delivers it is no promise: the bound only tells it from the deadline's end.
            # (1.2: the deadline's 1.25 s, less the rounding of the deadline gRPC sends; 1.5 s, so
            # that the steps before the wait, reading a 3,000 backlog, fit on a loaded machine.)
            for deadline, timeout_seconds, ends in ((1.5, 600.0, 1.2), (30.0, 0.5, 0.5)):
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as info:
                    method(request_type(tenant="busy", timeout_seconds=timeout_seconds), timeout=deadline)
                took = time.monotonic() - started
                error = from_rpc_error(info.value)
                assert (error.code, error.reason) == (grpc.StatusCode.DEADLINE_EXCEEDED, "HOT_PATH_DEADLINE_EXCEEDED")
                assert 2900 <= int(error.metadata["remaining_depth"]) <= 3000
                assert ends <= took < ends + 5.0, took  # the timeout: never held to the 30 s deadline
            with pytest.raises(DeadlineExceededError) as seen:  # the Python client says the same
                client.hot_path("busy", action, timeout_seconds=0.3)
            assert int(seen.value.metadata["remaining_depth"]) >= 2900
            # The timeout counts from the call's arrival: a step before the wait (here parked for
            # a second, as a loaded machine may be slow to run it) counts in it, never added to it.
            park.touch()
            threading.Timer(1.0, park.unlink).start()
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                method(request_type(tenant="busy", timeout_seconds=1.0), timeout=30)
            assert from_rpc_error(info.value).reason == "HOT_PATH_DEADLINE_EXCEEDED"
            assert time.monotonic() - started < 2.0
    finally:
        hold.unlink()
        park.unlink(missing_ok=True)


def test_many_tenants_streaming_never_starve_a_quiet_tenant(server_factory) -> None:
    server: ServerProcess = server_factory().start()
    stop = threading.Event()
    with MemoryClient(server.target) as client:
        streams = [_watch(client, f"tenant-{i}") for i in range(20) for _ in range(30)]  # 600 streams, 20 tenants
        client.retain("quiet", "still answered")
        latencies = []
        for _ in range(50):
            started = time.perf_counter()
            assert client.recall("quiet", "answered", k=1)
            latencies.append(time.perf_counter() - started)
        stop.set()
        for call in streams:
            call.cancel()
    assert sorted(latencies)[len(latencies) // 2] < 0.05


def test_reads_over_http_and_the_mem0_endpoints_run_on_the_reader_threads(server_factory, tmp_path: Path) -> None:
    park = tmp_path / "park"
    server: ServerProcess = server_factory(
        http=True,
        metrics=True,
        env={
            "MNEMOSYNE_TOKENS": tokens_json({"key-noisy": ["noisy"]}),
            "MNEMOSYNE_TEST_PARK_TENANT": "noisy",
            "MNEMOSYNE_TEST_PARK_FILE": str(park),
        },
    ).start()
    bearer, mem0_key = {"authorization": "Bearer key-noisy"}, {"authorization": "Token key-noisy"}
    with MemoryClient(server.target, "key-noisy") as client:
        client.retain("noisy", "a memory of the noisy tenant")
        park.touch()
        recall = memory_pb2.RecallRequest(tenant="noisy", query="memory", k=3)
        search = {"query": "memory", "filters": {"user_id": "nobody"}}
        with ThreadPoolExecutor(6) as pool:
            calls = [pool.submit(http_call, server.http_port, "Recall", recall, bearer) for _ in range(3)]
            calls += [
                pool.submit(request, server.http_port, "POST", "/v3/memories/search/", None, mem0_key, json_body=search)
                for _ in range(3)
            ]
            wait_until(lambda: gauge(server, "mnemosyne_queued_calls") == 5)
            assert gauge(server, "mnemosyne_reader_threads_busy") == 1  # the tenant's share
            assert gauge(server, "mnemosyne_worker_threads_busy") == 0
            park.unlink()
            assert [f.result(timeout=30).status for f in calls] == [200] * 6


def test_connections_that_never_finish_their_handshake_are_closed_and_others_are_served(server_factory) -> None:
    """A connection to the gRPC port that sends nothing (or half an HTTP/2 preface) is closed once
    its handshake's bound (10 s) has passed, not after gRPC core's two minutes: such clients hold
    no descriptor for long, and the port serves others meanwhile."""
    server: ServerProcess = server_factory().start()
    host, port = server.target.rsplit(":", 1)
    silent = [socket.create_connection((host, int(port)), timeout=30) for _ in range(20)]
    halfway = [socket.create_connection((host, int(port)), timeout=30) for _ in range(20)]
    for connection in halfway:
        connection.sendall(b"PRI * HTTP/2.0\r\n")
    with MemoryClient(server.target, timeout=10, retries=0) as client:
        client.retain("t", "served while others hang", request_id="r1")
        assert client.recall("t", "served", k=1)[0].memory.text == "served while others hang"
    begun = time.monotonic()
    for connection in silent + halfway:
        try:
            while connection.recv(4096):  # the server's settings frame, then its close
                pass
        except ConnectionResetError:
            pass
        connection.close()
    assert time.monotonic() - begun < 20


def test_past_its_most_connections_the_grpc_port_closes_a_new_one_and_frees_a_place_as_one_closes(
    server_factory,
) -> None:
    """Each connection holds a descriptor from its accept: past ``--grpc-max-connections`` (here 3)
    gRPC core closes a new one at once, and its client's call fails UNAVAILABLE (retried by the
    clients), while the connections open are served; a place frees as one closes."""
    server: ServerProcess = server_factory(args=["--grpc-max-connections", "3"]).start()
    assert "gRPC port: at most 3 connections open" in server.stderr_path.read_text()
    held = [MemoryClient(server.target, timeout=5, retries=0) for _ in range(3)]
    try:
        for n, client in enumerate(held):
            client.retain("t", f"memory {n}", request_id=f"r{n}")
        with MemoryClient(server.target, timeout=5, retries=0) as refused, pytest.raises(UnavailableError):
            refused.recall("t", "memory", k=1)
        assert held[0].recall("t", "memory 0", k=1)[0].memory.text == "memory 0"
        held.pop().close()
        with MemoryClient(server.target, timeout=5, retries=5) as admitted:
            assert admitted.recall("t", "memory 2", k=1)[0].memory.text == "memory 2"
    finally:
        for client in held:
            client.close()
