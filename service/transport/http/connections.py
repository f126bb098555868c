"""What the HTTP port (transport/http/server.py) keeps of its connections beside each one's protocol:
the cap on those open (``ConnectionCap``), the log of requests refused unread (``RefusalLog``) and
a TLS connection's bounded close (``TlsTransport``), all used on the server's event loop only."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import struct
import termios

from mnemosyne.errors import Unavailable
from mnemosyne.observability.counted_log import CountedLog

log = logging.getLogger("mnemosyne.http")


class RefusalLog:
    """The log of requests refused unread (``CountedLog``), its counts written on a timer of the
    server's event loop when no refusal follows. Used on that loop only."""

    def __init__(self, seconds: float) -> None:
        self._counts = CountedLog(log, "HTTP requests refused unread", seconds)
        self._timer: asyncio.TimerHandle | None = None

    def refused(self, reason: str, loop: asyncio.AbstractEventLoop) -> None:
        self._counts.count(reason, loop.time())
        due = self._counts.due()
        if due is not None and self._timer is None:
            self._timer = loop.call_at(due, self._write_due, loop, due)

    def _write_due(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        self._timer = None
        self._counts.write_due(max(loop.time(), due))  # a timer may run a clock tick early

    def close(self) -> None:
        """Write the count still waiting for its timer (the server stops)."""
        if self._timer is not None:
            self._timer.cancel()
        self._counts.close()


class ConnectionCap:
    """The HTTP port's open connections, against its most (used on the server's event loop only).

    Not uvicorn's ``limit_concurrency``: that is checked only once a request's head is whole, so a
    connection that idles or trickles its head is never refused and keeps its descriptor, and its
    refusal is a line of text on a connection kept open, not our JSON error and the connection
    closed."""

    def __init__(self, most: int, per_address: int) -> None:
        self.most = most
        self.per_address = per_address  # 0: no share of its own
        self.open = 0  # admitted and not yet closed
        self.by_address: dict[str, int] = {}  # of those, from each client address
        self.lingering = 0  # refused, their answer being read

    def admit(self, address: str) -> Unavailable | None:
        """Count a connection from ``address`` in, or the refusal when there is no place for it."""
        held = self.by_address.get(address, 0)
        if self.open >= self.most:
            return _full("connections", self.most, "--http-max-connections", "HTTP_CONNECTIONS_FULL")
        if self.per_address and held >= self.per_address:
            return _full(
                f"connections from {address}",
                self.per_address,
                "--http-max-connections-per-address",
                "HTTP_ADDRESS_CONNECTIONS_FULL",
            )
        self.open += 1
        self.by_address[address] = held + 1
        return None

    def release(self, address: str) -> None:
        self.open -= 1
        held = self.by_address.pop(address) - 1
        if held:
            self.by_address[address] = held


def _full(which: str, most: int, flag: str, reason: str) -> Unavailable:
    return Unavailable(
        f"the HTTP port holds its most {which} open ({most:,}, {flag}): retry in a second, and reuse "
        "a connection for several requests (keep-alive)",
        reason=reason,
        retry_after_seconds=1.0,
    )


class TlsTransport:
    """A TLS connection's transport as its protocol and cycles see it. asyncio's close of a TLS
    connection waits 30 s for the client's own close (its close_notify), the connection holding
    its place in the cap and its descriptor meanwhile: clients that kept their sockets after the
    server closed them (an answer with ``Connection: close``, a head's or the keep-alive's end)
    held the cap's places that long. Whoever closes it, it is dropped ``close_seconds`` after its
    close once nothing is left to send; one whose client still reads its answer is left to
    asyncio's own bound. Its protocol tells it when the connection is gone (``lost``)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, close_seconds: float) -> None:
        self._transport = transport
        self._loop = loop
        self._close_seconds = close_seconds
        self._timer: asyncio.TimerHandle | None = None  # closed: when it is looked at again
        self._gone = False  # connection_lost came

    def close(self) -> None:
        if not self._transport.is_closing():  # asyncio's second close forgets its TLS protocol
            self._transport.close()
        if self._timer is None and not self._gone:
            self._timer = self._loop.call_later(self._close_seconds, self._drop_closed)

    def lost(self) -> None:
        self._gone = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _drop_closed(self) -> None:
        self._timer = None
        if self.unsent():
            self._timer = self._loop.call_later(self._close_seconds, self._drop_closed)
            return
        self._transport.abort()

    def unsent(self) -> int:
        """``unsent`` of the connection, TLS's own buffer counted too (asyncio's transport under TLS,
        reached through its protocol, holds the socket's)."""
        inner = getattr(getattr(self._transport, "_ssl_protocol", None), "_transport", None)
        return self._transport.get_write_buffer_size() + (unsent(inner) if inner is not None else 0)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


def unsent(transport: asyncio.WriteTransport | TlsTransport) -> int:
    """The bytes written to ``transport`` that its client has not taken yet: those asyncio holds and
    those in the kernel's send queue (TIOCOUTQ; on loopback, those the client has not read), which
    alone move while a slow client reads, the kernel waking the writer only once much is free."""
    if isinstance(transport, TlsTransport):
        return transport.unsent()
    queued = 0
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):
            queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    return transport.get_write_buffer_size() + queued
