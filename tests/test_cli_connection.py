"""The client commands' connection flags and tenants, checked before any channel is made: a
malformed ``--target`` (or ``MNEMOSYNE_TARGET``, or a member's address for ``rebalance``) and a
malformed ``--tenant`` are refused in one line with their reason and exit 2, as the command's
first act (docs/operations.md#connection-flags), never with gRPC's C++ log lines, UNKNOWN, or
(``mcp``) a server that starts and then fails every tool call. Each case runs the command as a
subprocess."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ServerFactory

NOBODY = "127.0.0.1:1"  # a well-formed target nothing listens at: a check that reached it would say so


def _mnemosyne(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # ``mcp`` serves stdin: without a refusal it would end at EOF, exit 0
        env={**os.environ, "MNEMOSYNE_TOKEN": "unused", **(env or {})},
    )


def _refused(result: subprocess.CompletedProcess[str], reason: str, *words: str) -> None:
    """One line on stderr with ``reason`` and ``words``, exit 2, nothing of gRPC's."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert f"[{reason}]" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "UNKNOWN" not in result.stderr, result.stderr


def _command(name: str, tmp_path: Path, target: str, tenant: str = "acme") -> list[str]:
    """``name``'s arguments, otherwise well formed."""
    archive, directory = str(tmp_path / "acme.tar"), str(tmp_path / "backup")
    return {
        "health": ["health", "--target", target],
        "mcp": ["mcp", "--target", target, "--tenant", tenant],
        "backup": ["backup", "--target", target, "--to", directory, "--tenant", tenant],
        "export": ["export", "--target", target, "--tenant", tenant, "--to", archive],
        "import": ["import", "--target", target, "--from", archive, "--tenant", tenant],
        "consolidate": ["consolidate", "--target", target, "--tenant", tenant],
        "reembed": ["reembed", "--target", target, "--tenant", tenant],
        "restore": ["restore", "--from-replica", "s3://bucket/prefix", "--target", target, "--tenant", tenant],
    }[name]


MALFORMED_TARGETS = [
    ("health", ""),
    ("export", ""),
    ("mcp", "dns:///"),
    ("health", "dns:"),
    ("backup", "ipv4:999.1.1.1:1"),
    ("import", "ipv4:127.0.0.1"),
    ("consolidate", "ipv6:[::1]"),
    ("reembed", "localhost"),
    ("health", "localhost:0"),
    ("health", "localhost:65536"),
    ("restore", "dns://localhost:50051"),
    ("health", "unix://host/tmp/socket"),
    ("health", "http://localhost:50051"),
    ("mcp", "a b:50051"),
    ("health", "[::1:50051"),
]


@pytest.mark.parametrize(("command", "target"), MALFORMED_TARGETS)
def test_a_malformed_target_is_refused_in_one_line_before_any_channel(
    tmp_path: Path, command: str, target: str
) -> None:
    result = _mnemosyne(*_command(command, tmp_path, target))
    _refused(result, "CONFIG_INVALID", "--target", repr(target), "HOST:PORT")
    assert not (tmp_path / "acme.tar").exists() and not (tmp_path / "backup").exists()


@pytest.mark.parametrize("target", ["", "dns:///", "ipv4:999.1.1.1:1"])
def test_a_malformed_target_in_the_environment_is_refused_the_same_way(tmp_path: Path, target: str) -> None:
    result = _mnemosyne("consolidate", "--tenant", "acme", env={"MNEMOSYNE_TARGET": target})
    _refused(result, "CONFIG_INVALID", "MNEMOSYNE_TARGET", repr(target))


@pytest.mark.parametrize(
    ("flag", "address"), [("--from", "dns:///"), ("--to", "unix://host/socket"), ("--to", "ipv4:1.2.3.400:1")]
)
def test_a_rebalance_member_whose_address_is_no_target_is_refused(flag: str, address: str) -> None:
    lists = {"--from": f"a={NOBODY}", "--to": f"a={NOBODY}"}
    lists[flag] += f",b={address}"
    result = _mnemosyne("rebalance", "--from", lists["--from"], "--to", lists["--to"])
    _refused(result, "CONFIG_INVALID", f"{flag}: member b's address", repr(address))


def test_well_formed_targets_of_every_form_reach_the_server(server_factory: ServerFactory) -> None:
    port = server_factory().start().port
    forms = [
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"dns:///localhost:{port}",
        f"dns:localhost:{port}",
        f"ipv4:127.0.0.1:{port}",
        f"ipv4:127.0.0.1:{port},127.0.0.1:{port}",
    ]
    for target in forms:
        result = _mnemosyne("health", "--target", target)
        assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "SERVING", ""), target


MALFORMED_TENANTS = [
    ("mcp", "../x"),
    ("mcp", ""),
    ("mcp", "Acme"),
    ("mcp", "x" * 64),
    ("export", "../x"),
    ("consolidate", "a/b"),
    ("reembed", "_acme"),
    ("import", ""),
    ("backup", "../x"),
    ("restore", "../x"),
]


@pytest.mark.parametrize(("command", "tenant"), MALFORMED_TENANTS)
def test_a_malformed_tenant_is_refused_at_start(tmp_path: Path, command: str, tenant: str) -> None:
    # NOBODY: the refusal comes before any connection (one that tried would find no server).
    result = _mnemosyne(*_command(command, tmp_path, NOBODY, tenant=tenant))
    _refused(result, "TENANT_INVALID", repr(tenant[:80]))
    assert "listening" not in result.stderr
    assert not (tmp_path / "acme.tar").exists() and not (tmp_path / "backup").exists()


@pytest.mark.parametrize("command", ["health", "export", "backup", "consolidate", "mcp"])
@pytest.mark.parametrize(("given", "shown"), [("café-7", "'é' (U+00E9)"), ("tab\there", "'\\t' (U+0009)")])
def test_a_token_no_header_can_carry_is_refused_at_start(tmp_path: Path, command: str, given: str, shown: str) -> None:
    """gRPC refuses such a token as metadata in the client itself: every call failed INTERNAL
    ("Invalid metadata"), which names neither the token nor what is wrong with it."""
    token_file = tmp_path / "token"
    token_file.write_text(given, encoding="utf-8")
    from_file = _mnemosyne(*_command(command, tmp_path, NOBODY), "--token-file", str(token_file))
    _refused(from_file, "TOKEN_MALFORMED", f"--token-file {token_file}", shown)
    from_variable = _mnemosyne(*_command(command, tmp_path, NOBODY), env={"MNEMOSYNE_TOKEN": given})
    _refused(from_variable, "TOKEN_MALFORMED", "MNEMOSYNE_TOKEN", shown)
    assert "INTERNAL" not in from_file.stderr + from_variable.stderr
    assert not (tmp_path / "acme.tar").exists() and not (tmp_path / "backup").exists()


@pytest.mark.parametrize(("given", "words"), [(b"\xff\xfe-token", "not UTF-8"), (b"caf\xc3\xa9", "'\xe9' (U+00E9)")])
def test_hash_token_refuses_a_token_no_header_can_carry_in_one_line(given: bytes, words: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "hash-token"], input=given, capture_output=True, timeout=60
    )
    said = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in said, said
    assert said.splitlines() == [said.strip()] and words in said and not result.stdout, said


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (b"first-line\nsecond-line\n", "more than one line"),
        (b"a-token\n\n", "more than one line"),
        (b"x" * 4097 + b"\n", "longer than 4096 characters"),
        (b"x" * 100_000, "longer than 4096 characters"),
        (b"two words\n", "white space"),
        (b" leading\n", "white space"),
        (b"\n", "give the token"),
        (b"bell\x07\n", "U+0007"),
    ],
)
def test_hash_token_refuses_what_is_not_one_token_a_client_can_send(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], given: bytes, words: str
) -> None:
    """Only the first line was hashed (a second was dropped unsaid), and a token of any length or
    with spaces got a hash: one no request can carry, or not the token the server is sent."""
    from mnemosyne.cli.commands import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given)))
    assert main(["hash-token"]) == 2
    said = capsys.readouterr()
    assert not said.out and said.err.startswith("mnemosyne hash-token: ") and words in said.err, said
    assert said.err.count("\n") == 1
    for whole in (b"x" * 4096 + b"\n", b"a-token\r\n", b"a-token"):  # a trailing newline is fine
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(whole)))
        assert main(["hash-token"]) == 0
        assert capsys.readouterr().out.strip() == hashlib.sha256(whole.rstrip(b"\r\n")).hexdigest()


def test_a_memory_client_refuses_a_token_no_header_can_carry() -> None:
    from mnemosyne.client import MemoryClient

    with pytest.raises(ValueError, match=r"'\\n' \(U\+000A\).*TOKEN_MALFORMED"):
        MemoryClient(NOBODY, "two\nlines")


@pytest.mark.parametrize("timestamp", ["yesterday", "2026-02-30T00:00:00Z", "2026-01-01 00:00:00Z", "2026-1-1T0:0:0Z"])
@pytest.mark.parametrize("into", ["server", "data-dir"])
def test_a_restore_timestamp_that_is_no_rfc_3339_time_is_refused_before_object_storage(
    tmp_path: Path, timestamp: str, into: str
) -> None:
    """Litestream refuses it as "invalid -timestamp", which the restore took for no state at that
    time: it said the bucket held no replica of the tenant (and, with no bucket to ask, that
    object storage was unreachable), never that the time was malformed."""
    place = ["--target", NOBODY] if into == "server" else ["--data-dir", str(tmp_path / "data")]
    result = _mnemosyne(
        "restore", "--from-replica", "s3://bucket/prefix", "--tenant", "acme", *place, "--timestamp", timestamp
    )
    _refused(result, "TIMESTAMP_INVALID", f"--timestamp {timestamp!r}", "RFC 3339")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("workspace", ["", "a b", "../x", "a/b", "w" * 65])
def test_mcp_refuses_a_malformed_workspace_at_start(tmp_path: Path, workspace: str) -> None:
    """As /mcp over HTTP refuses one before its session opens: the stdio adapter started, and then
    every tool call of the session was refused by the server."""
    result = _mnemosyne(*_command("mcp", tmp_path, NOBODY), "--workspace", workspace)
    _refused(result, "WORKSPACE_INVALID", repr(workspace[:80]))
    assert "listening" not in result.stderr


def test_health_of_a_service_the_server_does_not_check_names_it(server_factory: ServerFactory) -> None:
    """The health service's NOT_FOUND carries no message: the line was "unhealthy: NOT_FOUND: "."""
    target = f"127.0.0.1:{server_factory().start().port}"
    for service in ["x y", "mnemosyne.v1.NoSuchService", "s" * 10_000]:
        result = _mnemosyne("health", "--target", target, "--service", service)
        lines = result.stderr.splitlines()
        assert result.returncode == 1 and len(lines) == 1, result.stderr[:500]
        assert lines[0].startswith(f"unhealthy: NOT_FOUND: the server checks no service {service[:80]!r}"), lines
    assert _mnemosyne("health", "--target", target, "--service", "mnemosyne.v1.MemoryService").stdout == "SERVING\n"
