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


# How soon a closed TLS connection whose client has not taken all of its answer is looked at
# again: soon at first (most clients take the rest at once), then each time twice as late, up to
# the last bound.
FIRST_LOOK_SECONDS = 0.01
LAST_LOOK_SECONDS = 1.0


class TlsTransport:
    """A TLS connection's transport as its protocol and cycles see it, its close bounded by the
    port's own bounds. asyncio's close of a TLS connection sends the TLS close (close_notify) at
    once and cuts the connection ``ssl_shutdown_timeout`` (30 s) later unless the client's own has
    come: a client that reads a large answer slowly sends its own only once it has read it all, and
    lost the rest of it; one that kept its socket held its place in the cap and its descriptor
    those 30 s. Here the close is asyncio's only once the client has taken the whole answer
    (``unsent``), the connection dropped meanwhile if its client takes none of it for
    ``stall_seconds`` (the port's send stall), and ``close_seconds`` after asyncio's close once
    nothing is left to send. Its protocol tells it when the connection is gone (``lost``)."""

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, stall_seconds: float, close_seconds: float
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._stall_seconds = stall_seconds
        self._close_seconds = close_seconds
        self._closing = False  # closed, by whoever
        self._closed_at: float | None = None  # loop time of asyncio's close, once the answer was taken
        self._timer: asyncio.TimerHandle | None = None  # closed: when it is looked at again
        self._look_seconds = FIRST_LOOK_SECONDS
        self._left = 0  # unsent at the last look
        self._taken_at = 0.0  # loop time the client last took some of its answer
        self._gone = False  # connection_lost came

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing or self._gone:
            return
        self._closing = True
        self._left, self._taken_at = self.unsent(), self._loop.time()
        self._look()

    def lost(self) -> None:
        self._gone = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _look(self) -> None:
        """A closed connection's next step: its drop once its client takes none of its answer for
        ``stall_seconds``; asyncio's close once it has taken it all; its drop ``close_seconds`` on."""
        self._timer = None
        now, left = self._loop.time(), self.unsent()
        if left < self._left:
            self._left, self._taken_at = left, now
        if left:
            if now - self._taken_at >= self._stall_seconds:
                self._transport.abort()
                return
            wait = self._look_seconds
            self._look_seconds = min(2 * wait, LAST_LOOK_SECONDS)
        elif self._closed_at is None:
            self._closed_at, wait = now, self._close_seconds
            if not self._transport.is_closing():  # else the client's close_notify started asyncio's close
                self._transport.close()
        elif now - self._closed_at < self._close_seconds:
            wait = self._closed_at + self._close_seconds - now
        else:
            self._transport.abort()
            return
        self._timer = self._loop.call_later(wait, self._look)

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
