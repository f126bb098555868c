"""TLS and mutual TLS on the gRPC port (certificates made here with ``cryptography``)."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.server_process import _free_port
from tests.support import SERVE, ServerProcess, serve_args, tokens_json

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
    ca: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Pem]:
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
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
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
    return Pki(ca, server, client, rogue_ca, rogue_client)


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


def _https_ping(port: int, pki: Pki, client: Pem | None = None) -> int:
    """The HTTP status of GET /v1/ping over TLS, verifying the server against the test CA (and
    presenting ``client``); 0 when the handshake fails."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                answer = tls.recv(4096)
    except (ssl.SSLError, ConnectionError):
        return 0
    return int(answer.split(b" ", 2)[1]) if answer else 0


def test_tls(server_factory, pki: Pki, tenant: str) -> None:  # type: ignore[no-untyped-def]
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


def test_mutual_tls_refuses_clients_without_the_right_certificate(server_factory, pki: Pki, tenant: str) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = server_factory(
        args=[
            "--tls-cert",
            str(pki.server.cert),
            "--tls-key",
            str(pki.server.key),
            "--tls-client-ca",
            str(pki.ca.cert),
        ],
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


def test_rebalance_speaks_tls_to_the_members(pki: Pki, tmp_path: Path) -> None:
    """`mnemosyne rebalance --tls-ca ... --tls-server-name ...` asks the members over TLS (a member
    list of one: it lists the member's tenants and finds nothing to move); without TLS it cannot."""
    port = _free_port()
    members = f"m0=127.0.0.1:{port}"
    server = ServerProcess(tmp_path / "m0", health_credentials=pki.credentials())
    server.args = ["--member", "m0", "--members", members]
    server.env = {
        "MNEMOSYNE_TLS_CERT": str(pki.server.cert),
        "MNEMOSYNE_TLS_KEY": str(pki.server.key),
        "MNEMOSYNE_TOKENS": tokens_json({"admin-token": ["*"]}),
    }
    server.start(60, port=port)
    try:
        with MemoryClient(server.target, "admin-token", credentials=pki.credentials(), options=NAME_OVERRIDE) as c:
            c.retain("acme", "the courier comes on Tuesdays")

        def run(*flags: str) -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "mnemosyne.cli", "rebalance", "--from", members, "--to", members, *flags]
            env = {**os.environ, "MNEMOSYNE_TOKEN": "admin-token"}
            return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

        over_tls = run("--tls-ca", str(pki.ca.cert), "--tls-server-name", "localhost")
        assert over_tls.returncode == 0, over_tls.stdout + over_tls.stderr
        assert "0 tenants held elsewhere" in over_tls.stdout
        plaintext = run()
        assert plaintext.returncode == 1 and "could not be asked" in plaintext.stdout, plaintext.stdout
    finally:
        server.stop()
