"""TLS credentials of the gRPC port, read from PEM files (e.g. a Kubernetes TLS Secret)."""

from __future__ import annotations

from pathlib import Path

import grpc

from mnemosyne.errors import InvalidArgument


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read the {what} {path}: {exc.strerror}", reason="CONFIG_INVALID") from None


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
    return grpc.ssl_server_credentials(
        [(_read(key, "TLS key"), _read(cert, "TLS certificate"))],
        root_certificates=_read(client_ca, "client CA bundle") if client_ca is not None else None,
        require_client_auth=client_ca is not None,
    )


def channel_credentials(ca: Path | None, cert: Path | None = None, key: Path | None = None) -> grpc.ChannelCredentials:
    """Client side: trust ``ca`` (system roots when None); present ``cert``/``key`` for mutual TLS."""
    if (cert is None) != (key is None):
        raise InvalidArgument("give both the client certificate and its key", reason="CONFIG_INVALID")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "CA bundle") if ca is not None else None,
        private_key=_read(key, "client key") if key is not None else None,
        certificate_chain=_read(cert, "client certificate") if cert is not None else None,
    )
