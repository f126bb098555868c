"""The outermost server interceptor: request id, latency histogram, access log.

It runs around the edge interceptor (auth, errors), so it sees the final status code of every
call, including refused ones. The request id is the client's ``x-request-id`` metadata when it is
a sane token, else a fresh one; it is attached to every log record of the call, and echoed in
the initial metadata when the client sent it. The access line carries method, code, duration and request id only, never a
tenant's data or a token. Unknown methods (no handler) are neither timed nor labelled, so a
client cannot grow the metric's label set.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator

import grpc

from mnemosyne.observability import logs
from mnemosyne.observability.metrics import ServerMetrics

log = logging.getLogger("mnemosyne.rpc")


def _metadata_value(details: grpc.HandlerCallDetails, key: str) -> str | None:
    for k, value in details.invocation_metadata or ():
        if k == key:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


class TelemetryInterceptor(grpc.ServerInterceptor):
    def __init__(self, metrics: ServerMetrics | None) -> None:
        self._metrics = metrics

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        sent_id = _metadata_value(details, "x-request-id")
        request_id = logs.request_id_from(sent_id)
        # Echo the id only to a client that sent one (it wants to correlate); an extra metadata
        # send costs every call some microseconds otherwise.
        echo = request_id == sent_id

        def finish(context: grpc.ServicerContext, started: float, failed: bool) -> None:
            code = context.code()  # set by abort(); None when the handler returned normally
            name = code.name if code is not None else ("UNKNOWN" if failed else "OK")
            seconds = time.perf_counter() - started
            if self._metrics is not None:
                self._metrics.observe_rpc(method, name, seconds)
            # Successful calls at DEBUG (one per call is a lot); refusals and failures at INFO.
            level = logging.DEBUG if name == "OK" else logging.INFO
            if log.isEnabledFor(level):
                log.log(
                    level, "rpc %s %s %.1fms", method, name, seconds * 1000,
                    extra={"event": "rpc", "method": method, "code": name, "duration_ms": round(seconds * 1000, 3)},
                )

        def begin(context: grpc.ServicerContext) -> Any:
            if echo:
                try:
                    context.send_initial_metadata((("x-request-id", request_id),))
                except (RuntimeError, ValueError):  # pragma: no cover - the call is already over
                    pass
            return logs.set_request_id(request_id)

        if handler.unary_unary:
            inner = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                started = time.perf_counter()
                token = begin(context)
                failed = True
                try:
                    response = inner(request, context)
                    failed = False
                    return response
                finally:
                    finish(context, started, failed)
                    logs.reset_request_id(token)

            return grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
            )
        if handler.unary_stream:
            inner_stream = handler.unary_stream

            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                started = time.perf_counter()
                token = begin(context)
                failed = True
                try:
                    # The context variable is per thread of the pool: a streaming handler runs
                    # in one worker thread from its first to its last message.
                    yield from inner_stream(request, context)
                    failed = False
                finally:
                    finish(context, started, failed)
                    logs.reset_request_id(token)

            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
            )
        return handler
