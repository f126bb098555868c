"""The server's configuration: one object (``ServerConfig``) nesting the engine's (engine/config.py),
each default given once, there or here; the ``serve`` flags take their defaults from these fields.
No test seam is configuration (runtime/seams.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemosyne.engine.config import EngineConfig
from mnemosyne.engine.extractor import Extractor
from mnemosyne.transport.admission import AdmissionLimits


@dataclass(frozen=True)
class ServerConfig:
    """The server's configuration, nesting the engine's (each default given once, there or here)."""

    engine: EngineConfig
    host: str = "127.0.0.1"
    port: int = 50051
    tokens_file: Path | None = None
    tokens_json: str | None = None
    allow_unauthenticated: bool = False
    grace_seconds: float = 20.0
    # Worker threads, per-tenant shares and the stream, queue and waiting limits (admission.py).
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    # The extractor of new memories; None = the rules extractor (see --extractor).
    extractor: Extractor | None = None
    # Which embedder makes the vectors (engine/config.py EMBEDDERS); a tenant keeps the one it began with.
    embedder: str = "hashing"
    # HTTP side port for /metrics, /healthz, /readyz: 0 = off; host None = the gRPC host.
    metrics_port: int = 9464
    metrics_host: str | None = None
    # The HTTP/JSON API (transport/http/json_api.py): 0 = off; host None = the gRPC host. Host names
    # it answers to besides loopback and its own address ("*": any), and web origins allowed by CORS.
    http_port: int = 8080
    http_host: str | None = None
    http_allowed_hosts: tuple[str, ...] = ()
    http_cors_origins: tuple[str, ...] = ()
    # TLS: server certificate chain and key (PEM files); a client CA turns on mutual TLS.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # After SIGTERM, seconds spent reporting NOT_SERVING while still serving (so load balancers
    # and readiness probes take the server out of rotation) before the grace period starts.
    drain_delay_seconds: float = 0.0
    # With members (engine.membership): forward a call for a tenant another member owns to it
    # (False: refuse it, NOT_OWNER).
    forwarding: bool = True
