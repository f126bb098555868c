"""The HTTP side port: ``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz``.

For tools that cannot speak gRPC (Prometheus, the kubelet's HTTP probes when the gRPC port uses
TLS). Plain HTTP, no authentication: it exposes no tenant data, only aggregate figures.

* ``/healthz`` — 200 while the process runs and its HTTP thread answers (liveness).
* ``/readyz`` — 200 only while the gRPC server is started and not shutting down; 503 otherwise.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("mnemosyne.http")


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _IPv6ThreadingServer(_ThreadingServer):
    address_family = socket.AF_INET6


# How long a connection may wait before its request is read: each connection holds a thread,
# and a client that connects and sends nothing would hold it for good. A scrape or a probe sends
# its request as it connects.
IDLE_SECONDS = 10.0
# How often the serving loop looks whether it is to stop: a stop waits up to this (the default 0.5 s
# was most of a stopped server's exit once its modules' teardown was skipped).
POLL_SECONDS = 0.05


class _QuietHandler(WSGIRequestHandler):
    timeout = IDLE_SECONDS

    # Scrapes and probes every few seconds would flood stderr with access lines.
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:
            pass  # no request in time: the connection is closed, and its thread ends


class SideServer:
    """Serves the side port in a daemon thread until ``stop()``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: Callable[[], bytes],
        ready: Callable[[], bool],
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        bind = host.strip("[]")
        server_class = _IPv6ThreadingServer if ":" in bind else _ThreadingServer
        handler = type("_Handler", (_QuietHandler,), {"timeout": idle_seconds})
        self._httpd = make_server(bind, port, self._app, server_class=server_class, handler_class=handler)
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name="metrics-http", daemon=True
        )
        self._thread.start()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return self._reply(start_response, "405 Method Not Allowed", b"use GET\n")
        if path == "/metrics":
            return self._reply(start_response, "200 OK", self._metrics(), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return self._reply(start_response, "200 OK", b"ok\n")
        if path == "/readyz":
            if self._ready():
                return self._reply(start_response, "200 OK", b"ready\n")
            return self._reply(start_response, "503 Service Unavailable", b"not ready\n")
        return self._reply(start_response, "404 Not Found", b"try /metrics, /healthz or /readyz\n")

    @staticmethod
    def _reply(
        start_response: Callable[..., Any], status: str, body: bytes, content_type: str = "text/plain; charset=utf-8"
    ) -> list[bytes]:
        start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
