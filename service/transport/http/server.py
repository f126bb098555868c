"""The HTTP port: the JSON API (transport/http/json_api.py) behind the guard (transport/http/guard.py),
served by uvicorn, an ASGI server, on the gRPC server's event loop.

uvicorn runs embedded: the socket is bound here (so a port of 0 picks a free one and a bind
failure is reported before the data directory is opened, like the gRPC port's), and its own
signal handling is not installed — the server process's SIGTERM handling stops both ports in
order (transport/server.py ``RunningServer.stop``). With TLS the HTTP port uses the gRPC port's
certificate, key and client CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import httptools
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from mnemosyne.errors import InvalidArgument, MnemosyneError
from mnemosyne.transport.config import ServerConfig
from mnemosyne.transport.errors import to_status_proto
from mnemosyne.transport.http.connections import ConnectionCap, RefusalLog, TlsTransport, unsent
from mnemosyne.transport.http.guard import TARGET_HOST, target_authority
from mnemosyne.transport.http.mapping import encode
from mnemosyne.transport.http.methods import answering_head
from mnemosyne.transport.send_stall import SEND_STALL_SECONDS

# How long a connection may take to send a request's whole head, from when it connects or its
# last response ends: uvicorn times a connection out only while it idles after a response (its
# keep-alive), so one that never finishes a head (sends nothing, or a header line now and then)
# would hold its socket for good. A client sends its head at once.
HEAD_SECONDS = 30.0
# How long a TLS connection may take to finish its handshake: until then the connection is not
# counted against the cap (its protocol has not started), and asyncio's own 60 s let a client that
# connects and sends nothing hold a descriptor each for a minute. Clients finish it within a few
# round trips.
HANDSHAKE_SECONDS = 10.0
# How long a request's body may pause while the server waits for it: a client that sent a whole
# head, then part of its body or none, held its socket (and its request's task) for good; one
# sending a large body slowly keeps sending. Not counted while the server reads nothing (the app
# has not taken what came, or the client waits for its 100 Continue).
BODY_PAUSE_SECONDS = 30.0
# The least rate a request's body comes at: it must be whole within BODY_SECONDS of its head, plus a
# second for each BODY_BYTES_PER_SECOND of it that came (Apache's mod_reqtimeout rule), the time
# the server reads nothing not counted. Else a body sent a byte at a time, each just within
# BODY_PAUSE_SECONDS, held its request for good. A body of 16 MiB may take under 5 minutes.
BODY_SECONDS = 30.0
BODY_BYTES_PER_SECOND = 64 * 1024
# The most a request's head (its line and headers) may hold: uvicorn's parser (httptools) keeps
# any length in memory. Browsers send a few KiB; 64 KiB is what common proxies accept at most.
HEAD_BYTES = 64 * 1024
# How long, and how much of it, a refused connection is still read (and dropped) before it is
# closed: closed with unread bytes it is reset, and a client still sending loses the answer. Four
# times the largest body taken (twice the default --max-request-bytes): a client sending a body
# refused for its size gets the answer; one that never stops sending is closed.
REFUSED_READ_SECONDS = 5.0
REFUSED_READ_BYTES = 64 << 20
# How long a TLS connection's close, whoever closes it, may wait for the client's own close once
# nothing is left to send (asyncio waits 30 s for it, the connection holding its place in the cap).
TLS_CLOSE_SECONDS = 1.0
# asyncio's own bound on a TLS connection's close (its ssl_shutdown_timeout's default), named so a
# test can shorten it (runtime/seams.py).
TLS_SHUTDOWN_SECONDS = 30.0
# A connection over the cap is answered 503 HTTP_CONNECTIONS_FULL and read (and dropped) this long
# at most, so that its client gets the answer rather than a reset; past REFUSED_FULL_LINGERING
# such connections (or a quarter of the cap, if less) it is closed at once: a flood of new
# connections holds no more descriptors.
REFUSED_FULL_READ_SECONDS = 1.0
REFUSED_FULL_LINGERING = 64
# Connections the kernel queues before they are accepted.
BACKLOG = 2048
# asyncio accepts up to its server's backlog at once, each taking a descriptor, and the cap sees
# them only a few turns of the loop later: in a flood it held several times that many before
# refusing one, beyond the cap's share of the open-file limit. It accepts an eighth of the cap at
# once; the kernel still queues BACKLOG (``HttpServer.start``).
ACCEPTED_AT_ONCE_SHARE = 8
# The most often requests refused unread (400 REQUEST_UNREADABLE, 431 REQUEST_HEAD_TOO_LARGE) are
# logged: a line each (uvicorn's "Invalid HTTP request received.") let any client write the log at
# will, so one line tells how many were refused since the last.
REFUSALS_LOG_SECONDS = 60.0


def compose(api: ASGIApp, mounts: Mapping[str, ASGIApp], pages: Mapping[str, ASGIApp] | None = None) -> ASGIApp:
    """One ASGI app for the port: a request for one of ``pages``' paths exactly (``/``) goes to
    that app, one under a mount's path prefix (``/console``, ``/docs``, ``/mcp``, the
    mem0-compatible ``/v3``, ``/v1/memories``...) to that app, everything else to the API
    (``/v1/…``, ``/openapi.json``). A prefix ending in ``/`` matches that path only (``/v1/ping/``
    is mem0's, ``/v1/ping`` ours). A HEAD is served as its GET on every one of them (``answering_head``)."""
    prefixes = sorted(mounts, key=len, reverse=True)
    exact = dict(pages or {})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path in exact:
            await exact[path](scope, receive, send)
            return
        for prefix in prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                await mounts[prefix](scope, receive, send)
                return
        await api(scope, receive, send)

    return answering_head(app)


@dataclass(frozen=True)
class HttpTls:
    cert: Path
    key: Path
    client_ca: Path | None = None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (OSError when the address cannot be bound)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by every accepted connection. Without it a response's head and body, written
        # separately, wait out the client's delayed ACK: 44 ms per call instead of 0.1 ms.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(BACKLOG)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


class _HeadTooLarge(Exception):
    """Raised in the parser's callback for a whole head over HEAD_BYTES: the parser stops there
    (nothing of the request runs) and uvicorn answers through ``send_400_response``."""


def _head_size(url: bytes, headers: Sequence[tuple[bytes, bytes]]) -> int:
    """The bytes of a parsed head, at least: its line without the method, each header line, the end."""
    return len(url) + len(" HTTP/1.1\r\n") + sum(len(name) + len(value) + 4 for name, value in headers) + 2


def _head_too_large() -> InvalidArgument:
    return InvalidArgument(
        f"the request's line and headers are over {HEAD_BYTES:,} bytes; send a shorter URL "
        "(a long filter goes in a POST body) and fewer or shorter headers",
        reason="REQUEST_HEAD_TOO_LARGE",
    )


class _CycleTransport:
    """The connection as one request's cycle sees it: uvicorn closes it as soon as the answer is
    written when the client asked so (``Connection: close``, HTTP/1.0), its body still coming or
    not; the close goes to the protocol (``_close_after_answer``), which reads what is left first."""

    def __init__(self, protocol: _HeadTimedProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = protocol
        self._cycle = cycle

    def close(self) -> None:
        self._protocol._close_after_answer(self._cycle)

    def __getattr__(self, name: str) -> object:
        return getattr(self._protocol.transport, name)


class _HeadTimedProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools), closing a connection that does not send a whole
    request head within ``head_seconds`` (``HEAD_SECONDS``) or within ``HEAD_BYTES``, and
    answering a request it cannot read as every error is answered (google.rpc.Status JSON), not
    with uvicorn's line of text."""

    head_seconds = HEAD_SECONDS
    body_pause_seconds = BODY_PAUSE_SECONDS
    body_seconds = BODY_SECONDS
    body_bytes_per_second = BODY_BYTES_PER_SECOND
    refused_read_seconds = REFUSED_READ_SECONDS
    refused_read_bytes = REFUSED_READ_BYTES
    send_stall_seconds = SEND_STALL_SECONDS
    refusals: RefusalLog  # the server's (HttpServer.start)
    cap: ConnectionCap  # the server's
    _admitted: str | None = None  # its client's address, once counted in ``cap.open``
    _lingering = False  # counted in ``cap.lingering``
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_seen = 0.0  # loop time of the head or the body's last part
    _body_begun = 0.0  # loop time of the head, moved on by the time the server read nothing
    _body_armed = 0.0  # loop time the body's timer was armed
    _body_bytes = 0  # of the body, come so far
    _head_bytes = 0  # received while the head is awaited
    _refused = False  # answered with an error: nothing more is read as a request
    _head_over = False  # a whole head over HEAD_BYTES came in one read: refused 431
    _deferred: tuple[int, InvalidArgument] | None = None  # a refusal that waits for the answer in flight
    _closing = False  # answered with the body still coming: read and dropped until it closes
    _dropping_timer: asyncio.TimerHandle | None = None  # refused: its end of reading and dropping
    _dropped = 0  # bytes read and dropped since the refusal
    _gone = False  # connection_lost came
    _send_timer: asyncio.TimerHandle | None = None  # writing paused: when the client is found stalled
    _unsent = 0  # bytes waiting to be sent when the send timer was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's own signature
        super().connection_made(transport)
        if not transport.can_write_eof():  # TLS: its close is bounded (``TlsTransport``)
            self.transport = TlsTransport(transport, self.loop, self.send_stall_seconds, TLS_CLOSE_SECONDS)  # type: ignore[assignment]  # what it calls is there
        address = self.client[0] if self.client else ""
        refusal = self.cap.admit(address)
        if refusal is not None:
            self._refused = True  # its request, if it sent one, is read and dropped
            self.refusals.refused(refusal.reason, self.loop)
            self._lingering = self.cap.lingering < min(REFUSED_FULL_LINGERING, self.cap.most // 4)
            self.cap.lingering += self._lingering
            self._answer(503, refusal, REFUSED_FULL_READ_SECONDS if self._lingering else 0.0)
            return
        self._admitted = address
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():  # a TLS connection's close waits for its answer to be taken (``TlsTransport``)
            return
        if self._refused:  # what the client still sends after the refusal is read and dropped
            self._dropped += len(data)
            if self._dropping_timer is not None and self._dropped > self.refused_read_bytes:
                self._end_dropping()
            return
        self._unset_keepalive_if_required()
        # uvicorn's data_received but for its WARNING line each (``_refuse`` counts them instead).
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol to switch to (ws="none"): the request is served as HTTP/1.1
        except httptools.HttpParserError:
            self.send_400_response("Invalid HTTP request received.")
        if self._head_timer is None:  # the head is whole (or the connection refused or closed)
            return
        self._head_bytes += len(data)
        if self._head_bytes > HEAD_BYTES:
            self._refuse(431, _head_too_large())

    def send_400_response(self, msg: str) -> None:
        if self._head_over:
            self._refuse(431, _head_too_large())
            return
        self._refuse(
            400,
            InvalidArgument(f"the request is not HTTP/1.1 this server can read ({msg})", reason="REQUEST_UNREADABLE"),
        )

    def _refuse(self, status: int, error: InvalidArgument) -> None:
        """Answer ``error``: the connection's bytes can no longer be read as requests. A whole
        request before them whose answer is not written yet is answered first (``_deferred``), in
        order; a request whose body is what cannot be read, or one queued behind others, ends as
        if its client left, so that no answer is written after this one (the app's write after
        the sending side closed raised, logged as an ERROR with a traceback)."""
        self._stop_waiting()
        self._refused = True
        self.refusals.refused(error.reason, self.loop)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if not cycle.more_body and not self.pipeline:
                self._deferred = (status, error)  # answered when its response is complete
                return
            for ended in (cycle, *(queued for queued, _ in self.pipeline)):
                ended.disconnected = True
                ended.message_event.set()
            if cycle.response_started:  # half an answer is out: no other can follow it
                self.transport.close()
                return
            # The refusal is this request's answer: a HEAD's has no body (RFC 9110 §9.3.2).
            self._answer(status, error, head_only=cycle.scope["method"] == "HEAD")
            return
        self._answer(status, error)

    def _answer(
        self, status: int, error: MnemosyneError, read_seconds: float | None = None, *, head_only: bool = False
    ) -> None:
        """Write the refusal (its head only: ``head_only``), then read (and drop) what the client
        still sends (``_drop_rest``) for ``read_seconds`` (``refused_read_seconds``)."""
        if self.transport.is_closing():
            return
        body = encode(to_status_proto(error))
        head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        if error.retry_after_seconds is not None:
            head += f"retry-after: {max(1, math.ceil(error.retry_after_seconds))}\r\n"
        head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        self.transport.write(head.encode("ascii") + (b"" if head_only else body))
        self._drop_rest(self.refused_read_seconds if read_seconds is None else read_seconds)

    def _drop_rest(self, seconds: float) -> None:
        """After a refusal: read and drop what the client still sends for ``seconds`` at most and
        ``refused_read_bytes``, or until its client closes, then close. Closed with unread bytes, the
        connection is reset, and a client still sending (its body) loses the answer: over TLS too,
        where the answer's ``content-length`` and ``connection: close`` are its end (no half-close
        there); in plain text the sending side is closed at once."""
        self._refused = True
        if seconds <= 0:
            self.transport.close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self._dropping_timer = self.loop.call_later(seconds, self._end_dropping)

    def _end_dropping(self) -> None:
        if self._dropping_timer is not None:
            self._dropping_timer.cancel()
            self._dropping_timer = None
        if self._gone:
            return
        self.transport.close()  # TLS: bounded, the client's close never coming from a sender (``TlsTransport``)

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        # A head that came whole in the read crossing HEAD_BYTES is not counted in data_received
        # (it was served, and a URL over 65,535 bytes failed uvicorn's parse: 400): it is here.
        if _head_size(self.url, self.headers) > HEAD_BYTES:
            self._head_over = True
            raise _HeadTooLarge
        authority = target_authority(self.url)
        if authority is not None:  # uvicorn keeps only the target's path: the guard checks this host
            self.scope[TARGET_HOST] = authority  # type: ignore[literal-required]  # a key of our own
        super().on_headers_complete()
        self.cycle.transport = _CycleTransport(self, self.cycle)  # type: ignore[assignment]  # what it calls is there
        self._body_seen = self._body_begun = self.loop.time()
        self._body_bytes = 0
        self._await_body(self.body_pause_seconds)  # stopped at once by on_message_complete when there is none

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._body_seen = self.loop.time()  # the one timer, armed at the head, counts from here
        self._body_bytes += len(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_waiting_for_body()

    def _await_body(self, seconds: float) -> None:
        self._stop_waiting_for_body()
        self._body_armed = self.loop.time()
        self._body_timer = self.loop.call_later(seconds, self._body_late)

    def _body_due(self) -> float:
        """When the body is late: paused too long, or not whole at its least rate."""
        whole_by = self._body_begun + self.body_seconds + self._body_bytes / self.body_bytes_per_second
        return min(self._body_seen + self.body_pause_seconds, whole_by)

    def _body_late(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.more_body or self.transport.is_closing():
            return  # answered early (the head timer waits for the next request) or whole
        now = self.loop.time()
        if now < self._body_due():  # parts came since the timer was armed
            self._await_body(self._body_due() - now)
            return
        if self.flow.read_paused or cycle.waiting_for_100_continue:  # the server is not reading: not the client's time
            self._body_begun += now - self._body_armed
            self._body_seen = now
            self._await_body(self.body_pause_seconds)
            return
        if now - self._body_seen >= self.body_pause_seconds:
            why = f"stopped coming: nothing of it for {self.body_pause_seconds:g} s"
        else:
            why = (
                f"came too slowly: {self._body_bytes:,} bytes in {now - self._body_begun:.3g} s (it may take "
                f"{self.body_seconds:g} s and a second more for each {self.body_bytes_per_second:,} bytes)"
            )
        self._refuse(
            408,
            InvalidArgument(
                f"the request's body {why}; send the body whole, at once after the head",
                reason="REQUEST_BODY_TIMEOUT",
            ),
        )

    def _close_after_answer(self, cycle: RequestResponseCycle) -> None:
        """Close the connection once ``cycle``'s answer is written. A body still coming (refused
        unread: too large, a route or a method that takes none, a tenant refused) is read and dropped
        first (``_drop_rest``): closed with unread bytes, the connection was reset, and a client still
        sending its body lost the answer (urllib's 413 for a body over the limit was 'Connection
        reset by peer'; over TLS, every client that sends its whole body before it reads)."""
        transport = self.transport
        if not cycle.more_body or cycle.disconnected or transport.is_closing():
            transport.close()
            return
        self._closing = True  # nothing more is read as a request
        self._stop_waiting_for_body()
        self._drop_rest(self.refused_read_seconds)

    def on_response_complete(self) -> None:
        if self._closing:  # no request after this one: the connection is closing
            return
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.disconnected and not self.transport.is_closing():
            # Answered before its body was whole: what still comes of it was counted as the next
            # request's head (a body over 64 KiB made the next request a 431), and a body the client
            # held back for a 100 Continue never sent was read from the next request's bytes (400).
            self._close_after_answer(cycle)
            return
        super().on_response_complete()
        if self._deferred is not None:  # the request before unreadable bytes is answered: now the refusal
            deferred, self._deferred = self._deferred, None
            self._answer(*deferred)
        elif self.timeout_keep_alive_task is not None:  # idle now (no pipelined request is waiting)
            self._await_head()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None and not self._gone:
            self._unsent = unsent(self.transport)
            self._send_timer = self.loop.call_later(self.send_stall_seconds, self._check_sending)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _check_sending(self) -> None:
        """``send_stall_seconds`` after writing paused or its client last took bytes: none, dropped."""
        left = unsent(self.transport)
        if left < self._unsent:  # it reads, slowly: its next bytes are awaited as long
            self._unsent = left
            self._send_timer = self.loop.call_later(self.send_stall_seconds, self._check_sending)
            return
        self._send_timer = None
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        # However it closed: its client left or reset it, a timer or a refusal closed it, the server stops.
        if self._admitted is not None:
            self.cap.release(self._admitted)
            self._admitted = None
        self.cap.lingering -= self._lingering
        self._lingering = False
        self._gone = True
        for timer in (self._dropping_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        if isinstance(self.transport, TlsTransport):
            self.transport.lost()
        self._stop_waiting()
        self._stop_waiting_for_body()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.head_seconds, self.transport.close)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _stop_waiting_for_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


class _EmbeddedServer(uvicorn.Server):
    handshake_seconds = HANDSHAKE_SECONDS
    tls_shutdown_seconds = TLS_SHUTDOWN_SECONDS

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The server process handles SIGTERM and SIGINT (cli.py); uvicorn must not take them over.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start, but serving ``sockets`` with a TLS handshake bounded by
        ``handshake_seconds`` and its close by ``tls_shutdown_seconds`` (uvicorn's own
        ``create_server`` takes no such bounds)."""
        await super().startup(sockets=[])  # its lifespan and state, no listener of its own
        self.started = False
        loop = asyncio.get_running_loop()
        config = self.config

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]  # uvicorn's protocols take these
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=loop
            )

        for sock in sockets or []:
            self.servers.append(
                await loop.create_server(
                    protocol,
                    sock=sock,
                    ssl=config.ssl,
                    backlog=config.backlog,
                    ssl_handshake_timeout=self.handshake_seconds if config.ssl else None,
                    ssl_shutdown_timeout=self.tls_shutdown_seconds if config.ssl else None,
                )
            )
        self.started = True


class HttpServer:
    def __init__(self, server: uvicorn.Server, serving: asyncio.Task[None], port: int, refusals: RefusalLog) -> None:
        self._server, self._serving = server, serving
        self.port = port
        self._refusals = refusals

    @classmethod
    async def start(
        cls,
        app: ASGIApp,
        sock: socket.socket,
        *,
        tls: HttpTls | None,
        head_seconds: float = HEAD_SECONDS,
        handshake_seconds: float = HANDSHAKE_SECONDS,
        body_pause_seconds: float = BODY_PAUSE_SECONDS,
        body_seconds: float = BODY_SECONDS,
        body_bytes_per_second: int = BODY_BYTES_PER_SECOND,
        refused_read_seconds: float = REFUSED_READ_SECONDS,
        refused_read_bytes: int = REFUSED_READ_BYTES,
        send_stall_seconds: float = SEND_STALL_SECONDS,
        tls_shutdown_seconds: float = TLS_SHUTDOWN_SECONDS,
        max_connections: int = ServerConfig.http_max_connections,
        max_connections_per_address: int = ServerConfig.http_max_connections_per_address,
        refusals_log_seconds: float = REFUSALS_LOG_SECONDS,
    ) -> HttpServer:
        """Serve ``app`` on ``sock``, holding at most ``max_connections`` open (the caller's budget)."""
        refusals = RefusalLog(refusals_log_seconds)
        timing = {
            "head_seconds": head_seconds,
            "body_pause_seconds": body_pause_seconds,
            "body_seconds": body_seconds,
            "body_bytes_per_second": body_bytes_per_second,
            "refused_read_seconds": refused_read_seconds,
            "refused_read_bytes": refused_read_bytes,
            "send_stall_seconds": send_stall_seconds,
        }
        config = uvicorn.Config(
            app,
            http=type(
                "_Protocol",
                (_HeadTimedProtocol,),
                {**timing, "refusals": refusals, "cap": ConnectionCap(max_connections, max_connections_per_address)},
            ),
            backlog=max(1, min(BACKLOG, max_connections // ACCEPTED_AT_ONCE_SHARE)),  # accepted at once
            lifespan="off",
            log_config=None,  # our logging (observability/logs.py) formats uvicorn's records
            access_log=False,  # the edge writes the access records
            proxy_headers=False,
            server_header=False,
            ws="none",
            timeout_graceful_shutdown=None,  # ``stop`` bounds the wait, from the grace period left
            ssl_certfile=tls.cert if tls else None,
            ssl_keyfile=tls.key if tls else None,
            ssl_ca_certs=tls.client_ca if tls and tls.client_ca else None,
            ssl_cert_reqs=ssl.CERT_REQUIRED if tls and tls.client_ca else ssl.CERT_NONE,
        )
        server = _EmbeddedServer(config)
        server.handshake_seconds, server.tls_shutdown_seconds = handshake_seconds, tls_shutdown_seconds
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.005)
        sock.listen(BACKLOG)  # asyncio's listen took the smaller backlog: the kernel queues as before
        return cls(server, serving, sock.getsockname()[1], refusals)

    async def stop(self, seconds: float = 0.0) -> None:
        """Stop accepting, let open requests finish for up to ``seconds`` (what is left of the
        grace period: uvicorn's own wait would start only now, and last the whole of it again),
        then close the connections still open (a request still reading its body sees its client
        gone) and end."""
        self._server.should_exit = True
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await asyncio.shield(self._serving)
        except TimeoutError:
            for connection in list(self._server.server_state.connections):
                connection.transport.close()  # its unsent answer first (asyncio writes what is buffered)
            self._server.force_exit = True  # uvicorn waits for those connections no more
            await self._serving
        finally:
            self._refusals.close()
