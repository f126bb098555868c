"""Prometheus metrics on the HTTP side port, and /healthz, /readyz."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.observability import http
from mnemosyne.observability.http import SideServer
from tests.support import ServerFactory, ServerProcess, health_check, tokens_json, wait_until

TOKEN = "metrics-test-token-5b1f"
ADMIN = "metrics-admin-token-77aa"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def _value(
    families: dict[str, list[tuple[str, dict[str, str], float]]], family: str, sample: str | None = None, **labels: str
) -> float:
    sample = sample or family
    found = [
        v for name, lab, v in families[family] if name == sample and all(lab.get(k) == x for k, x in labels.items())
    ]
    assert len(found) == 1, (family, sample, labels, families[family])
    return found[0]


@pytest.fixture
def metered(server_factory: ServerFactory, tenant: str) -> ServerProcess:
    return server_factory(metrics=True, env={"MNEMOSYNE_TOKENS": tokens_json({TOKEN: [tenant], ADMIN: ["*"]})}).start()


def test_metrics_after_traffic(metered: ServerProcess, tenant: str) -> None:
    texts = [f"Order {n} shipped to warehouse {n * 7} on monday" for n in range(7)]
    with MemoryClient(metered.target, TOKEN) as client:
        created = [client.retain(tenant, t) for t in texts]
        duplicates = [client.retain(tenant, texts[0]), client.retain(tenant, texts[1])]
        client.recall(tenant, "warehouse", k=3)
        with pytest.raises(MnemosyneClientError):
            client.retain(tenant, "   ")  # INVALID_ARGUMENT
        stats = client.stats(tenant)
    assert [r.status for r in created] == ["created"] * 7
    assert [r.status for r in duplicates] == ["duplicate"] * 2

    status, text = _get(metered.metrics_url + "/metrics")
    assert status == 200
    families = _families(text)

    assert _value(families, "mnemosyne_writes", "mnemosyne_writes_total") == 7 == stats.writes
    assert _value(families, "mnemosyne_duplicates", "mnemosyne_duplicates_total") == 2 == stats.duplicates
    assert _value(families, "mnemosyne_model_calls", "mnemosyne_model_calls_total") == 7 == stats.model_calls
    assert _value(families, "mnemosyne_embed_calls", "mnemosyne_embed_calls_total") == 7 == stats.embed_calls
    assert "mnemosyne_cas_rejections" in families  # declared; no workspace conflicts happened
    assert _value(families, "mnemosyne_open_tenants") >= 1
    assert _value(families, "mnemosyne_queue_depth") == 0
    assert _value(families, "mnemosyne_oldest_pending_seconds") == 0

    histogram = "mnemosyne_rpc_duration_seconds"
    retain = "/mnemosyne.v1.MemoryService/Retain"
    assert _value(families, histogram, histogram + "_count", method=retain, code="OK") == 9
    assert _value(families, histogram, histogram + "_count", method=retain, code="INVALID_ARGUMENT") == 1
    assert (
        _value(families, histogram, histogram + "_count", method="/mnemosyne.v1.MemoryService/Recall", code="OK") == 1
    )
    assert _value(families, histogram, histogram + "_bucket", method=retain, code="OK", le="+Inf") == 9
    assert _value(families, histogram, histogram + "_sum", method=retain, code="OK") > 0
    # Labels take values from fixed sets only.
    for _name, labels, _v in families[histogram]:
        assert set(labels) <= {"method", "code", "le"}
        assert labels["method"].startswith(("/mnemosyne.v1.", "/grpc.health.v1."))
    # Default process metrics.
    assert _value(families, "process_cpu_seconds", "process_cpu_seconds_total") > 0
    assert "python_info" in families
    # No tenant id anywhere in the exposition.
    assert tenant not in text


def test_refused_and_unknown_calls_do_not_grow_labels(metered: ServerProcess, tenant: str) -> None:
    with MemoryClient(metered.target, "wrong-token") as client:
        with pytest.raises(MnemosyneClientError) as refused:
            client.stats(tenant)
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(metered.target) as channel:
        unknown: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/mnemosyne.v1.{tenant}/Steal")
        with pytest.raises(grpc.RpcError) as exc:
            unknown(b"", timeout=10)
        _assert_method_not_found(exc.value, f"/mnemosyne.v1.{tenant}/Steal")
        # A method our service lacks, called as a stream: the same refusal, whatever the call's kind.
        streamed: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            "/mnemosyne.v1.MemoryService/Steal"
        )
        with pytest.raises(grpc.RpcError) as exc:
            list(streamed(iter([b"", b""]), timeout=10))
        _assert_method_not_found(exc.value, "/mnemosyne.v1.MemoryService/Steal")
    _status, text = _get(metered.metrics_url + "/metrics")
    families = _families(text)
    histogram = "mnemosyne_rpc_duration_seconds"
    assert (
        _value(
            families, histogram, histogram + "_count", method="/mnemosyne.v1.AdminService/Stats", code="UNAUTHENTICATED"
        )
        == 1
    )
    assert tenant not in text


def _assert_method_not_found(error: grpc.RpcError, method: str) -> None:
    """UNIMPLEMENTED with our ErrorInfo reason and a message naming the method (not gRPC's bare
    "Method not found!")."""
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    status = rpc_status.from_call(error)  # type: ignore[arg-type]  # a failed call is its grpc.Call too
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    next(d for d in status.details if d.Is(info.DESCRIPTOR)).Unpack(info)
    assert info.reason == "METHOD_NOT_FOUND"
    assert method in status.message and "mnemosyne.v1.MemoryService" in status.message


def test_health_without_token_on_authenticated_server(metered: ServerProcess) -> None:
    with grpc.insecure_channel(metered.target) as channel:
        response = health_check(channel, timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_http_probes(metered: ServerProcess) -> None:
    assert _get(metered.metrics_url + "/healthz") == (200, "ok\n")
    assert _get(metered.metrics_url + "/readyz") == (200, "ready\n")
    assert _get(metered.metrics_url + "/nothing-here")[0] == 404


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_side_port_answers_head_as_get_and_names_both_in_a_405_s_allow(metered: ServerProcess, path: str) -> None:
    """HEAD: the GET's status and headers, no body; another method: 405 with ``Allow`` (it had none)."""
    connection = HTTPConnection("127.0.0.1", metered.metrics_port, timeout=10)
    try:
        connection.request("HEAD", path)
        head = connection.getresponse()
        assert (head.status, head.read()) == (200, b"") and int(head.headers["content-length"]) > 0
        connection = HTTPConnection("127.0.0.1", metered.metrics_port, timeout=10)
        connection.request("DELETE", path)
        refused = connection.getresponse()
        assert (refused.status, refused.headers["allow"]) == (405, "GET, HEAD"), refused.headers
    finally:
        connection.close()


def test_a_side_port_connection_that_sends_nothing_is_closed_and_others_are_served(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A side-port connection that sends no request is let go after the idle time (here 0.3 s),
    without a traceback, and probes are answered meanwhile."""
    side = SideServer("127.0.0.1", 0, metrics=lambda: b"# nothing\n", ready=lambda: True, idle_seconds=0.3)
    try:
        silent = [socket.create_connection(("127.0.0.1", side.port), timeout=5) for _ in range(3)]
        with urllib.request.urlopen(f"http://127.0.0.1:{side.port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        for connection in silent:
            assert connection.recv(1) == b""  # closed by the server, not by the 5 s timeout
            connection.close()
    finally:
        side.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_side_port_connections_that_send_nothing_hold_no_thread_and_a_burst_is_accepted_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each side-port connection held a thread from its accept (3,000 idle connections at 300 a
    second: ~830 threads), and the listen backlog of 5 made a burst wait a second for the client's
    retry. A connection waits for its request holding no thread, at most MAX_WAITING of them (the
    longest waiting closed first), and a burst of connections is queued by the kernel."""
    monkeypatch.setattr(http, "MAX_WAITING", 40)
    side = SideServer("127.0.0.1", 0, metrics=lambda: b"# nothing\n", ready=lambda: True)
    threads = threading.active_count()
    try:

        def connect(_: int) -> tuple[socket.socket, float]:
            started = time.monotonic()
            connection = socket.create_connection(("127.0.0.1", side.port), timeout=5)
            return connection, time.monotonic() - started

        with ThreadPoolExecutor(50) as pool:  # a burst: 50 connections at once, then 50 more
            connected = list(pool.map(connect, range(100)))
        idle = [connection for connection, _ in connected]
        # No connection waited for its client's retry of a dropped SYN (1 s): each is timed on its
        # own, so a busy machine's slow thread pool does not count.
        assert max(seconds for _, seconds in connected) < 0.9
        with urllib.request.urlopen(f"http://127.0.0.1:{side.port}/metrics", timeout=5) as answer:
            assert answer.status == 200 and answer.read() == b"# nothing\n"
        assert threading.active_count() <= threads + 1  # the scrape's thread, while it ends
        # The 61 that waited longest were let go (the last 39 and the scrape's wait, for 10 s).
        wait_until(lambda: len(select.select(idle, [], [], 0)[0]) == 61)
        assert all(connection.recv(1) == b"" for connection in select.select(idle, [], [], 0)[0])
        for connection in idle:
            connection.close()
    finally:
        side.stop()


def _slow_reader(port: int) -> socket.socket:
    """A connection that asks for /metrics and reads nothing (its receive buffer a few KiB)."""
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.settimeout(5)
    reader.connect(("127.0.0.1", port))
    reader.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return reader


def test_side_port_slow_senders_and_slow_readers_hold_no_thread_and_are_dropped_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A connection sending its request a byte at a time kept a thread as long as it went on (10 s
    a byte), one not reading its answer kept one 10 s a write: 300 slow readers made a scrape take
    1.7 s. Neither holds a thread now: each is closed when the idle time (here 0.5 s) is over,
    probes are answered meanwhile, and the drops are logged counted, not a line each."""
    body = b"# x\n" * (2 * 1024 * 1024)  # 8 MiB: more than the kernel's buffers hold for a reader
    side = SideServer("127.0.0.1", 0, metrics=lambda: body, ready=lambda: True, idle_seconds=0.5)
    threads = threading.active_count()
    senders = [socket.create_connection(("127.0.0.1", side.port), timeout=5) for _ in range(20)]
    readers = [_slow_reader(side.port) for _ in range(20)]
    try:
        with caplog.at_level("WARNING", logger="mnemosyne.http"):
            started, dropped = time.monotonic(), set[socket.socket]()
            while len(dropped) < len(senders) and time.monotonic() - started < 3:
                for sender in set(senders) - dropped:
                    try:
                        sender.send(b"G")  # a byte each 50 ms: never a whole request head
                    except OSError:
                        dropped.add(sender)
                assert _get(f"http://127.0.0.1:{side.port}/healthz") == (200, "ok\n")
                time.sleep(0.05)
            assert len(dropped) == len(senders) and time.monotonic() - started < 1.5
            assert threading.active_count() <= threads + 1  # the exposition's
            for reader in readers:  # cut off: not the whole answer
                received = 0
                with contextlib.suppress(ConnectionResetError):
                    while chunk := reader.recv(1 << 20):
                        received += len(chunk)
                assert received < len(body)
            side.stop()  # writes the count still waiting
    finally:
        for connection in senders + readers:
            connection.close()
        side.stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "mnemosyne.http"]
    suffix = " (logged at most every 60 s)"
    assert lines == [
        "metrics port connections dropped: 1 no whole request in 0.5 s" + suffix,
        "metrics port connections dropped: 20 answer not read in 0.5 s, 19 no whole request in 0.5 s" + suffix,
    ], lines


def test_side_port_slow_readers_hold_at_most_a_few_copies_of_the_metrics(caplog: pytest.LogCaptureFixture) -> None:
    """Each slow reader asking for /metrics as the last one's exposition ended held a copy of its
    own until its idle time was over: up to MAX_WAITING copies (256 of a few MiB). Answers not
    read hold at most MAX_UNREAD_EXPOSITIONS expositions (4): past that the oldest reader is reset
    at once, the others are read whole."""
    size = 8 * 1024 * 1024  # more than the kernel's buffers hold for a reader

    def exposition() -> bytes:
        return b"# x\n" * (size // 4)  # a new copy each time, as the server's own

    side = SideServer("127.0.0.1", 0, metrics=exposition, ready=lambda: True, idle_seconds=30)
    readers: list[socket.socket] = []
    try:
        with caplog.at_level("WARNING", logger="mnemosyne.http"):
            for _ in range(2 * http.MAX_UNREAD_EXPOSITIONS):  # each answered before the next asks: its own copy
                readers.append(_slow_reader(side.port))
                assert select.select([readers[-1]], [], [], 5)[0], "no answer began"
            received = []
            for reader in readers:
                got = 0
                with contextlib.suppress(ConnectionResetError):
                    while chunk := reader.recv(1 << 20):
                        got += len(chunk)
                received.append(got)
            side.stop()  # writes the count still waiting
        kept = http.MAX_UNREAD_EXPOSITIONS
        assert all(got < size for got in received[:kept]), received  # reset, not read whole
        assert all(got > size for got in received[kept:]), received  # the head and the whole text
    finally:
        for reader in readers:
            reader.close()
        side.stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "mnemosyne.http"]
    said = re.compile(rf"metrics port connections dropped: (\d+) answer not read, {kept} newer expositions held \(")
    counts = [said.match(line) for line in lines]
    assert sum(int(count[1]) for count in counts if count is not None) == kept and None not in counts, lines


def test_side_port_answers_a_slow_reader_cannot_leave_to_the_kernel_are_dropped_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An answer the kernel took whole was closed at once and left to the kernel, which kept
    sending it for minutes to a client that did not read, beyond MAX_WAITING and the idle time
    (600 slow readers of a 256 KiB exposition: 210 MiB of kernel memory). The connection is kept
    until its client closes it, and reset when its idle time (here 0.5 s) is over: the kernel
    drops what it held. A client that read its answer whole is not counted as dropped."""
    body = b"# x\n" * (32 * 1024)  # 128 KiB: the kernel takes it whole
    side = SideServer("127.0.0.1", 0, metrics=lambda: body, ready=lambda: True, idle_seconds=0.5)
    slow = _slow_reader(side.port)
    whole = socket.create_connection(("127.0.0.1", side.port), timeout=5)
    try:
        with caplog.at_level("WARNING", logger="mnemosyne.http"):
            whole.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while len(answer) < len(body) and (chunk := whole.recv(1 << 20)):
                answer += chunk
            assert answer.endswith(body)  # read whole, and kept open
            time.sleep(1.5)
            received = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := slow.recv(1 << 20):
                    received += len(chunk)
            assert received < len(body), received  # reset: the kernel no longer holds it
            assert whole.recv(1) == b""  # closed, its answer read
            side.stop()  # writes the count still waiting
    finally:
        slow.close()
        whole.close()
        side.stop()
    lines = [record.getMessage() for record in caplog.records if record.name == "mnemosyne.http"]
    assert lines == ["metrics port connections dropped: 1 answer not read in 0.5 s (logged at most every 60 s)"], lines


def test_metrics_port_off_by_zero(server_factory) -> None:
    process = server_factory().start()  # ServerProcess passes --metrics-port 0
    assert process.metrics_port == 0


def test_open_tenants_gauge_follows_the_lru(server_factory, tenant: str) -> None:
    server = server_factory(metrics=True, args=["--max-open-tenants", "2"]).start()
    with MemoryClient(server.target) as client:
        client.retain(tenant, "first tenant's memory")
        assert _value(_families(_get(server.metrics_url + "/metrics")[1]), "mnemosyne_open_tenants") == 1
        for n in range(4):
            client.retain(f"{tenant}-{n}", "another tenant's memory")
    # Idle files beyond --max-open-tenants are closed (the last call's once it has released it).
    wait_until(lambda: _value(_families(_get(server.metrics_url + "/metrics")[1]), "mnemosyne_open_tenants") == 2)


def test_cas_rejections_are_counted_by_reason(metered: ServerProcess, tenant: str) -> None:
    from mnemosyne.client import AbortedError
    from mnemosyne.v1 import workspace_pb2

    with MemoryClient(metered.target, TOKEN) as client:
        client.update_global(tenant, "first", observed_generation=0)
        for _ in range(2):
            with pytest.raises(AbortedError):
                client.update_global(tenant, "stale", observed_generation=0)
        with pytest.raises(grpc.RpcError):  # a raw call without the observation metadata
            client.workspace.UpdateGlobal(
                workspace_pb2.UpdateGlobalRequest(tenant=tenant, content="blind"),
                metadata=client.call_metadata,
                timeout=10,
            )
    families = _families(_get(metered.metrics_url + "/metrics")[1])
    assert (
        _value(families, "mnemosyne_cas_rejections", "mnemosyne_cas_rejections_total", reason="GENERATION_MISMATCH")
        == 2
    )
    assert (
        _value(families, "mnemosyne_cas_rejections", "mnemosyne_cas_rejections_total", reason="OBSERVATION_MISSING")
        == 1
    )


def test_call_latency_scrapes_as_prometheus_clients_histogram() -> None:
    """The call histogram's own collector (observability/call_latency.py) gives the exposition a
    prometheus_client Histogram gives for the same observations: an observation equal to a bound
    in that bucket, cumulative buckets, +Inf, count and sum, each (method, code) its own series."""
    from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics
    from prometheus_client.exposition import generate_latest

    from mnemosyne.observability.call_latency import CallLatency
    from mnemosyne.observability.metrics import RPC_BUCKETS

    disable_created_metrics()  # type: ignore[no-untyped-call]  # as the server does
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    latency = CallLatency("calls_seconds", "Calls.", RPC_BUCKETS, ours)
    histogram = Histogram("calls_seconds", "Calls.", ["method", "code"], buckets=RPC_BUCKETS, registry=theirs)
    observed = [
        ("/a.S/Ping", "OK", 0.0001),
        ("/a.S/Ping", "OK", 0.0005),  # on a bound
        ("/a.S/Ping", "OK", 0.00051),
        ("/a.S/Ping", "CANCELLED", 2.5),
        ("/a.S/Recall", "OK", 31.0),  # beyond the last bound
        ("/a.S/Recall", "OK", 0.0),
    ]
    for method, code, seconds in observed:
        latency.observe(method, code, seconds)
        histogram.labels(method=method, code=code).observe(seconds)
    scraped = _families(generate_latest(ours).decode())
    assert scraped == _families(generate_latest(theirs).decode())
    assert _value(scraped, "calls_seconds", "calls_seconds_count", method="/a.S/Ping", code="OK") == 3
