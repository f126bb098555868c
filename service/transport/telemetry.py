"""The outermost server interceptor: request id, latency histogram, access log.

It runs around the edge interceptor (auth, errors), so it sees the final status code of every
call, including refused ones. The request id is the client's ``x-request-id`` metadata when it is
a sane token, else a fresh one; it is attached to every log record of the call, and echoed in
the initial metadata when the client sent it (merged into a servicer's own initial metadata, such
as AssembleContext's generations, since a call has only one). The access line carries method,
code, duration and request id only, never a tenant's data or a token. Unknown methods (no handler) are neither timed nor labelled, so a
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


class _RequestIdContext:
    """The servicer context, adding ``x-request-id`` to the call's one set of initial metadata:
    merged into the servicer's own ``send_initial_metadata`` if it sends any, otherwise sent before
    the first response or the error status."""

    def __init__(self, context: grpc.ServicerContext, request_id: str) -> None:
        self._context = context
        self._pending: tuple[tuple[str, str], ...] = (("x-request-id", request_id),)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def send_initial_metadata(self, metadata: Any) -> None:
        pending, self._pending = self._pending, ()
        self._context.send_initial_metadata((*metadata, *pending))

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, ()
            try:
                self._context.send_initial_metadata(pending)
            except (RuntimeError, ValueError):  # pragma: no cover - the call is already over
                pass

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.flush()
        self._context.abort(code, details)

    def abort_with_status(self, status: grpc.Status) -> None:
        self.flush()
        self._context.abort_with_status(status)


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
            # Successful calls at DEBUG (one per call is a lot); refusals and failures at INFO,
            # with the ErrorInfo reason they answered with.
            reason = logs.take_failure_reason() if name != "OK" else ""
            level = logging.DEBUG if name == "OK" else logging.INFO
            if log.isEnabledFor(level):
                extra = {"event": "rpc", "method": method, "code": name, "duration_ms": round(seconds * 1000, 3)}
                if reason:
                    extra["reason"] = reason
                log.log(level, "rpc %s %s%s %.1fms", method, name, f" {reason}" if reason else "", seconds * 1000, extra=extra)

        def begin(context: grpc.ServicerContext) -> Any:
            return logs.set_request_id(request_id)

        def wrap(context: grpc.ServicerContext) -> Any:
            return _RequestIdContext(context, request_id) if echo else context

        if handler.unary_unary:
            inner = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                started = time.perf_counter()
                token = begin(context)
                failed = True
                try:
                    wrapped = wrap(context)
                    response = inner(request, wrapped)
                    if echo:
                        wrapped.flush()
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
                    wrapped = wrap(context)
                    for response in inner_stream(request, wrapped):
                        if echo:
                            wrapped.flush()
                        yield response
                    if echo:
                        wrapped.flush()
                    failed = False
                finally:
                    finish(context, started, failed)
                    logs.reset_request_id(token)

            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
            )
        return handler
