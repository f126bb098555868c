"""Helpers shared by the tests: the real server in a child process, token documents, a tiny
real gRPC server answering as a broken server might."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import grpc
import pytest
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from mnemosyne.cli.server_process import ServerProcess, _free_port, stop_all
from mnemosyne.client import MemoryClient
from mnemosyne.store.membership import Membership
from mnemosyne.transport.auth import TokenAuthenticator
from mnemosyne.transport.cluster.forwarding import member_key
from mnemosyne.v1 import memory_pb2

__all__ = [
    "SERVE",
    "RefusingServer",
    "ServerFactory",
    "ServerProcess",
    "failed_call",
    "gauge",
    "health_check",
    "link_key",
    "link_port",
    "serve_args",
    "sql_row",
    "status_details",
    "stop_all",
    "tokens_json",
    "wait_until",
]

# ``mnemosyne serve`` in a child process with this interpreter (add ``serve_args``).
SERVE = [sys.executable, "-m", "mnemosyne.cli"]
PORT_FLAGS = ("--port", "--metrics-port", "--http-port")
# The ``server_factory`` fixture (tests/conftest.py): ``make(data_dir=None, **ServerProcess's
# keywords)``, a private server process (not started) that the fixture stops after the test.
ServerFactory = Callable[..., ServerProcess]


def module_server(factory: pytest.TempPathFactory, name: str, **options: Any) -> Iterator[ServerProcess]:
    """A module's own server (``yield from`` it in a module-scoped fixture), in a folder ``name``."""
    process = ServerProcess(factory.mktemp(name) / "data", **options)
    process.start()
    yield process
    process.stop()


def serve_args(data_dir: Path, *flags: str) -> list[str]:
    """The arguments of ``mnemosyne serve`` on ``data_dir`` with ``flags``, each port the flags
    leave out 0 (gRPC on a free port, the metrics and HTTP ports off): a test never binds a default
    port (50051, 9464, 8080), which another server of the machine (the README's) may hold."""
    ports = [word for flag in PORT_FLAGS if flag not in flags for word in (flag, "0")]
    return ["serve", "--data-dir", str(data_dir), *ports, *flags]


def tokens_json(tokens: dict[str, list[str]]) -> str:
    """A tokens document (for MNEMOSYNE_TOKENS) granting each token (its own name) the tenants
    listed; ``["*"]`` makes an admin token."""
    from mnemosyne.transport.auth import hash_token

    return json.dumps(
        {
            "tokens": [
                {"name": f"tok{i}", "sha256": hash_token(t), "tenants": ts} for i, (t, ts) in enumerate(tokens.items())
            ]
        }
    )


def gauge(server: ServerProcess, name: str, **labels: str) -> float:
    """A metric's value from the server's /metrics (start it with metrics=True): the family's
    first series, or the one with ``labels``."""
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                if labels.items() <= sample.labels.items():
                    return float(sample.value)
    raise AssertionError(f"{name} {labels or ''} is not exposed")


def sql_row(connection: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
    """The one row ``sql`` must return (a count, a row the test wrote): a missing row fails here,
    naming the query, instead of as a TypeError further on."""
    row = connection.execute(sql, params).fetchone()
    assert row is not None, f"no row: {sql}"
    return tuple(row)


def failed_call(error: grpc.RpcError) -> grpc.Call:
    """A failed call's error as the ``grpc.Call`` it also is (code, details, both metadata): the
    published stubs type ``RpcError`` apart from ``Call``."""
    assert isinstance(error, grpc.Call), type(error)
    return error


def health_check(channel: grpc.Channel, timeout: float) -> health_pb2.HealthCheckResponse:
    """grpc.health.v1 Check of the whole server, through grpc_health's own stub."""
    stub = health_pb2_grpc.HealthStub(channel)
    response: health_pb2.HealthCheckResponse = stub.Check(  # type: ignore[attr-defined]  # the published stubs omit the stub's methods
        health_pb2.HealthCheckRequest(), timeout=timeout
    )
    return response


def threads_at(pid: int, policy: int) -> set[int]:
    """The threads of process ``pid`` that run under the scheduling ``policy`` (runtime/background.py)."""
    threads = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if os.sched_getscheduler(int(tid)) == policy:
                threads.add(int(tid))
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return threads


def forget_untold(store: Any, memory_id: int) -> tuple[int, int]:
    """Forget ``memory_id`` in a write transaction of ``store`` (a TenantStore) and tell its caches
    nothing: the moment between a forget's commit and its word to them. Returns the forget epoch
    before and after it."""
    with store.write() as write:
        _, before = write.index_state()
        assert write.forget_memory(memory_id)
        _, after = write.index_state()
    return before, after


def wait_until(predicate: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def writers_through_kills(
    server: ServerProcess, writers: Sequence[Callable[[threading.Event], None]], kills: list[float]
) -> None:
    """Run each of ``writers`` (told to end by the event) on a thread while ``server`` is SIGKILLed
    and started again, once after each of ``kills`` seconds (random moments of its writes), then
    left up a little; returns when every writer has ended."""
    stop = threading.Event()
    threads = [threading.Thread(target=writer, args=(stop,)) for writer in writers]
    for thread in threads:
        thread.start()
    try:
        for seconds in kills:
            time.sleep(seconds)
            server.kill()
            server.restart()
        time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def link_port(process: ServerProcess) -> int:
    """A member's link port (transport/cluster/link.py), from the start-up line of its latest start."""
    ports = re.findall(r"member link port (\d+)", process.stderr_path.read_text())
    assert ports, "the start-up line names no member link port"
    return int(ports[-1])


def link_key(process: ServerProcess) -> bytes:
    """The member key of a member's deployment, derived as the members derive it (from their list
    and tokens): a test that holds it speaks the member link as an entry member does."""
    args = process.args
    membership = Membership.parse(args[args.index("--member") + 1], args[args.index("--members") + 1])
    tokens = process.env.get("MNEMOSYNE_TOKENS")
    hashes = TokenAuthenticator.from_json(tokens, source="MNEMOSYNE_TOKENS").token_hashes if tokens else []
    return bytes.fromhex(member_key(membership, hashes))


@contextmanager
def parked_recall(
    server: ServerProcess, park: Path, tenant: str, timeout: float = 60.0
) -> Iterator[grpc.Future[memory_pb2.RecallResponse]]:
    """A recall of ``tenant`` held on a reader thread for the block (the server started with
    MNEMOSYNE_TEST_PARK_TENANT=tenant and MNEMOSYNE_TEST_PARK_FILE=park): the file is made, the
    recall sent and seen busy; when the block ends the file is removed and the recall has been
    answered (its future is yielded, for the test to read)."""
    park.touch()
    try:
        with MemoryClient(server.target, timeout=timeout, retries=0) as reader:
            request = memory_pb2.RecallRequest(tenant=tenant, query="memory", k=1)
            parked = reader.memory.Recall.future(request, timeout=timeout)
            wait_until(lambda: gauge(server, "mnemosyne_reader_threads_busy") == 1)
            yield parked
            park.unlink()
            parked.exception(timeout=timeout)  # answered (or failed) before its channel closes
    finally:
        park.unlink(missing_ok=True)


@contextmanager
def haproxy(directory: Path, grpc: dict[str, int], http: dict[str, int] | None = None) -> Iterator[tuple[int, int]]:
    """Debian's HAProxy in front of members (id -> gRPC port, and id -> HTTP port), routing each
    call to one of them at random (HTTP/2 to the gRPC ports); yields its gRPC and HTTP ports (0:
    no HTTP frontend). Skips the test without the binary."""
    binary = shutil.which("haproxy")
    if binary is None:
        pytest.skip("Debian's haproxy is needed (apt-get install haproxy; scripts/setup names it)")
    grpc_port, http_port = _free_port(), _free_port() if http else 0
    config = f"""defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend grpc
  bind 127.0.0.1:{grpc_port} proto h2
  default_backend members_grpc
backend members_grpc
  balance random
"""
    config += "".join(f"  server {m} 127.0.0.1:{port} proto h2\n" for m, port in grpc.items())
    if http:
        config += f"""frontend http
  bind 127.0.0.1:{http_port}
  default_backend members_http
backend members_http
  balance random
"""
        config += "".join(f"  server {m} 127.0.0.1:{port}\n" for m, port in http.items())
    (directory / "haproxy.cfg").write_text(config)
    command = [binary, "-f", str(directory / "haproxy.cfg"), "-db"]
    # What it says goes to a file: a pipe nobody reads would stop it once full.
    with (directory / "haproxy.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", grpc_port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "haproxy did not start"
                time.sleep(0.05)
        yield grpc_port, http_port
    finally:
        process.terminate()
        process.wait(timeout=10)


def on_a_terminal(args: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """``mnemosyne ARGS`` run with its stderr on a pseudo-terminal: (exit status, what it printed
    there)."""
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mnemosyne.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env={**os.environ, **(env or {})},
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    return process.wait(timeout=120), output.decode(errors="replace")


def altered_mac(token: str) -> str:
    """A token this server issued (``<text>.<mac>``, URL-safe base64) with the first letter of its
    MAC changed: other bytes (the last letters carry bits a decoder may ignore)."""
    at = token.index(".") + 1
    return token[:at] + ("B" if token[at] != "B" else "C") + token[at + 1 :]


def respelt_end(token: str) -> str:
    """``token`` with its last letter changed only in the bits base64 leaves unused: the same
    bytes, spelt otherwise than issued."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelt = token[:-1] + alphabet[alphabet.index(token[-1]) ^ 1]
    mac, respelt_mac = token.split(".")[1], respelt.split(".")[1]
    assert base64.urlsafe_b64decode(mac + "==") == base64.urlsafe_b64decode(respelt_mac + "==")
    return respelt


def status_details(code: grpc.StatusCode, message: str, *details: Message | any_pb2.Any) -> bytes:
    """The ``grpc-status-details-bin`` of a failure: a google.rpc.Status of ``details`` (an
    ``Any`` as it is: one that is no such message)."""
    packed = []
    for detail in details:
        if not isinstance(detail, any_pb2.Any):
            wrapped = any_pb2.Any()
            wrapped.Pack(detail)
            detail = wrapped
        packed.append(detail)
    return bytes(status_pb2.Status(code=code.value[0], message=message, details=packed).SerializeToString())


class RefusingServer:
    """A real gRPC server on loopback whose MemoryService.Recall refuses every call with ``code``,
    ``message`` and the ``grpc-status-details-bin`` ``details`` (``status_details``, or bytes no
    server of ours sends), counting the ``calls``."""

    def __init__(self) -> None:
        self.code, self.message, self.details, self.calls = grpc.StatusCode.FAILED_PRECONDITION, "", b"", 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        recall = grpc.unary_unary_rpc_method_handler(
            self._recall,
            request_deserializer=memory_pb2.RecallRequest.FromString,
            response_serializer=memory_pb2.RecallResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("mnemosyne.v1.MemoryService", {"Recall": recall}),)
        )
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _recall(self, _request: memory_pb2.RecallRequest, context: grpc.ServicerContext) -> None:
        self.calls += 1
        context.set_trailing_metadata((("grpc-status-details-bin", self.details),))
        context.abort(self.code, self.message)

    def stop(self) -> None:
        self._server.stop(None)
