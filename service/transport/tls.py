"""TLS credentials of the gRPC port, read from PEM files (e.g. a Kubernetes TLS Secret)."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from mnemosyne.errors import InvalidArgument
from mnemosyne.runtime.files import read_named_file


def _read(path: Path, what: str) -> bytes:
    try:
        return read_named_file(path)
    except OSError as exc:
        raise InvalidArgument(f"cannot read the {what} {path}: {exc.strerror}", reason="CONFIG_INVALID") from None


def _check_pair(cert: Path, key: Path, what: str) -> None:
    """Refuse a certificate and key that are not a PEM chain and its private key, naming them:
    gRPC would only fail later, at bind or at the first connection, without saying why."""
    try:
        # A key protected by a passphrase is refused too (gRPC cannot use one), never prompted for.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        raise InvalidArgument(
            f"the {what} {cert} and its key {key} are not a PEM certificate chain and the (unencrypted) private "
            f"key of its first certificate ({exc.reason or 'no PEM they hold could be read'})",
            reason="CONFIG_INVALID",
        ) from None


def _check_ca(ca: Path, what: str) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=ca)
    except ssl.SSLError as exc:
        raise InvalidArgument(
            f"the {what} {ca} holds no PEM certificate ({exc.reason or 'none could be read'})", reason="CONFIG_INVALID"
        ) from None


def server_credentials(cert: Path | None, key: Path | None, client_ca: Path | None) -> grpc.ServerCredentials | None:
    """None for plaintext; TLS with ``cert`` and ``key``; mutual TLS when ``client_ca`` is given
    (clients must present a certificate signed by it, or the handshake fails)."""
    if cert is None and key is None:
        if client_ca is not None:
            raise InvalidArgument(
                "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key as well", reason="CONFIG_INVALID"
            )
        return None
    if cert is None or key is None:
        raise InvalidArgument("give both --tls-cert and --tls-key (PEM files) to serve TLS", reason="CONFIG_INVALID")
    pair = [(_read(key, "TLS key"), _read(cert, "TLS certificate"))]
    _check_pair(cert, key, "TLS certificate")
    root_certificates = _read(client_ca, "client CA bundle") if client_ca is not None else None
    if client_ca is not None:
        _check_ca(client_ca, "client CA bundle")
    return grpc.ssl_server_credentials(
        pair, root_certificates=root_certificates, require_client_auth=client_ca is not None
    )


def check_member_certificate(cert: Path, key: Path, client_ca: Path) -> None:
    """Under mutual TLS a member presents its own certificate to the others as a client's (the
    gRPC hop, the member link): refuse at start one the client CA would not accept so (no
    ``clientAuth`` usage, another CA), saying why; else every hop fails, and the entry sees only
    OWNER_UNAVAILABLE. Checked by a handshake in memory, the member on both ends."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cafile=client_ca)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE  # only the client's side is checked
    client.load_cert_chain(cert, key)
    problem = _handshake(server, client)
    if problem is not None:
        raise InvalidArgument(
            f"the TLS certificate {cert} is not accepted as a client certificate by the client CA bundle {client_ca} "
            f"({problem}): members present it to each other under mutual TLS, so it must allow client "
            "authentication (extended key usage clientAuth) as well as server authentication",
            reason="CONFIG_INVALID",
        )


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str | None:
    """Why a TLS handshake between the two contexts fails (None: it succeeds), over memory."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    ends = [client.wrap_bio(client_in, client_out), server.wrap_bio(server_in, server_out, server_side=True)]
    done = [False, False]
    for _ in range(8):  # TLS 1.2 and 1.3 take at most 3 flights
        for n, end in enumerate(ends):
            if done[n]:
                continue
            try:
                end.do_handshake()
                done[n] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError as exc:
                return exc.verify_message or str(exc)
            except ssl.SSLError as exc:
                return exc.reason or str(exc)
        client_in.write(server_out.read())
        server_in.write(client_out.read())
        if all(done):
            return None
    return "the handshake did not finish"


def channel_credentials(ca: Path | None, cert: Path | None = None, key: Path | None = None) -> grpc.ChannelCredentials:
    """Client side: trust ``ca`` (system roots when None); present ``cert``/``key`` for mutual TLS."""
    if (cert is None) != (key is None):
        raise InvalidArgument("give both the client certificate and its key", reason="CONFIG_INVALID")
    root_certificates = _read(ca, "CA bundle") if ca is not None else None
    if ca is not None:
        _check_ca(ca, "CA bundle")
    private_key = _read(key, "client key") if key is not None else None
    certificate_chain = _read(cert, "client certificate") if cert is not None else None
    if cert is not None and key is not None:
        _check_pair(cert, key, "client certificate")
    return grpc.ssl_channel_credentials(
        root_certificates=root_certificates, private_key=private_key, certificate_chain=certificate_chain
    )
