"""The owner's end of the member link (transport/cluster/link.py): the unary calls and server
streams other members forward here, each answered through the edge as any call
(transport/edge.py) and its answer framed back on the connection it came by; a stream's messages
no faster than its entry grants them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2

from mnemosyne.transport.call import Call
from mnemosyne.transport.cluster.link import (
    ANSWER,
    CALL,
    CANCEL,
    CONNECT_SECONDS,
    CREDIT,
    END,
    HEAD,
    HELLO,
    MAX_FRAME_BYTES,
    MAX_HELLO_BYTES,
    MESSAGE,
    STREAM,
    LinkTls,
    frame,
    pack,
    pack_metadata,
    read_frame,
    unpack,
    unpack_metadata,
)
from mnemosyne.transport.edge import Edge, Kind, decoder, kind_of
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
        # The unary methods and the server streams (Kind.STREAM), each with its request decoder.
        self._methods: dict[str, tuple[Callable[..., Any], Kind, Callable[[bytes], Any]]] = {}
        for service in services:
            for method in service.methods:
                if not method.client_streaming:
                    path = f"/{service.full_name}/{method.name}"
                    implementation = getattr(servicers[service.name], method.name)
                    request_type = message_factory.GetMessageClass(method.input_type)
                    decode = decoder(request_type.FromString, path, edge.max_request_bytes)
                    self._methods[path] = (implementation, kind_of(implementation), decode)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int, tls: LinkTls | None) -> int:
        self._server = await asyncio.start_server(
            self._serve, host.strip("[]"), port, ssl=tls.server_context() if tls is not None else None
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
        calls: dict[int, asyncio.Task[None]] = {}
        credits: dict[int, _Credit] = {}  # of the open streams
        try:
            _, kind, key = await asyncio.wait_for(read_frame(reader, MAX_HELLO_BYTES), CONNECT_SECONDS)
            if kind != HELLO or not hmac.compare_digest(key, self._key):
                log.warning("a member link connection without this deployment's member key: closed")
                return
            writer.write(frame(0, HELLO))
            while True:
                number, kind, body = await read_frame(reader, MAX_FRAME_BYTES)
                if kind in (CALL, STREAM) and number not in calls:
                    credit = _Credit() if kind == STREAM else None
                    if credit is not None:
                        credits[number] = credit
                    task = asyncio.ensure_future(self._answer(number, body, writer, credit))
                    calls[number] = task
                    task.add_done_callback(functools.partial(_forget, calls, credits, number))
                elif kind == CANCEL and number in calls:
                    calls[number].cancel()
                elif kind == CREDIT and number in credits:
                    credits[number].grant(int.from_bytes(body[:4], "big"))
        except (OSError, EOFError, ValueError, TimeoutError):
            pass  # the entry went away or broke the protocol: its calls are cancelled below
        finally:
            self._connections.discard(connection)
            for task in list(calls.values()):
                task.cancel()
            writer.close()

    def _known(self, number: int, body: bytes, writer: asyncio.StreamWriter, *, stream: bool) -> _Asked | None:
        """What a CALL or STREAM frame asks, or None when it was answered here: a body that does
        not parse closes the connection (not a member speaking this protocol); a method this
        member does not serve so is refused UNIMPLEMENTED (a member of another version)."""
        try:
            head, packed_metadata = unpack(body)
            method_bytes, timeout_text, request_bytes = unpack(head)
            metadata = unpack_metadata(packed_metadata)
            method = method_bytes.decode()
            timeout = float(timeout_text) if timeout_text else None
        except (ValueError, UnicodeDecodeError):
            writer.close()
            return None
        known = self._methods.get(method)
        if known is None or (known[1] is Kind.STREAM) != stream:
            _refuse(writer, number, _unimplemented(method), stream=stream)
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        return _Asked(method, metadata, deadline, request_bytes, *known)

    async def _answer(self, number: int, body: bytes, writer: asyncio.StreamWriter, credit: _Credit | None) -> None:
        """A CALL (``credit`` None: one ANSWER) or a STREAM (HEAD with its first message, each
        message as its entry's ``credit`` allows, then END), run through the edge as any call; a
        refusal is an ANSWER or END with its status, and an entry gone is a client gone."""
        asked = self._known(number, body, writer, stream=credit is not None)
        if asked is None:
            return
        edge = self._edge
        sent_request_id = next((v for k, v in asked.metadata if k == "x-request-id"), None)
        async with edge.envelope(asked.method, sent_request_id, _refusal, asked.metadata) as envelope:
            request = asked.decode(asked.request_bytes)
            call = edge.begin(asked.method, request, asked.metadata, asked.deadline)
            call.answers_bytes = True  # a call forwarded on (a moved tenant) passes its bytes through
            if credit is None:
                response = await edge.answer(asked.kind, asked.implementation, request, call)
                data = response if isinstance(response, bytes) else response.SerializeToString()
                _answer_with(writer, number, b"", data, call.initial_metadata, call.trailing_metadata)
            else:
                await _streamed(writer, number, edge.answer_stream(asked.implementation, request, call), call, credit)
            return
        refusal: status_pb2.Status | None = envelope.refusal
        if refusal is not None:  # None: the call ended with nobody to answer
            _refuse(writer, number, refusal.SerializeToString(), stream=credit is not None)


async def _streamed(
    writer: asyncio.StreamWriter, number: int, messages: AsyncGenerator[Any, None], call: Call, credit: _Credit
) -> None:
    head = True  # the initial metadata is still to send (with the first message, in one write)
    async with contextlib.aclosing(messages):
        async for message in messages:
            await credit.take()
            data = message if isinstance(message, bytes) else message.SerializeToString()
            await _sent(writer, _head(number, call) * head + frame(number, MESSAGE, data))
            head = False
    _send(writer, _head(number, call) * head + frame(number, END, pack([b"", pack_metadata(call.trailing_metadata)])))


def _refuse(writer: asyncio.StreamWriter, number: int, status: bytes, *, stream: bool) -> None:
    if stream:
        _send(writer, frame(number, END, pack([status, pack_metadata([])])))
    else:
        _answer_with(writer, number, status, b"", [], [])


def _head(number: int, call: Call) -> bytes:
    return frame(number, HEAD, pack_metadata(call.initial_metadata))


class _Asked(NamedTuple):
    method: str
    metadata: list[tuple[str, str]]
    deadline: float | None
    request_bytes: bytes
    implementation: Callable[..., Any]
    kind: Kind
    decode: Callable[[bytes], Any]


class _Credit:
    """The messages a stream's entry will take (it grants them with CREDIT frames)."""

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


def _forget(calls: dict[int, asyncio.Task[None]], credits: dict[int, _Credit], number: int, _: object) -> None:
    calls.pop(number, None)
    credits.pop(number, None)


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
