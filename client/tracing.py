"""The caller's trace context on every call: when OpenTelemetry's API is installed and a span is
current where a call is made, its W3C ``traceparent`` (and ``tracestate``, ``baggage``) go with the
call as metadata, so the server's spans join the caller's trace (docs/operations.md#traces).
Without the API, or without a current span, nothing is added."""

from __future__ import annotations

try:
    from opentelemetry import propagate
except ImportError:  # OpenTelemetry is the caller's choice: without it there is no trace to join
    propagate = None  # type: ignore[assignment]  # the module, or None when it is not installed


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """The current trace context as call metadata (empty without one)."""
    if propagate is None:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())
