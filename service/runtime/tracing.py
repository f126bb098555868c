"""Trace spans, for every layer, without knowing who records them: off (the default) each call
here costs a check of one module global; on, a ``Tracer`` installed by the server
(observability/otel.py, OpenTelemetry's SDK, when the standard ``OTEL_*`` variables configure
an exporter: ``configured``) records them.

What makes a span:

* ``call``: each call the server answers (transport/envelope.py), a child of the caller's trace
  when its metadata or headers carry a W3C ``traceparent``; current while the call runs, so the
  engine's spans below are its children (worker threads run in the call's context);
* ``span``: a step inside the current span (the write path's phases, recall's steps, a hot-path
  round, which is a trace of its own: it runs on a background thread for many callers);
* ``hop``: a member's call to another (transport/cluster/forwarding.py), whose ``headers`` carry
  its ``traceparent`` to the owner, so one trace spans both members;
* ``tenant``: the call's tenant as an attribute of its span, only when the operator allows it
  (``--trace-tenant-ids``: tenant ids then reach the tracing backend).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Protocol

Attributes = Mapping[str, str | int | float | bool]
Headers = Sequence[tuple[str, str]]

# The variables that turn tracing on (OpenTelemetry's own names), and those that keep it off.
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OpenTelemetry variables ask for traces: an OTLP endpoint, or
    ``OTEL_TRACES_EXPORTER=otlp``; never with ``OTEL_SDK_DISABLED=true`` or
    ``OTEL_TRACES_EXPORTER=none``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "otlp" or any(environ.get(name, "").strip() for name in _ENDPOINTS)


class CallSpan(Protocol):
    def end(self, name: str, code: str, reason: str) -> None:
        """The call ended with gRPC status ``code`` (its ErrorInfo ``reason``); ``name``: its method."""


class HopSpan(Protocol):
    headers: Headers  # the traceparent (and tracestate) of this hop, for the call it makes

    def end(self, error: BaseException | None) -> None: ...


class Tracer(Protocol):
    tenant_ids: bool  # whether a span may carry its tenant id (the operator's choice)

    def call(self, method: str, carrier: Headers) -> CallSpan: ...

    def span(self, name: str, attributes: Attributes) -> contextlib.AbstractContextManager[None]: ...

    def hop(self, name: str, attributes: Attributes) -> HopSpan: ...

    def annotate(self, key: str, value: str) -> None: ...


class _Nothing:
    """What every span is while tracing is off."""

    headers: Headers = ()

    def end(self, *_: object) -> None:
        pass


_NOTHING = _Nothing()
_NO_SPAN = contextlib.nullcontext()
_tracer: Tracer | None = None


def install(tracer: Tracer | None) -> None:
    """Record spans with ``tracer`` from now on (None: no longer)."""
    global _tracer
    _tracer = tracer


def enabled() -> bool:
    return _tracer is not None


def call(method: str, carrier: Headers) -> CallSpan:
    """The span of one call the server answers, current until its ``end``."""
    return _NOTHING if _tracer is None else _tracer.call(method, carrier)


def span(name: str, **attributes: str | int | float | bool) -> contextlib.AbstractContextManager[None]:
    """A span of one step, a child of the current span, current inside the ``with`` block."""
    return _NO_SPAN if _tracer is None else _tracer.span(name, attributes)


def hop(name: str, **attributes: str | int | float | bool) -> HopSpan:
    """The span of a call to another member; its ``headers`` go with that call."""
    return _NOTHING if _tracer is None else _tracer.hop(name, attributes)


def tenant(tenant_id: str) -> None:
    """The current call's tenant, on its span when the operator allows tenant ids in traces."""
    if _tracer is not None and _tracer.tenant_ids and tenant_id:
        _tracer.annotate("mnemosyne.tenant", tenant_id)
