"""The server's HTTP port: the HTTP/JSON API, the MCP endpoint, the mem0-compatible API, the
console, the API reference and the root page, behind one guard (transport/http/guard.py), served by uvicorn (transport/http/server.py).

A module of its own so that a server with the HTTP port off never loads the HTTP stack: Starlette,
uvicorn and above all the MCP SDK (its pydantic models) take about a second of a server's start.
``mnemosyne serve`` imports this module only when ``--http-port`` is not 0 and hands ``HttpSurface``
to ``start_server`` (transport/server.py), which makes it before the gRPC server starts and starts
it after.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Sequence

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from starlette.types import ASGIApp

from mnemosyne.engine.engine import Engine
from mnemosyne.errors import FailedPrecondition
from mnemosyne.runtime.interpreter import connection_budget
from mnemosyne.runtime.seams import Seams
from mnemosyne.transport.config import ServerConfig
from mnemosyne.transport.edge import Edge
from mnemosyne.transport.grpc.servicers import Servicers
from mnemosyne.transport.http import mapping as http_mapping
from mnemosyne.transport.http import openapi
from mnemosyne.transport.http.api_docs import api_docs_app
from mnemosyne.transport.http.console import console_app
from mnemosyne.transport.http.guard import Guard
from mnemosyne.transport.http.home import home_app
from mnemosyne.transport.http.json_api import HttpApi
from mnemosyne.transport.http.mcp import McpEndpoint
from mnemosyne.transport.http.mem0 import MEM0_PREFIXES, Mem0Api, relay_handler
from mnemosyne.transport.http.paths import CONSOLE_PATH, DOCS_PATH, HOME_PATH, MCP_PATH
from mnemosyne.transport.http.server import TLS_SHUTDOWN_SECONDS, HttpServer, HttpTls, bind, compose
from mnemosyne.transport.in_process import InProcess
from mnemosyne.version import VERSION

log = logging.getLogger("mnemosyne.http")


class HttpSurface:
    """Everything on the HTTP port, made in two steps around the gRPC server's start: made (the
    mem0 relay's handler is a method of the gRPC server, added before it starts), then
    ``start``-ed (the port bound and served, the MCP session manager running)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.mcp: McpEndpoint | None = None
        self.http: HttpServer | None = None
        # Another member's mem0 request for a tenant of this one arrives over gRPC (the relay).
        self.mem0: Mem0Api | None = None
        server.add_generic_rpc_handlers([relay_handler(lambda: self.mem0)])

    @property
    def port(self) -> int:
        return self.http.port if self.http is not None else 0

    async def start(
        self,
        config: ServerConfig,
        host: str,
        services: Sequence[ServiceDescriptor],
        edge: Edge,
        servicers: Servicers,
        engine: Engine,
        *,
        tls: bool,
        seams: Seams,
    ) -> None:
        """Bind ``host``:``config.http_port`` and serve (TLS like the gRPC port when ``tls``;
        ``seams``: a test's bounds on sending, runtime/seams.py)."""
        routes = http_mapping.routes(services)  # refuses an RPC with no route that is not GRPC_ONLY
        document = json.dumps(openapi.document(routes, version=VERSION)).encode()
        own = [] if host in ("0.0.0.0", "::", "[::]") else [host]
        self.mem0 = Mem0Api(edge, servicers, engine.memories, engine.limits, engine.consistency)
        self.mcp = McpEndpoint(edge, InProcess(edge, services, servicers.by_service()))
        mounts: dict[str, ASGIApp] = {
            MCP_PATH: self.mcp,
            CONSOLE_PATH: console_app(),
            DOCS_PATH: api_docs_app(),
            **dict.fromkeys(MEM0_PREFIXES, self.mem0),
        }
        pages = {HOME_PATH: home_app(config.metrics_port)}
        app = Guard(
            compose(HttpApi(edge, routes, servicers.by_service(), openapi=document), mounts, pages),
            allowed_hosts=[*config.http_allowed_hosts, *own],
            cors_origins=config.http_cors_origins,
        )
        sock = _bind(host, config.http_port)
        https = (
            HttpTls(config.tls_cert, config.tls_key, config.tls_client_ca)
            if tls and config.tls_cert and config.tls_key
            else None
        )
        try:
            self.http = await HttpServer.start(
                app,
                sock,
                tls=https,
                max_connections=connection_budget(config.http_max_connections, "HTTP"),
                max_connections_per_address=config.http_max_connections_per_address,
                send_stall_seconds=edge.send_stall_seconds,
                tls_shutdown_seconds=seams.tls_shutdown_seconds or TLS_SHUTDOWN_SECONDS,
            )
        except BaseException:
            sock.close()
            raise
        await self.mcp.start()

    async def stop_sessions(self) -> None:
        """End the MCP sessions (first in a graceful stop)."""
        if self.mcp is not None:
            await self.mcp.stop()

    async def stop(self, seconds: float = 0.0) -> None:
        """Stop serving HTTP; in-flight requests get ``seconds`` (what is left of the grace period)."""
        if self.http is not None:
            await self.http.stop(seconds)


def _bind(host: str, port: int) -> socket.socket:
    try:
        return bind(host, port)
    except OSError as exc:
        raise FailedPrecondition(
            f"cannot listen for HTTP on {host}:{port} ({exc.strerror}): is the port in use? "
            "(--http-port 0 turns the HTTP API off)",
            reason="LISTEN_FAILED",
        ) from None
