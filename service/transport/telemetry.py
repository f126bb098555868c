"""Telemetry of every call: its request id, its trace span (runtime/tracing.py: nothing unless
tracing is configured), its latency histogram, its access record.

The request id is the client's ``x-request-id`` metadata when it is a sane token, else a fresh
one; it is attached to every log record of the call (the worker thread running the call's engine
work inherits it), and echoed in the initial metadata when the client sent it, merged into the
servicer's own initial metadata (such as AssembleContext's generations), since a call has only one.
The access record carries method, code, reason, duration and request id only, never a tenant's
data or a token. Only the methods of our registered services are recorded, so a client cannot
grow the metric's label set.
"""

from __future__ import annotations

import contextvars
import logging
import time

from mnemosyne.observability import logs
from mnemosyne.observability.metrics import ServerMetrics
from mnemosyne.runtime import tracing

log = logging.getLogger("mnemosyne.rpc")


class Recorder:
    def __init__(self, metrics: ServerMetrics | None) -> None:
        self._metrics = metrics

    @staticmethod
    def begin(
        sent: str | None, method: str, carrier: tracing.Headers
    ) -> tuple[tuple[tuple[str, str], ...], contextvars.Token[str], tracing.CallSpan]:
        """Set the call's request id from the ``x-request-id`` the client sent (metadata or
        header) and begin its trace span (a child of the caller's ``traceparent`` in
        ``carrier``, its metadata or headers); (the metadata echoing the request id, the token to
        reset it with, the span)."""
        request_id = logs.request_id_from(sent)
        # Echoed only to a client that sent one (it wants to correlate).
        echo = (("x-request-id", request_id),) if request_id == sent else ()
        return echo, logs.set_request_id(request_id), tracing.call(method, carrier)

    def end(
        self,
        method: str,
        code: str,
        reason: str,
        started: float,
        token: contextvars.Token[str],
        span: tracing.CallSpan,
    ) -> None:
        span.end(method, code, reason)
        seconds = time.perf_counter() - started
        if self._metrics is not None:
            self._metrics.observe_rpc(method, code, seconds)
        # Successful calls, and calls their client ended (a watch it stopped), at DEBUG (one per
        # call is a lot); refusals and failures at INFO, with the ErrorInfo reason they answered with.
        level = logging.DEBUG if code in ("OK", "CANCELLED") else logging.INFO
        if log.isEnabledFor(level):
            extra = {"event": "rpc", "method": method, "code": code, "duration_ms": round(seconds * 1000, 3)}
            if reason:
                extra["reason"] = reason
            log.log(
                level, "rpc %s %s%s %.1fms", method, code, f" {reason}" if reason else "", seconds * 1000, extra=extra
            )
        logs.reset_request_id(token)
