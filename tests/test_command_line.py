"""What a newcomer meets first: the command's version, ``python -m mnemosyne``, a port that is
taken, and the client's message when no server answers."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import grpc
import pytest

from mnemosyne import MemoryClient, __version__
from mnemosyne.client.errors import MnemosyneClientError, UnavailableError
from mnemosyne.errors import InvalidArgument
from mnemosyne.replication.url import ReplicaUrl
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


PORT_FLAGS = ("--port", "--metrics-port", "--http-port")


def test_the_command_line_sets_the_interpreter_up_before_numpy_loads() -> None:
    """``mnemosyne serve`` runs with one BLAS thread (runtime/interpreter.py), which numpy reads
    once, as it loads: importing the package and its command line must not load numpy first (the
    public names of ``mnemosyne`` load on first use)."""
    probe = "import sys, mnemosyne, mnemosyne.cli; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("flag", PORT_FLAGS)
def test_a_port_in_use_is_one_line_with_its_reason(tmp_path: Path, taken_port: int, flag: str) -> None:
    others = [part for other in PORT_FLAGS if other != flag for part in (other, "0")]
    data_dir = tmp_path / "data"
    line = _last_line_only_error(_serve(data_dir, flag, str(taken_port), *others))
    assert f"127.0.0.1:{taken_port}" in line
    assert "Address already in use" in line and "[LISTEN_FAILED]" in line
    assert f"choose another {flag}" in line
    # Refused before the data directory was opened: nothing was created.
    assert not data_dir.exists()


def _file(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _directory(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


# Mistakes a person makes starting a server: (flags, words the one line must hold, a path that
# must not exist afterwards). Every one is refused in one line, exit 2, before anything is served.
def _link(path: Path, to: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(to)
    return path


START_UP_MISTAKES: dict[str, Callable[[Path], tuple[list[str], list[str], Path | None]]] = {
    "a data directory that is a file": lambda d: (
        ["--data-dir", str(_file(d / "data"))],
        [f"the data directory {d / 'data'} is a file, not a directory", "[DATA_DIR_UNUSABLE]"],
        None,
    ),
    "a data directory that is a device": lambda d: (
        ["--data-dir", "/dev/null"],
        ["the data directory /dev/null is a device, not a directory", "[DATA_DIR_UNUSABLE]"],
        None,
    ),
    "a data directory inside a file": lambda d: (
        ["--data-dir", str(_file(d / "file") / "data")],
        [f"the data directory {d / 'file' / 'data'} cannot be used: Not a directory", "[DATA_DIR_UNUSABLE]"],
        None,
    ),
    "a data directory whose tenants directory is a file": lambda d: (
        ["--data-dir", str(_file(d / "data" / "tenants").parent)],
        [
            f"cannot be used: {d / 'data' / 'tenants'} is a file or a broken link, where a directory goes",
            "[DATA_DIR_UNUSABLE]",
        ],
        None,
    ),
    "a data directory inside another's": lambda d: (
        ["--data-dir", str(_file(d / "data" / ".mnemosyne.lock").parent / "tenants")],
        [f"{d / 'data' / 'tenants'} is inside the data directory {d / 'data'}", "[DATA_DIR_INSIDE_ANOTHER]"],
        d / "data" / "tenants",
    ),
    "a data directory that is a link to nothing": lambda d: (
        ["--data-dir", str(_link(d / "data", d / "gone"))],
        [f"the data directory {d / 'data'} is a symbolic link that leads to no directory", "[DATA_DIR_UNUSABLE]"],
        d / "gone",
    ),
    "a data directory whose lock cannot be opened": lambda d: (
        ["--data-dir", str(_directory(d / "data" / ".mnemosyne.lock").parent)],
        [f"cannot be used: Is a directory: {d / 'data' / '.mnemosyne.lock'}", "[DATA_DIR_UNUSABLE]"],
        None,
    ),
    "a tokens file that is missing": lambda d: (
        ["--data-dir", str(d / "data"), "--tokens-file", str(d / "tokens.json")],
        [str(d / "tokens.json"), "cannot be read", "[TOKENS_FILE_INVALID]"],
        d / "data",
    ),
    "a tokens file that is malformed": lambda d: (
        ["--data-dir", str(d / "data"), "--tokens-file", str(_file(d / "tokens.json", '{"tokens": {}}'))],
        [str(d / "tokens.json"), "[TOKENS_FILE_INVALID]"],
        d / "data",
    ),
    "TLS files that are missing": lambda d: (
        ["--data-dir", str(d / "data"), "--tls-cert", str(d / "tls.crt"), "--tls-key", str(d / "tls.key")],
        [f"cannot read the TLS key {d / 'tls.key'}", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "TLS files that are not PEM": lambda d: (
        ["--data-dir", str(d / "data"), "--tls-cert", str(_file(d / "tls.crt", "not a certificate"))]
        + ["--tls-key", str(_file(d / "tls.key", "not a key"))],
        [f"the TLS certificate {d / 'tls.crt'} and its key {d / 'tls.key'} are not a PEM", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "a member list file that is missing": lambda d: (
        ["--data-dir", str(d / "data"), "--member", "m0", "--members", f"@{d / 'members.txt'}"],
        [f"cannot read --members @{d / 'members.txt'}: No such file or directory", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "a member list without this member's id": lambda d: (
        ["--data-dir", str(d / "data"), "--members", "m0=127.0.0.1:1"],
        ["--members needs --member", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "a member address no member can dial": lambda d: (
        ["--data-dir", str(d / "data"), "--member", "m0", "--members", "m0=127.0.0.1:99999,m1=127.0.0.1:1"],
        ["--members: member m0's address '127.0.0.1:99999' is not a server address", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "a replica URL whose endpoint cannot be read": lambda d: (
        ["--data-dir", str(d / "data"), "--replica-url", "s3://bkt/p?endpoint=http://[::1"],
        ["its endpoint 'http://[::1' cannot be read", "[CONFIG_INVALID]"],
        d / "data",
    ),
    "this member's id without the member list": lambda d: (
        ["--data-dir", str(d / "data"), "--member", "m0"],
        ["--member needs --members", "[CONFIG_INVALID]"],
        d / "data",
    ),
}


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (["members", "--count", "100000"], "--count: give 1 to 64 members"),
        (["members", "--count", "65"], "--count: give 1 to 64 members"),
        (["members", "--count", "0"], "--count: give 1 to 64 members"),  # it said "from 1 to 2147483647"
        (["restore", "--from", "somewhere"], "restore --from DIR: give --data-dir"),
        (
            ["restore", "--from-replica", "s3://bkt/p"],
            "restore --from-replica without --data-dir restores one --tenant",
        ),
        # An explicit --target that a restore into a data directory would ignore (it talked to no server).
        (["restore", "--from", "b", "--data-dir", "d", "--target", "h:1"], "restore --from DIR writes a backup's"),
        (["restore", "--from", "b", "--target", "h:1"], "and talks to no server: drop --target"),
        (["restore", "--from-replica", "s3://bkt/p", "--data-dir", "d", "--target", "h:1"], "drop --target"),
        # So were the other connection flags (they were ignored too), each named.
        (["restore", "--from", "b", "--data-dir", "d", "--token-file", "t"], "talks to no server: drop --token-file ("),
        (["restore", "--from", "b", "--data-dir", "d", "--tls-ca", "c", "--tls"], "drop --tls-ca, --tls ("),
        (
            ["restore", "--from-replica", "s3://bkt/p", "--data-dir", "d", "--tls-cert", "c", "--tls-key", "k"],
            "drop --tls-cert, --tls-key (",
        ),
        (["restore", "--from", "b", "--data-dir", "d", "--tls-server-name", "n"], "drop --tls-server-name ("),
        # A replica URL is refused by its parts before object storage is asked (each was a
        # traceback, a REPLICA_UNREACHABLE that no retry ends, or a prefix climbing out of its own).
        *(
            (["restore", "--from-replica", url, "--tenant", "t", "--target", "127.0.0.1:1"], words)
            for url, words in (
                ("", "replicas go to S3-compatible object storage"),
                ("s3://bkt/p?endpoint=http://[::1", "its endpoint 'http://[::1' cannot be read"),
                ("s3://bkt/p?endpoint=http://h:99999", "cannot be read (Port out of range"),
                ("s3://bkt/p?endpoint=ftp://h", "is not http(s)://HOST[:PORT]"),
                ("s3://bkt/p?region=../x", "region '../x' (its region= or AWS_REGION) is not a region name"),
                (
                    "s3://bkt/p?endpont=http://h:9000",
                    "Litestream reads no query key 'endpont'; the keys it reads: endpoint,",
                ),
                ("s3://no!such/p", "bucket 'no!such' is not a bucket name"),
                ("s3://../p", "bucket '..' is not a bucket name (3-63 of a-z, 0-9"),  # S3's naming rules
                ("s3://bkt/../../other", "none of them '.' or '..'"),
                ("s3://bkt/a//b", "none of them '.' or '..'"),
                ("s3://bkt/mem\nber", "holds a control character"),
                (f"s3://bkt/{'p' * 600}", "its prefix is more than 512 bytes"),
            )
        ),
    ],
)
def test_a_local_command_s_mistake_is_one_line_with_its_reason(tmp_path: Path, command: list[str], words: str) -> None:
    result = _run(sys.executable, "-m", "mnemosyne", *command, timeout=30)
    line = _last_line_only_error(result)
    assert line.startswith("mnemosyne: ") and words in line and line.endswith("[CONFIG_INVALID]"), line


def test_an_offline_restore_takes_the_connection_variables_of_the_environment(tmp_path: Path) -> None:
    """Unlike the flags (refused above), MNEMOSYNE_TARGET, MNEMOSYNE_TOKEN and MNEMOSYNE_CLIENT_TLS...
    are the environment's, set for other commands: the restore goes on, to the backup it is given."""
    variables = {"MNEMOSYNE_TARGET": "h:1", "MNEMOSYNE_TOKEN": "t", "MNEMOSYNE_CLIENT_TLS": "1"}
    variables |= {f"MNEMOSYNE_CLIENT_TLS_{name}": "x" for name in ("CA", "CERT", "KEY", "SERVER_NAME")}
    command = [sys.executable, "-m", "mnemosyne", "restore", "--from", str(tmp_path / "b"), "--data-dir", "d"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, env=os.environ | variables)
    assert _last_line_only_error(result).endswith("it is not a backup directory [NOT_A_BACKUP]")


def test_a_replica_url_s_bucket_is_named_by_s3_s_rules() -> None:
    """S3's general purpose bucket naming rules (the Helm chart's schema holds them too): each
    refused name was taken (boto3's 1-255 of a-zA-Z0-9.-_), to fail at the server or name a path."""
    for bucket in ("..", "b", "ab", "a..b", "-ab", "ab-", ".ab", "Upper", "un_der", "192.168.5.4", "b" * 64):
        with pytest.raises(InvalidArgument, match=r"is not a bucket name \(3-63 of a-z, 0-9"):
            ReplicaUrl.parse(f"s3://{bucket}/p")
    for bucket in ("abc", "my-bucket", "mnemosyne-replicas", "a.b.c", "t-0123456789abcdef", "b" * 63, "1.2.3"):
        assert ReplicaUrl.parse(f"s3://{bucket}/p").bucket == bucket


def test_a_restore_from_object_storage_without_keys_says_to_set_them_not_to_retry(tmp_path: Path) -> None:
    """No AWS keys in the environment: the bucket is never asked, so no retry ends it; the line
    names the variables to set (it said "retry once it answers")."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true"}  # no ~/.aws, no instance keys
    command = ["restore", "--from-replica", "s3://bkt/p?endpoint=http://127.0.0.1:1", "--tenant", "t"]
    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne", *command, "--target", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    line = _last_line_only_error(result)
    assert "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line and "retry" not in line, line
    assert line.endswith("[REPLICA_UNREACHABLE]"), line


def test_a_members_mistake_is_one_line_before_any_member_starts_or_names_the_member(
    tmp_path: Path, taken_port: int
) -> None:
    """``mnemosyne members``: a serve flag after -- that it sets per member (every member would
    have had the same data directory, and all but one failed on its lock), port ranges past 65535
    or overlapping, are refused before anything starts; a member that cannot start is named with
    what it said. Each was a RuntimeError traceback holding the member's log."""
    data_dir = tmp_path / "members"
    off = ["--http-port", "0", "--metrics-port", "0", "--data-dir", str(data_dir)]
    refused = {
        ("--port", "0", *off, "--", "--data-dir", str(tmp_path / "other")): "--data-dir after --",
        ("--port", "0", *off, "--", "--members=m0=127.0.0.1:1"): "--members after --",
        ("--port", "65535", *off): "--port 65535 with --count 2 gives member m1 port 65536",
        ("--port", "30000", "--metrics-port", "30001", "--http-port", "0", "--data-dir", str(data_dir)): (
            "port 30001 would be both the --port of m1 and the --metrics-port of m0"
        ),
    }
    for flags, words in refused.items():
        line = _last_line_only_error(_run(sys.executable, "-m", "mnemosyne", "members", "--count", "2", *flags))
        assert words in line and line.endswith("[CONFIG_INVALID]"), line
        assert not data_dir.exists(), flags
    # A server's data directory (its lock file there) gets no member's directory or log file.
    served = tmp_path / "served"
    served.mkdir()
    (served / ".mnemosyne.lock").touch()
    ports = ["--port", "0", "--http-port", "0", "--metrics-port", "0"]
    line = _last_line_only_error(_run(sys.executable, "-m", "mnemosyne", "members", *ports, "--data-dir", str(served)))
    assert line.endswith("[DATA_DIR_INSIDE_ANOTHER]") and sorted(served.iterdir()) == [served / ".mnemosyne.lock"]
    result = _run(sys.executable, "-m", "mnemosyne", "members", "--count", "2", "--port", str(taken_port), *off)
    line = _last_line_only_error(result)
    assert line.startswith("mnemosyne: member m0 did not start: ") and line.endswith("[LISTEN_FAILED]"), line


@pytest.mark.parametrize("mistake", START_UP_MISTAKES)
def test_a_start_up_mistake_is_one_line_without_a_traceback(tmp_path: Path, mistake: str) -> None:
    flags, words, absent = START_UP_MISTAKES[mistake](tmp_path)
    ports = [part for flag in PORT_FLAGS for part in (flag, "0")]  # no default port: the README's server may run
    result = _run(sys.executable, "-m", "mnemosyne", "serve", *ports, *flags, timeout=30)
    line = _last_line_only_error(result)
    assert all(word in line for word in words), line
    assert absent is None or not absent.exists()


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


@contextmanager
def _wrong_ports() -> Iterator[dict[str, str]]:
    """Addresses where no Mnemosyne server listens: a port nothing listens on, an HTTP/1 server,
    and a gRPC server of other services."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    other = grpc.server(ThreadPoolExecutor(max_workers=1))
    other_port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        yield {
            "nothing listening": f"127.0.0.1:{free}",
            "an HTTP server": f"127.0.0.1:{web.server_address[1]}",
            "a gRPC server of other services": f"127.0.0.1:{other_port}",
        }
    finally:
        other.stop(0)
        web.shutdown()
        web.server_close()


def test_a_client_at_the_wrong_port_asks_whether_a_mnemosyne_server_listens_there() -> None:
    """The failure keeps its code, reason and class; its message names the address first, then
    gRPC's own words, on one line."""
    with _wrong_ports() as wrong:
        for what, target in wrong.items():
            with MemoryClient(target, timeout=5.0, retries=0) as client:
                with pytest.raises(MnemosyneClientError) as info:
                    client.recall("acme", "anything")
            error = info.value
            expected = grpc.StatusCode.UNIMPLEMENTED if what.startswith("a gRPC") else grpc.StatusCode.UNAVAILABLE
            assert error.code == expected and error.reason == expected.name, (what, error)
            assert isinstance(error, UnavailableError) == (expected == grpc.StatusCode.UNAVAILABLE)
            text = str(error)
            assert text.startswith(f"{expected.name}: is a Mnemosyne server listening at {target}? ("), (what, text)
            cause = info.value.__cause__
            assert "\n" not in text and isinstance(cause, grpc.RpcError), cause
            assert text.endswith(f"({cause.details()})"), text
        # A deployment of many members: the address is the member's the call went to.
        members = f"m0={wrong['nothing listening']}"
        with MemoryClient("", members=members, timeout=5.0, retries=0) as client:
            with pytest.raises(
                UnavailableError, match=f"is a Mnemosyne server listening at {wrong['nothing listening']}"
            ):
                client.retain("acme", "anything")
        # The command line says it in one line (every client command prints its client's error).
        target = wrong["an HTTP server"]
        ran = _run(sys.executable, "-m", "mnemosyne", "consolidate", "--target", target, "--tenant", "acme")
        lines = ran.stderr.strip().splitlines()
        assert ran.returncode == 2 and len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
        assert lines[0].startswith(f"mnemosyne consolidate: UNAVAILABLE: is a Mnemosyne server listening at {target}?")


def test_a_command_at_an_address_where_nothing_listens_fails_after_its_retry_window(tmp_path: Path) -> None:
    """A command tries a repeatable call again while the server is unreachable for --retry-window
    seconds (3 by default, MNEMOSYNE_CLIENT_RETRY_WINDOW), not a client library's 15 s."""
    with _wrong_ports() as wrong:
        target = wrong["nothing listening"]
        archive = tmp_path / "acme.tar"
        command = (
            sys.executable,
            "-m",
            "mnemosyne",
            "export",
            "--target",
            target,
            "--tenant",
            "acme",
            "--to",
            str(archive),
        )
        took = {}
        for name, flags, env in (
            ("default", (), {}),
            ("never", ("--retry-window", "0"), {}),
            ("variable", (), {"MNEMOSYNE_CLIENT_RETRY_WINDOW": "6"}),
        ):
            began = time.monotonic()
            ran = subprocess.run(
                [*command, *flags], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
            )
            took[name] = time.monotonic() - began
            assert ran.returncode == 2 and "is a Mnemosyne server listening" in ran.stderr, ran.stderr
            assert not archive.exists()
    # The last wait is cut short rather than run past the window: each ends a little before it.
    assert (
        took["never"] < 2 and 2.5 <= took["default"] < took["never"] + 5 and took["variable"] > took["default"] + 2
    ), took


def test_a_server_refusal_is_not_taken_for_a_wrong_port(server, tenant: str) -> None:
    """A Mnemosyne server's own answers (they carry their ErrorInfo) keep their message."""
    target = server if isinstance(server, str) else server.target
    with MemoryClient(target, retries=0) as client:
        with pytest.raises(MnemosyneClientError) as info:
            client.retain(tenant, "   ")
    assert info.value.reason == "TEXT_EMPTY" and "listening" not in str(info.value)


def _text_options() -> Iterator[tuple[str, str, list[str]]]:
    """(command, option, the command's other required options filled) for every option of every
    command that takes a text as it is (no type, no choices): from the parser, so a new one is
    covered."""
    import argparse

    from mnemosyne.cli.commands import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in commands.choices.items():
        options = [a for a in parser._actions if a.option_strings and a.nargs is None]
        for hostile in options:
            if hostile.type is not None or hostile.choices or hostile.nargs == 0:
                continue
            required: list[str] = []
            # A required group of alternatives (restore's --from | --from-replica): its first, unless
            # the option tried is one of them.
            chosen = [
                group._group_actions[0]
                for group in parser._mutually_exclusive_groups
                if group.required and hostile not in group._group_actions
            ]
            for other in options:
                if (other.required or other in chosen) and other is not hostile:
                    value = str(other.choices and list(other.choices)[0] or ("1" if other.type else "x"))
                    required += [other.option_strings[0], value]
            yield command, hostile.option_strings[0], required


@pytest.mark.parametrize(("command", "option", "required"), list(_text_options()), ids=lambda v: str(v))
def test_text_that_is_not_utf8_is_refused_in_one_line(
    command: str, option: str, required: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from mnemosyne.cli.commands import main

    # What Python makes of a command line byte that is not UTF-8 (b"\xff"): a lone surrogate.
    with pytest.raises(SystemExit) as ended:
        main([command, *required, option, "a" + b"\xff".decode("utf-8", "surrogateescape")])
    assert ended.value.code == 2
    said = capsys.readouterr().err
    assert f"mnemosyne {command}: error: {option} is not UTF-8 text" in said, said


def _damaged_tenant_files(data_dir: Path) -> list[str]:
    """Tenant files inspect and oplog cannot read: text, a FIFO, a directory, a file of ours (its
    application id) cut short."""
    import apsw

    from mnemosyne.store.schema import APPLICATION_ID

    tenants = data_dir / "tenants"
    tenants.mkdir(parents=True)
    (tenants / "text.sqlite").write_text("not a database")
    os.mkfifo(tenants / "fifo.sqlite")
    (tenants / "folder.sqlite").mkdir()
    connection = apsw.Connection(str(tenants / "cut.sqlite"))
    connection.pragma("application_id", APPLICATION_ID)
    connection.execute("CREATE TABLE memories (body TEXT); CREATE TABLE ledger (entry TEXT)")
    connection.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
        "INSERT INTO memories SELECT printf('%.200c', 'x') FROM n"
    )
    connection.close()
    os.truncate(tenants / "cut.sqlite", 3 * 4096)
    return ["text", "fifo", "folder", "cut"]


@pytest.mark.parametrize("command", ["inspect", "oplog"])
def test_inspect_and_oplog_name_a_tenant_file_they_cannot_read_in_one_line(tmp_path: Path, command: str) -> None:
    """They were a traceback of SQLite's error (NotADBError, CorruptError, IOError) and, for a
    FIFO, a wait for ever."""
    for tenant in _damaged_tenant_files(tmp_path / "data"):
        result = _run(
            sys.executable, "-m", "mnemosyne", command, "--data-dir", str(tmp_path / "data"), "--tenant", tenant
        )
        line = _last_line_only_error(result)
        assert f"{tenant}.sqlite is damaged" in line and line.endswith("[TENANT_CORRUPT]"), line


def _path_options() -> Iterator[tuple[str, str, list[str]]]:
    """(command, option, the command's other flags) for every option naming a file or directory
    (commands.PATH_FLAGS), from the parser: a client command aims at a port nothing listens on, a
    server at ports of its own."""
    import argparse

    from mnemosyne.cli.commands import PATH_FLAGS, build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in commands.choices.items():
        flags = {flag for action in parser._actions for flag in action.option_strings}
        for option in (a for a in parser._actions if a.dest in PATH_FLAGS):
            others = ["--target", "127.0.0.1:1"] if "--target" in flags else []
            others += [part for flag in PORT_FLAGS if flag in flags for part in (flag, "0")]
            for action in parser._actions:
                if action.required and action.option_strings and action is not option:
                    others += [action.option_strings[0], "x"]
            for group in parser._mutually_exclusive_groups:
                if group.required and option not in group._group_actions:
                    others += [group._group_actions[0].option_strings[0], "x"]
            yield command, option.option_strings[0], others


@pytest.mark.parametrize(("command", "option", "others"), list(_path_options()), ids=lambda v: str(v))
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, command: str, option: str, others: list[str]
) -> None:
    """An empty --to, --from or --data-dir was the directory the command ran in: a backup or a
    drill's servers written there, a server serving it."""
    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne", command, *others, option, ""],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"mnemosyne {command}: error: {option} is empty: give a path (not the current directory by default)"
    )
    assert list(tmp_path.iterdir()) == []


def _unreadable_kinds(tmp_path: Path) -> dict[str, Path]:
    os.mkfifo(tmp_path / "fifo")
    return {"a FIFO": tmp_path / "fifo", "a device": Path("/dev/zero")}


# A flag naming a file to read: (the command with FILE for it, the reason of its one line).
FILES_READ = {
    "--token-file": (["health", "--target", "127.0.0.1:1", "--token-file", "FILE"], "TOKEN_FILE_UNREADABLE"),
    "--tls-ca": (["health", "--target", "127.0.0.1:1", "--tls-ca", "FILE"], "CONFIG_INVALID"),
    "--tls-cert": (["export", "--target", "127.0.0.1:1", "--tenant", "t", "--to", "a.tar"], "CONFIG_INVALID"),
    "import --from": (["import", "--target", "127.0.0.1:1", "--from", "FILE"], "ARCHIVE_INVALID"),
    "rebalance --from @": (["rebalance", "--from", "@FILE", "--to", "m1=127.0.0.1:1"], "CONFIG_INVALID"),
    "serve --tokens-file": (["serve", "--tokens-file", "FILE"], "TOKENS_FILE_INVALID"),
    "serve --members @": (["serve", "--member", "m0", "--members", "@FILE"], "CONFIG_INVALID"),
    "serve --tls-cert": (["serve", "--tls-cert", "FILE", "--tls-key", "FILE"], "CONFIG_INVALID"),
}


@pytest.mark.parametrize("flag", FILES_READ)
def test_a_file_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, flag: str) -> None:
    """A FIFO (no writer) made the command wait for ever before saying a word; /dev/zero read until
    memory ran out."""
    command, reason = FILES_READ[flag]
    if flag == "--tls-cert":
        command = [*command, "--tls-cert", "FILE", "--tls-key", "FILE"]
    if command[0] == "serve":
        command = [*command, "--data-dir", str(tmp_path / "data"), *(part for f in PORT_FLAGS for part in (f, "0"))]
    for kind, file in _unreadable_kinds(tmp_path).items():
        args = [part.replace("FILE", str(file)) for part in command]
        line = _last_line_only_error(_run(sys.executable, "-m", "mnemosyne", *args, timeout=60))
        assert str(file) in line and line.endswith(f"[{reason}]"), (kind, line)
        assert "not a regular file" in line or "not a usable tenant archive" in line, (kind, line)


def _thread_flags() -> list[str]:
    """Every serve flag that is a number of threads (--*-threads, --*-workers), from the parser."""
    import argparse

    from mnemosyne.cli.commands import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [
        flag
        for action in commands.choices["serve"]._actions
        for flag in action.option_strings[:1]
        if flag.endswith(("-threads", "-workers"))
    ]


@pytest.mark.parametrize("flag", _thread_flags())
def test_a_number_of_threads_no_process_can_start_is_refused_in_one_line(tmp_path: Path, flag: str) -> None:
    """--hot-path-workers 2147483647 started threads until the process could start no more, then
    ended in a traceback (RuntimeError: can't start new thread)."""
    ports = [part for port_flag in PORT_FLAGS for part in (port_flag, "0")]
    result = _run(
        sys.executable, "-m", "mnemosyne", "serve", "--data-dir", str(tmp_path / "data"), *ports, flag, "2147483647"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert flag in result.stderr.strip().splitlines()[-1], result.stderr


@pytest.mark.parametrize(
    ("args", "says", "reason"),
    [
        (("drill", "--data-dir", "{file}"), "it is a file, where a directory goes: {file}", "PATH_WRONG_KIND"),
        # A device is no file (it was said to be one).
        (("drill", "--data-dir", "/dev/null"), "it is a device, where a directory goes: /dev/null", "PATH_WRONG_KIND"),
        # A loop of symbolic links is no file (it was said to be one).
        (("drill", "--data-dir", "{loop}"), "it is a symbolic link that leads to no directory", "PATH_WRONG_KIND"),
        (("drill", "--data-dir", "{file}/data"), "Not a directory", "PATH_WRONG_KIND"),
        (("restore", "--from", "{file}", "--data-dir", "{dir}/restored"), "Not a directory", "PATH_WRONG_KIND"),
    ],
)
def test_a_path_a_command_cannot_use_is_one_line_naming_it_and_its_reason(
    tmp_path: Path, args: tuple[str, ...], says: str, reason: str
) -> None:
    """What the system said of the path, the path, and a reason, as every other refusal ends: not
    "File exists" for a file given where a directory goes, and never a line without a reason."""
    file = tmp_path / "a-file"
    file.write_text("not a directory")
    (tmp_path / "a-loop").symlink_to(tmp_path / "a-loop")
    filled = [arg.format(file=file, dir=tmp_path, loop=tmp_path / "a-loop") for arg in args]
    result = _run(sys.executable, "-m", "mnemosyne", *filled)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"mnemosyne {args[0]}: ") and says.format(file=file) in lines[0], lines[0]
    assert lines[0].endswith(f"[{reason}]"), lines[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file", "a-loop"]  # nothing made beside them


def test_a_rebalance_that_cannot_ask_a_member_says_so_on_stderr_and_exits_1() -> None:
    """Nothing listens at the members' addresses: the command's report stays on stdout, and what
    stopped it (each member it could not ask, and that it must run again) is on stderr."""
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    old, new = f"m1=127.0.0.1:{port}", f"m1=127.0.0.1:{port},m2=127.0.0.1:{port}"
    result = _run(sys.executable, "-m", "mnemosyne", "rebalance", "--from", old, "--to", new)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    problems = result.stderr.splitlines()
    assert any("member m1" in line and "could not be told of the change" in line for line in problems), problems
    assert any("nothing was moved" in line for line in problems), problems  # none listed, none moved
    assert problems[-1].endswith("run it again to finish"), problems
    assert "could not be" not in result.stdout and "tenants held elsewhere" not in result.stdout


def _serve_numbers() -> list[tuple[str, int | float, int | float, str]]:
    """Each number flag of serve: its flag, smallest, largest and help."""
    from mnemosyne.cli.flags import settings
    from mnemosyne.cli.serve import ServeSettings
    from mnemosyne.transport.config import ServerConfig

    return [
        (s.flag, *s.option.bounds(s.kind), s.option.help)
        for cls in (ServerConfig, ServeSettings)
        for s in settings(cls)
        if s.kind in (int, float) and not s.option.variable_only
    ]


@pytest.mark.parametrize("given", ["0", "-1", "99999999999"])
def test_a_serve_number_out_of_its_flag_s_range_is_refused_naming_the_flag_and_the_range(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """--replica-active-limit 0 was taken as 1 (as were --hot-path-workers and --hot-path-batch
    0), and --webhook-workers 0 started no worker: every number flag took 0. A flag 0 makes
    meaningless starts at 1; one that takes 0 says in its help what 0 means."""
    from mnemosyne.cli.commands import build_parser, command_parser

    for name in [name for name in os.environ if name.startswith("MNEMOSYNE_")]:
        monkeypatch.delenv(name)
    serve = command_parser(build_parser(), "serve")
    numbers = _serve_numbers()
    assert {"--replica-active-limit", "--hot-path-batch", "--max-text-chars"} <= {flag for flag, *_ in numbers}
    for flag, smallest, largest, help in numbers:
        if flag == "--near-duplicate-threshold" and given == "0":  # a cosine: 0 is one value of many
            continue
        if smallest <= float(given) <= largest:
            if given == "99999999999":  # ~93 GiB: a quota of bytes takes it, no other flag
                assert flag == "--max-tenant-bytes", f"{flag} takes {given}"
                continue
            assert given == "0" and re.search(r"\b0(:| =)", help), f"{flag} takes 0; its help must say what 0 means"
            continue
        with pytest.raises(SystemExit) as exited:
            serve.parse_args([flag, given])
        assert exited.value.code == 2
        said = capsys.readouterr().err.splitlines()[-1]
        assert said.startswith(f"mnemosyne serve: error: argument {flag}: the value is '{given}'; "), said
        written = [f"{n:g}" if isinstance(n, float) else str(n) for n in (smallest, largest)]
        assert said.endswith(" from {} to {}".format(*written)), said


def test_a_serve_variable_s_value_refused_names_the_variable_and_the_flag_wins_over_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MNEMOSYNE_MAX_K=abc was refused as "argument --max-k: ... 'abc' is not": whoever set the
    variable (a chart, a unit file) looked for a flag never given."""
    from mnemosyne.cli.commands import build_parser, command_parser

    for name in [name for name in os.environ if name.startswith("MNEMOSYNE_")]:
        monkeypatch.delenv(name)
    for variable, value, flag in [
        ("MNEMOSYNE_MAX_K", "abc", "--max-k"),
        ("MNEMOSYNE_SYNCHRONOUS", "off", "--synchronous"),
    ]:
        monkeypatch.setenv(variable, value)
        serve = command_parser(build_parser(), "serve")
        with pytest.raises(SystemExit) as exited:
            serve.parse_args([])
        said = capsys.readouterr().err.splitlines()[-1]
        assert exited.value.code == 2 and said.startswith(f"mnemosyne serve: error: argument {flag}: "), said
        assert f"'{value}'" in said and f"the variable {variable}" in said, said
        given = "7" if flag == "--max-k" else "normal"
        assert str(getattr(serve.parse_args([flag, given]), flag[2:].replace("-", "_"))) == given  # the flag wins
        with pytest.raises(SystemExit):
            serve.parse_args([flag, value])  # its own mistake is the flag's: no variable named
        assert "variable" not in capsys.readouterr().err
        monkeypatch.delenv(variable)


def test_an_empty_thread_is_refused_not_taken_for_every_thread(capsys: pytest.CaptureFixture[str]) -> None:
    """``consolidate --thread ""`` (``--thread "$THREAD"``, the variable unset) consolidated every
    idle thread of the tenant, the flag's default, instead of the one meant."""
    from mnemosyne.cli.commands import main

    assert main(["consolidate", "--target", "127.0.0.1:1", "--tenant", "t", "--thread", ""]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith("mnemosyne: --thread is empty: give a thread id") and said.endswith("[THREAD_INVALID]")
