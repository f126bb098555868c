"""Traces (docs/operations.md#traces): with the standard OTEL_* variables naming an OTLP endpoint,
each member exports its spans to it — here a receiver in this test that decodes the real OTLP
protobuf (opentelemetry-proto's ExportTraceServiceRequest) — and one trace spans the caller (the
Python or the Node client's current span), the member it called, the forwarding hop and the
member that owns the tenant, with the write path's phases and recall's legs and steps below the
owner's span; the hot path's rounds are traces of their own. A tenant id is on a span only where
the operator allowed it; with OTEL_SDK_DISABLED=true nothing is exported."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider

from mnemosyne.cli.server_process import LocalMembers
from mnemosyne.client import MemoryClient
from mnemosyne.client.routing import owner_of
from tests.node_support import node_package
from tests.support import ServerFactory, wait_until


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    member: str  # the resource's mnemosyne.member
    service: str  # the resource's service.name


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on a free loopback port: POST /v1/traces, protobuf."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"

    def named(self, name: str, **attributes: Any) -> list[Span]:
        with self.lock:
            return [
                s for s in self.spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
            ]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found = Span(
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        span.name,
                        span.kind,
                        {a.key: _value(a.value) for a in span.attributes},
                        str(resource.get("mnemosyne.member", "")),
                        str(resource.get("service.name", "")),
                    )
                    with self.server.lock:
                        self.server.spans.append(found)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _otel_env(receiver: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}


@pytest.fixture(scope="module")
def members(receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMembers]:
    # m0 (where the clients call) may put tenant ids on its spans; m1 (the owner) may not.
    deployment = LocalMembers(
        tmp_path_factory.mktemp("traced"),
        2,
        env=_otel_env(receiver),
        args_of=lambda i: ["--trace-tenant-ids"] if i == 0 else [],
    ).start()
    yield deployment
    deployment.stop()


def _theirs(members: LocalMembers, prefix: str) -> str:
    """A tenant m1 owns (a call of it at m0 is forwarded)."""
    return next(t for t in (f"{prefix}-{n}" for n in range(1000)) if owner_of(t, members.ids) == "m1")


def _one(spans: list[Span]) -> Span:
    assert len(spans) == 1, spans
    return spans[0]


def test_one_trace_spans_the_caller_both_members_and_the_engine_s_steps(
    receiver: Receiver, members: LocalMembers
) -> None:
    tenant = _theirs(members, "traced")
    caller = TracerProvider().get_tracer("agent")  # the caller's own tracing (nothing exported)
    m0 = members.processes[0]
    with MemoryClient(m0.target) as client:
        with caller.start_as_current_span("agent turn") as turn:
            client.retain(tenant, "Invoice INV-7 was paid by wire")
            client.recall(tenant, "invoice paid", k=3)
        client.hot_path(tenant, "enable")
        client.retain(tenant, "Parcel PX-9 arrived on Monday", fast=True)
        client.hot_path(tenant, "flush")
    trace_id, turn_id = f"{turn.get_span_context().trace_id:032x}", f"{turn.get_span_context().span_id:016x}"
    retain = "mnemosyne.v1.MemoryService/Retain"
    wait_until(lambda: len([s for s in receiver.named(retain) if s.trace_id == trace_id]) == 2, 20)
    wait_until(lambda: bool(receiver.named("hot_path.round")), 20)

    def in_trace(name: str, member: str) -> list[Span]:
        return [s for s in receiver.named(name) if s.trace_id == trace_id and s.member == member]

    # The entry member's call is the caller's child, the hop its child, the owner's call the hop's.
    entry = _one(in_trace(retain, "m0"))
    assert entry.parent_id == turn_id and entry.kind == 2  # SERVER
    assert entry.service == "mnemosyne"  # no OTEL_SERVICE_NAME: the default name
    assert (entry.attributes["rpc.service"], entry.attributes["rpc.method"]) == ("mnemosyne.v1.MemoryService", "Retain")
    assert entry.attributes["rpc.grpc.status_code"] == 0
    hop = _one(in_trace(f"forward {retain}", "m0"))
    assert hop.parent_id == entry.span_id and hop.kind == 3 and hop.attributes["mnemosyne.member"] == "m1"  # CLIENT
    owner = _one(in_trace(retain, "m1"))
    assert owner.parent_id == hop.span_id
    # The write path's phases under the owner's call.
    below = {s.span_id: s for s in receiver.spans if s.trace_id == trace_id and s.member == "m1"}

    def under(span: Span, root: Span) -> bool:
        while span.parent_id in below:
            span = below[span.parent_id]
            if span.span_id == root.span_id:
                return True
        return span.parent_id == root.span_id

    phases = {s.name for s in below.values() if s.name.startswith("write.") and under(s, owner)}
    assert phases == {"write.prepare", "write.extract", "write.embed", "write.near_duplicates", "write.commit"}
    # Recall's query vector, legs and steps under the owner's Recall.
    recall = _one(in_trace("mnemosyne.v1.MemoryService/Recall", "m1"))
    steps = {s.name for s in below.values() if s.name.startswith("recall.") and under(s, recall)}
    assert {"recall.embed", "recall.candidates", "recall.leg.vector", "recall.leg.text", "recall.rank"} <= steps
    # The hot path's round: a trace of its own on the owner.
    assert {s.member for s in receiver.named("hot_path.round")} == {"m1"}
    # Tenant ids only where the operator allowed them.
    assert entry.attributes["mnemosyne.tenant"] == tenant
    assert not [s for s in receiver.spans if s.member == "m1" and "mnemosyne.tenant" in s.attributes]


def test_the_node_client_carries_the_host_s_trace(receiver: Receiver, members: LocalMembers) -> None:
    tenant = _theirs(members, "node-traced")
    script = r"""
const { context, trace, propagation } = require('@opentelemetry/api');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const { BasicTracerProvider } = require('@opentelemetry/sdk-trace-base');
const { MemoryClient } = require('./src');
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = new BasicTracerProvider().getTracer('host');
const client = new MemoryClient(process.argv[1]);
tracer.startActiveSpan('host turn', async (span) => {
  await client.retain(process.argv[2], 'A note from a Node host');
  span.end();
  client.close();
  const { traceId, spanId } = span.spanContext();
  process.stdout.write(JSON.stringify({ traceId, spanId }));
});
"""
    done = subprocess.run(
        ["node", "-e", script, members.processes[0].target, tenant],
        cwd=node_package(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    turn = json.loads(done.stdout)
    retain = "mnemosyne.v1.MemoryService/Retain"
    wait_until(lambda: {s.member for s in receiver.named(retain) if s.trace_id == turn["traceId"]} == {"m0", "m1"}, 20)
    (entry,) = [s for s in receiver.named(retain) if s.trace_id == turn["traceId"] and s.member == "m0"]
    assert entry.parent_id == turn["spanId"]  # the host's span: the Node client sent its traceparent


def test_nothing_is_exported_when_the_sdk_is_disabled(
    receiver: Receiver, server_factory: ServerFactory, tmp_path: Path
) -> None:
    env = {**_otel_env(receiver), "OTEL_SDK_DISABLED": "true", "OTEL_SERVICE_NAME": "disabled-one"}
    server = server_factory(env=env).start()
    with MemoryClient(server.target) as client:
        client.retain("quiet", "nothing of this is traced")
    server.stop()  # a tracer would export its last spans now
    time.sleep(0.3)
    assert re.search(r"^  traces +off \(no OTEL_\* variable names an exporter\)$", server.stderr_path.read_text(), re.M)
    assert not [s for s in receiver.spans if s.service == "disabled-one"]
