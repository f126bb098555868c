"""The HTTP/JSON API: every RPC at its ``google.api.http`` route (transport/http/mapping.py),
answered by the same servicers through the same edge as gRPC (transport/edge.py: admission,
authentication, authorisation, the error table), so a rule is never written twice.

* Requests: ``Authorization: Bearer <token>`` as over gRPC; the other headers are the call's
  metadata (``x-request-id``, the observed generations of UpdateGlobal and UpdateWorkspace,
  ``mnemosyne-ask-server-time``). A body above twice ``max_request_bytes`` is refused unread (413
  REQUEST_TOO_LARGE); the decoded request is held to the gRPC limit.
* Responses: 200 with the response's proto3 JSON; the call's response and trailing metadata
  (AssembleContext's generations, ``mnemosyne-server-time-us`` when asked) as headers.
* Errors: ``google.rpc.Status`` JSON (code, message, ``ErrorInfo`` with the reason, ``RetryInfo``)
  with the HTTP status of the standard table (transport/errors.py); a retryable refusal also
  carries ``Retry-After`` (whole seconds, rounded up).
* Server streams (WatchEvents, AggregateStats) are Server-Sent Events: one ``data:`` line of JSON
  per message, with ``id:`` the message's ``sequence`` when it has one; ``Last-Event-ID`` (the
  last id a client saw) sets the request's ``after_sequence``, so a reconnect resumes where the
  dropped connection ended. A comment line every 15 s keeps idle connections open through
  proxies; an error after the stream started is a last event named ``status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from google.rpc import status_pb2
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mnemosyne.errors import MnemosyneError
from mnemosyne.transport.call import Call
from mnemosyne.transport.edge import Edge, Kind, Undecodable, body_too_large, kind_of
from mnemosyne.transport.envelope import CallEnvelope, ClientLeft, Refuse
from mnemosyne.transport.errors import http_status
from mnemosyne.transport.http.mapping import Route, Router, decode, encode
from mnemosyne.transport.http.methods import method_not_allowed
from mnemosyne.transport.http.paths import OPENAPI_PATH

KEEPALIVE_SECONDS = 15.0
UNROUTED = "(no route)"  # the metric label of requests that matched no route
_RESUME_FIELD = "after_sequence"  # set from Last-Event-ID
_END = object()  # the stream ended
_GONE = object()  # the client went away


def _headers(call: Call, echo: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The call's response and trailing metadata, and the request id's echo, as headers."""
    return dict((*call.initial_metadata, *call.trailing_metadata, *echo))


def error_headers(error: BaseException, echo: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The headers an error answers with over HTTP: the request id's echo, ``Retry-After`` (in
    whole seconds, rounded up) and ``Allow``."""
    headers = dict(echo)
    if isinstance(error, MnemosyneError):
        if error.retry_after_seconds is not None:
            headers["retry-after"] = str(max(1, math.ceil(error.retry_after_seconds)))
        if "allow" in error.metadata:
            headers["allow"] = error.metadata["allow"]
    return headers


def error_response(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> Response:
    """An error as the JSON API answers it: its status's JSON, with the HTTP status of the table."""
    return Response(
        encode(status),
        status_code=http_status(status, envelope.outcome.reason),
        headers=error_headers(error, envelope.echo),
        media_type="application/json",
    )


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes ``limit`` bytes (the rest is never read). A body that
    ends before it is whole raises ``ClientLeft``: the client closed the connection, or sent what
    uvicorn could not parse (a malformed chunk), which uvicorn answers with its own 400 and closes,
    so that the app sees the same early end."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientLeft from None
    return b"".join(chunks)


def refusal_sender(
    answer: Callable[[CallEnvelope, BaseException, status_pb2.Status], Response],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> Refuse:
    """An envelope's ``refuse`` for an HTTP request: ``answer``'s response, sent; an error after
    the response began is raised as it is (nothing more can be said)."""

    async def refuse(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> None:
        if envelope.answered:
            raise error
        await answer(envelope, error, status)(scope, receive, send)

    return refuse


class HttpApi:
    """The ASGI endpoint of every RPC route."""

    def __init__(self, edge: Edge, routes: list[Route], servicers: Mapping[str, object], *, openapi: bytes) -> None:
        self._edge = edge
        self._router = Router(routes)
        self._openapi = openapi
        self._implementations: dict[str, tuple[Callable[..., Any], Kind]] = {}
        for route in routes:
            implementation = getattr(servicers[route.rpc.containing_service.name], route.rpc.name)
            self._implementations[route.method] = (implementation, kind_of(implementation))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        refuse = refusal_sender(error_response, scope, receive, send)
        headers = request.headers.items()
        async with self._edge.envelope(UNROUTED, request.headers.get("x-request-id"), refuse, headers) as envelope:
            if scope["path"] == OPENAPI_PATH:
                response: Response | _EventStream = self._openapi_document(request.method)
            else:
                route, path = self._router.match(request.method, _raw_path(scope))
                envelope.method = route.method
                response = await self._answer(request, route, path, envelope)
            envelope.answered = True
            await response(scope, receive, send)

    def _openapi_document(self, verb: str) -> Response:
        if verb != "GET":  # a HEAD comes as its GET (methods.answering_head)
            raise method_not_allowed(OPENAPI_PATH, ["GET"])
        return Response(self._openapi, media_type="application/json")

    async def _answer(
        self, request: Request, route: Route, path: dict[str, str], envelope: CallEnvelope
    ) -> Response | _EventStream:
        edge = self._edge
        implementation, kind = self._implementations[route.method]
        limit = 2 * edge.max_request_bytes
        body = await read_body(request, limit)  # a GET's too: one given is refused, never dropped unread
        overrides = {}
        resume = request.headers.get("last-event-id")
        if route.streams and resume is not None and _RESUME_FIELD in route.rpc.input_type.fields_by_name:
            overrides[_RESUME_FIELD] = resume
        decoded = (
            Undecodable(body_too_large(edge.max_request_bytes))
            if body is None
            else decode(
                route,
                path,
                request.scope["query_string"],
                body,
                overrides=overrides,
                max_request_bytes=edge.max_request_bytes,
            )
        )
        call = edge.begin(route.method, decoded, list(request.headers.items()), None, surface="http")
        if kind is Kind.STREAM:
            return await _EventStream.open(edge, implementation, decoded, call, envelope)
        work = edge.answer(kind, implementation, decoded, call)
        # A waiting call (Flush) ends when its client leaves, as over gRPC.
        response = await (_unless_client_leaves(request, work) if kind is Kind.WAITING else work)
        return Response(encode(response), headers=_headers(call, envelope.echo), media_type="application/json")


def _raw_path(scope: Scope) -> str:
    """The path as sent (still percent-encoded, so an encoded "/" stays inside its segment)."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw.decode("latin-1").split("?", 1)[0]


async def _unless_client_leaves(request: Request, answer: Any) -> Any:
    work = asyncio.ensure_future(answer)
    left = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({work, left}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise ClientLeft
        return work.result()
    finally:
        left.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _EventStream:
    """A server stream as Server-Sent Events. The stream runs in its own task (the pump) feeding a
    queue, so that the response can send keep-alive comments while the stream waits."""

    def __init__(
        self, pump: asyncio.Task[None], queue: asyncio.Queue[Any], first: Any, envelope: CallEnvelope, call: Call
    ) -> None:
        self._pump, self._queue, self._first, self._envelope = pump, queue, first, envelope
        self._headers = {**_headers(call, envelope.echo), "cache-control": "no-store", "x-accel-buffering": "no"}

    @classmethod
    async def open(
        cls,
        edge: Edge,
        implementation: Callable[..., AsyncGenerator[Any, None]],
        request: Any,
        call: Call,
        envelope: CallEnvelope,
    ) -> Response | _EventStream:
        """The stream once its first step succeeded or its first message came, else (a bad
        request, a refused stream) the error response with its HTTP status."""
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=16)
        call.stepped = asyncio.Event()
        pump = asyncio.ensure_future(cls._run(edge, edge.answer_stream(implementation, request, call), queue))
        first_message = asyncio.ensure_future(queue.get())
        stepped = asyncio.ensure_future(call.stepped.wait())
        try:
            await asyncio.wait({first_message, stepped}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            pump.cancel()
            raise
        finally:
            stepped.cancel()
            if not first_message.done():
                first_message.cancel()
        first = first_message.result() if first_message.done() and not first_message.cancelled() else None
        if isinstance(first, BaseException):
            return error_response(envelope, first, envelope.status_of(first))
        return cls(pump, queue, first, envelope, call)

    @staticmethod
    async def _run(edge: Edge, messages: AsyncGenerator[Any, None], queue: asyncio.Queue[Any]) -> None:
        try:
            # Its client not taking the messages when a shutdown's grace period ends: SHUTTING_DOWN.
            with edge.admission.cut_when_calls_end():
                async with contextlib.aclosing(messages):  # cancelled (the client left): the stream ends at once
                    async for item in messages:
                        await queue.put(item)
            await queue.put(_END)
        except Exception as exc:
            await queue.put(exc)

    async def _next(self, left: asyncio.Future[None]) -> Any:
        """The next message, _END, an exception, _GONE; None after a quiet keep-alive period."""
        get = asyncio.ensure_future(self._queue.get())
        done, _ = await asyncio.wait({get, left}, timeout=KEEPALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        return _GONE if left in done else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        left = asyncio.ensure_future(_disconnected(receive))
        start = [(b"content-type", b"text/event-stream; charset=utf-8")]
        start += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self._headers.items()]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": start})
            item = self._first
            while True:
                if item is None:
                    item = await self._next(left)
                if item is _GONE:
                    self._envelope.client_gone()
                    return
                if item is None:
                    chunk = b": keep-alive\n\n"
                elif item is _END:
                    break
                elif isinstance(item, BaseException):
                    status = self._envelope.status_of(item)
                    await send(
                        {"type": "http.response.body", "body": _event(encode(status), name="status"), "more_body": True}
                    )
                    break
                else:
                    chunk = _event(encode(item), event_id=getattr(item, "sequence", None))
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                item = None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (asyncio.CancelledError, OSError):
            self._envelope.client_gone()
            raise
        finally:
            left.cancel()
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump


def _event(data: bytes, *, name: str | None = None, event_id: int | None = None) -> bytes:
    lines = [b"id: %d" % event_id] if event_id is not None else []
    if name is not None:
        lines.append(b"event: " + name.encode())
    lines.append(b"data: " + data)
    return b"\n".join(lines) + b"\n\n"
