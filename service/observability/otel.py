"""Traces with OpenTelemetry's SDK (the ``otel`` extra), exported over OTLP as the standard
``OTEL_*`` variables say (the endpoint, headers, protocol, sampler, batch delays, service name and
resource attributes are the SDK's to read): the ``Tracer`` that runtime/tracing.py records with.
Loaded by ``mnemosyne serve`` only when those variables ask for traces (``tracing.configured``).

Spans follow OpenTelemetry's RPC conventions: a SERVER span per call named after its method
(``mnemosyne.v1.MemoryService/Retain``) with ``rpc.system``, ``rpc.service``, ``rpc.method`` and
``rpc.grpc.status_code``, an error status for any code but OK; a CLIENT span per forwarding hop;
INTERNAL spans for the steps. W3C Trace Context (``traceparent``, ``tracestate``) is read from a
call's metadata or headers and written into a hop's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import grpc
from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from mnemosyne.errors import FailedPrecondition
from mnemosyne.runtime import tracing
from mnemosyne.version import VERSION

_CODES = {code.name: code.value[0] for code in grpc.StatusCode}


def _exporter() -> SpanExporter:
    """OTLP over HTTP (protobuf), or over gRPC when the variables ask for it and its exporter is
    installed."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    )
    if protocol.strip().lower() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise FailedPrecondition(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package opentelemetry-exporter-otlp-proto-grpc; "
                "install it, or use http/protobuf (the otel extra's)",
                reason="CONFIG_INVALID",
            ) from None
        exporter: SpanExporter = GrpcExporter()
        return exporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


class _Call:
    """A call's SERVER span, current (attached) from its start to its end."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self._token = context.attach(trace.set_span_in_context(span))

    def end(self, name: str, code: str, reason: str) -> None:
        span = self.span
        service, _, method = name.strip("/").rpartition("/")
        span.update_name(name.strip("/"))
        if service:
            span.set_attributes({"rpc.service": service, "rpc.method": method})
        span.set_attribute("rpc.grpc.status_code", _CODES.get(code, 2))
        if reason:
            span.set_attribute("mnemosyne.reason", reason)
        if code not in ("OK", "CANCELLED"):
            span.set_status(Status(StatusCode.ERROR, f"{code} {reason}".strip()))
        span.end()
        # A server stream may end in another context than it began (its generator closed from
        # elsewhere): then there is nothing of this call's left to restore there.
        with contextlib.suppress(ValueError, RuntimeError):
            context._RUNTIME_CONTEXT.detach(self._token)


class _Hop:
    """A forwarding hop's CLIENT span (not current): its context travels in ``headers``."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        self.headers: tracing.Headers = tuple(carrier.items())

    def end(self, error: BaseException | None) -> None:
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        self.span.end()


class OtelTracer:
    """runtime/tracing.py's ``Tracer`` over an SDK ``TracerProvider``."""

    def __init__(self, provider: TracerProvider, *, tenant_ids: bool) -> None:
        self.provider = provider
        self.tenant_ids = tenant_ids
        self._tracer = provider.get_tracer("mnemosyne", VERSION)

    def call(self, method: str, carrier: tracing.Headers) -> tracing.CallSpan:
        parent = propagate.extract({k.lower(): v for k, v in carrier if isinstance(v, str)})
        span = self._tracer.start_span(
            method.strip("/"), context=parent, kind=SpanKind.SERVER, attributes={"rpc.system": "grpc"}
        )
        return _Call(span)

    @contextlib.contextmanager
    def span(self, name: str, attributes: tracing.Attributes) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, attributes=attributes):
            yield

    def hop(self, name: str, attributes: tracing.Attributes) -> tracing.HopSpan:
        return _Hop(self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes))

    def annotate(self, key: str, value: str) -> None:
        trace.get_current_span().set_attribute(key, value)

    def shutdown(self) -> None:
        """Export what is left (at the server's stop)."""
        self.provider.shutdown()


def tracer_from_environment(*, tenant_ids: bool, member: str | None) -> OtelTracer:
    """A tracer exporting as the ``OTEL_*`` variables say; the resource names the service
    ``mnemosyne`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) names it, and the
    member of a deployment of many."""
    attributes: dict[str, str] = {"service.version": VERSION}
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not named:
        attributes["service.name"] = "mnemosyne"
    if member:
        attributes["mnemosyne.member"] = member
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    return OtelTracer(provider, tenant_ids=tenant_ids)
