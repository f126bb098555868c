"""The owner's end of the member link (transport/cluster/link.py): the calls other members
forward here (unary, server and client streams), each answered through the edge as any call
(transport/edge.py) and its answer framed back on the connection it came by; a server stream's
messages no faster than its entry grants them, a client stream's granted as they are read."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2

from mnemosyne.transport.call import Call, metadata_value
from mnemosyne.transport.cluster.link import (
    ANSWER,
    CALL,
    CANCEL,
    CONNECT_SECONDS,
    CREDIT,
    END,
    HEAD,
    HELLO,
    INPUT,
    MAX_FRAME_BYTES,
    MAX_HELLO_BYTES,
    MESSAGE,
    STREAM,
    STREAM_WINDOW,
    Credit,
    LinkTls,
    credit_frame,
    frame,
    granted,
    pack,
    pack_metadata,
    read_frame,
    unpack,
    unpack_metadata,
)
from mnemosyne.transport.edge import Edge, Kind, client_stream_requests, decoder, kind_of
from mnemosyne.transport.envelope import CallEnvelope, ClientLeft

log = logging.getLogger("mnemosyne.cluster")


class LinkServer:
    """The owner's end: the unary methods of ``services`` answered through ``edge``."""

    def __init__(
        self,
        edge: Edge,
        services: Sequence[descriptor.ServiceDescriptor],
        servicers: Mapping[str, object],
        key: bytes,
    ) -> None:
        self._edge = edge
        self._key = key
        # Every method: the frame that opens it (CALL, STREAM: a server stream, INPUT: a client
        # stream), its servicer method and kind, its request decoder.
        self._methods: dict[str, _Method] = {}
        for service in services:
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                implementation = getattr(servicers[service.name], method.name)
                request_type = message_factory.GetMessageClass(method.input_type)
                decode = decoder(request_type.FromString, path, edge.max_request_bytes)
                opened_by = INPUT if method.client_streaming else STREAM if method.server_streaming else CALL
                self._methods[path] = _Method(opened_by, implementation, kind_of(implementation), decode)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int, tls: LinkTls | None) -> int:
        # The hello must come within CONNECT_SECONDS of the handshake, and the TLS handshake within
        # as long (asyncio's own bound is a minute, a descriptor held each meanwhile).
        self._server = await asyncio.start_server(
            self._serve,
            host.strip("[]"),
            port,
            ssl=tls.server_context() if tls is not None else None,
            ssl_handshake_timeout=CONNECT_SECONDS if tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and close every connection (their calls are cancelled)."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = asyncio.current_task()
        assert connection is not None
        self._connections.add(connection)
        calls: dict[int, tuple[asyncio.Task[None], _Exchange]] = {}
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                _, kind, key = await read_frame(reader, MAX_HELLO_BYTES)
            if kind != HELLO or not hmac.compare_digest(key, self._key):
                log.warning("a member link connection without this deployment's member key: closed")
                return
            writer.write(frame(0, HELLO))
            while True:
                number, kind, body = await read_frame(reader, MAX_FRAME_BYTES)
                if kind in (CALL, STREAM, INPUT) and number not in calls:
                    exchange = _Exchange(kind, number, writer)
                    task = asyncio.ensure_future(self._answer(exchange, body))
                    calls[number] = task, exchange
                    task.add_done_callback(functools.partial(_forget, calls, number))
                elif number in calls:  # what the entry sends on a call it opened
                    task, exchange = calls[number]
                    if kind == CANCEL:
                        task.cancel()
                    elif kind == CREDIT and exchange.credit is not None:
                        exchange.credit.grant(granted(body))
                    elif kind in (MESSAGE, END) and exchange.inbox is not None:
                        exchange.inbox.deliver(kind, body)
        except (OSError, EOFError, ValueError, TimeoutError):
            pass  # the entry went away or broke the protocol: its calls are cancelled below
        except asyncio.CancelledError:
            # ``close``: the connection ends here. Ended by cancellation, Python 3.11's
            # start_server would log it as an unhandled exception (its callback asks a cancelled
            # task for its exception; fixed in 3.12).
            pass
        finally:
            self._connections.discard(connection)
            for task, _ in list(calls.values()):
                task.cancel()
            writer.close()

    def _known(self, exchange: _Exchange, body: bytes) -> _Asked | None:
        """What an opening frame asks, or None when it was answered here: a body that does not
        parse closes the connection (not a member speaking this protocol); a method this member
        does not serve so is refused UNIMPLEMENTED (a member of another version)."""
        try:
            head, packed_metadata = unpack(body)
            method_bytes, timeout_text, request_bytes = unpack(head)
            metadata = unpack_metadata(packed_metadata)
            method = method_bytes.decode()
            timeout = float(timeout_text) if timeout_text else None
        except (ValueError, UnicodeDecodeError):
            exchange.writer.close()
            return None
        known = self._methods.get(method)
        if known is None or known.opened_by != exchange.opened_by:
            exchange.refuse(_unimplemented(method))
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        return _Asked(method, metadata, deadline, request_bytes, known)

    async def _answer(self, exchange: _Exchange, body: bytes) -> None:
        """A call, as its opening frame asks: CALL, one ANSWER; STREAM, HEAD with its first
        message, each message as its entry's credit allows, then END; INPUT, the messages as they
        come (the first authorised as a unary call's request), then one ANSWER. Run through the
        edge as any call; a refusal is an ANSWER or END with its status, and an entry gone is a
        client gone."""
        asked = self._known(exchange, body)
        if asked is None:
            return
        edge, method = self._edge, asked.method
        sent_request_id = metadata_value(asked.metadata, "x-request-id")
        async with edge.envelope(asked.path, sent_request_id, _refusal, asked.metadata) as envelope:
            if exchange.inbox is not None:
                first, rest = await exchange.inbox.first_and_rest(method.decode)
                request = first if first is not None else method.decode(b"")
            else:
                request = method.decode(asked.request_bytes)
            call = edge.begin(asked.path, request, asked.metadata, asked.deadline)
            call.answers_bytes = True  # a call forwarded on (a moved tenant) passes its bytes through
            if exchange.credit is not None:
                messages = edge.answer_stream(method.implementation, request, call)
                # Waiting for its entry's credit is cut too when a shutdown's grace period ends.
                with edge.admission.cut_when_calls_end():
                    await _streamed(exchange.writer, exchange.number, messages, call, exchange.credit)
                return
            if exchange.inbox is not None:
                requests = client_stream_requests(first, rest)
                response = await edge.answer_client_stream(method.implementation, requests, call)
            else:
                response = await edge.answer(method.kind, method.implementation, request, call)
            data = response if isinstance(response, bytes) else response.SerializeToString()
            _answer_with(exchange.writer, exchange.number, b"", data, call.initial_metadata, call.trailing_metadata)
            return
        refusal: status_pb2.Status | None = envelope.refusal
        if refusal is not None:  # None: the call ended with nobody to answer
            exchange.refuse(refusal.SerializeToString())


async def _streamed(
    writer: asyncio.StreamWriter, number: int, messages: AsyncGenerator[Any, None], call: Call, credit: Credit
) -> None:
    head = True  # the initial metadata is still to send (with the first message, in one write)
    async with contextlib.aclosing(messages):
        async for message in messages:
            await credit.take()
            data = message if isinstance(message, bytes) else message.SerializeToString()
            await _sent(writer, _head(number, call) * head + frame(number, MESSAGE, data))
            head = False
    _send(writer, _head(number, call) * head + frame(number, END, pack([b"", pack_metadata(call.trailing_metadata)])))


def _head(number: int, call: Call) -> bytes:
    return frame(number, HEAD, pack_metadata(call.initial_metadata))


class _Method(NamedTuple):
    opened_by: int  # CALL, STREAM or INPUT
    implementation: Callable[..., Any]
    kind: Kind
    decode: Callable[[bytes], Any]


class _Asked(NamedTuple):
    path: str
    metadata: list[tuple[str, str]]
    deadline: float | None
    request_bytes: bytes  # a client stream's come as its MESSAGE frames
    method: _Method


class _Inbox:
    """A client stream's messages as its entry sends them, granted ``STREAM_WINDOW`` ahead of
    their reading (so at most that many wait here)."""

    def __init__(self, writer: asyncio.StreamWriter, number: int) -> None:
        self._writer, self._number = writer, number
        self._frames: collections.deque[tuple[int, bytes]] = collections.deque()
        self._arrived = asyncio.Event()
        self._read = 0
        _send(writer, credit_frame(number, STREAM_WINDOW))

    def deliver(self, kind: int, body: bytes) -> None:
        self._frames.append((kind, body))
        self._arrived.set()

    async def first_and_rest(self, decode: Callable[[bytes], Any]) -> tuple[Any, AsyncIterator[Any]]:
        """The first request (None: the stream ended before it) and the rest, decoded (what
        cannot be decoded as the decoder's refusal, ``Undecodable``)."""
        rest = self._requests(decode)
        return await anext(rest, None), rest

    async def _requests(self, decode: Callable[[bytes], Any]) -> AsyncIterator[Any]:
        while True:
            while not self._frames:
                self._arrived.clear()
                await self._arrived.wait()
            kind, body = self._frames.popleft()
            if kind == END:
                return
            self._read += 1
            if self._read >= STREAM_WINDOW // 2:
                _send(self._writer, credit_frame(self._number, self._read))
                self._read = 0
            yield decode(body)


class _Exchange:
    """One call on a connection: its number, the frame that opened it, and what it needs."""

    def __init__(self, opened_by: int, number: int, writer: asyncio.StreamWriter) -> None:
        self.opened_by, self.number, self.writer = opened_by, number, writer
        self.credit = Credit() if opened_by == STREAM else None  # the messages its entry will take
        self.inbox = _Inbox(writer, number) if opened_by == INPUT else None

    def refuse(self, status: bytes) -> None:
        """The call's refusal, as its kind answers (a stream's END, else an ANSWER)."""
        if self.opened_by == STREAM:
            _send(self.writer, frame(self.number, END, pack([status, pack_metadata([])])))
        else:
            _answer_with(self.writer, self.number, status, b"", [], [])


def _send(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """Write ``data`` unless the connection is closing; whether it was written."""
    if writer.is_closing():
        return False
    writer.write(data)
    return True


async def _sent(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write a stream's message and wait for the connection to take it; the entry gone ends the
    stream as a client gone."""
    if not _send(writer, data):
        raise ClientLeft()
    try:
        await writer.drain()
    except (OSError, RuntimeError):
        raise ClientLeft() from None


async def _refusal(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> status_pb2.Status:
    """A refusal on the link: its status, sent back as the answer."""
    return status


def _forget(calls: dict[int, Any], number: int, _: object) -> None:
    calls.pop(number, None)


def _unimplemented(method: str) -> bytes:
    status = status_pb2.Status(code=12, message=f"this member does not serve {method} on the member link")
    data: bytes = status.SerializeToString()
    return data


def _answer_with(
    writer: asyncio.StreamWriter,
    number: int,
    status: bytes,
    response: bytes,
    initial: Sequence[tuple[str, str]],
    trailing: Sequence[tuple[str, str]],
) -> None:
    _send(writer, frame(number, ANSWER, pack([status, response, pack_metadata(initial), pack_metadata(trailing)])))
