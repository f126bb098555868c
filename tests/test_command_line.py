"""What a newcomer meets first: the command's version, ``python -m mnemosyne``, a port that is
taken, and the client's message when no server answers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import grpc
import pytest

from mnemosyne import MemoryClient, __version__
from mnemosyne.client.errors import UnavailableError
from tests.support import SERVE, serve_args

DISTRIBUTION = "mnemosyne-memory-service"


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process-like owner is listening on."""
    with socket.socket() as owner:
        owner.bind(("127.0.0.1", 0))
        owner.listen()
        yield owner.getsockname()[1]


def test_version_is_the_installed_distribution_s() -> None:
    assert __version__ == version(DISTRIBUTION)
    command = shutil.which("mnemosyne")
    assert command is not None, "the console script is installed with the package"
    for argv in ([command, "--version"], [sys.executable, "-m", "mnemosyne", "--version"]):
        result = _run(*argv)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"mnemosyne {__version__}"


def test_python_dash_m_is_the_same_command() -> None:
    result = _run(sys.executable, "-m", "mnemosyne", "--help")
    assert result.returncode == 0
    for command in ("serve", "health", "hash-token", "inspect", "oplog", "drill"):
        assert command in result.stdout
    unknown = _run(sys.executable, "-m", "mnemosyne", "no-such-command")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def _serve(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return _run(*SERVE, *serve_args(data_dir, *flags))


def _last_line_only_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mnemosyne:")]
    assert len(errors) == 1, result.stderr
    # gRPC core's own bind-failure log line is not printed: the port was refused before gRPC saw it.
    assert "add_port" not in result.stderr and "Failed to add port" not in result.stderr
    return errors[0]


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_a_port_in_use_is_one_line_with_its_reason(tmp_path: Path, taken_port: int, flag: str) -> None:
    others = ["--metrics-port", "0"] if flag == "--port" else ["--port", "0"]
    data_dir = tmp_path / "data"
    line = _last_line_only_error(_serve(data_dir, flag, str(taken_port), *others))
    assert f"127.0.0.1:{taken_port}" in line
    assert "Address already in use" in line and "[LISTEN_FAILED]" in line
    assert f"choose another {flag}" in line
    # Refused before the data directory was opened: nothing was created.
    assert not data_dir.exists()


@pytest.mark.parametrize("port", ["0", "50999"])
def test_a_host_that_is_not_this_machine_s_is_named(tmp_path: Path, port: str) -> None:
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never a local address.
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [*SERVE, *serve_args(data_dir, "--host", "192.0.2.7", "--port", port)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MNEMOSYNE_ALLOW_UNAUTHENTICATED": "1"},
    )
    line = _last_line_only_error(result)
    assert f"192.0.2.7:{port}" in line and "Cannot assign requested address" in line
    assert "[LISTEN_FAILED]" in line and "not this machine's" in line
    assert not data_dir.exists()


def test_a_host_that_does_not_resolve_is_named(tmp_path: Path) -> None:
    # .invalid never resolves (RFC 2606).
    result = subprocess.run(
        [*SERVE, *serve_args(tmp_path / "data", "--host", "no-such-host.invalid")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MNEMOSYNE_ALLOW_UNAUTHENTICATED": "1"},
    )
    line = _last_line_only_error(result)
    assert "no-such-host.invalid" in line and "does not resolve" in line and "[LISTEN_FAILED]" in line


def test_a_server_that_is_not_there_is_unavailable_said_once() -> None:
    # A port nothing listens on: the connection is refused, no ErrorInfo comes back.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    with MemoryClient(f"127.0.0.1:{free}", timeout=5.0, retries=0) as client:
        with pytest.raises(UnavailableError) as info:
            client.recall("acme", "anything")
    error = info.value
    assert error.code == grpc.StatusCode.UNAVAILABLE
    text = str(error)
    assert text.startswith("UNAVAILABLE: ") and not text.startswith("UNAVAILABLE UNAVAILABLE")
    assert error.message and error.message in text
