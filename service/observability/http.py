"""The HTTP side port: ``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz``.

For tools that cannot speak gRPC (Prometheus, the kubelet's HTTP probes when the gRPC port uses
TLS). Plain HTTP, no authentication: it exposes no tenant data, only aggregate figures.

* ``/healthz`` — 200 while the process runs and its HTTP thread answers (liveness).
* ``/readyz`` — 200 only while the gRPC server is started and not shutting down; 503 otherwise.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("mnemosyne.http")


# Connections the kernel queues before they are accepted: socketserver's 5 made a burst of
# connections (probes and scrapes of many pods at once) wait a second for the client's retry.
BACKLOG = 128
# How long a connection may wait before its request is read. A scrape or a probe sends its
# request as it connects; a client that connects and sends nothing is let go.
IDLE_SECONDS = 10.0
# The most connections that wait for their request at once: past it, the one that waited longest is
# closed. A waiting connection holds a socket and no thread (``SideServer._serve``).
MAX_WAITING = 256


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = BACKLOG


class _IPv6ThreadingServer(_ThreadingServer):
    address_family = socket.AF_INET6


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
    """Serves the side port in a daemon thread until ``stop()``: that thread accepts connections
    and waits for their requests, and a connection whose request has come is served on a thread of
    its own. So a connection that sends nothing holds no thread (each took one, ~830 for 3,000
    idle connections opened at 300 a second), and at most ``MAX_WAITING`` of them are kept."""

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
        self._idle_seconds = idle_seconds
        self._wake, self._woken = socket.socketpair()  # stop() writes to end the serving loop
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Accept connections; hand each to a thread of its own once its request has come, close
        it when it sent nothing within the idle time or when it waited longest of ``MAX_WAITING``."""
        listening = self._httpd.socket
        # Oldest first (each waits the same idle time): (deadline, address) of each connection.
        waiting: dict[socket.socket, tuple[float, Any]] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(listening, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while True:
                oldest = next(iter(waiting.values()), None)
                for key, _ in selector.select(None if oldest is None else max(0.0, oldest[0] - time.monotonic())):
                    if key.fileobj is self._woken:
                        for connection in waiting:
                            self._httpd.shutdown_request(connection)
                        return
                    if key.fileobj is listening:
                        self._accept(selector, waiting)
                    elif isinstance(key.fileobj, socket.socket):
                        selector.unregister(key.fileobj)
                        self._serve_one(key.fileobj, waiting.pop(key.fileobj)[1])
                now = time.monotonic()
                while waiting and next(iter(waiting.values()))[0] <= now:
                    self._let_go(selector, waiting, next(iter(waiting)))

    def _serve_one(self, connection: socket.socket, address: Any) -> None:
        """Serve ``connection``'s request on a thread of its own (as socketserver's own loop does)."""
        try:
            self._httpd.process_request(connection, address)
        except Exception:
            self._httpd.handle_error(connection, address)
            self._httpd.shutdown_request(connection)

    def _accept(self, selector: selectors.BaseSelector, waiting: dict[socket.socket, tuple[float, Any]]) -> None:
        try:
            connection, address = self._httpd.get_request()
        except OSError:
            return  # the client left before it was accepted
        if len(waiting) >= MAX_WAITING:
            self._let_go(selector, waiting, next(iter(waiting)))
        waiting[connection] = (time.monotonic() + self._idle_seconds, address)
        selector.register(connection, selectors.EVENT_READ)

    def _let_go(
        self,
        selector: selectors.BaseSelector,
        waiting: dict[socket.socket, tuple[float, Any]],
        connection: socket.socket,
    ) -> None:
        selector.unregister(connection)
        del waiting[connection]
        self._httpd.shutdown_request(connection)

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
        self._wake.send(b"x")
        self._thread.join(timeout=5)
        self._httpd.server_close()
        self._wake.close()
        self._woken.close()
