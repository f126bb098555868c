"""The HTTP/JSON API against the gRPC API of the same real server: every RPC at its
google.api.http route answers what gRPC answers (the JSON equals MessageToDict of the gRPC
response), fails as gRPC fails (the same ErrorInfo reason, the standard HTTP status), and the
cases are driven by the routes in the protos, so a new RPC cannot be left out."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import grpc
import pytest
from google.protobuf import json_format, message, message_factory, timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mnemosyne.transport.errors import HTTP_STATUS_BY_CODE
from mnemosyne.transport.http.mapping import GRPC_ONLY, routes
from mnemosyne.transport.server import SERVICES
from mnemosyne.v1 import (
    admin_pb2,
    events_pb2,
    expiry_pb2,
    hot_path_pb2,
    memory_pb2,
    revisions_pb2,
    types_pb2,
    webhooks_pb2,
    workspace_pb2,
)
from tests.docs_support import DOCS, section, table_rows
from tests.http_support import ROUTES, call, request, rpc_request, server_sent_events
from tests.support import ServerProcess, failed_call

GLOBAL = "mnemosyne-global-generation"
WORKSPACE = "mnemosyne-workspace-generation"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("http-api") / "data", http=True)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def channel(api: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(api.target) as channel:
        yield channel


def _grpc(channel: grpc.Channel, rpc: str, request: message.Message, metadata: tuple[tuple[str, str], ...] = ()) -> Any:
    """(response, initial metadata) of a unary RPC, or the list of messages of a stream."""
    route = ROUTES[rpc]
    response_type = message_factory.GetMessageClass(route.rpc.output_type)
    if route.streams:
        stream = channel.unary_stream(
            route.method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        return stream(request, metadata=metadata, timeout=30)
    unary = channel.unary_unary(
        route.method, request_serializer=type(request).SerializeToString, response_deserializer=response_type.FromString
    )
    response, outcome = unary.with_call(request, metadata=metadata, timeout=30)
    return response, dict(outcome.initial_metadata())


def _new_tenant() -> str:
    return f"h{uuid.uuid4().hex[:12]}"


# The event id of each filled tenant's first fast write.
FIRST_EVENT: dict[str, int] = {}


def _filled(channel: grpc.Channel) -> str:
    """A tenant with memories, Global and workspace records and finished hot-path events."""
    tenant = _new_tenant()
    _grpc(channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="The refund ticket is RF-88213"))
    _grpc(channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="Ada prefers the night train to Lyon"))
    _grpc(channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="Ada prefers the night train to Lyon!"))
    for position, text in ((2, "Ada is back from Lyon"), (1, "Ada takes the night train tonight")):
        threaded = memory_pb2.RetainRequest(
            tenant=tenant, text=text, occurred_at=_MAY_8, thread=_thread("chat/1", position)
        )
        _grpc(channel, "Retain", threaded)
    travel = {"topic": "travel"}
    _grpc(channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="Bo flies to Oslo", metadata=travel))
    change = workspace_pb2.RecordChange(op=workspace_pb2.RecordChange.PUT, key="plan.md", content="ship it")
    _grpc(
        channel,
        "UpdateWorkspace",
        workspace_pb2.UpdateWorkspaceRequest(tenant=tenant, workspace="w1", changes=[change]),
        ((WORKSPACE, "0"),),
    )
    _grpc(
        channel, "UpdateGlobal", workspace_pb2.UpdateGlobalRequest(tenant=tenant, content="# Memory"), ((GLOBAL, "0"),)
    )
    _grpc(channel, "Enable", hot_path_pb2.HotPathRequest(tenant=tenant))
    fast, _ = _grpc(
        channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="a fast note about Lisbon", fast=True)
    )
    FIRST_EVENT[tenant] = fast.result.event_id  # an acceptance position: after the synchronous writes
    _grpc(channel, "Retain", memory_pb2.RetainRequest(tenant=tenant, text="a fast note about Porto", fast=True))
    _grpc(channel, "Flush", hot_path_pb2.FlushRequest(tenant=tenant, timeout_seconds=30))
    # A webhook of a kind no call here makes (nothing is sent), its secret given: twins alike.
    _grpc(channel, "CreateWebhook", _webhook(tenant, WEBHOOK_SECRETS[0]))
    return tenant


# Webhook secrets given, so twin tenants' answers are the same.
WEBHOOK_SECRETS = ("whsec_" + "A" * 43 + "=", "whsec_" + "B" * 43 + "=")


def _webhook(tenant: str, secret: str) -> webhooks_pb2.CreateWebhookRequest:
    return webhooks_pb2.CreateWebhookRequest(
        tenant=tenant,
        url="https://hooks.example.com/in",
        kinds=[webhooks_pb2.WEBHOOK_KIND_MEMORY_EXPIRED],
        secrets=[secret],
    )


@dataclass(frozen=True)
class Case:
    request: Callable[[str], message.Message]  # the request for a tenant
    write: bool = False  # a write: each transport gets its own tenant, prepared alike
    metadata: tuple[tuple[str, str], ...] = ()
    tenantless: bool = False
    # Fields that differ between the twin tenants of a write (a time; a hash keyed per memory):
    # present in both answers, compared no further.
    volatile: tuple[str, ...] = ()


_MAY_8 = timestamp_pb2.Timestamp(seconds=1_683_554_160, nanos=123_456_000)  # 2023-05-08T13:56:00.123456Z


def _thread(thread_id: str, position: int) -> types_pb2.ThreadRef:
    return types_pb2.ThreadRef(id=thread_id, position=position)


_PUT = workspace_pb2.RecordChange(op=workspace_pb2.RecordChange.PUT, key="notes.md", content="hello")
CASES: dict[str, Case] = {
    "Retain": Case(
        lambda t: memory_pb2.RetainRequest(
            tenant=t, text="Bo likes tea", metadata={"k": "v"}, occurred_at=_MAY_8, thread=_thread("chat/1", 4)
        ),
        write=True,
    ),
    "RetainBatch": Case(
        lambda t: memory_pb2.RetainBatchRequest(
            tenant=t,
            items=[
                memory_pb2.RetainItem(text="one thing", occurred_at=_MAY_8, thread=_thread("chat/1", 5)),
                memory_pb2.RetainItem(text=""),
                memory_pb2.RetainItem(text="bad thread", thread=_thread("chat 1", 0)),
            ],
        ),
        write=True,
    ),
    "Recall": Case(lambda t: memory_pb2.RecallRequest(tenant=t, query="night train", k=3, scopes=["global"])),
    "GetMemory": Case(lambda t: memory_pb2.GetMemoryRequest(tenant=t, memory_id=2)),
    "ListMemories": Case(lambda t: memory_pb2.ListMemoriesRequest(tenant=t, page_size=2, thread="chat/1")),
    "ForgetMemory": Case(lambda t: memory_pb2.ForgetMemoryRequest(tenant=t, memory_id=1, request_id="f-1"), write=True),
    "UpdateMemory": Case(
        lambda t: memory_pb2.UpdateMemoryRequest(tenant=t, memory_id=2, text="Ada prefers the day train to Nice"),
        write=True,
        volatile=("memory.createdAt", "memory.updatedAt"),
    ),
    "ForgetMemories": Case(
        lambda t: memory_pb2.ForgetMemoriesRequest(tenant=t, metadata_equals={"topic": "travel"}), write=True
    ),
    "ListMemoryVersions": Case(lambda t: memory_pb2.ListMemoryVersionsRequest(tenant=t, memory_id=2)),
    "ListMemoryRevisions": Case(lambda t: revisions_pb2.ListMemoryRevisionsRequest(tenant=t, memory_id=2)),
    "RevertMemory": Case(
        lambda t: revisions_pb2.RevertMemoryRequest(tenant=t, memory_id=2, revision=1),
        write=True,
        volatile=("memory.createdAt",),
    ),
    "GetExpiryPolicy": Case(lambda t: expiry_pb2.GetExpiryPolicyRequest(tenant=t)),
    "SetExpiryPolicy": Case(
        lambda t: expiry_pb2.SetExpiryPolicyRequest(
            tenant=t, policy=expiry_pb2.ExpiryPolicy(default_ttl_seconds=3600, update_extends=True)
        ),
        write=True,
    ),
    "AssembleContext": Case(
        lambda t: workspace_pb2.AssembleContextRequest(tenant=t, workspace="w1", query="Lyon", k=2)
    ),
    "UpdateGlobal": Case(
        lambda t: workspace_pb2.UpdateGlobalRequest(tenant=t, content="# New"), write=True, metadata=((GLOBAL, "1"),)
    ),
    "UpdateWorkspace": Case(
        lambda t: workspace_pb2.UpdateWorkspaceRequest(tenant=t, workspace="w1", changes=[_PUT]),
        write=True,
        metadata=((WORKSPACE, "1"),),
    ),
    "GetRecord": Case(lambda t: workspace_pb2.GetRecordRequest(tenant=t, scope="workspace/w1", key="plan.md")),
    "ListRecords": Case(lambda t: workspace_pb2.ListRecordsRequest(tenant=t, scope="workspace/w1")),
    "EditRecords": Case(
        lambda t: workspace_pb2.EditRecordsRequest(tenant=t, scope="global", expected_generation=1, changes=[_PUT]),
        write=True,
    ),
    "Consolidate": Case(
        lambda t: workspace_pb2.ConsolidateRequest(
            tenant=t, scope="workspace/w1", expected_generation=1, changes=[_PUT], receipt_id="r-1"
        ),
        write=True,
    ),
    "ConsolidateSession": Case(
        lambda t: workspace_pb2.ConsolidateSessionRequest(tenant=t, thread="chat/1"), write=True
    ),
    "Enable": Case(lambda t: hot_path_pb2.HotPathRequest(tenant=t), write=True),
    "Disable": Case(lambda t: hot_path_pb2.HotPathRequest(tenant=t, timeout_seconds=30), write=True),
    "Status": Case(lambda t: hot_path_pb2.HotPathRequest(tenant=t)),
    "Flush": Case(lambda t: hot_path_pb2.FlushRequest(tenant=t, timeout_seconds=30), write=True),
    "GetEvent": Case(lambda t: events_pb2.GetEventRequest(tenant=t, event_id=FIRST_EVENT.get(t, 1))),
    "ListEvents": Case(lambda t: events_pb2.ListEventsRequest(tenant=t, status=events_pb2.SUCCEEDED, page_size=5)),
    "WatchEvents": Case(lambda t: events_pb2.WatchEventsRequest(tenant=t)),
    "VerifyIntegrity": Case(lambda t: admin_pb2.VerifyIntegrityRequest(tenant=t)),
    # The file's size moves while background maintenance merges the full-text index after the
    # writes of _filled (store/maintenance.py): present in both answers, compared no further.
    "Stats": Case(lambda t: admin_pb2.StatsRequest(tenant=t), volatile=("fileBytes",)),
    "Dedup": Case(lambda t: admin_pb2.DedupRequest(tenant=t, threshold=0.9)),
    # To the tests' embedder, the tenant's own: a step with nothing to do (a move: tests/test_reembed.py).
    "ReembedTenant": Case(lambda t: admin_pb2.ReembedTenantRequest(tenant=t, embedder="hashing")),
    "ListTenants": Case(lambda t: admin_pb2.ListTenantsRequest(page_size=1000), tenantless=True),
    # Every tenant's file size: background maintenance (merges, checkpoints) changes them between calls.
    "AggregateStats": Case(
        lambda t: admin_pb2.AggregateStatsRequest(chunk_size=1000), tenantless=True, volatile=("fileBytes",)
    ),
    "Ping": Case(lambda t: admin_pb2.PingRequest(), tenantless=True),
    "WhoAmI": Case(lambda t: admin_pb2.WhoAmIRequest(), tenantless=True),
    # Counted in memory as the calls come (the minutes), read from the file against the clock
    # (the memories' moments), sized by background maintenance (fileBytes): present, not compared.
    "GetTenantFigures": Case(
        lambda t: admin_pb2.GetTenantFiguresRequest(tenant=t), volatile=("minutes", "memories", "fileBytes")
    ),
    "ListTenantFigures": Case(
        lambda t: admin_pb2.ListTenantFiguresRequest(limit=3), tenantless=True, volatile=("largest", "busiest")
    ),
    "ListScopes": Case(lambda t: workspace_pb2.ListScopesRequest(tenant=t)),
    "ListRecordRevisions": Case(
        lambda t: revisions_pb2.ListRecordRevisionsRequest(tenant=t, scope="workspace/w1", key="plan.md")
    ),
    "RevertRecord": Case(
        lambda t: revisions_pb2.RevertRecordRequest(
            tenant=t, scope="workspace/w1", key="plan.md", generation=1, expected_generation=1
        ),
        write=True,
    ),
    "EraseTenant": Case(
        lambda t: admin_pb2.EraseTenantRequest(tenant=t), write=True, volatile=("receipt.erasedAt", "receipt.headHash")
    ),
    "CreateWebhook": Case(
        lambda t: _webhook(t, WEBHOOK_SECRETS[1]), write=True, volatile=("webhook.createdAt", "webhook.secrets")
    ),
    "ListWebhooks": Case(lambda t: webhooks_pb2.ListWebhooksRequest(tenant=t)),
    "DeleteWebhook": Case(lambda t: webhooks_pb2.DeleteWebhookRequest(tenant=t, webhook_id=1), write=True),
    "RotateWebhookSecret": Case(
        lambda t: webhooks_pb2.RotateWebhookSecretRequest(tenant=t, webhook_id=1, secret=WEBHOOK_SECRETS[1]),
        write=True,
        volatile=("webhook.createdAt", "webhook.secrets"),
    ),
    "ResumeWebhook": Case(
        lambda t: webhooks_pb2.ResumeWebhookRequest(tenant=t, webhook_id=1),
        write=True,
        volatile=("webhook.createdAt", "webhook.secrets"),
    ),
    "ListWebhookDeliveries": Case(lambda t: webhooks_pb2.ListWebhookDeliveriesRequest(tenant=t, webhook_id=1)),
}


def test_every_rpc_has_a_route_or_a_reason_and_a_case_here() -> None:
    every = {method.name for service in SERVICES for method in service.methods}
    routed = {route.rpc.name for route in routes(SERVICES)}
    assert every == routed | {path.rsplit("/", 1)[1] for path in GRPC_ONLY}
    assert set(CASES) == routed, "add a case for the new RPC (or list it in GRPC_ONLY with its reason)"
    assert types_pb2.DESCRIPTOR.services_by_name == {}  # types.proto defines no service to forget


def _normalized(document: Any, tenant: str, volatile: tuple[str, ...] = ()) -> Any:
    """A twin tenant's answer with its name replaced and its volatile fields marked, so two
    tenants' answers compare."""
    document = json.loads(json.dumps(document).replace(tenant, "<tenant>"))
    if "consistencyToken" in document:  # a write's token: bound to its tenant (and its timeline)
        volatile = (*volatile, "consistencyToken")
    for path in volatile:
        *parents, leaf = path.split(".")
        holder = document
        for key in parents:
            holder = holder[key]
        assert holder.pop(leaf), path
        holder[leaf] = "<volatile>"
    return document


def _marked(document: Any, keys: tuple[str, ...]) -> Any:
    """``document`` with the value of each of ``keys``, wherever it stands, marked volatile (a
    stream's messages hold them at any depth and in lists)."""
    if isinstance(document, dict):
        return {k: "<volatile>" if k in keys else _marked(v, keys) for k, v in document.items()}
    if isinstance(document, list):
        return [_marked(v, keys) for v in document]
    return document


def _stream_prefix(messages: Any, count: int) -> list[dict[str, Any]]:
    taken = []
    for item in messages:
        taken.append(json_format.MessageToDict(item))
        if len(taken) == count:
            break
    return taken


@pytest.mark.parametrize("rpc", sorted(CASES))
def test_the_json_answer_equals_the_grpc_answer(api: ServerProcess, channel: grpc.Channel, rpc: str) -> None:
    case = CASES[rpc]
    route = ROUTES[rpc]
    grpc_tenant = _filled(channel)
    http_tenant = _filled(channel) if case.write else grpc_tenant
    if route.streams:
        expected = _grpc(channel, rpc, case.request(grpc_tenant))
        count = 4 if rpc == "WatchEvents" else 10_000
        wanted = _stream_prefix(expected, count)
        expected.cancel()
        verb, path, _ = rpc_request(route, case.request(http_tenant))
        events = server_sent_events(api.http_port, path)
        got = [json.loads(event["data"]) for _, event in zip(range(len(wanted)), events)]
        events.close()
        assert _marked(got, case.volatile) == _marked(wanted, case.volatile) and wanted
        return
    response, initial = _grpc(channel, rpc, case.request(grpc_tenant), case.metadata)
    reply = call(api.http_port, rpc, case.request(http_tenant), dict(case.metadata))
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/json"
    assert _normalized(reply.json(), http_tenant, case.volatile) == _normalized(
        json_format.MessageToDict(response), grpc_tenant, case.volatile
    )
    for key, value in initial.items():  # AssembleContext's generations come back as headers
        if key.startswith("mnemosyne-") and key != "mnemosyne-server-time-us":
            assert reply.headers[key] == value


def _grpc_error(
    channel: grpc.Channel, rpc: str, request: message.Message, metadata: tuple[tuple[str, str], ...]
) -> tuple[int, str]:
    with pytest.raises(grpc.RpcError) as raised:
        outcome = _grpc(channel, rpc, request, metadata)
        if ROUTES[rpc].streams:
            list(outcome)
    return _code_and_reason(raised.value)


def _code_and_reason(error: grpc.RpcError) -> tuple[int, str]:
    status = rpc_status.from_call(failed_call(error))
    assert status is not None, error
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return status.code, info.reason
    raise AssertionError("no ErrorInfo")


@pytest.mark.parametrize("rpc", sorted(CASES))
def test_the_json_error_is_the_grpc_error(api: ServerProcess, channel: grpc.Channel, rpc: str) -> None:
    case = CASES[rpc]
    if case.tenantless:
        # No tenant to get wrong: a page token, chunk size or limit out of range, or an unknown parameter.
        bad = {
            "ListTenants": admin_pb2.ListTenantsRequest(page_token="not-a-token"),
            "AggregateStats": admin_pb2.AggregateStatsRequest(chunk_size=-5),
            "ListTenantFigures": admin_pb2.ListTenantFiguresRequest(limit=500),
        }.get(rpc)
        if bad is None:
            verb, path, _ = rpc_request(ROUTES[rpc], case.request(""))
            reply = request(api.http_port, verb, path + "?no_such_field=1")
            assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE")
            return
    else:
        bad = case.request("Bad!Tenant")
    code, reason = _grpc_error(channel, rpc, bad, case.metadata)
    reply = call(api.http_port, rpc, bad, dict(case.metadata))
    assert reply.headers["content-type"] == "application/json"
    assert (reply.status, reply.reason, reply.json()["code"]) == (HTTP_STATUS_BY_CODE[code], reason, code)


def test_the_docs_route_table_is_the_routes_of_the_protos() -> None:
    rows = table_rows(section((DOCS / "http-api.md").read_text(), "Routes"))
    documented = {cells[0].strip("`"): cells[1] for cells in rows[2:]}  # below the header
    expected = {
        f"{route.rpc.containing_service.name}.{route.rpc.name}": f"`{route.verb} {route.template}`"
        for route in routes(SERVICES)
    }
    for rpc, route in expected.items():
        assert documented.get(rpc, "").startswith(route), (
            f"{rpc}: docs/http-api.md says {documented.get(rpc)!r}, not {route}"
        )
    for path in GRPC_ONLY:
        service, method = path.strip("/").split("/")
        assert documented[f"{service.rsplit('.', 1)[1]}.{method}"].startswith("gRPC only"), path
    assert len(documented) == len(expected) + len(GRPC_ONLY)


def test_time_and_thread_in_json(api: ServerProcess) -> None:
    """occurred_at is an RFC 3339 string and thread an object in JSON, both ways; a thread is listed
    in order by a query parameter; invalid values are 400 with their reason."""
    tenant = _new_tenant()
    base = f"/v1/tenants/{tenant}/memories"
    for position, text in ((7, "Jo said the gym opens at six"), (3, "Jo joined a gym yesterday")):
        body: dict[str, object] = {
            "text": text,
            "occurredAt": "2023-03-17T10:00:00.250Z",
            "thread": {"id": "jo/s1", "position": position},
        }
        assert request(api.http_port, "POST", base, json_body=body).status == 200
    assert request(api.http_port, "POST", base, json_body={"text": "no thread at all"}).status == 200
    listed = request(api.http_port, "GET", f"{base}?thread=jo%2Fs1").json()["memories"]
    assert [(m["text"], m["thread"], m["occurredAt"]) for m in listed] == [
        ("Jo joined a gym yesterday", {"id": "jo/s1", "position": "3"}, "2023-03-17T10:00:00.250Z"),
        ("Jo said the gym opens at six", {"id": "jo/s1", "position": "7"}, "2023-03-17T10:00:00.250Z"),
    ]
    plain = request(api.http_port, "GET", base).json()["memories"][-1]
    assert plain["text"] == "no thread at all" and "thread" not in plain and "occurredAt" not in plain
    refused: list[tuple[dict[str, object], str]] = [
        ({"text": "x", "thread": {"id": "", "position": 1}}, "THREAD_INVALID"),
        ({"text": "x", "thread": {"id": "a" * 129}}, "THREAD_INVALID"),
        ({"text": "x", "thread": {"id": "ok", "position": -1}}, "THREAD_INVALID"),
        ({"text": "x", "thread": {"id": "ok", "position": str(2**53)}}, "THREAD_INVALID"),
        ({"text": "x", "occurredAt": "0000-12-31T00:00:00Z"}, "OCCURRED_AT_INVALID"),
        ({"text": "x", "occurredAt": "2023-02-29T00:00:00Z"}, "NUMBER_INVALID"),  # no time: docs/http-api.md
        ({"text": "x", "occurredAt": "yesterday"}, "NUMBER_INVALID"),  # no time: docs/http-api.md
    ]
    for body, reason in refused:
        reply = request(api.http_port, "POST", base, json_body=body)
        assert (reply.status, reply.reason) == (400, reason), body
    reply = request(api.http_port, "GET", f"{base}?thread=no%20spaces")
    assert (reply.status, reply.reason) == (400, "THREAD_INVALID")


# RFC 3339 times outside google.protobuf.Timestamp's range (years 1 to 9999), and the moment each
# names, as gRPC carries it: json_format cannot decode them, yet the same moment over gRPC is refused
# by the RPC in its own words.
_BEYOND_RANGE = {
    "0000-01-01T00:00:00Z": (-62_167_219_200, 0),
    "0001-01-01T00:30:00.25+01:00": (-62_135_598_600, 250_000_000),
    "9999-12-31T23:59:59-01:00": (253_402_304_399, 0),
    "10000-01-01T00:00:00Z": (253_402_300_800, 0),
}


def _timestamp_fields(descriptor: Any, request: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of each Timestamp field ``request`` can be given, into the first item of a list."""
    for field in descriptor.fields:
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.message_type.full_name == "google.protobuf.Timestamp":
            yield (*at, field.name)
        elif field.is_repeated:
            if len(getattr(request, field.name)):
                yield from _timestamp_fields(field.message_type, getattr(request, field.name)[0], (*at, field.name, 0))
        elif len(at) < 4:
            yield from _timestamp_fields(field.message_type, getattr(request, field.name), (*at, field.name))


def _outcome_over_grpc(channel: grpc.Channel, rpc: str, sent: message.Message, tenant: str) -> Any:
    try:
        response, _ = _grpc(channel, rpc, sent, CASES[rpc].metadata)
    except grpc.RpcError as error:
        status = rpc_status.from_call(failed_call(error))
        assert status is not None
        info = error_details_pb2.ErrorInfo()
        next(d for d in status.details if d.Is(info.DESCRIPTOR)).Unpack(info)
        return (HTTP_STATUS_BY_CODE[error.code().value[0]], info.reason)
    return _normalized(json_format.MessageToDict(response), tenant)


_TIMED = sorted(
    rpc
    for rpc in CASES
    if not ROUTES[rpc].streams and any(_timestamp_fields(ROUTES[rpc].rpc.input_type, CASES[rpc].request("t")))
)


def test_the_rpcs_that_take_a_time_over_json() -> None:
    assert _TIMED == ["ListEvents", "Retain", "RetainBatch", "UpdateMemory"]


@pytest.mark.parametrize("rpc", _TIMED)
def test_a_time_beyond_timestamps_range_is_refused_over_json_as_over_grpc(
    api: ServerProcess, channel: grpc.Channel, rpc: str
) -> None:
    """A time before year 1 or after 9999 (a time zone's offset may take it there) is refused
    with the reason the RPC gives the same moment over gRPC, not as an undecodable request."""
    case = CASES[rpc]
    reasons: set[str] = set()
    grpc_tenant, http_tenant = _filled(channel), _filled(channel)  # each call below is refused
    for path in _timestamp_fields(ROUTES[rpc].rpc.input_type, case.request("t")):
        for text, (seconds, nanos) in _BEYOND_RANGE.items():
            sent = case.request(grpc_tenant)
            holder: Any = sent
            for step in path:
                holder = holder[step] if isinstance(step, int) else getattr(holder, step)
            holder.seconds, holder.nanos = seconds, nanos
            expected = _outcome_over_grpc(channel, rpc, sent, grpc_tenant)
            # The same request in JSON, the time as its RFC 3339 text.
            verb, route_path, body = rpc_request(ROUTES[rpc], _without(case.request(http_tenant), path))
            if body is None:
                route_path += ("&" if "?" in route_path else "?") + f"{path[-1]}={quote(text)}"
            else:
                document = json.loads(body)
                holder = document
                for step in path[:-1]:
                    holder = holder[step]
                holder[path[-1]] = text
                body = json.dumps(document).encode()
            reply = request(api.http_port, verb, route_path, body, dict(case.metadata))
            got = (reply.status, reply.reason) if reply.status != 200 else _normalized(reply.json(), http_tenant)
            assert got == expected, (path, text)
            reasons.update(str(expected).split("'"))
    assert reasons & {"OCCURRED_AT_INVALID", "EXPIRES_AT_INVALID", "TIMESTAMP_INVALID"}, reasons


def _without(request: message.Message, path: tuple[Any, ...]) -> message.Message:
    """``request`` with the Timestamp at ``path`` cleared (so its JSON leaves room for the text)."""
    holder: Any = request
    for step in path[:-1]:
        holder = holder[step] if isinstance(step, int) else getattr(holder, step)
    holder.ClearField(path[-1])
    return request


def test_speaker_in_json(api: ServerProcess) -> None:
    """speaker is a string in JSON, both ways (a conversation message's name too); a bad one is 400
    with its reason."""
    tenant = _new_tenant()
    base = f"/v1/tenants/{tenant}/memories"
    assert (
        request(api.http_port, "POST", base, json_body={"text": "I adopted a puppy", "speaker": " Jo "}).status == 200
    )
    talk = {"messages": [{"role": "user", "content": "Hi there", "name": "Ana"}]}
    assert request(api.http_port, "POST", base, json_body=talk).status == 200
    assert request(api.http_port, "POST", base, json_body={"text": "nobody said this"}).status == 200
    listed = request(api.http_port, "GET", base).json()["memories"]
    assert [(m["text"], m.get("speaker")) for m in listed] == [
        ("I adopted a puppy", "Jo"),
        ("user (Ana): Hi there", "Ana"),
        ("nobody said this", None),
    ]
    for body in (
        {"text": "x", "speaker": "two\nlines"},
        {"messages": [{"role": "user", "content": "x", "name": "a\x00"}]},
    ):
        reply = request(api.http_port, "POST", base, json_body=body)
        assert (reply.status, reply.reason) == (400, "SPEAKER_INVALID"), body


def test_server_time_is_a_header_when_asked(api: ServerProcess) -> None:
    """A request with the ``mnemosyne-ask-server-time`` header gets the handler's own time as
    the ``mnemosyne-server-time-us`` header (as gRPC's trailer); one without gets none."""
    tenant = _new_tenant()
    base = f"/v1/tenants/{tenant}/memories"
    ask = {"mnemosyne-ask-server-time": "1"}
    wrote = request(api.http_port, "POST", base, json_body={"text": "the crate is in bay 4"}, headers=ask)
    assert wrote.status == 200 and 0 < float(wrote.headers["mnemosyne-server-time-us"]) < 30e6
    recalled = request(api.http_port, "POST", f"{base}:recall", json_body={"query": "crate"}, headers=ask)
    assert recalled.status == 200 and 0 < float(recalled.headers["mnemosyne-server-time-us"]) < 30e6
    unasked = request(api.http_port, "POST", f"{base}:recall", json_body={"query": "crate"})
    assert unasked.status == 200 and "mnemosyne-server-time-us" not in unasked.headers


# -- one mistake, one reason, on every surface ----------------------------------------------------


@dataclass(frozen=True)
class Mistake:
    """One client mistake as each surface that can express it makes it, and the one ErrorInfo
    reason every one of them refuses it with (docs/http-api.md#errors): gRPC ``(rpc, request)``,
    the JSON API ``(verb, path under /v1/tenants/{tenant}, body)``, the mem0 paths ``(verb, path,
    body)`` and an MCP tool ``(tool, arguments)``; a body of bytes is sent as it is."""

    reason: str
    grpc: tuple[str, message.Message] | None = None
    json: tuple[str, str, Any] | None = None
    mem0: tuple[str, str, Any] | None = None
    mcp: tuple[str, dict[str, Any]] | None = None
    tenant: str = ""  # the tenant it names ("": a good one)


_LONG_TEXT, _LONG_QUERY = "a" * 32_769, "a" * 4_097
_PAST_9999 = 253_402_300_800  # 10000-01-01T00:00:00Z, in unix seconds
MISTAKES = {
    "text of another JSON type": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", {"text": 5}),
        mem0=("POST", "/v3/memories/add/", {"messages": [{"role": "user", "content": 5}]}),
        mcp=("retain", {"text": 5}),
    ),
    "a boolean given as text": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", {"text": "a", "fast": "false"}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a", "infer": "false"}),
        mcp=("retain", {"text": "a", "fast": "false"}),
    ),
    "a time of another JSON type": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", {"text": "a", "expiresAt": 5}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a", "expiration_date": 5}),
    ),
    "a message without its role": Mistake(
        "MESSAGE_ROLE_INVALID",
        json=("POST", "/memories", {"messages": [{"content": "a"}, {"role": "user", "content": "b"}]}),
        mem0=("POST", "/v3/memories/add/", {"messages": [{"content": "a"}]}),
    ),
    "a list given as text": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/workspace:update", {"workspace": "w", "changes": "put a.md"}),
        mcp=("update_workspace", {"changes": "put a.md"}),
    ),
    "metadata that is no object": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", {"text": "a", "metadata": []}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a", "metadata": []}),
    ),
    "a key given twice": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", b'{"text": "a", "text": "b"}'),
        mem0=("POST", "/v3/memories/add/", b'{"messages": "a", "messages": "b"}'),
    ),
    "an unknown field": Mistake(
        "REQUEST_UNDECODABLE",
        json=("POST", "/memories", {"text": "a", "bogus": 1}),
        mcp=("recall", {"query": "a", "top_k": 3}),
    ),
    "k that is no whole number": Mistake(
        "NUMBER_INVALID",
        json=("POST", "/memories:recall", {"query": "a", "k": 1.5}),
        mem0=("POST", "/v3/memories/search/", {"query": "a", "top_k": 1.5}),
        mcp=("recall", {"query": "a", "k": 1.5}),
    ),
    "k out of range": Mistake(
        "K_OUT_OF_RANGE",
        grpc=("Recall", memory_pb2.RecallRequest(query="a", k=101)),
        json=("POST", "/memories:recall", {"query": "a", "k": 101}),
        mem0=("POST", "/v3/memories/search/", {"query": "a", "top_k": 101}),
        mcp=("recall", {"query": "a", "k": 101}),
    ),
    "page_size out of range": Mistake(
        "PAGE_SIZE_OUT_OF_RANGE",
        grpc=("ListEvents", events_pb2.ListEventsRequest(page_size=1001)),
        json=("GET", "/events?page_size=1001", None),
        mem0=("GET", "/v1/events/?page_size=1001", None),
        mcp=("list_events", {"page_size": 1001}),
    ),
    "a time past the year 9999": Mistake(
        "OCCURRED_AT_INVALID",
        grpc=("Retain", memory_pb2.RetainRequest(text="a", occurred_at=timestamp_pb2.Timestamp(seconds=_PAST_9999))),
        json=("POST", "/memories", {"text": "a", "occurredAt": "10000-01-01T00:00:00Z"}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a", "timestamp": _PAST_9999}),
    ),
    "a time that is no time": Mistake(
        "NUMBER_INVALID",
        json=("POST", "/memories", {"text": "a", "occurredAt": "2020-01-01"}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a", "timestamp": "2020-01-01"}),
    ),
    "text of white space only": Mistake(
        "TEXT_EMPTY",
        grpc=("Retain", memory_pb2.RetainRequest(text=" \t")),
        json=("POST", "/memories", {"text": " \t"}),
        mem0=("POST", "/v3/memories/add/", {"messages": " \t"}),
        mcp=("retain", {"text": " \t"}),
    ),
    "no text": Mistake(
        "TEXT_EMPTY",
        grpc=("Retain", memory_pb2.RetainRequest()),
        json=("POST", "/memories", {}),
        mem0=("POST", "/v3/memories/add/", {}),
        mcp=("retain", {}),
    ),
    "text too long": Mistake(
        "TEXT_TOO_LONG",
        grpc=("Retain", memory_pb2.RetainRequest(text=_LONG_TEXT)),
        json=("POST", "/memories", {"text": _LONG_TEXT}),
        mem0=("POST", "/v3/memories/add/", {"messages": _LONG_TEXT}),
        mcp=("retain", {"text": _LONG_TEXT}),
    ),
    "query of white space only": Mistake(
        "QUERY_EMPTY",
        grpc=("Recall", memory_pb2.RecallRequest(query=" ")),
        json=("POST", "/memories:recall", {"query": " "}),
        mem0=("POST", "/v3/memories/search/", {"query": " "}),
        mcp=("recall", {"query": " "}),
    ),
    "no query": Mistake(
        "QUERY_EMPTY",
        grpc=("Recall", memory_pb2.RecallRequest()),
        json=("POST", "/memories:recall", {}),
        mem0=("POST", "/v3/memories/search/", {}),
        mcp=("recall", {}),
    ),
    "a null query (null is not given) and k": Mistake(
        "QUERY_EMPTY",
        json=("POST", "/memories:recall", {"query": None, "k": None}),
        mem0=("POST", "/v3/memories/search/", {"query": None, "top_k": None}),
        mcp=("recall", {"query": None, "k": None}),
    ),
    "query too long": Mistake(
        "QUERY_TOO_LONG",
        grpc=("Recall", memory_pb2.RecallRequest(query=_LONG_QUERY)),
        json=("POST", "/memories:recall", {"query": _LONG_QUERY}),
        mem0=("POST", "/v3/memories/search/", {"query": _LONG_QUERY}),
        mcp=("recall", {"query": _LONG_QUERY}),
    ),
    "a bad tenant id": Mistake(
        "TENANT_INVALID",
        grpc=("Retain", memory_pb2.RetainRequest(text="a")),
        json=("POST", "/memories", {"text": "a"}),
        mem0=("POST", "/v3/memories/add/", {"messages": "a"}),
        mcp=("retain", {"text": "a"}),
        tenant="Bad Tenant",
    ),
    "too many items in a batch": Mistake(
        "BATCH_TOO_LARGE",
        grpc=("RetainBatch", memory_pb2.RetainBatchRequest(items=[memory_pb2.RetainItem(text="a")] * 1001)),
        json=("POST", "/memories:batchRetain", {"items": [{"text": "a"}] * 1001}),
    ),
}
_MCP_HELLO = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}


def _http_reason(port: int, verb: str, path: str, body: Any, headers: dict[str, str]) -> str:
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    reply = request(port, verb, path, raw, headers)
    return reply.reason if reply.status >= 400 else f"answered {reply.status}"


async def _mcp_reasons(port: int, tenant: str, calls: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The reason each tool call's error ends with, by mistake, in one session."""
    reasons = {}
    session = Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp?tenant={tenant}"))
    async with session:
        for name, (tool, arguments) in calls.items():
            result = await session.call_tool(tool, arguments)
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]  # a tool error is text
            ending = re.search(r"\(([A-Z_]+)\)$", text)
            reasons[name] = ending[1] if result.is_error and ending else f"answered {text[:120]!r}"
    return reasons


def _mistake_reasons(api: ServerProcess, channel: grpc.Channel, mistake: Mistake) -> dict[str, str]:
    """The reason each surface but MCP's tools refused ``mistake`` with (MCP: only a bad tenant)."""
    tenant = mistake.tenant or _new_tenant()
    got = {}
    if mistake.grpc is not None:
        rpc, sent = mistake.grpc
        named = type(sent)()
        named.CopyFrom(sent)
        named.tenant = tenant  # type: ignore[attr-defined]  # every request of the table names a tenant
        try:
            _grpc(channel, rpc, named)
            got["gRPC"] = "answered OK"
        except grpc.RpcError as error:
            got["gRPC"] = _code_and_reason(error)[1]
    if mistake.json is not None:
        verb, path, body = mistake.json
        got["JSON"] = _http_reason(api.http_port, verb, f"/v1/tenants/{quote(tenant)}{path}", body, {})
    if mistake.mem0 is not None:
        headers = {"authorization": "Token any", "mnemosyne-tenant": tenant}
        got["mem0"] = _http_reason(api.http_port, *mistake.mem0, headers)
    if mistake.mcp is not None and mistake.tenant:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": _MCP_HELLO}
        accept = {"accept": "application/json, text/event-stream"}
        got["MCP"] = _http_reason(api.http_port, "POST", f"/mcp?tenant={quote(tenant)}", hello, accept)
    return got


def test_the_same_mistake_gets_the_same_reason_on_every_surface(api: ServerProcess, channel: grpc.Channel) -> None:
    """Each mistake of ``MISTAKES`` through every surface that can make it: gRPC, the JSON API,
    the mem0 paths and the MCP tools all refuse it with its one reason."""
    found = {name: _mistake_reasons(api, channel, mistake) for name, mistake in MISTAKES.items()}
    tool_calls = {name: m.mcp for name, m in MISTAKES.items() if m.mcp is not None and not m.tenant}
    for name, reason in anyio.run(_mcp_reasons, api.http_port, _new_tenant(), tool_calls).items():
        found[name]["MCP"] = reason
    wrong = [
        f"{name} over {surface}: {reason}, not {MISTAKES[name].reason}"
        for name, reasons in found.items()
        for surface, reason in reasons.items()
        if reason != MISTAKES[name].reason
    ]
    assert not wrong, "\n".join(wrong)
