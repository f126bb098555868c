"""The HTTP side port: ``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz``.

For tools that cannot speak gRPC (Prometheus, the kubelet's HTTP probes when the gRPC port uses
TLS). Plain HTTP, no authentication: it exposes no tenant data, only aggregate figures.

* ``/healthz`` — 200 while the process runs and its HTTP thread answers (liveness).
* ``/readyz`` — 200 only while the gRPC server is started and not shutting down; 503 otherwise.

One thread serves every connection, without blocking (``SideServer._serve``): a connection that
sends its request slowly, or does not read its answer, holds a socket and a few KiB, never a
thread, and is closed after ``IDLE_SECONDS``. ``/metrics`` is computed on one thread of its own,
so that a slow figure never delays a probe.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import selectors
import socket
import struct
import termios
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mnemosyne.observability.counted_log import CountedLog

log = logging.getLogger("mnemosyne.http")


# Connections the kernel queues before they are accepted: socketserver's 5 made a burst of
# connections (probes and scrapes of many pods at once) wait a second for the client's retry.
BACKLOG = 128
# How long a connection may take to send its request head, and then to read its answer. A scrape
# or a probe sends its request as it connects and reads the answer at once; a client that sends a
# byte at a time, or stops reading, is let go.
IDLE_SECONDS = 10.0
# The most connections held at once (waiting for their request, or for their answer to be read):
# past it, the one that came first is closed.
MAX_WAITING = 256
# The most /metrics expositions held in answers not yet read (each the whole text, up to a few MiB,
# answers of one exposition sharing it): past it, the scrapes reading slowest, the oldest, are
# reset. Else 256 slow readers, each asking as the last one's exposition ended, held 256 copies.
MAX_UNREAD_EXPOSITIONS = 4
# The longest request head read (Prometheus and the kubelet send a few hundred bytes).
HEAD_BYTES = 8 * 1024
# Connections dropped (too slow, too many) are logged at most this often, counted by reason.
DROPS_LOG_SECONDS = 60.0

_PLAIN = "text/plain; charset=utf-8"


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, as socketserver's (an IPv6 address takes IPv4 too where the system
    says so: no IPV6_V6ONLY of its own); OSError when the address cannot be bound."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _unsent(sock: socket.socket) -> int:
    """The bytes the kernel still holds for the client (Linux's SIOCOUTQ; elsewhere taken as some)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0])
    except (OSError, AttributeError):
        return 1


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    deadline: float  # when it is dropped: its head or its answer is late
    head: bytearray = field(default_factory=bytearray)
    answer: list[memoryview] = field(default_factory=list)  # what is left to send
    method: str = ""  # of its request, once read whole
    exposition: bytes | None = None  # the /metrics text its answer holds
    handed: bool = False  # its whole answer is with the kernel: kept until its client closes


class SideServer:
    """Serves the side port in a daemon thread until ``stop()``: that thread accepts
    connections, reads their requests and writes the answers, none of them blocking, so no
    connection holds a thread (a thread each kept ~830 for 3,000 idle connections; one sending a
    byte every few seconds kept its thread as long as it liked). At most ``MAX_WAITING``
    connections are kept; ``/metrics`` is computed once for all the scrapes that wait for it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: Callable[[], bytes],
        ready: Callable[[], bool],
        idle_seconds: float = IDLE_SECONDS,
        drops_log_seconds: float = DROPS_LOG_SECONDS,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._listening = _listen(host.strip("[]"), port)
        self.port: int = self._listening.getsockname()[1]
        self._idle_seconds = idle_seconds
        self._drops = CountedLog(log, "metrics port connections dropped", drops_log_seconds)
        # In the order they came (the first is closed when too many are held).
        self._connections: dict[socket.socket, _Connection] = {}
        self._scrapes: list[_Connection] = []  # waiting for the next exposition
        self._unread: dict[_Connection, None] = {}  # scrapes whose answer is not all sent, oldest first
        self._exposing: tuple[Future[bytes], list[_Connection]] | None = None
        self._exposer = ThreadPoolExecutor(1, thread_name_prefix="metrics-exposition")
        self._selector = selectors.DefaultSelector()
        self._stopping = False
        self._wake, self._woken = socket.socketpair()  # an exposition's end and stop() write to it
        self._woken.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Accept connections, read their requests, write their answers; drop the late ones."""
        self._selector.register(self._listening, selectors.EVENT_READ)
        self._selector.register(self._woken, selectors.EVENT_READ)
        while not self._stopping:
            for key, events in self._selector.select(self._timeout()):
                if key.fileobj is self._woken:
                    self._drain_wakes()
                elif key.fileobj is self._listening:
                    self._accept()
                elif key.data.sock not in self._connections:
                    pass  # closed by an event before it in this round (a newer connection came)
                elif events & selectors.EVENT_WRITE:
                    self._send(key.data)
                else:
                    self._read(key.data)
            self._answer_scrapes()
            self._drop_late(time.monotonic())
        for connection in list(self._connections.values()):
            self._close(connection)
        self._selector.close()
        self._drops.close()

    def _timeout(self) -> float | None:
        deadlines = [connection.deadline for connection in self._connections.values()]
        due = self._drops.due()
        if due is not None:
            deadlines.append(due)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _drain_wakes(self) -> None:
        try:
            while self._woken.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        try:
            sock, _ = self._listening.accept()
        except OSError:
            return  # the client left before it was accepted (or none was there)
        sock.setblocking(False)
        if len(self._connections) >= MAX_WAITING:
            self._drop(next(iter(self._connections.values())), f"closed for a newer one ({MAX_WAITING} held)")
        connection = _Connection(sock, time.monotonic() + self._idle_seconds)
        self._connections[sock] = connection
        self._selector.register(sock, selectors.EVENT_READ, connection)

    def _read(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(4096 if connection.handed else HEAD_BYTES + 1 - len(connection.head))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(connection)  # the client left (or, answered, has read it and closed)
            return
        if connection.handed:
            return  # what a client sends after its answer is dropped
        # Searched from where its end could be: a head sent a byte at a time is not read again each time.
        searched = max(0, len(connection.head) - 3)
        connection.head += data
        end = max(connection.head.find(b"\r\n\r\n", searched), connection.head.find(b"\n\n", searched))
        if end < 0 and len(connection.head) <= HEAD_BYTES:
            return  # more of the head to come
        self._selector.unregister(connection.sock)
        if end < 0:
            self._answer(
                connection, "431 Request Header Fields Too Large", f"request head over {HEAD_BYTES} bytes\n".encode()
            )
        else:
            self._route(connection, bytes(connection.head[:end]).split(b"\n", 1)[0])

    def _route(self, connection: _Connection, request_line: bytes) -> None:
        """Answer the request, or queue it for the next exposition (``/metrics``)."""
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._answer(connection, "400 Bad Request", b"not an HTTP request\n")
            return
        connection.method = parts[0]
        path = urllib.parse.unquote(parts[1].split("?", 1)[0], "latin-1")
        if connection.method not in ("GET", "HEAD"):
            self._answer(connection, "405 Method Not Allowed", b"use GET or HEAD\n", allow="GET, HEAD")
        elif path == "/metrics":
            connection.deadline = time.monotonic() + self._idle_seconds
            self._scrapes.append(connection)
        elif path == "/healthz":
            self._answer(connection, "200 OK", b"ok\n")
        elif path == "/readyz" and self._ready():
            self._answer(connection, "200 OK", b"ready\n")
        elif path == "/readyz":
            self._answer(connection, "503 Service Unavailable", b"not ready\n")
        else:
            self._answer(connection, "404 Not Found", b"try /metrics, /healthz or /readyz\n")

    def _answer_scrapes(self) -> None:
        """Answer the scrapes the exposition that ended was computed for, and start the next
        one for those that came since: one at a time, each shared by all that wait for it."""
        if self._exposing is not None and self._exposing[0].done():
            exposition, scrapes = self._exposing
            self._exposing = None
            try:
                body, status, content_type = exposition.result(), "200 OK", CONTENT_TYPE_LATEST
            except Exception:
                log.exception("the metrics could not be computed")
                body, status, content_type = (
                    b"the metrics could not be computed: see the server's log\n",
                    "500 Internal Server Error",
                    _PLAIN,
                )
            for connection in scrapes:
                if connection.sock in self._connections:  # not dropped meanwhile
                    connection.exposition = body
                    self._answer(connection, status, body, content_type)
            self._drop_unread_past_bound()
        if self._exposing is None and self._scrapes:
            exposition = self._exposer.submit(self._metrics)
            self._exposing = (exposition, self._scrapes)
            self._scrapes = []
            exposition.add_done_callback(self._exposed)

    def _exposed(self, _: Future[bytes]) -> None:
        with contextlib.suppress(OSError):  # stopped meanwhile
            self._wake.send(b"e")

    def _answer(
        self, connection: _Connection, status: str, body: bytes, content_type: str = _PLAIN, *, allow: str = ""
    ) -> None:
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            + (f"Allow: {allow}\r\n" if allow else "")  # a 405's: RFC 9110 §15.5.6
            + "Connection: close\r\n\r\n"
        ).encode("latin-1")
        connection.answer = [memoryview(head)] + ([] if connection.method == "HEAD" else [memoryview(body)])
        connection.deadline = time.monotonic() + self._idle_seconds
        self._send(connection)
        if connection.answer:  # the rest when the client has read some
            self._selector.register(connection.sock, selectors.EVENT_WRITE, connection)
            if connection.exposition is not None:
                self._unread[connection] = None

    def _drop_unread_past_bound(self) -> None:
        """Reset the oldest scrapes not yet read until their answers hold at most
        MAX_UNREAD_EXPOSITIONS expositions."""
        while len({id(c.exposition) for c in self._unread}) > MAX_UNREAD_EXPOSITIONS:
            self._drop(next(iter(self._unread)), f"answer not read, {MAX_UNREAD_EXPOSITIONS} newer expositions held")

    def _send(self, connection: _Connection) -> None:
        try:
            sent = connection.sock.sendmsg(connection.answer)
        except BlockingIOError:
            return
        except OSError:
            self._close(connection)  # the client left
            return
        while sent and connection.answer:
            first = connection.answer[0]
            connection.answer[0] = first[sent:]
            sent = max(0, sent - len(first))
            if not connection.answer[0]:
                connection.answer.pop(0)
        if not connection.answer:
            self._handed_over(connection)

    def _handed_over(self, connection: _Connection) -> None:
        """The whole answer is with the kernel. Closed now, the socket would be left to the
        kernel, which keeps sending to a client that does not read for minutes, with no bound
        here. It is kept, counted in MAX_WAITING, until its client closes it or its time is over
        (``_drop_late``: reset, the kernel drops what it still holds)."""
        connection.exposition = None
        self._unread.pop(connection, None)
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_WR)  # the client reads the answer's end
        connection.handed = True
        try:
            self._selector.modify(connection.sock, selectors.EVENT_READ, connection)
        except KeyError:  # written at once: not watched
            self._selector.register(connection.sock, selectors.EVENT_READ, connection)

    def _drop_late(self, now: float) -> None:
        for connection in [c for c in self._connections.values() if c.deadline <= now]:
            if connection.handed and not _unsent(connection.sock):
                self._close(connection)  # read whole, not closed by its client: nothing is lost
            elif connection.answer or connection.handed:
                self._drop(connection, f"answer not read in {self._idle_seconds:g} s")
            elif connection in self._scrapes or (self._exposing and connection in self._exposing[1]):
                self._drop(connection, f"metrics not computed in {self._idle_seconds:g} s")
            else:
                self._drop(connection, f"no whole request in {self._idle_seconds:g} s")
        self._drops.write_due(now)

    def _drop(self, connection: _Connection, reason: str) -> None:
        self._drops.count(reason, time.monotonic())
        # Reset, not closed: the kernel drops at once the answer it still held for the client
        # (up to a few MiB each), rather than trying to send it for minutes.
        connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if self._connections.pop(connection.sock, None) is None:
            return
        connection.answer = []
        connection.exposition = None
        self._unread.pop(connection, None)
        if connection in self._scrapes:
            self._scrapes.remove(connection)
        try:
            self._selector.unregister(connection.sock)
        except KeyError:
            pass  # waiting for its answer: not watched
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_WR)  # as socketserver closes: the answer first
        connection.sock.close()

    def stop(self) -> None:
        if self._stopping:
            return  # stopped already
        self._stopping = True
        self._wake.send(b"x")
        self._thread.join(timeout=5)
        self._exposer.shutdown(wait=False, cancel_futures=True)
        self._listening.close()
        self._wake.close()
        self._woken.close()
