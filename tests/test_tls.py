"""TLS and mutual TLS on the gRPC port (certificates made here with ``cryptography``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import http.client
import ipaddress
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from starlette.types import Receive, Scope, Send

from mnemosyne.cli.commands import build_parser
from mnemosyne.cli.server_process import LocalMembers, _free_port
from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.client.types import ThreadRef
from mnemosyne.store.membership import Membership, owner_of
from mnemosyne.transport.cluster.forwarding import member_key
from tests.support import SERVE, ServerProcess, gauge, serve_args, tokens_json

NAME_OVERRIDE = [("grpc.ssl_target_name_override", "localhost")]


@dataclass
class Pem:
    cert: Path
    key: Path


def _issue(
    directory: Path,
    name: str,
    *,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    server: bool = False,
    client: bool = False,
    ca: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Pem]:
    """A certificate for ``localhost`` with ``server`` (and for client authentication too with
    ``client``), else a client's, or a CA's with ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
            ),
            critical=False,
        )
    elif not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    pem = Pem(directory / f"{name}.crt", directory / f"{name}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, key, pem


@dataclass
class Pki:
    ca: Pem
    server: Pem
    client: Pem
    rogue_ca: Pem
    rogue_client: Pem
    member: Pem  # a server's certificate valid for client authentication too (members under mutual TLS)

    def credentials(self, client: Pem | None = None, ca: Pem | None = None) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=(ca or self.ca).cert.read_bytes(),
            private_key=client.key.read_bytes() if client else None,
            certificate_chain=client.cert.read_bytes() if client else None,
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key, ca = _issue(directory, "ca", issuer=None, ca=True)
    _c, _k, server = _issue(directory, "server", issuer=(ca_cert, ca_key), server=True)
    _c, _k, client = _issue(directory, "client", issuer=(ca_cert, ca_key))
    rogue_cert, rogue_key, rogue_ca = _issue(directory, "rogue-ca", issuer=None, ca=True)
    _c, _k, rogue_client = _issue(directory, "rogue-client", issuer=(rogue_cert, rogue_key))
    _c, _k, member = _issue(directory, "member", issuer=(ca_cert, ca_key), server=True, client=True)
    return Pki(ca, server, client, rogue_ca, rogue_client, member)


def _serving(cert: Path, key: Path, client_ca: Path | None = None) -> list[str]:
    """The TLS flags of ``mnemosyne serve`` (mutual TLS with ``client_ca``)."""
    return ["--tls-cert", str(cert), "--tls-key", str(key), *(["--tls-client-ca", str(client_ca)] if client_ca else [])]


def _trusting(ca: Path, cert: Path | None = None, key: Path | None = None) -> list[str]:
    """The TLS flags of a client command (a client certificate with ``cert`` and ``key``)."""
    return ["--tls-ca", str(ca), *(["--tls-cert", str(cert), "--tls-key", str(key)] if cert and key else [])]


def _works(target: str, credentials: grpc.ChannelCredentials | None, tenant: str) -> bool:
    with MemoryClient(target, credentials=credentials, options=NAME_OVERRIDE, retries=0, timeout=10) as c:
        try:
            c.retain(tenant, "the vault code is kept by the night manager")
        except MnemosyneClientError as exc:
            assert exc.code == grpc.StatusCode.UNAVAILABLE, exc  # a refused handshake, nothing else
            return False
        return [h.memory.text for h in c.recall(tenant, "vault code", k=1)] == [
            "the vault code is kept by the night manager"
        ]


def _health(target: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", "health", "--target", target, "--tls-server-name", "localhost", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _tls_exchange(port: int, pki: Pki, request: bytes, client: Pem | None = None, size: int = 4096) -> bytes:
    """What the TLS server on ``port`` answers first to ``request``, verified against the test CA
    (presenting ``client``); b"" when the handshake fails or the connection closes unanswered."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(request)
                return tls.recv(size)
    except (ssl.SSLError, ConnectionError):
        return b""


def _https_ping(port: int, pki: Pki, client: Pem | None = None) -> int:
    """The HTTP status of GET /v1/ping over TLS (presenting ``client``); 0 when the handshake fails."""
    answer = _tls_exchange(port, pki, b"GET /v1/ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", client)
    return int(answer.split(b" ", 2)[1]) if answer else 0


def test_tls(server_factory, pki: Pki, tenant: str) -> None:
    server: ServerProcess = server_factory(
        env={"MNEMOSYNE_TLS_CERT": str(pki.server.cert), "MNEMOSYNE_TLS_KEY": str(pki.server.key)},
        health_credentials=pki.credentials(),
        metrics=True,
        http=True,
    ).start()
    # The HTTP port uses the gRPC port's certificate, and speaks nothing but TLS.
    assert _https_ping(server.http_port, pki) == 200
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        http_connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        http_connection.request("GET", "/v1/ping")
        http_connection.getresponse().read()
    assert _works(server.target, pki.credentials(), tenant)
    assert not _works(server.target, None, tenant)  # plaintext client
    assert not _works(server.target, pki.credentials(ca=pki.rogue_ca), tenant)  # does not trust the server
    assert _health(server.target, "--tls", "--tls-ca", str(pki.ca.cert)).returncode == 0
    assert _health(server.target).returncode == 1  # plaintext health check cannot reach a TLS port
    # The side port stays plain HTTP for probes and Prometheus.
    with urllib.request.urlopen(server.metrics_url + "/readyz", timeout=10) as response:
        assert response.status == 200


def test_mutual_tls_refuses_clients_without_the_right_certificate(server_factory, pki: Pki, tenant: str) -> None:
    server: ServerProcess = server_factory(
        args=_serving(pki.server.cert, pki.server.key, pki.ca.cert),
        health_credentials=pki.credentials(client=pki.client),
        http=True,
    ).start()
    assert _https_ping(server.http_port, pki, client=pki.client) == 200
    assert _https_ping(server.http_port, pki) == 0  # no client certificate
    assert _https_ping(server.http_port, pki, client=pki.rogue_client) == 0
    assert _works(server.target, pki.credentials(client=pki.client), tenant)
    assert not _works(server.target, pki.credentials(), tenant)  # no client certificate
    assert not _works(server.target, pki.credentials(client=pki.rogue_client), tenant)  # signed by another CA
    assert not _works(server.target, None, tenant)
    ok = _health(
        server.target,
        "--tls-ca",
        str(pki.ca.cert),
        "--tls-cert",
        str(pki.client.cert),
        "--tls-key",
        str(pki.client.key),
        "--tls",
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "SERVING", ok.stderr
    assert _health(server.target, "--tls", "--tls-ca", str(pki.ca.cert)).returncode == 1


def test_tls_configuration_errors_are_clear(tmp_path: Path, pki: Pki) -> None:
    result = subprocess.run(
        [*SERVE, *serve_args(tmp_path / "d", "--tls-cert", str(pki.server.cert), "--tls-client-ca", str(pki.ca.cert))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--tls-key" in result.stderr


def test_tls_files_that_do_not_fit_are_named_in_one_line(pki: Pki, tmp_path: Path) -> None:
    """A certificate with another's key, or a CA bundle that is no PEM, is refused at start (server)
    or before connecting (client) in one line naming the file — not as a port in use, not as an
    unreachable server, and without gRPC's own log lines."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a PEM file")
    serve = ["serve", "--data-dir", str(tmp_path / "data"), "--port", "0", "--metrics-port", "0", "--http-port", "0"]
    health = ["health", "--target", "127.0.0.1:1"]
    server, client = pki.server, pki.client
    cases = [
        ([*serve, *_serving(server.cert, client.key)], f"the TLS certificate {server.cert} and its key {client.key}"),
        ([*serve, *_serving(server.cert, server.key, garbage)], f"the client CA bundle {garbage} holds no PEM"),
        ([*health, *_trusting(garbage)], f"the CA bundle {garbage} holds no PEM certificate"),
        (
            [*health, *_trusting(pki.ca.cert, client.cert, server.key)],
            f"the client certificate {client.cert} and its key",
        ),
    ]
    for args, words in cases:
        ran = subprocess.run([sys.executable, "-m", "mnemosyne.cli", *args], capture_output=True, text=True, timeout=60)
        said = [line for line in ran.stderr.splitlines() if line.startswith("mnemosyne")]
        assert ran.returncode == 2 and len(said) == 1 and "Traceback" not in ran.stderr, (args, ran.stderr)
        assert words in said[0] and said[0].endswith("[CONFIG_INVALID]"), said[0]
        assert "andshaker" not in ran.stderr, ran.stderr  # gRPC core never got the files
    assert not (tmp_path / "data").exists()


# Commands that work on files or start servers of their own: every other command connects to a
# server and takes every connection flag (``mnemosyne rebalance`` names its servers by member lists
# instead of --target).
LOCAL_COMMANDS = {"serve", "hash-token", "inspect", "oplog", "restore", "members", "drill"}
CONNECTION_FLAGS = {"--target", "--token-file", "--tls", "--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name"}
NO_TARGET = {"rebalance"}
ADMIN = "admin-token-tls"
# The client settings a child process may inherit from the test's environment.
CLIENT_VARIABLES = ("MNEMOSYNE_TARGET", "MNEMOSYNE_TOKEN", "MNEMOSYNE_CLIENT_TLS")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def _connecting() -> dict[str, argparse.ArgumentParser]:
    return {name: command for name, command in _commands().items() if name not in LOCAL_COMMANDS}


def test_every_command_that_connects_takes_every_connection_flag() -> None:
    connecting = _connecting()
    assert {"health", "mcp", "backup", "export", "import", "rebalance", "consolidate"} <= set(connecting)
    for name, command in connecting.items():
        wanted = CONNECTION_FLAGS - {"--target"} if name in NO_TARGET else CONNECTION_FLAGS
        missing = sorted(wanted - set(command._option_string_actions))
        assert not missing, (
            f"mnemosyne {name} lacks {missing}: give it add_connection_flags (service/cli/client_commands.py)"
        )


@dataclass
class Deployment:
    """A server of one member (``rebalance`` asks members) with an admin token, and how a client
    command reaches it: by flags, or by the MNEMOSYNE_ variables."""

    server: ServerProcess
    members: str
    tenant: str
    work: Path
    flags: list[str]
    env: dict[str, str]

    def run(self, command: str, *args: str, tls: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(CLIENT_VARIABLES)}
        env["MNEMOSYNE_TOKEN"] = ADMIN
        argv = [sys.executable, "-m", "mnemosyne.cli", command, *args]
        if tls:
            env.update(self.env)
            argv += self.flags
        if command not in NO_TARGET and "MNEMOSYNE_TARGET" not in env:
            argv += ["--target", self.server.target]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

    def ok(self, command: str, *args: str) -> str:
        ran = self.run(command, *args)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, f"{command}: {ran.stdout}{ran.stderr}"
        return ran.stdout


def _run_health(d: Deployment) -> None:
    assert d.ok("health").strip() == "SERVING"


def _run_mcp(d: Deployment) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith(CLIENT_VARIABLES)}
    env.update({"MNEMOSYNE_TOKEN": ADMIN, **d.env})
    args = ["-m", "mnemosyne.cli", "mcp", "--tenant", d.tenant, *d.flags]
    if "MNEMOSYNE_TARGET" not in env:
        args += ["--target", d.server.target]

    async def session() -> str:
        async with Client(StdioServerParameters(command=sys.executable, args=args, env=env)) as c:
            retained = await c.call_tool("retain", {"text": "The spare key is under the blue pot"})
            assert not retained.is_error, retained
            recalled = await c.call_tool("recall", {"query": "where is the spare key"})
            assert not recalled.is_error, recalled
            return "\n".join(getattr(part, "text", "") for part in recalled.content)

    assert "blue pot" in anyio.run(session)


def _run_consolidate(d: Deployment) -> None:
    assert d.ok("consolidate", "--tenant", d.tenant, "--thread", "chat-1").startswith("chat-1 global: applied")


def _run_export(d: Deployment) -> None:
    assert d.ok("export", "--tenant", d.tenant, "--to", str(d.work / "t.tar")).startswith(f"exported {d.tenant} ")


def _run_import(d: Deployment) -> None:
    said = d.ok("import", "--from", str(d.work / "t.tar"), "--tenant", f"{d.tenant}-copy")
    assert said.startswith(f"imported {d.tenant}-copy ")


def _run_backup(d: Deployment) -> None:
    assert "2 tenants copied" in d.ok("backup", "--to", str(d.work / "backup"))


def _run_rebalance(d: Deployment) -> None:
    assert "0 tenants held elsewhere" in d.ok("rebalance", "--from", d.members, "--to", d.members)


def _run_reembed(d: Deployment) -> None:
    # The tenant is on hashing already (the tests' embedder): the command asks, and has nothing to do.
    assert d.ok("reembed", "--tenant", d.tenant, "--embedder", "hashing").startswith(f"{d.tenant} runs on the hashing")


# Each connecting command, run with its connection flags, and what it must have done; in this
# order (export before import). A new connecting command must be added here.
COMMAND_RUNS = {
    "health": _run_health,
    "mcp": _run_mcp,
    "consolidate": _run_consolidate,
    "export": _run_export,
    "import": _run_import,
    "backup": _run_backup,
    "rebalance": _run_rebalance,
    "reembed": _run_reembed,
}


@pytest.mark.parametrize("mutual", [False, True], ids=["tls-by-flags", "mutual-tls-by-environment"])
def test_every_connecting_command_reaches_a_tls_server(pki: Pki, tmp_path: Path, mutual: bool) -> None:
    """Each command that connects works against a TLS server (flags on the command line) and a
    mutual-TLS server (the MNEMOSYNE_TARGET and MNEMOSYNE_CLIENT_TLS_* variables); without TLS it
    is refused in one line."""
    assert set(COMMAND_RUNS) == set(_connecting()), "every connecting command is run against TLS here"
    port = _free_port()
    members = f"m0=127.0.0.1:{port}"
    server = ServerProcess(tmp_path / "data", health_credentials=pki.credentials(client=pki.client if mutual else None))
    server.args = [
        "--member",
        "m0",
        "--members",
        members,
        *_serving(pki.server.cert, pki.server.key, pki.ca.cert if mutual else None),
    ]
    server.env = {"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
    server.start(60, port=port)
    if mutual:
        flags: list[str] = []
        env = {
            "MNEMOSYNE_TARGET": f"localhost:{port}",
            "MNEMOSYNE_CLIENT_TLS_CA": str(pki.ca.cert),
            "MNEMOSYNE_CLIENT_TLS_CERT": str(pki.client.cert),
            "MNEMOSYNE_CLIENT_TLS_KEY": str(pki.client.key),
        }
    else:
        flags, env = [*_trusting(pki.ca.cert), "--tls-server-name", "localhost"], {}
    deployment = Deployment(server, members, "tls-acme", tmp_path, flags, env)
    try:
        with MemoryClient(server.target, ADMIN, credentials=server.health_credentials, options=NAME_OVERRIDE) as c:
            for position, text in enumerate(["The staging database is db-stage-2", "We ship on Thursday"]):
                c.retain(deployment.tenant, text, occurred_at=1_796_032_800.0 + 60 * position)
                c.retain(deployment.tenant, f"turn {position}: {text}", thread=ThreadRef("chat-1", position))
        for run in COMMAND_RUNS.values():
            run(deployment)
        plaintext = deployment.run("export", "--tenant", deployment.tenant, "--to", str(tmp_path / "p.tar"), tls=False)
        errors = plaintext.stderr.strip().splitlines()
        assert plaintext.returncode == 2 and len(errors) == 1 and "Traceback" not in plaintext.stderr, plaintext.stderr
        assert errors[0].startswith(
            f"mnemosyne export: UNAVAILABLE: is a Mnemosyne server listening at {server.target}?"
        )
        assert not (tmp_path / "p.tar").exists()
    finally:
        server.stop()


def test_members_forward_over_tls_and_their_link_is_tls_too(tmp_path: Path, pki: Pki) -> None:
    """Two members serving TLS: the gRPC hop and the member link (transport/cluster/link.py) both
    take the gRPC port's certificate; a plaintext connection to the link is not served, and one that
    starts no handshake is closed within the link's connect bound."""
    members = LocalMembers(tmp_path, 2, args=_serving(pki.server.cert, pki.server.key), metrics=True)
    for process in members.processes:
        process.health_credentials = pki.credentials()
    members.start()
    try:
        m0, m1 = members.processes
        tenant = next(f"tenant-{i}" for i in range(50) if owner_of(f"tenant-{i}", members.ids) == "m1")
        with MemoryClient(m0.target, credentials=pki.credentials(), options=NAME_OVERRIDE, retries=0) as client:
            client.retain(tenant, "the vault code is kept by the night manager")
            deadline = time.monotonic() + 15
            while gauge(m0, "mnemosyne_forwarded_calls_linked") == 0:
                assert time.monotonic() < deadline, "no call went over the member link"
                assert client.recall(tenant, "vault code", k=1)[0].memory.text.startswith("the vault code")
                time.sleep(0.05)
        port = int(re.findall(r"member link port (\d+)", m1.stderr_path.read_text())[-1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(struct.pack("!IIB", 4, 0, 1) + b"key?")
            assert plain.recv(64) == b""  # a TLS server closes a connection that is not a handshake
        with socket.create_connection(("127.0.0.1", port), timeout=30) as silent:  # no handshake at all
            begun = time.monotonic()
            assert silent.recv(64) == b""
            assert time.monotonic() - begun < 15  # its bound (5 s), not asyncio's minute
    finally:
        members.stop()


def _link_hello(port: int, pki: Pki, key: bytes, client: Pem | None = None) -> bytes:
    """What a member link port answers first to a hello carrying the member ``key`` (presenting
    ``client``): b"" when the connection closes unanswered."""
    return _tls_exchange(port, pki, struct.pack("!IIB", len(key), 0, 1) + key, client, size=64)


def test_members_forward_over_mutual_tls_on_the_hop_and_the_link(tmp_path: Path, pki: Pki) -> None:
    """Two members serving mutual TLS (--tls-client-ca) with a certificate valid for server and
    client authentication both: a call forwarded as a gRPC call and calls over the member link
    work, each member presenting its certificate as the client's; the link refuses a TLS client
    without a certificate."""
    members = LocalMembers(tmp_path, 2, args=_serving(pki.member.cert, pki.member.key, pki.ca.cert), metrics=True)
    credentials = pki.credentials(client=pki.client)
    for process in members.processes:
        process.health_credentials = credentials
    members.start()
    try:
        m0, m1 = members.processes
        tenant = next(f"tenant-{i}" for i in range(50) if owner_of(f"tenant-{i}", members.ids) == "m1")
        with MemoryClient(m0.target, credentials=credentials, options=NAME_OVERRIDE, retries=0) as client:
            client.retain(tenant, "the vault code is kept by the night manager")
            # The first forwarded call is a gRPC call (the owner tells its link port in the answer).
            assert gauge(m0, "mnemosyne_forwarded_calls") == 1 and gauge(m0, "mnemosyne_forwarded_calls_linked") == 0
            assert gauge(m1, "mnemosyne_forwarded_calls_received") == 1
            deadline = time.monotonic() + 15
            while gauge(m0, "mnemosyne_forwarded_calls_linked") == 0:
                assert time.monotonic() < deadline, "no call went over the member link"
                assert client.recall(tenant, "vault code", k=1)[0].memory.text.startswith("the vault code")
                time.sleep(0.05)
            assert client.recall(tenant, "vault code", k=1)[0].memory.text.startswith("the vault code")
        # The member key admits a member's certificate to the link, never a TLS client without one.
        port = int(re.findall(r"member link port (\d+)", m1.stderr_path.read_text())[-1])
        key = bytes.fromhex(member_key(Membership.parse("m1", members.members), []))
        hello = struct.pack("!IIB", 0, 0, 1)
        assert _link_hello(port, pki, key, client=pki.member)[: len(hello)] == hello
        assert _link_hello(port, pki, key) == b""
    finally:
        members.stop()


def test_members_under_mutual_tls_need_a_certificate_for_client_authentication(tmp_path: Path, pki: Pki) -> None:
    """A member whose certificate is for server authentication only, under mutual TLS, would fail
    every hop (the owner closes the handshake; the entry sees only OWNER_UNAVAILABLE): it refuses
    to start, saying why. A certificate for both starts (the test above forwards with it)."""
    members = f"m0=127.0.0.1:{_free_port()},m1=127.0.0.1:{_free_port()}"
    member = ["--member", "m0", "--members", members]
    result = subprocess.run(
        [*SERVE, *serve_args(tmp_path / "d", *member, *_serving(pki.server.cert, pki.server.key, pki.ca.cert))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "not accepted as a client certificate" in result.stderr and "clientAuth" in result.stderr, result.stderr
    assert "unsuitable certificate purpose" in result.stderr, result.stderr  # OpenSSL's reason, passed on


def test_the_http_port_s_connection_cap_refuses_over_tls_as_in_plain_text(pki: Pki) -> None:
    """Over TLS a connection counts once its handshake is done: past the cap (here 1) the next is
    answered 503 HTTP_CONNECTIONS_FULL inside TLS (no half-close there: it is read for a second
    after its answer, then closed), and its place frees when the one held closes."""
    from mnemosyne.transport.http.server import HttpServer, HttpTls, bind

    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    trusting = ssl.create_default_context(cafile=str(pki.ca.cert))
    get = b"GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n"
    get_once = b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"

    async def run() -> None:
        tls = HttpTls(pki.server.cert, pki.server.key)
        server = await HttpServer.start(ok, bind("127.0.0.1", 0), tls=tls, max_connections=1)
        try:
            held = await asyncio.open_connection("127.0.0.1", server.port, ssl=trusting, server_hostname="localhost")
            held[1].write(get)
            assert (await asyncio.wait_for(held[0].readuntil(b"ok"), 5)).startswith(b"HTTP/1.1 200 ")
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=trusting, server_hostname="localhost"
            )
            answer = await asyncio.wait_for(reader.read(), 5)  # answered as it came, before any request
            assert answer.startswith(b"HTTP/1.1 503 ") and b"HTTP_CONNECTIONS_FULL" in answer, answer[:300]
            writer.close()
            held[1].close()
            for _ in range(100):  # once the server has seen the held one close
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", server.port, ssl=trusting, server_hostname="localhost"
                )
                writer.write(get_once)
                if (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200 "):
                    break
                writer.close()
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the cap did not free up")
            writer.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_tls_connection_the_server_closed_frees_its_place_though_its_client_never_closes(pki: Pki) -> None:
    """asyncio's close of a TLS connection waits 30 s for the client's own close (its
    close_notify), and the connection held its place in the cap and its descriptor meanwhile: two
    clients (the cap here) that kept their sockets without closing them, one answered with
    ``Connection: close`` and one that sent no request within the head's bound, left every other
    client refused 503 HTTP_CONNECTIONS_FULL for 30 s after the server had closed both. Whoever
    closes it, a TLS connection with nothing left to send is dropped TLS_CLOSE_SECONDS later."""
    from mnemosyne.transport.http.server import TLS_CLOSE_SECONDS, HttpServer, HttpTls, bind

    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    trusting = ssl.create_default_context(cafile=str(pki.ca.cert))
    get_once = b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    done = threading.Event()
    head_seconds = 0.5

    def keep(port: int, request: bytes, kept: threading.Event) -> None:
        """Connect, send ``request`` and read its answer (if any), then hold the socket, never
        reading or closing it, until the test is done."""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with trusting.wrap_socket(raw, server_hostname="localhost") as tls:
                if request:
                    tls.sendall(request)
                    answer = b""
                    while not answer.endswith(b"ok"):
                        answer += tls.recv(4096)
                kept.set()
                done.wait(60)

    async def served(port: int) -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting, server_hostname="localhost")
        writer.write(get_once)
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return answer.startswith(b"HTTP/1.1 200 ")

    async def run() -> None:
        tls = HttpTls(pki.server.cert, pki.server.key)
        server = await HttpServer.start(ok, bind("127.0.0.1", 0), tls=tls, max_connections=2, head_seconds=head_seconds)
        keepers = []
        try:
            for request in (get_once, b""):
                kept = threading.Event()
                keepers.append(asyncio.ensure_future(asyncio.to_thread(keep, server.port, request, kept)))
                await asyncio.to_thread(kept.wait, 10)
            started = time.monotonic()
            while not await served(server.port):
                assert time.monotonic() - started < head_seconds + TLS_CLOSE_SECONDS + 3, "no place freed"
                await asyncio.sleep(0.1)
        finally:
            done.set()
            await asyncio.gather(*keepers, return_exceptions=True)
            await server.stop()

    asyncio.run(run())


def test_a_flood_of_tls_connections_past_the_cap_holds_no_descriptor_a_second_after_its_refusal(pki: Pki) -> None:
    """Past the cap (here 2, so none is read after its 503: a quarter of the cap is 0) each new
    TLS connection is answered and closed at once; its close waited 30 s for a client that never
    closes, holding a descriptor each: 40 such connections held 40 descriptors of the server's
    beyond the cap. A second after their refusal they hold none."""
    from mnemosyne.transport.http.server import TLS_CLOSE_SECONDS, HttpServer, HttpTls, bind

    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    trusting = ssl.create_default_context(cafile=str(pki.ca.cert))
    flood = 40

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def connect(port: int) -> ssl.SSLSocket:
        return trusting.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost"
        )

    async def run() -> None:
        tls = HttpTls(pki.server.cert, pki.server.key)
        server = await HttpServer.start(ok, bind("127.0.0.1", 0), tls=tls, max_connections=2)
        held: list[ssl.SSLSocket] = []
        try:
            before = open_descriptors()
            for _ in range(flood):  # the first two take the cap's places; none is ever closed here
                held.append(await asyncio.to_thread(connect, server.port))
            await asyncio.sleep(TLS_CLOSE_SECONDS + 1.5)
            servers_own = open_descriptors() - before - flood  # the clients' sockets are this process's too
            assert servers_own <= 2 + 4, f"{servers_own} descriptors still held by the server"
        finally:
            for sock in held:
                sock.close()
            await server.stop()

    asyncio.run(run())


def test_a_tls_connection_that_does_not_finish_its_handshake_is_closed_within_its_bound(pki: Pki) -> None:
    """Until its TLS handshake is done a connection is not counted against the cap, so its time is
    bounded (here 0.5 s; HANDSHAKE_SECONDS, 10 s), not asyncio's minute: a client that connects and
    sends nothing, or half a hello, is closed, and one that completes its handshake is served."""
    from mnemosyne.transport.http.server import HttpServer, HttpTls, bind

    async def ok(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    trusting = ssl.create_default_context(cafile=str(pki.ca.cert))

    async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
        async with asyncio.timeout(seconds):
            while await reader.read(4096):
                pass
        return True

    async def run() -> None:
        tls = HttpTls(pki.server.cert, pki.server.key)
        server = await HttpServer.start(ok, bind("127.0.0.1", 0), tls=tls, handshake_seconds=0.5)
        try:
            silent = await asyncio.open_connection("127.0.0.1", server.port)
            halfway = await asyncio.open_connection("127.0.0.1", server.port)
            halfway[1].write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a hello's first bytes
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=trusting, server_hostname="localhost"
            )
            await asyncio.sleep(1.0)  # past the bound: a finished handshake is not held to it
            writer.write(b"GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200 ")
            writer.close()
            assert await closed_within(silent[0], 5) and await closed_within(halfway[0], 5)
        finally:
            await server.stop()

    asyncio.run(run())


# (head, status, reason) of requests the HTTP port refuses before it reads their body (a body over
# twice ``--max-request-bytes 65536``, a Content-Type it does not read, a method or route it does
# not take, a token missing, a host refused, a head it cannot read): the client is still
# sending it when answered.
_JSON = {"content-type": "application/json"}
_TOKEN = {"authorization": "Bearer tls-refusals-token"}
_REFUSED_EARLY = [
    ("POST /v1/tenants/big/memories", {**_JSON, **_TOKEN}, 413, "REQUEST_TOO_LARGE"),
    ("POST /v3/memories/add/", {**_JSON, "authorization": "Token tls-refusals-token"}, 413, "REQUEST_TOO_LARGE"),
    ("POST /v1/tenants/big/memories", _JSON, 401, "TOKEN_MISSING"),
    ("POST /v1/tenants/big/memories", {"content-type": "text/plain", **_TOKEN}, 415, "CONTENT_TYPE_UNSUPPORTED"),
    ("PUT /v1/tenants/big/memories", {**_JSON, **_TOKEN}, 405, "METHOD_NOT_ALLOWED"),
    ("POST /mcp", {**_JSON, **_TOKEN}, 400, "TENANT_INVALID"),
    ("POST /v1/tenants/big/memories", {**_JSON, "host": "evil.example"}, 403, "HOST_FORBIDDEN"),
    ("POST /v1/tenants/big/memories", {**_JSON, "x-bad\x01": "1"}, 400, "REQUEST_UNREADABLE"),
]
_SENT_BODY = 4 << 20


def _refusal_while_sending(port: int, pki: Pki, line: str, headers: dict[str, str], body: int = _SENT_BODY) -> bytes:
    """What a TLS client that sends a request's head and then its whole body, as most clients do
    (``sendall`` then read), reads back: the whole answer, its body as long as its Content-Length."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    head = f"{line} HTTP/1.1\r\ncontent-length: {body}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in {"host": "localhost", **headers}.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(head.encode("latin-1"))
            chunk = b"a" * 65536
            for _ in range(body // len(chunk)):
                tls.sendall(chunk)
            answer = b""
            while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _content_length(answer):
                data = tls.recv(65536)
                if not data:
                    break
                answer += data
            return answer


def _content_length(answer: bytes) -> int:
    found = re.search(rb"\r\ncontent-length: *(\d+)", answer.split(b"\r\n\r\n", 1)[0], re.IGNORECASE)
    return int(found.group(1)) if found else 0


def test_a_request_refused_while_its_client_sends_its_body_gets_its_answer_over_tls(server_factory, pki: Pki) -> None:
    """Over TLS a refusal given before the body was read closed the connection at once, the body
    still coming: the client's next writes were reset and it never read the answer. It is read
    and dropped after the answer, as in plain text, and the client gets the answer every time."""
    server: ServerProcess = server_factory(
        args=[*_serving(pki.server.cert, pki.server.key), "--max-request-bytes", "65536"],
        env={"MNEMOSYNE_TOKENS": tokens_json({"tls-refusals-token": ["big"]})},
        health_credentials=pki.credentials(),
        http=True,
    ).start()
    failures: dict[str, list[str]] = {}
    for line, headers, status, reason in _REFUSED_EARLY:
        for _ in range(20):
            try:
                answer = _refusal_while_sending(server.http_port, pki, line, headers)
            except OSError as exc:
                answer = f"{type(exc).__name__}: {exc}".encode()
            head, _, body = answer.partition(b"\r\n\r\n")
            if not head.startswith(f"HTTP/1.1 {status} ".encode()) or f'"{reason}"'.encode() not in body:
                failures.setdefault(f"{line} {status}", []).append(answer[:200].decode("latin-1"))
    assert not failures, {what: f"{len(got)} of 20, e.g. {got[0][:80]}" for what, got in failures.items()}


@pytest.mark.parametrize(
    "head",
    [
        b"POST /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\n",  # refused by the app, unread
        b"POST /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\nX-Bad\x01: 1\r\n\r\n",  # unreadable: 400
    ],
    ids=["refused-by-the-app", "refused-unreadable"],
)
@pytest.mark.parametrize("pause", [0.0, 0.02, None], ids=["fast", "slow", "silent"])
@pytest.mark.parametrize("over_tls", [True, False], ids=["tls", "plain"])
def test_a_client_that_goes_on_sending_after_its_refusal_is_closed_within_the_bound(
    pki: Pki, head: bytes, pause: float | None, over_tls: bool
) -> None:
    """What a client sends after its refusal is read and dropped for a bounded time and a bounded
    number of bytes (here 1 MiB, and 1 s, or 10 s for the fast sender, which the bytes' bound must
    stop first; REFUSED_READ_SECONDS, 5 s, and REFUSED_READ_BYTES, 64 MiB), then its connection
    is closed: a client sending without end, fast or slowly, or one that stops sending and never
    closes, holds it no longer, over TLS as in plain text (asyncio's TLS close alone waits 30 s for
    the client's own close)."""
    from mnemosyne.transport.http.server import TLS_CLOSE_SECONDS, HttpServer, HttpTls, bind

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        body = b'{"code": 3, "message": "too large"}'
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    trusting = ssl.create_default_context(cafile=str(pki.ca.cert))
    done = threading.Event()
    bound = 10.0 if pause == 0.0 else 1.0

    def send_until_closed(port: int) -> int:
        """Send ``head`` and then bytes every ``pause`` s (None: 64 KiB, then nothing) until the
        server's close stops it or the test is done; the bytes sent."""
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with trusting.wrap_socket(raw, server_hostname="localhost") if over_tls else raw as sending:
                sending.sendall(head)
                sent = 0
                with contextlib.suppress(OSError):
                    while not done.is_set():
                        if pause is None and sent:
                            done.wait(0.05)
                            continue
                        chunk = 1024 if pause else 65536  # slowly: 50 KiB a second
                        sending.sendall(b"a" * chunk)
                        sent += chunk
                        time.sleep(pause or 0.0)
                return sent

    async def run() -> None:
        tls = HttpTls(pki.server.cert, pki.server.key) if over_tls else None
        server = await HttpServer.start(
            refuse, bind("127.0.0.1", 0), tls=tls, refused_read_seconds=bound, refused_read_bytes=1 << 20
        )
        connections = server._server.server_state.connections
        try:
            sending = asyncio.ensure_future(asyncio.to_thread(send_until_closed, server.port))
            started = time.monotonic()
            while not connections and not sending.done() and time.monotonic() - started < 10:
                await asyncio.sleep(0.005)  # a fast sender's connection may be gone before it is seen
            while connections and time.monotonic() - started < 40:
                await asyncio.sleep(0.02)
            held = time.monotonic() - started
            done.set()
            sent = await sending
        finally:
            done.set()
            await server.stop()
        if pause == 0.0:  # the bytes' bound, long before the time's
            assert held < 4 and sent < 64 << 20, (held, sent)
        else:  # the time's bound: the bytes' is far off
            assert 1.0 <= held < 1.0 + TLS_CLOSE_SECONDS + 2 and sent < 1 << 20, (held, sent)

    asyncio.run(run())


def _answer_read(port: int, pki: Pki, request: bytes, *, first_pause: float, step_pause: float) -> tuple[int, int]:
    """The body's length an answer over TLS declares, and the bytes of it a client got that sends
    ``request``, waits ``first_pause`` s and then takes 16 KiB every ``step_pause`` s, its receive
    buffer small (so the server holds what it has not taken), until the server closes."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    with socket.socket() as raw:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        raw.settimeout(30)
        raw.connect(("127.0.0.1", port))
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(request)
            time.sleep(first_pause)
            got = b""
            with contextlib.suppress(OSError):  # cut: reset, or no close_notify (ssl.SSLEOFError)
                while chunk := tls.recv(16384):
                    got += chunk
                    time.sleep(step_pause)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), got[:300]
    return _content_length(got), len(body)


def test_a_large_answer_over_tls_ending_in_a_close_reaches_a_slow_reader_whole(
    server_factory, pki: Pki, tenant: str
) -> None:
    """An answer with ``Connection: close`` over TLS was cut ``ssl_shutdown_timeout`` after the
    server's close (asyncio's 30 s, here 1 s) while its client still read it, slowly but steadily:
    the TLS close waited for the client's own, and the client sends that only once it has read it
    all. In plain text nothing cuts it. The client that reads gets it whole; one that takes none of
    it is still dropped by the send stall's bound (here 1 s; SEND_STALL_SECONDS, 30 s)."""
    server: ServerProcess = server_factory(
        args=_serving(pki.server.cert, pki.server.key),
        env={"MNEMOSYNE_TEST_TLS_SHUTDOWN_SECONDS": "1", "MNEMOSYNE_TEST_SEND_STALL_SECONDS": "1"},
        health_credentials=pki.credentials(),
        http=True,
    ).start()
    # Lines of nothing: 30,000 characters a memory, each twice as long in JSON ("\\n"), the page 6 MB.
    texts = [f"memory {i}:" + "\n" * 30_000 for i in range(100)]
    with MemoryClient(server.target, credentials=pki.credentials(), options=NAME_OVERRIDE, timeout=60) as client:
        results = client.retain_batch(tenant, texts)
    assert all(result.status == "created" for result in results), results[0]
    request = (
        f"GET /v1/tenants/{tenant}/memories?page_size=1000 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    started = time.monotonic()
    declared, got = _answer_read(server.http_port, pki, request.encode(), first_pause=0.0, step_pause=0.01)
    took = time.monotonic() - started
    assert declared > 5 << 20 and got == declared, (declared, got, f"{took:.1f} s")
    declared, got = _answer_read(server.http_port, pki, request.encode(), first_pause=3.0, step_pause=0.0)
    assert got < declared, "a client that read nothing for 3 s still got its whole answer"
