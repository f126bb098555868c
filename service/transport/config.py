"""The server's configuration: one object (``ServerConfig``) nesting the engine's (engine/config.py),
each default given once, there or here; a field made with ``option`` is also a ``serve`` flag and
variable, its help written here (engine/options.py). No test seam is configuration (runtime/seams.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.extractor import Extractor
from mnemosyne.engine.options import option
from mnemosyne.transport.admission import AdmissionLimits

MAX_PORT = 65_535


@dataclass(frozen=True)
class ServerConfig:
    """The server's configuration, nesting the engine's (each default given once, there or here)."""

    engine: EngineConfig
    host: str = option("127.0.0.1", "address to bind (a non-loopback one needs tokens)")
    port: int = option(50051, "gRPC port (0 = any free)", maximum=MAX_PORT)
    tokens_file: Path | None = option(None, "JSON file of token hashes and their tenants")
    # For a Kubernetes Secret mounted as a variable.
    tokens_json: str | None = option(None, "the tokens file's JSON document itself", name="tokens", variable_only=True)
    allow_unauthenticated: bool = option(
        False, "1 = serve a non-loopback address without tokens (insecure)", variable_only=True, unset="unset"
    )
    grace_seconds: float = option(20.0, "after the drain delay, how long SIGTERM waits for in-flight calls (0: none)")
    # Worker threads, per-tenant shares and the stream, queue and waiting limits (admission.py).
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    # The extractor of new memories; None = the rules extractor (see --extractor).
    extractor: Extractor | None = None
    metrics_port: int = option(9464, "HTTP port for /metrics, /healthz, /readyz (0 = off)", maximum=MAX_PORT)
    metrics_host: str | None = option(None, "address of the metrics port", unset="the gRPC --host")
    # The HTTP/JSON API (transport/http/json_api.py).
    # Each holds a file descriptor, from its accept, its handshake included.
    grpc_max_connections: int = option(
        0,
        "connections the gRPC port holds open (0: 4096, or a quarter of the open-file limit if less); "
        "past them a new one is closed at once (its client sees UNAVAILABLE and tries again)",
    )
    http_port: int = option(8080, "port of the HTTP/JSON API and /openapi.json (0 = off)", maximum=MAX_PORT)
    http_host: str | None = option(None, "address of the HTTP port", unset="the gRPC --host")
    # Each holds a file descriptor: idle or trickling clients took them all (transport/http/server.py).
    http_max_connections: int = option(
        1024,
        "connections the HTTP port holds open, at most a quarter of the open-file limit; "
        "past them a new one is refused 503 HTTP_CONNECTIONS_FULL",
        minimum=1,
    )
    # Each client address at most this many of those; off by default: behind a proxy every client has the proxy's.
    http_max_connections_per_address: int = option(
        0,
        "connections one client address may hold open on the HTTP port (0: no share of its own); "
        "past them a new one is refused 503 HTTP_ADDRESS_CONNECTIONS_FULL",
    )
    http_allowed_hosts: tuple[str, ...] = option(
        (),
        "a Host name the HTTP port answers to besides loopback and its own address ('*' = any)",
        name="http-allowed-host",
    )
    http_cors_origins: tuple[str, ...] = option(
        (),
        "a web origin (e.g. https://console.example.com) whose pages may call the HTTP API",
        name="http-cors-origin",
    )
    tls_cert: Path | None = option(None, "PEM certificate chain: serve gRPC over TLS")
    tls_key: Path | None = option(None, "PEM private key of --tls-cert")
    tls_client_ca: Path | None = option(None, "PEM CA bundle: require client certificates signed by it (mutual TLS)")
    # So that load balancers and readiness probes take the server out of rotation before the grace
    # period starts.
    drain_delay_seconds: float = option(
        0.0, "after SIGTERM, keep serving this long while health reports NOT_SERVING (0: none)"
    )
    # With members (engine.membership).
    forwarding: bool = option(
        True,
        "refuse (NOT_OWNER) a call for a tenant another member owns instead of forwarding it",
        name="no-forwarding",
    )
    member_link: bool = option(
        True,
        "forward unary calls to other members as gRPC calls, not over the member link",
        name="no-member-link",
    )
    member_link_port: int = option(
        0,
        "with members: port of the member link, where other members' forwarded calls arrive (0 = any free)",
        maximum=MAX_PORT,
    )
