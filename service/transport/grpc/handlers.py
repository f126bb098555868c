"""The gRPC form of the edge: every method of a service as a grpc.aio handler, made once when the
services are registered (no interceptor runs per call). Each call runs in its envelope
(transport/envelope.py) through the edge's steps (transport/edge.py); a refusal is an abort with
the ``google.rpc.Status`` of the one table, its details in ``grpc-status-details-bin``.

* a request that cannot be decoded, or is above the size limit, reaches the edge as its refusal
  (``edge.decoder``), raised once the caller is authenticated;
* the request id's echo is merged into the call's initial metadata (a call has only one);
* a forwarded call's response passes through as the owner's bytes (``answers_bytes``);
* a server stream whose client takes none of it for the send stall's bound is ended
  (transport/send_stall.py), what it holds freed at once (``_write``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import ExitStack, aclosing
from functools import partial
from typing import Any

import grpc
from google.protobuf import descriptor, message_factory
from google.rpc import status_pb2
from grpc._cython.cygrpc import ExecuteBatchError  # a message's send failed: grpc.aio raises it as is

from mnemosyne.errors import ResourceExhausted, Unavailable, Unimplemented
from mnemosyne.transport.call import Call, metadata_value
from mnemosyne.transport.edge import Edge, client_stream_requests, decoder, kind_of
from mnemosyne.transport.envelope import CallEnvelope, ClientLeft
from mnemosyne.transport.errors import rich_status, to_status_proto
from mnemosyne.transport.send_stall import StreamNotRead, not_read

Context = grpc.aio.ServicerContext[Any, Any]
# How long a refusal is waited for: sent after the messages before it, it is left to gRPC past
# this, sent should a client that takes none of them read on.
STATUS_SECONDS = 1.0


def service_handlers(edge: Edge, service: descriptor.ServiceDescriptor, servicer: object) -> grpc.GenericRpcHandler:
    """The gRPC handlers of every method of ``service``, each wrapped by the edge."""
    handlers = {}
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        request_type = message_factory.GetMessageClass(method.input_type)
        serialize = _serializer(message_factory.GetMessageClass(method.output_type))
        decode = decoder(request_type.FromString, path, edge.max_request_bytes)
        implementation = getattr(servicer, method.name)
        if method.client_streaming:
            handler = _client_stream(edge, path, implementation, request_type)
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                handler, request_deserializer=decode, response_serializer=serialize
            )
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _stream(edge, path, implementation), request_deserializer=decode, response_serializer=serialize
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(edge, path, implementation), request_deserializer=decode, response_serializer=serialize
            )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class UnknownMethods(grpc.GenericRpcHandler):
    """The last handler: a method no service of this server has (a typo, a client of another
    version, a scanner) is refused UNIMPLEMENTED / METHOD_NOT_FOUND naming it, where gRPC's own
    answer is a bare "Method not found!" with no reason to branch on. Outside the edge: nothing is
    read, authorised or recorded (the metrics' method label only takes our methods' names)."""

    def __init__(self, served: Sequence[str]) -> None:
        self._served = ", ".join(served)

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes]:
        method = handler_call_details.method[:200]
        error = Unimplemented(
            f"no method {method!r} on this server: its services are {self._served} (server reflection lists them)",
            reason="METHOD_NOT_FOUND",
        )
        refusal = rich_status(to_status_proto(error))

        async def refuse(requests: AsyncIterator[bytes], context: Context) -> None:
            await context.abort(refusal.code, refusal.details, refusal.trailing_metadata)

        # A stream both ways answers a call of any kind; the request's bytes are never read.
        return grpc.stream_stream_rpc_method_handler(refuse)


def _unary(edge: Edge, method: str, implementation: Callable[..., Any]) -> Callable[..., Any]:
    kind = kind_of(implementation)

    async def handle(request: Any, context: Context) -> Any:
        metadata, request_id = _metadata(context)
        async with edge.envelope(method, request_id, partial(_abort, context), metadata) as envelope:
            call = _begin(edge, method, request, context, metadata)
            response = await edge.answer(kind, implementation, request, call)
            if (sending := _set_metadata(context, call, envelope)) is not None:
                await sending
            return response

    return handle


def _client_stream(
    edge: Edge, method: str, implementation: Callable[..., Awaitable[Any]], request_type: Callable[[], Any]
) -> Callable[..., Any]:
    """A client stream (ImportTenant): its first message is admitted and authorised as a unary
    call's request is, and the servicer reads the messages (that one first) as an async
    iterator; a message that cannot be decoded ends the call with its refusal. Counted and
    bounded as an open stream. gRPC only (there is no JSON form of a client stream)."""

    async def handle(requests: AsyncIterator[Any], context: Context) -> Any:
        metadata, request_id = _metadata(context)
        async with edge.envelope(method, request_id, partial(_abort, context), metadata) as envelope:
            stream = requests.__aiter__()
            first = await anext(stream, None)
            call = _begin(edge, method, first if first is not None else request_type(), context, metadata)
            messages = client_stream_requests(first, stream)
            response = await edge.answer_client_stream(implementation, messages, call)
            if (sending := _set_metadata(context, call, envelope)) is not None:
                await sending
            return response

    return handle


def _stream(edge: Edge, method: str, implementation: Callable[..., AsyncGenerator[Any, None]]) -> Callable[..., Any]:
    """A server stream, written by the handler itself (not yielded to gRPC, which leaves a stream
    whose send failed suspended until garbage collection): however it ends, the stream's
    generators are closed at once, so what they hold (a place, a scratch copy) goes with them."""

    async def handle(request: Any, context: Context) -> None:
        metadata, request_id = _metadata(context)
        async with edge.envelope(method, request_id, partial(_abort, context), metadata) as envelope:
            call = _begin(edge, method, request, context, metadata)
            # A write its client does not take yet is cut too when a shutdown's grace period ends.
            with edge.admission.cut_when_calls_end():
                try:
                    async with aclosing(edge.answer_stream(implementation, request, call)) as messages:
                        async for message in messages:
                            if not envelope.answered:
                                await _send_initial(context, call.initial_metadata, envelope)
                            await _write(context, message, call, edge.send_stall_seconds)
                except StreamNotRead:
                    _counted_until_its_call_ends(edge, call, context)
                    raise
            if not envelope.answered:
                await _send_initial(context, call.initial_metadata, envelope)

    return handle


async def _write(context: Context, message: Any, call: Call, seconds: float) -> None:
    """One message of a server stream, which gRPC's flow control holds until its client takes
    what came before. One its client takes none of for ``seconds`` (SEND_STALL_SECONDS) ends the
    stream STREAM_NOT_READ: raised here, it closes the stream's generators at once, and with them
    what they hold (a scratch copy, an export's place; ``_counted_until_its_call_ends``). gRPC
    lets a message through once its client read about half of what its windows hold: a client
    reading slowly lets one through within it."""
    try:
        async with asyncio.timeout(seconds):
            await context.write(message)
    except ExecuteBatchError as error:  # the client left as it was sent (else: cancelled)
        raise ClientLeft from error
    except TimeoutError:
        raise not_read(call.method, call.tenant, seconds) from None


def _counted_until_its_call_ends(edge: Edge, call: Call, context: Context) -> None:
    """A stream ended unread stays counted, as a call and in ``--streams-per-tenant``, until gRPC
    ends it (its client reads on, cancels or goes): gRPC, which the server cannot make drop a
    call, holds its message not taken meanwhile (an export's chunk: megabytes), so however many
    streams a tenant's clients leave unread, they hold no more than that limit allows. Taken once
    the stream's generators closed and gave their place back: not taken should another stream of
    the tenant have taken that place meanwhile, or the server begun to stop."""
    held = ExitStack()
    try:
        edge.admission.enter()
        held.callback(edge.admission.leave)
        held.enter_context(edge.admission.stream(call.tenant))
    except (ResourceExhausted, Unavailable):
        held.close()
        return
    context.add_done_callback(lambda _context: held.close())  # type: ignore[arg-type]  # the stubs want their own class


def _begin(edge: Edge, method: str, request: Any, context: Context, metadata: list[tuple[str, str]]) -> Call:
    remaining = context.time_remaining()
    call = edge.begin(method, request, metadata, time.monotonic() + remaining if remaining is not None else None)
    call.answers_bytes = True  # a forwarded call's response passes through as the owner's bytes
    return call


async def _abort(context: Context, envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> None:
    """Answer with the error's status (abort raises, ending the call)."""
    if not envelope.answered:
        await _send_initial(context, (), envelope)
    rich = rich_status(status)
    try:
        async with asyncio.timeout(STATUS_SECONDS):  # a client taking none of a stream holds it back
            await context.abort(rich.code, rich.details, rich.trailing_metadata)
    except (TimeoutError, ExecuteBatchError):  # ExecuteBatchError: the client left meanwhile
        pass  # the abort begun, gRPC ends the call with it (not with OK) once the handler returns


async def _send_initial(context: Context, metadata: Sequence[tuple[str, str]], envelope: CallEnvelope) -> None:
    """The call's initial metadata with the request id's echo (sent once: the answer began)."""
    envelope.answered = True
    sent = (*metadata, *envelope.echo)
    if sent:
        await context.send_initial_metadata(sent)


def _set_metadata(context: Context, call: Call, envelope: CallEnvelope) -> Awaitable[None] | None:
    """A unary answer's trailing metadata set, and the sending of its initial metadata to await
    when it has any (None without: most calls, which then skip a coroutine; gRPC sends empty
    initial metadata with the response)."""
    if call.trailing_metadata:
        context.set_trailing_metadata(tuple(call.trailing_metadata))
    if call.initial_metadata or envelope.echo:
        return _send_initial(context, call.initial_metadata, envelope)
    envelope.answered = True
    return None


def _serializer(response_type: Any) -> Callable[[Any], bytes]:
    """The response serializer, passing through the bytes of a forwarded call's response."""
    serialize = response_type.SerializeToString

    def serialized(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialized


def _metadata(context: Context) -> tuple[list[tuple[str, str]], str | None]:
    """The call's metadata as text, read once per call (``begin`` uses it), and the request id
    the client sent in it."""
    metadata = [
        (k, v if isinstance(v, str) else v.decode("ascii", "replace")) for k, v in context.invocation_metadata() or ()
    ]
    return metadata, metadata_value(metadata, "x-request-id")
