"""The owner's end of the member link (transport/cluster/link.py): the unary calls other members
forward here, each answered through the edge as any call (transport/edge.py) and its answer framed
back on the connection it came by."""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2

from mnemosyne.transport.cluster.link import (
    ANSWER,
    CALL,
    CANCEL,
    CONNECT_SECONDS,
    HELLO,
    MAX_FRAME_BYTES,
    MAX_HELLO_BYTES,
    LinkTls,
    frame,
    pack,
    pack_metadata,
    read_frame,
    unpack,
    unpack_metadata,
)
from mnemosyne.transport.edge import Edge, Kind, decoder, kind_of
from mnemosyne.transport.envelope import CallEnvelope

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
        self._methods: dict[str, tuple[Callable[..., Any], Kind, Callable[[bytes], Any]]] = {}
        for service in services:
            for method in service.methods:
                if not (method.client_streaming or method.server_streaming):
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
        try:
            _, kind, key = await asyncio.wait_for(read_frame(reader, MAX_HELLO_BYTES), CONNECT_SECONDS)
            if kind != HELLO or not hmac.compare_digest(key, self._key):
                log.warning("a member link connection without this deployment's member key: closed")
                return
            writer.write(frame(0, HELLO))
            while True:
                number, kind, body = await read_frame(reader, MAX_FRAME_BYTES)
                if kind == CALL and number not in calls:
                    task = asyncio.ensure_future(self._answer(number, body, writer))
                    calls[number] = task
                    task.add_done_callback(functools.partial(_forget, calls, number))
                elif kind == CANCEL and number in calls:
                    calls[number].cancel()
        except (OSError, EOFError, ValueError, TimeoutError):
            pass  # the entry went away or broke the protocol: its calls are cancelled below
        finally:
            self._connections.discard(connection)
            for task in list(calls.values()):
                task.cancel()
            writer.close()

    async def _answer(self, number: int, body: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            head, packed_metadata = unpack(body)
            method_bytes, timeout_text, request_bytes = unpack(head)
            metadata = unpack_metadata(packed_metadata)
            method = method_bytes.decode()
            timeout = float(timeout_text) if timeout_text else None
        except (ValueError, UnicodeDecodeError):
            writer.close()  # not a member speaking this protocol
            return
        known = self._methods.get(method)
        if known is None:  # a member of another version: the entry relays the refusal
            _answer_with(writer, number, _unimplemented(method), b"", [], [])
            return
        implementation, kind, decode = known
        edge = self._edge
        sent_request_id = next((v for k, v in metadata if k == "x-request-id"), None)
        async with edge.envelope(method, sent_request_id, _refusal, metadata) as envelope:
            request = decode(request_bytes)
            deadline = None if timeout is None else time.monotonic() + timeout
            call = edge.begin(method, request, metadata, deadline)
            call.answers_bytes = True  # a call forwarded on (a moved tenant) passes its bytes through
            response = await edge.answer(kind, implementation, request, call)
            data = response if isinstance(response, bytes) else response.SerializeToString()
            _answer_with(writer, number, b"", data, call.initial_metadata, call.trailing_metadata)
            return
        refusal: status_pb2.Status | None = envelope.refusal
        if refusal is not None:  # None: the call ended with nobody to answer
            _answer_with(writer, number, refusal.SerializeToString(), b"", [], [])


async def _refusal(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> status_pb2.Status:
    """A refusal on the link: its status, sent back as the answer."""
    return status


def _forget(calls: dict[int, asyncio.Task[None]], number: int, _: object) -> None:
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
    if not writer.is_closing():
        writer.write(frame(number, ANSWER, pack([status, response, pack_metadata(initial), pack_metadata(trailing)])))
