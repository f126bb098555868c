"""The member link: a forwarded call carried to its owner over one plain TCP connection per member
pair, not as a gRPC call of its own (docs/scale-out.md#the-member-link).

A gRPC hop makes the entry run a whole grpc.aio client call besides the server call it answers,
which costs more than two Ping floors of CPU (docs/performance.md, "where the hop's time goes").
On the link a call is one frame each way, told apart by its number, and the owner runs it
through the same edge as any call (transport/edge.py: the token authenticated and authorised
again, admission and the tenant's share, the request id, trace context, metrics and the access
record), so the hop's contract (transport/cluster/forwarding.py) is the same:

* carried: the hop's metadata (the caller's token, request id and ``mnemosyne-*`` keys, the trace
  context, the route and the member key), the seconds left to the deadline, the request's bytes;
* answered: the response's bytes with its initial and trailing metadata, or the refusal's
  ``google.rpc.Status`` with its details, as the owner would answer them over gRPC;
* cancellation: the entry sends CANCEL for a call it no longer waits for (its caller left, or
  the deadline passed); a lost connection cancels every call it carried, at both ends;
* members only: a connection's first frame is the member key, or the owner closes it; with TLS
  on the gRPC port, the link uses the same certificates, verified both ways as on that port.

Unary calls and streams take the link (Recall, Retain..., WatchEvents, ExportTenant, ImportTenant).
A server stream is opened by a STREAM frame (a CALL's body) and answered by HEAD (its initial
metadata, with the first message or at the end), MESSAGE frames (one response each) and END (its
status and trailing metadata); the owner sends no more messages than the entry granted with CREDIT
frames (``STREAM_WINDOW`` ahead of its reading), so a slow reader holds back only its own stream,
never the connection's other calls. A client stream (ImportTenant) is opened by INPUT (a CALL's
body without a request), its messages follow as MESSAGE frames no further ahead than the owner
granted (CREDIT the other way), then an empty END; the owner answers with ANSWER as for a unary
call. A move's member-to-member steps stay gRPC calls. An owner tells the entry its link port in
the trailing metadata of a gRPC hop (``x-mnemosyne-member-link``, only to a caller with the member
key), so the first hop to a member is a gRPC call and the next ones take the link once it is
connected; a member that cannot be connected to is reached by gRPC meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import ssl
import struct
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from google.rpc import status_pb2

log = logging.getLogger("mnemosyne.cluster")

LINK_PORT_KEY = "x-mnemosyne-member-link"
# A frame: its body's length, the call's number, its kind; then the body.
_HEADER = struct.Struct("!IIB")
HELLO, CALL, CANCEL, ANSWER = 1, 2, 3, 4
STREAM, HEAD, MESSAGE, END, CREDIT, INPUT = 5, 6, 7, 8, 9, 10
_LOST = 0  # not a frame: the connection closed under a stream
# Messages of a stream one end may send before the other has read them (a message is at most an
# export's or an import's 1 MiB chunk). The reader grants half a window again once it read that many.
STREAM_WINDOW = 8
_LENGTH = struct.Struct("!I")
# Above the largest request a member accepts (max_request_bytes is at most 64 MiB, as the gRPC
# hop's channel) with room for the metadata; a connection sending more is closed.
MAX_FRAME_BYTES = 65 * 1024 * 1024
# Before the member key is checked, a connection may send only this much.
MAX_HELLO_BYTES = 1024
CONNECT_SECONDS = 5.0
# After a failed connection, how long the entry keeps to gRPC before trying again.
_RETRY_SECONDS = 30.0


class LinkLost(Exception):
    """The connection closed while a call was on it: whether the owner ran it is unknown."""


def pack(parts: Sequence[bytes]) -> bytes:
    return b"".join(_LENGTH.pack(len(part)) + part for part in parts)


def unpack(body: bytes) -> list[bytes]:
    parts, at, view = [], 0, memoryview(body)
    while at < len(body):
        if at + _LENGTH.size > len(body):
            raise ValueError("a field's length runs past its frame")
        (size,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        if at + size > len(body):
            raise ValueError("a field runs past its frame")
        parts.append(bytes(view[at : at + size]))
        at += size
    return parts


def pack_metadata(metadata: Sequence[tuple[str, str]]) -> bytes:
    return pack([text.encode("utf-8", "surrogatepass") for pair in metadata for text in pair])


def unpack_metadata(body: bytes) -> list[tuple[str, str]]:
    texts = [part.decode("utf-8", "surrogatepass") for part in unpack(body)]
    if len(texts) % 2:
        raise ValueError("a metadata key without its value")
    return list(zip(texts[::2], texts[1::2]))


def frame(number: int, kind: int, body: bytes = b"") -> bytes:
    return _HEADER.pack(len(body), number, kind) + body


async def read_frame(reader: asyncio.StreamReader, limit: int) -> tuple[int, int, bytes]:
    size, number, kind = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes (the limit is {limit})")
    return number, kind, await reader.readexactly(size)


@dataclass(frozen=True)
class LinkAnswer:
    """The owner's answer: ``status`` empty for a response, else the refusal's google.rpc.Status."""

    status: bytes
    response: bytes
    initial_metadata: list[tuple[str, str]]
    trailing_metadata: list[tuple[str, str]]

    def refusal(self) -> status_pb2.Status | None:
        return status_pb2.Status.FromString(self.status) if self.status else None


class Credit:
    """The messages a stream's reader will take: granted by its CREDIT frames, taken by its sender."""

    def __init__(self) -> None:
        self._left = 0
        self._granted = asyncio.Event()

    def grant(self, messages: int) -> None:
        self._left += messages
        self._granted.set()

    async def take(self) -> None:
        while self._left <= 0:
            self._granted.clear()
            await self._granted.wait()
        self._left -= 1


def granted(body: bytes) -> int:
    """The messages a CREDIT frame grants."""
    return int.from_bytes(body[:4], "big")


def _opening(
    number: int, kind: int, method: str, timeout: float | None, request: bytes, metadata: Sequence[tuple[str, str]]
) -> bytes:
    """The frame opening a call (CALL, STREAM or INPUT: a client stream's requests follow it)."""
    head = pack([method.encode(), b"" if timeout is None else repr(timeout).encode(), request])
    return frame(number, kind, pack([head, pack_metadata(metadata)]))


def credit_frame(number: int, messages: int) -> bytes:
    return frame(number, CREDIT, _LENGTH.pack(messages))


class LinkStream:
    """A server stream's answer as the entry reads it: its frames in order, as the link's reader
    delivers them (never more messages than the entry granted, so the list stays short)."""

    def __init__(self, link: MemberLink, number: int) -> None:
        self._link = link
        self.number = number
        self._frames: collections.deque[tuple[int, bytes]] = collections.deque()
        self._arrived = asyncio.Event()
        self.initial_metadata: list[tuple[str, str]] | None = None  # once the owner's HEAD came
        self.trailing_metadata: list[tuple[str, str]] = []
        self.refusal: status_pb2.Status | None = None  # the owner's END with an error
        self.ended = False  # the owner's END came
        self._read = 0  # messages read since the last grant

    def deliver(self, kind: int, body: bytes) -> None:
        self._frames.append((kind, body))
        self._arrived.set()

    async def first_word(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the owner's first frame, and take it when it is HEAD or END
        (then ``initial_metadata`` or ``refusal`` is known before any message is read)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while not self._frames:
                    self._arrived.clear()
                    await self._arrived.wait()
        if self._frames and self._frames[0][0] in (HEAD, END):
            self._take_word(*self._frames.popleft())

    async def messages(self) -> AsyncIterator[bytes]:
        """The owner's messages until its END (a refusal is then in ``refusal``); raises LinkLost."""
        while not self.ended:
            while not self._frames:
                self._arrived.clear()
                await self._arrived.wait()
            kind, body = self._frames.popleft()
            if kind == MESSAGE:
                self._read += 1
                if self._read >= STREAM_WINDOW // 2:
                    self._link.send(credit_frame(self.number, self._read))
                    self._read = 0
                yield body
            elif kind == _LOST:
                raise LinkLost("the member link closed while the stream was on it")
            else:
                self._take_word(kind, body)

    def _take_word(self, kind: int, body: bytes) -> None:
        try:
            if kind == HEAD:
                self.initial_metadata = unpack_metadata(body)
                return
            status, trailing = unpack(body)
            self.trailing_metadata = unpack_metadata(trailing)
            self.refusal = status_pb2.Status.FromString(status) if status else None
        except (ValueError, DecodeError) as exc:  # not a member speaking this protocol
            raise LinkLost(f"the owner's {'head' if kind == HEAD else 'end'} of a stream does not parse") from exc
        self.ended = True


# -- TLS ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkTls:
    """The gRPC port's certificate and key, and the CA its members' certificates are signed by (the
    client CA of mutual TLS, else the certificate's own chain, as the gRPC hop trusts)."""

    cert: Path
    key: Path
    ca: Path | None

    def server_context(self) -> ssl.SSLContext:
        """As the gRPC port: a client certificate is required with mutual TLS (``ca``); the member
        key in the first frame is what admits a member either way."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        if self.ca is not None:
            context.load_verify_locations(cafile=self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca or self.cert)
        # The deployment's own certificate may be the trust anchor (its chain, without a CA's).
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        context.load_cert_chain(self.cert, self.key)
        return context


# -- the entry's side -----------------------------------------------------------------------------


class MemberLink:
    """The entry's connection to one member: calls told apart by their number."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._numbers = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[LinkAnswer]] = {}
        self._streams: dict[int, LinkStream] = {}
        self._sending: dict[int, Credit] = {}  # the client streams' messages the owners granted
        self.closed = False
        self._reading = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, host: str, port: int, key: bytes, tls: LinkTls | None) -> MemberLink:
        """A link to the member at ``host``:``port``, its key accepted (raises OSError, or
        asyncio's errors, when it cannot be made)."""
        context = tls.client_context() if tls is not None else None
        async with asyncio.timeout(CONNECT_SECONDS):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host if context else None
            )
        try:
            writer.write(frame(0, HELLO, key))
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    _, kind, _ = await read_frame(reader, MAX_HELLO_BYTES)
            except EOFError:
                kind = 0
            if kind != HELLO:
                raise ConnectionError("the member closed the link: it did not accept this member's key")
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer)

    def _new_number(self) -> int:
        """The number of a call opened on this link now (LinkLost once the link is closed)."""
        if self.closed:
            raise LinkLost("the member link is closed")
        return next(self._numbers)

    async def call(
        self, method: str, request: bytes, metadata: Sequence[tuple[str, str]], timeout: float | None
    ) -> LinkAnswer:
        """The owner's answer to one call; cancelled, the owner is told to cancel it too."""
        number = self._new_number()
        answered: asyncio.Future[LinkAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answered
        try:
            self._writer.write(_opening(number, CALL, method, timeout, request, metadata))
            await self._writer.drain()
            return await answered
        except asyncio.CancelledError:
            if not self.closed:
                self._writer.write(frame(number, CANCEL))
            raise
        except (OSError, RuntimeError) as exc:  # the connection failed as the call was written
            raise LinkLost(str(exc)) from None
        finally:
            self._waiting.pop(number, None)

    async def stream(
        self, method: str, request: bytes, metadata: Sequence[tuple[str, str]], timeout: float | None
    ) -> LinkStream:
        """Open a server stream on the owner; close it with ``end_stream``."""
        number = self._new_number()
        stream = self._streams[number] = LinkStream(self, number)
        try:
            opened = _opening(number, STREAM, method, timeout, request, metadata)
            self._writer.write(opened + credit_frame(number, STREAM_WINDOW))
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            self._streams.pop(number, None)
            raise LinkLost(str(exc)) from None
        except asyncio.CancelledError:
            self.end_stream(stream)
            raise
        return stream

    def send(self, data: bytes) -> None:
        if not self.closed:
            self._writer.write(data)

    async def client_stream(
        self, method: str, messages: AsyncIterator[bytes], metadata: Sequence[tuple[str, str]], timeout: float | None
    ) -> LinkAnswer:
        """The owner's answer to a client stream of ``messages``, sent as the owner grants them
        (an answer before the last, such as a refusal of the first, ends the sending); cancelled,
        the owner is told to cancel it too. An error of ``messages`` is raised as it came."""
        number = self._new_number()
        answered: asyncio.Future[LinkAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answered
        credit = self._sending[number] = Credit()
        sending: asyncio.Future[None] | None = None
        try:
            self._writer.write(_opening(number, INPUT, method, timeout, b"", metadata))
            sending = asyncio.ensure_future(self._send_messages(number, messages, credit))
            either: set[asyncio.Future[Any]] = {answered, sending}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not answered.done():
                sending.result()  # the caller's messages failed: their error, the owner cancelled
            return await answered
        except BaseException as exc:
            if not self.closed:
                self._writer.write(frame(number, CANCEL))
            if isinstance(exc, (OSError, RuntimeError)):  # the connection failed as it was written
                raise LinkLost(str(exc)) from None
            raise
        finally:
            self._waiting.pop(number, None)
            self._sending.pop(number, None)
            if sending is not None:
                sending.cancel()
                if sending.done() and not sending.cancelled():
                    sending.exception()  # retrieved: an answer that came first made it moot

    async def _send_messages(self, number: int, messages: AsyncIterator[bytes], credit: Credit) -> None:
        async for message in messages:
            await credit.take()
            self._writer.write(frame(number, MESSAGE, message))
            await self._writer.drain()
        self._writer.write(frame(number, END))

    def end_stream(self, stream: LinkStream) -> None:
        """The entry is done with ``stream``: the owner is told to cancel it unless it ended."""
        self._streams.pop(stream.number, None)
        if not stream.ended and not self.closed:
            self._writer.write(frame(stream.number, CANCEL))

    async def _read(self) -> None:
        try:
            while True:
                number, kind, body = await read_frame(self._reader, MAX_FRAME_BYTES)
                stream = self._streams.get(number)
                if stream is not None and kind in (HEAD, MESSAGE, END):
                    stream.deliver(kind, body)
                    continue
                credit = self._sending.get(number)
                if credit is not None and kind == CREDIT:
                    credit.grant(granted(body))
                    continue
                answered = self._waiting.get(number)
                if kind == ANSWER and answered is not None and not answered.done():
                    status, response, initial, trailing = unpack(body)
                    answered.set_result(
                        LinkAnswer(status, response, unpack_metadata(initial), unpack_metadata(trailing))
                    )
        except (OSError, EOFError, ValueError) as exc:
            log.info("the member link closed: %s", exc or type(exc).__name__)
        finally:
            self._lose()

    def _lose(self) -> None:
        self.closed = True
        for answered in self._waiting.values():
            if not answered.done():
                answered.set_exception(LinkLost("the member link closed while the call was on it"))
        for stream in self._streams.values():
            stream.deliver(_LOST, b"")
        self._writer.close()

    async def close(self) -> None:
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


class MemberLinks:
    """The entry's links to the other members, each connected in the background once its member
    told its port; ``ready`` gives one only while it is connected."""

    def __init__(self, addresses: Mapping[str, str], key: bytes, tls: LinkTls | None) -> None:
        self._addresses = addresses
        self._key = key
        self._tls = tls
        self._links: dict[str, MemberLink] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}
        self._retry_at: dict[str, float] = {}

    def ready(self, member: str) -> MemberLink | None:
        link = self._links.get(member)
        return link if link is not None and not link.closed else None

    def told(self, member: str, port_text: str) -> None:
        """``member`` answered a gRPC hop with its link port: connect, unless connected or
        connecting, or a failure is recent."""
        if self.ready(member) is not None or member in self._connecting:
            return
        if time.monotonic() < self._retry_at.get(member, 0.0) or not port_text.isdigit():
            return
        port = int(port_text)
        if not 0 < port < 65_536:
            return
        task = asyncio.ensure_future(self._connect(member, port))
        self._connecting[member] = task
        task.add_done_callback(lambda _: self._connecting.pop(member, None))

    async def _connect(self, member: str, port: int) -> None:
        host = self._addresses[member].rsplit(":", 1)[0].strip("[]")
        try:
            self._links[member] = await MemberLink.connect(host, port, self._key, self._tls)
            log.info("member link to %s (%s:%d) connected", member, host, port)
        except (OSError, TimeoutError) as exc:  # refused, unreachable, TLS, the key refused
            self._retry_at[member] = time.monotonic() + _RETRY_SECONDS
            log.warning(
                "cannot connect the member link to %s (%s:%d): %s; its calls stay gRPC calls for %.0fs",
                member,
                host,
                port,
                exc or type(exc).__name__,
                _RETRY_SECONDS,
            )

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
