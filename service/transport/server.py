"""Building and running the gRPC server: ``await start_server(config) -> RunningServer``.

The server is grpc.aio's: one asyncio event loop answers every call, and the engine's blocking
work runs on admission's worker threads (transport/admission.py), so a call that waits — a stream,
a flush — holds no thread. Thread-pool server and asyncio server measured side by side before the
switch: docs (bench/fairness.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mnemosyne.engine.engine import Engine
from mnemosyne.errors import FailedPrecondition
from mnemosyne.observability.http import SideServer
from mnemosyne.observability.metrics import ServerMetrics
from mnemosyne.runtime import read_priority
from mnemosyne.runtime.interpreter import connection_budget
from mnemosyne.runtime.seams import Seams
from mnemosyne.transport import consistency
from mnemosyne.transport.admission import Admission, AdmissionLimits
from mnemosyne.transport.auth import TokenAuthenticator
from mnemosyne.transport.cluster.fanout import FanOut
from mnemosyne.transport.cluster.forwarding import Forwarder, member_key
from mnemosyne.transport.cluster.link import LinkTls
from mnemosyne.transport.cluster.link_server import LinkServer
from mnemosyne.transport.cluster.moves import MoveDriver
from mnemosyne.transport.config import ServerConfig
from mnemosyne.transport.edge import Edge
from mnemosyne.transport.grpc.handlers import UnknownMethods, service_handlers
from mnemosyne.transport.grpc.hot_path import EventsServicer, HotPathServicer
from mnemosyne.transport.grpc.servicers import AdminServicer, MemoryServicer, Servicers
from mnemosyne.transport.grpc.webhooks import WebhookServicer
from mnemosyne.transport.grpc.workspace import WorkspaceServicer
from mnemosyne.transport.send_stall import send_stall_seconds
from mnemosyne.transport.telemetry import Recorder
from mnemosyne.transport.tls import check_member_certificate, server_credentials
from mnemosyne.v1 import admin_pb2, events_pb2, hot_path_pb2, memory_pb2, webhooks_pb2, workspace_pb2

if TYPE_CHECKING:
    from mnemosyne.transport.http.surface import HttpSurface

log = logging.getLogger("mnemosyne.server")

SERVICES = [
    memory_pb2.DESCRIPTOR.services_by_name["MemoryService"],
    workspace_pb2.DESCRIPTOR.services_by_name["WorkspaceService"],
    hot_path_pb2.DESCRIPTOR.services_by_name["HotPathService"],
    events_pb2.DESCRIPTOR.services_by_name["EventsService"],
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
    webhooks_pb2.DESCRIPTOR.services_by_name["WebhookService"],
]
SERVICE_NAMES = [service.full_name for service in SERVICES]
# What reflection lists and an unknown method's refusal names (the members' own link is not public).
PUBLIC_SERVICE_NAMES = [*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME]
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# The end of a shutdown's grace period left to the calls still waiting for the hot path (Flush,
# Disable, a read given a token) or for a thread (their turn, their job's answer: a long recall or
# export, a held write) to answer SHUTTING_DOWN before the server stops.
ANSWER_SECONDS = 0.5
HANDSHAKE_MS = 10_000
# The gRPC port's connections when --grpc-max-connections is 0 (at most a quarter of the open-file limit).
GRPC_CONNECTIONS = 4096


def server_options(
    max_request_bytes: int, admission: AdmissionLimits, max_connections: int = GRPC_CONNECTIONS
) -> list[tuple[str, int]]:
    """The grpc.aio server's channel options (also the bare server's in bench/serving.py)."""
    return [
        # gRPC core closes a connection past these at once, counting those still in their handshake.
        ("grpc.max_allowed_incoming_connections", max_connections),
        # Twice the documented request limit, so a request above it reaches the edge and
        # is refused with its reason (REQUEST_TOO_LARGE) rather than by the transport.
        ("grpc.max_receive_message_length", 2 * max_request_bytes),
        # Responses stay under RESPONSE_BUDGET_BYTES plus one item (engine/limits.py).
        ("grpc.max_send_message_length", 2 * max_request_bytes),
        ("grpc.so_reuseport", 0),
        # A connection must finish its handshake (TLS, then HTTP/2's preface and settings) within
        # this: gRPC core's own two minutes let a client that connects and sends nothing hold a
        # descriptor each that long. Clients finish it within a few round trips.
        ("grpc.server_handshake_timeout_ms", HANDSHAKE_MS),
        # Calls that arrived faster than the event loop takes them wait in gRPC core; past
        # its default 1,000 it cancels some at random (a burst of 1,100 streams lost 1-5).
        # Admission bounds what may be open; this only lets a burst reach admission.
        ("grpc.server.max_pending_requests", 4 * (admission.streams + admission.queued_calls)),
        ("grpc.server.max_pending_requests_hard_limit", 8 * (admission.streams + admission.queued_calls)),
    ]


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    engine: Engine
    health: health.aio.HealthServicer
    admission: Admission
    grace_seconds: float
    drain_delay_seconds: float = 0.0
    metrics: ServerMetrics | None = None
    side: SideServer | None = None
    http: HttpSurface | None = None
    forwarder: Forwarder | None = None
    # The member link's listener (transport/cluster/link_server.py), with members.
    link: LinkServer | None = None
    # Who may call (None: no tokens, everyone who reaches the ports): for the start-up summary.
    authenticator: TokenAuthenticator | None = None
    started: bool = False
    stopping: bool = False

    @property
    def metrics_port(self) -> int:
        return self.side.port if self.side is not None else 0

    @property
    def http_port(self) -> int:
        return self.http.port if self.http is not None else 0

    def ready(self) -> bool:
        """What /readyz reports: the gRPC server is started and not shutting down."""
        return self.started and not self.stopping

    async def stop(self) -> None:
        """Graceful stop, in this order:

        1. health NOT_SERVING (gRPC health and /readyz), calls still served for the drain delay,
           so load balancers and readiness probes take the server out of rotation;
        2. open WatchEvents streams end (clients resume by sequence); new calls are refused with
           UNAVAILABLE/SHUTTING_DOWN, in-flight ones get the grace period;
        3. the gRPC server and the HTTP port stop (what still runs after the grace period is cancelled);
        4. tenant files close and the worker threads stop. /healthz answers until the very end.
        """
        self.stopping = True
        await self.health.enter_graceful_shutdown()
        log.info("health NOT_SERVING; serving %.1fs more before draining", self.drain_delay_seconds)
        if self.drain_delay_seconds > 0:
            await asyncio.sleep(self.drain_delay_seconds)
        started = time.monotonic()
        self.engine.hot_path.end_streams()
        drained = await self.admission.close_and_wait(max(0.0, self.grace_seconds - ANSWER_SECONDS))
        if not drained:  # the calls still waiting (the hot path, a thread) answer SHUTTING_DOWN in the time left
            self.engine.hot_path.end_waits()
            self.admission.end_calls()
            drained = await self.admission.close_and_wait(min(ANSWER_SECONDS, self.grace_seconds))
        log.info(
            "refusing new calls; in-flight calls %s", "finished" if drained else "still running after the grace period"
        )
        if self.http is not None:
            await self.http.stop_sessions()
        if self.forwarder is not None:
            await self.forwarder.close()
        if self.link is not None:
            await self.link.close()
        # Both ports get what is left of the grace period, no more: then what still runs is cut.
        left = max(0.0, self.grace_seconds - (time.monotonic() - started))
        await asyncio.gather(self.server.stop(left), *([self.http.stop(left)] if self.http is not None else []))
        await asyncio.get_running_loop().run_in_executor(None, self.engine.close)
        self.admission.stop()
        log.info("stopped: in-flight calls drained, tenant files closed")
        if self.side is not None:
            self.side.stop()


def _authenticator(config: ServerConfig) -> TokenAuthenticator | None:
    authenticator = None
    if config.tokens_file is not None:
        authenticator = TokenAuthenticator.from_file(config.tokens_file)
    elif config.tokens_json:
        authenticator = TokenAuthenticator.from_json(config.tokens_json, source="MNEMOSYNE_TOKENS")
    if authenticator is not None:
        admins = sorted(p.name for p in authenticator.principals if p.is_admin)
        log.info(
            "tokens: %d, of which admin (every tenant): %s", len(authenticator.principals), ", ".join(admins) or "none"
        )
        return authenticator
    if config.host not in LOOPBACK_HOSTS and not config.allow_unauthenticated:
        raise FailedPrecondition(
            f"refusing to serve {config.host} without authentication: give --tokens-file (or "
            "MNEMOSYNE_TOKENS), bind a loopback host, or set MNEMOSYNE_ALLOW_UNAUTHENTICATED=1",
            reason="AUTH_REQUIRED",
        )
    log.warning("no tokens configured: serving WITHOUT authentication on %s", config.host)
    return None


def _forwarder(
    config: ServerConfig, authenticator: TokenAuthenticator | None, metrics: ServerMetrics, engine: Engine
) -> Forwarder | None:
    """The forwarding hop of a member of many (transport/cluster/forwarding.py); None for a single server."""
    membership = config.engine.membership
    if membership is None:
        return None
    log.info(
        "member %s of %d (%s), ownership epoch %d; forwarding %s",
        membership.me,
        len(membership.ids),
        membership.describe(),
        membership.epoch,
        "on" if config.forwarding else "off",
    )
    credentials = None
    if config.tls_cert is not None and config.tls_key is not None:
        # The members present the same certificate to each other as to clients.
        if config.tls_client_ca is not None and len(membership.ids) > 1:  # a lone member hops to none
            check_member_certificate(config.tls_cert, config.tls_key, config.tls_client_ca)
        chain, key = config.tls_cert.read_bytes(), config.tls_key.read_bytes()
        ca = config.tls_client_ca.read_bytes() if config.tls_client_ca is not None else chain
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=chain)
    return Forwarder(
        membership,
        SERVICES,
        enabled=config.forwarding,
        key=member_key(membership, authenticator.token_hashes if authenticator is not None else []),
        metrics=metrics,
        credentials=credentials,
        placement=engine.pool.placement,
        link=config.member_link,
        link_tls=_link_tls(config),
    )


def _link_tls(config: ServerConfig) -> LinkTls | None:
    """The member link's TLS: the gRPC port's certificate, when it has one."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    return LinkTls(config.tls_cert, config.tls_key, config.tls_client_ca)


def _check_can_listen(host: str, port: int, *, what: str, choose: str) -> None:
    """Refuse, before the data directory is opened, a port that cannot be bound, with the reason.

    gRPC core reports a failed bind only as a port of 0 (and a log line of its own); binding a
    plain socket first names the cause. gRPC binds every address the host resolves to and is
    satisfied by one, and so is this check. A port taken between the two binds still fails below.
    Port 0 is checked too: it proves the host is this machine's.
    """
    try:
        addresses = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise FailedPrecondition(
            f"cannot listen {what} on {host}:{port}: the host does not resolve ({exc.strerror})",
            reason="LISTEN_FAILED",
        ) from None
    causes: list[str] = []
    for family, kind, proto, _, sockaddr in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(sockaddr)
                return
            except OSError as exc:
                causes.append(exc.strerror or str(exc))
    hint = "another process listens there" if "Address already in use" in causes else "it is not this machine's"
    raise FailedPrecondition(
        f"cannot listen {what} on {host}:{port} ({'; '.join(sorted(set(causes)))}): {hint}; {choose}",
        reason="LISTEN_FAILED",
    )


class HttpSurfaceMaker(Protocol):
    """``HttpSurface`` (transport/http/surface.py), passed in by whoever turns the HTTP port on."""

    def __call__(self, server: grpc.aio.Server, /) -> HttpSurface: ...


async def start_server(
    config: ServerConfig, *, http_surface: HttpSurfaceMaker | None = None, seams: Seams | None = None
) -> RunningServer:
    """Start serving ``config``. With an HTTP port, ``http_surface`` makes what it serves: the
    caller imports the HTTP stack only then (``mnemosyne serve`` does; see transport/http/surface.py).
    ``seams``: a test's (runtime/seams.py), None in production."""
    seams = seams or Seams()
    if config.http_port and http_surface is None:
        raise ValueError("config.http_port is set: pass http_surface=HttpSurface (transport/http/surface.py)")
    _check_ports(config)
    authenticator = _authenticator(config)
    credentials = server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)
    metrics = ServerMetrics()
    engine = _engine(config, metrics, seams)
    admission = _admission(config, metrics, engine, seams)
    running: RunningServer | None = None
    try:
        forwarder = _forwarder(config, authenticator, metrics, engine)
        server = grpc.aio.server(
            options=server_options(
                config.engine.limits.max_request_bytes,
                config.admission,
                _connections(config),
            )
        )
        running = RunningServer(
            server=server,
            port=0,
            engine=engine,
            health=health.aio.HealthServicer(),
            admission=admission,
            grace_seconds=config.grace_seconds,
            drain_delay_seconds=config.drain_delay_seconds,
            metrics=metrics,
            forwarder=forwarder,
            authenticator=authenticator,
        )
        edge, servicers = _edge_and_servicers(running, authenticator, seams)
        await _register(running, edge, servicers)
        running.port = _listen(server, config, credentials)
        if forwarder is not None and config.member_link:
            running.link = LinkServer(edge, SERVICES, servicers.by_service(), forwarder.shared_secret)
            forwarder.link_port = await running.link.start(config.host, config.member_link_port, _link_tls(config))
        running.side = _side_server(config, running)
        if config.http_port and http_surface is not None:
            running.http = http_surface(server)  # adds the mem0 relay's method
        # The last handler, after every method is added (the mem0 relay's too): only what none has.
        server.add_generic_rpc_handlers([UnknownMethods(PUBLIC_SERVICE_NAMES)])
        await server.start()
        if running.http is not None:
            http_host = config.http_host or config.host
            await running.http.start(
                config, http_host, SERVICES, edge, servicers, engine, tls=credentials is not None, seams=seams
            )
        running.started = True
    except BaseException:
        await _abandon(running, engine, admission)
        raise
    _log_listening(config, running, tls=credentials is not None)
    return running


def _connections(config: ServerConfig) -> int:
    """--grpc-max-connections as given (the operator's choice), or by default GRPC_CONNECTIONS
    within a quarter of the open-file limit (logged)."""
    if config.grpc_max_connections:
        log.info("gRPC port: at most %d connections open (--grpc-max-connections)", config.grpc_max_connections)
        return config.grpc_max_connections
    return connection_budget(GRPC_CONNECTIONS, "gRPC")


def _check_ports(config: ServerConfig) -> None:
    """Refuse, before the data directory is opened, each port that cannot be bound."""
    _check_can_listen(config.host, config.port, what="for gRPC", choose="choose another --port (0: any free port)")
    if config.metrics_port:
        _check_can_listen(
            config.metrics_host or config.host,
            config.metrics_port,
            what="for metrics",
            choose="choose another --metrics-port (0 turns the side port off)",
        )
    if config.http_port:
        _check_can_listen(
            config.http_host or config.host,
            config.http_port,
            what="for HTTP",
            choose="choose another --http-port (0 turns the HTTP API off)",
        )
    if config.engine.membership is not None and config.member_link and config.member_link_port:
        _check_can_listen(
            config.host,
            config.member_link_port,
            what="for the member link",
            choose="choose another --member-link-port (0: any free port)",
        )


def _engine(config: ServerConfig, metrics: ServerMetrics, seams: Seams) -> Engine:
    # As many idle readers per tenant as its calls may run at once (engine/config.py).
    at_once = config.admission.calls_per_tenant + config.admission.reader_share
    engine_config = dataclasses.replace(
        config.engine, readers_per_tenant=max(config.engine.readers_per_tenant, at_once)
    )
    return Engine(
        engine_config,
        extractor=config.extractor,
        observer=metrics,
        seams=seams,
    )


def _admission(config: ServerConfig, metrics: ServerMetrics, engine: Engine, seams: Seams) -> Admission:
    """Admission (transport/admission.py), its gauges and counters in the metrics."""
    admission = Admission(config.admission, park_tenant=seams.park_tenant, park_file=seams.park_file)
    # This thread is the event loop, which runs lone snapshot reads inline (admission): a read
    # never waits for reads.
    read_priority.never_give_way()
    log.info("admission limits: %s", admission.describe())
    members = config.engine.membership
    metrics.read_gauges_from(
        {
            "mnemosyne_open_tenants": engine.open_tenants,
            "mnemosyne_queue_depth": engine.queue_depth,
            "mnemosyne_oldest_pending_seconds": engine.oldest_pending_seconds,
            "mnemosyne_worker_threads_busy": lambda: admission.running,
            "mnemosyne_reader_threads_busy": lambda: admission.reading,
            "mnemosyne_queued_calls": lambda: admission.queued,
            "mnemosyne_open_streams": lambda: admission.open_streams,
            "mnemosyne_waiting_calls": lambda: admission.waiting_calls,
            "mnemosyne_mcp_sessions": lambda: admission.mcp_sessions,
            **engine.replication_gauges(),
            "mnemosyne_sqlite_memory_bytes": engine.sqlite_memory,
            "mnemosyne_data_volume_size_bytes": engine.data_volume_size,
            "mnemosyne_data_volume_free_bytes": engine.data_volume_free,
            "mnemosyne_members": lambda: len(members.ids) if members is not None else 1,
        }
    )
    metrics.count_refusals_from(admission.refusals)
    metrics.count_reads_from(admission.reads)
    return admission


def _edge_and_servicers(
    running: RunningServer, authenticator: TokenAuthenticator | None, seams: Seams
) -> tuple[Edge, Servicers]:
    """The edge every call passes (transport/edge.py) and the servicers behind it."""
    engine, forwarder = running.engine, running.forwarder
    mover = MoveDriver(engine, forwarder, hold_after=seams.move_hold_after)
    edge = Edge(
        authenticator,
        running.admission,
        max_request_bytes=engine.limits.max_request_bytes,
        recorder=Recorder(running.metrics),
        forwarder=forwarder,
        finish_move=mover.finish,
        wait_for_writes=partial(consistency.wait, engine),
        send_stall_seconds=send_stall_seconds(seams),
    )
    servicers = Servicers(
        memory=MemoryServicer(engine),
        workspace=WorkspaceServicer(engine.workspaces, engine.consolidator, engine.consistency),
        hot_path=HotPathServicer(engine),
        events=EventsServicer(engine),
        admin=AdminServicer(engine, FanOut(forwarder, running.metrics) if forwarder is not None else None, mover),
        webhooks=WebhookServicer(engine),
    )
    return edge, servicers


async def _register(running: RunningServer, edge: Edge, servicers: Servicers) -> None:
    """Our services behind the edge; health checking and reflection without it (probes carry no
    credentials)."""
    server, by_service = running.server, servicers.by_service()
    server.add_generic_rpc_handlers([service_handlers(edge, service, by_service[service.name]) for service in SERVICES])
    health_pb2_grpc.add_HealthServicer_to_server(running.health, server)
    for name in ["", *SERVICE_NAMES]:
        await running.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(PUBLIC_SERVICE_NAMES, server)


def _listen(server: grpc.aio.Server, config: ServerConfig, credentials: grpc.ServerCredentials | None) -> int:
    """The gRPC port (TLS when ``credentials``)."""
    address = (
        f"[{config.host}]:{config.port}"
        if ":" in config.host and not config.host.startswith("[")
        else f"{config.host}:{config.port}"
    )
    try:
        port = (
            server.add_secure_port(address, credentials)
            if credentials is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError:
        port = 0
    if port == 0:
        raise FailedPrecondition(
            f"cannot listen on {address}: the port is in use or the address is not this machine's "
            "(choose another --port, or 0 for any free port)",
            reason="LISTEN_FAILED",
        )
    return port


def _side_server(config: ServerConfig, running: RunningServer) -> SideServer | None:
    """The HTTP side port of /metrics, /healthz and /readyz (None when off)."""
    if not config.metrics_port:
        return None
    metrics_host = config.metrics_host or config.host
    assert running.metrics is not None
    try:
        return SideServer(metrics_host, config.metrics_port, metrics=running.metrics.exposition, ready=running.ready)
    except OSError as exc:
        raise FailedPrecondition(
            f"cannot listen for metrics on {metrics_host}:{config.metrics_port} ({exc.strerror}): "
            "is the port in use? (--metrics-port 0 turns the side port off)",
            reason="LISTEN_FAILED",
        ) from None


async def _abandon(running: RunningServer | None, engine: Engine, admission: Admission) -> None:
    """Undo a start that failed half-way: whatever began stops, the tenant files close."""
    if running is not None:
        if running.http is not None:
            await running.http.stop_sessions()
            await running.http.stop()
        await running.server.stop(None)
        if running.forwarder is not None:
            await running.forwarder.close()
        if running.link is not None:
            await running.link.close()
        if running.side is not None:
            running.side.stop()
    engine.close()
    admission.stop()


def _log_listening(config: ServerConfig, running: RunningServer, *, tls: bool) -> None:
    log.info(
        "listening on %s:%d (%s, pid %d, data %s, metrics port %s, HTTP port %s%s)",
        config.host,
        running.port,
        "mutual TLS" if config.tls_client_ca else "TLS" if tls else "plaintext",
        os.getpid(),
        config.engine.data_dir,
        running.metrics_port or "off",
        running.http_port or "off",
        f", member link port {running.link.port}" if running.link is not None else "",
    )
