"""``mnemosyne serve`` in a child process on a loopback port: what the recovery drills, the tests
and the benchmarks all start, kill with SIGKILL and restart."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mnemosyne.store.membership import owner_of

# Starts of a server whose picked side port another process took first (ServerProcess.start).
PICK_ATTEMPTS = 3


class ServerExited(RuntimeError):
    """The server exited before it served: its exit code and what it said on stderr."""

    def __init__(self, data_dir: Path, returncode: int, said: str) -> None:
        super().__init__(f"server exited with {returncode}: {said[-2000:]}")
        self.data_dir = data_dir
        self.returncode = returncode
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        # serve's own error line ("mnemosyne: ... [REASON]", or its usage error) ends what it said.
        self.last_line = lines[-1].removeprefix("mnemosyne: ") if lines else f"it exited with {returncode}"


class SidePortTaken(ServerExited):
    """The server could not listen on a metrics or HTTP port picked for it: taken meanwhile."""


class ServerProcess:
    """``mnemosyne serve`` in a child process on a free loopback port.

    ``env`` adds environment variables (e.g. test seams); ``args`` adds command-line flags;
    ``metrics=True`` turns the HTTP side port on (a free port; ``metrics_url``), ``http=True`` the
    HTTP/JSON API (``http_url``); ``open_files``
    (soft, hard) is the open-file limit the server sets itself first thing (as a shell's ``ulimit -n``
    would have), through the MNEMOSYNE_TEST_OPEN_FILES seam; ``python`` runs another installation's
    server (a benchmark's baseline), this interpreter's by default.
    ``start()`` returns when the server printed its port and answers health checks.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        metrics: bool = False,
        http: bool = False,
        health_credentials: grpc.ChannelCredentials | None = None,
        open_files: tuple[int, int] | None = None,
        python: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.python = python or sys.executable  # another installation's interpreter: its server
        self.env = dict(env or {})
        self.args = list(args or [])
        self.metrics = metrics
        self.http = http
        self.health_credentials = health_credentials  # for a TLS server's start-up health check
        if open_files is not None:
            self.env["MNEMOSYNE_TEST_OPEN_FILES"] = f"{open_files[0]}:{open_files[1]}"
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.metrics_port = 0
        self.http_port = 0
        self.stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.log"
        self._log_start = 0  # where this start's lines begin in the (appended) log

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "start the ServerProcess first"
        return self.process.pid

    @property
    def metrics_url(self) -> str:
        assert self.metrics_port, "start the ServerProcess with metrics=True"
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def http_url(self) -> str:
        assert self.http_port, "start the ServerProcess with http=True"
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 30.0, port: int = 0) -> ServerProcess:
        self.spawn(port)
        return self.wait_ready_or_spawn_again(port, timeout)

    def wait_ready_or_spawn_again(self, port: int, timeout: float) -> ServerProcess:
        """``wait_ready`` for the process just spawned on ``port``. The side ports are picked by
        ``spawn`` (0 turns them off), so another process may take one between the pick and the
        server's bind: then the server is spawned again on new picks."""
        picked = (self.metrics and not self.metrics_port) or (self.http and not self.http_port)
        for attempt in range(1, PICK_ATTEMPTS + 1):
            try:
                return self.wait_ready(timeout)
            except SidePortTaken:
                if not picked or attempt == PICK_ATTEMPTS:
                    raise
                self.spawn(port)
        raise AssertionError("unreachable")

    def spawn(self, port: int = 0) -> None:
        """Start the process without waiting for it (``wait_ready`` waits): servers spawned side
        by side load at once."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        # 0 turns the side port off, so a free port is picked here (kept across restarts).
        metrics_port = (self.metrics_port or _free_port()) if self.metrics else 0
        http_port = (self.http_port or _free_port()) if self.http else 0
        command = [
            self.python,
            "-m",
            "mnemosyne.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(port or self.port),
            "--metrics-port",
            str(metrics_port),
            "--http-port",
            str(http_port),
            *self.args,
        ]
        stderr = open(self.stderr_path, "a")
        self._log_start = stderr.tell()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        stderr.close()

    def wait_ready(self, timeout: float = 30.0) -> ServerProcess:
        """Return when the spawned server printed its port and answers health checks."""
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=5)
            with open(self.stderr_path, errors="replace") as log:
                log.seek(self._log_start)
                said = log.read()
            taken = "[LISTEN_FAILED]" in said and ("for metrics" in said or "for HTTP" in said)
            raise (SidePortTaken if taken else ServerExited)(self.data_dir, self.process.returncode, said)
        serving = json.loads(line)
        self.port = serving["port"]
        self.metrics_port = serving.get("metrics_port", 0)
        self.http_port = serving.get("http_port", 0)
        channel = (
            grpc.secure_channel(
                self.target, self.health_credentials, options=[("grpc.ssl_target_name_override", "localhost")]
            )
            if self.health_credentials is not None
            else grpc.insecure_channel(self.target)
        )
        with channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    if (
                        stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status  # type: ignore[attr-defined]  # the published stubs omit the stub's methods
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        break
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        return self

    def restart(self, timeout: float = 30.0) -> ServerProcess:
        """Start again on the same port and data directory (after a kill or stop)."""
        return self.start(timeout, port=self.port)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no flush — a crash."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            return self.process.wait(timeout=timeout)
        return self.process.returncode if self.process else 0

    def wait_exit(self, timeout: float = 10.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        stop_all([self])

    def tenant_file(self, tenant: str) -> Path:
        return self.data_dir / "tenants" / f"{tenant}.sqlite"


def stop_all(servers: Sequence[ServerProcess], timeout: float = 15.0) -> None:
    """Graceful stops of ``servers`` side by side: SIGTERM to each running one, then wait for each
    (SIGKILL past ``timeout``), so many servers stop in about the time of one."""
    running = [s.process for s in servers if s.process is not None and s.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


_RECENT_PICKS: collections.deque[int] = collections.deque(maxlen=256)
_LOWEST_PICK = 10_000  # below it: well-known and registered services


def _ephemeral_ports() -> tuple[int, int]:
    """The range the kernel gives a bind to port 0 from (Linux's default when unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def _free_port() -> int:
    """A port free now, not one of the last picks here, and outside the kernel's ephemeral range
    when there is room below it: a picked port stays free until its server binds it (members are
    all picked before the first one starts), and meanwhile any other process binding port 0 (a
    server of another test, a client's socket) is given a port of that range, never this one."""
    low, _high = _ephemeral_ports()
    while True:
        if low - _LOWEST_PICK >= 1_000:
            port = random.randrange(_LOWEST_PICK, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue  # taken: another
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        if port not in _RECENT_PICKS:
            _RECENT_PICKS.append(port)
            return port


class LocalMembers:
    """A deployment of ``count`` members on loopback (docs/scale-out.md), member ``i`` a
    ``ServerProcess`` with id ``m<i>`` and data directory ``root/m<i>``: ports are chosen up front,
    since each member is started with the whole list (``*base_port``: member ``i`` takes base + i,
    else free ports). ``args_of(i)`` / ``env_of(i)`` add one
    member's flags and environment (``args``/``env``: every member's)."""

    def __init__(
        self,
        root: Path,
        count: int,
        *,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        args_of: Callable[[int], list[str]] | None = None,
        env_of: Callable[[int], dict[str, str]] | None = None,
        metrics: bool = False,
        http: bool = False,
        base_port: int = 0,
        http_base_port: int = 0,
        metrics_base_port: int = 0,
    ) -> None:
        self.ids = [f"m{i}" for i in range(count)]
        self.ports = [base_port + i if base_port else _free_port() for i in range(count)]
        self.members = ",".join(f"{member}=127.0.0.1:{port}" for member, port in zip(self.ids, self.ports))
        self.processes = [
            ServerProcess(
                Path(root) / member,
                args=["--member", member, "--members", self.members, *(args or []), *(args_of(i) if args_of else [])],
                env={**(env or {}), **(env_of(i) if env_of else {})},
                metrics=metrics or bool(metrics_base_port),
                http=http or bool(http_base_port),
            )
            for i, member in enumerate(self.ids)
        ]
        for i, process in enumerate(self.processes):
            process.http_port = http_base_port + i if http_base_port else 0
            process.metrics_port = metrics_base_port + i if metrics_base_port else 0

    def start(self, timeout: float = 60.0) -> LocalMembers:
        try:
            for process, port in zip(self.processes, self.ports):
                process.spawn(port)
            for process, port in zip(self.processes, self.ports):
                process.wait_ready_or_spawn_again(port, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_all(self.processes)

    def owner(self, tenant: str) -> ServerProcess:
        """The member the ownership hash names for ``tenant``."""
        return self.processes[self.ids.index(owner_of(tenant, self.ids))]
