"""Bearer tokens, per-tenant authorisation (a malformed tenant id is invalid before any token is
looked at, on every surface), and health checks that need no token."""

from __future__ import annotations

import http.client
import json
import re
from typing import Any
from urllib.parse import quote

import grpc
import pytest
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2

from mnemosyne.client import MemoryClient, PermissionDeniedError, UnauthenticatedError
from mnemosyne.client.errors import error_info
from mnemosyne.transport.auth import hash_token
from mnemosyne.transport.http.mem0 import ROUTES as MEM0_ROUTES
from mnemosyne.transport.server import SERVICES
from mnemosyne.v1 import memory_pb2, memory_pb2_grpc
from tests.http_support import ROUTES, Reply, request, rpc_request
from tests.http_support import call as call_route
from tests.support import health_check

TOKENS = {"svc-acme": "s3cret-acme-token", "admin": "s3cret-admin-token"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from tests.support import ServerProcess

    root = tmp_path_factory.mktemp("auth")
    tokens_file = root / "tokens.json"
    tokens_file.write_text(
        json.dumps(
            {
                "tokens": [
                    {"name": "svc-acme", "sha256": hash_token(TOKENS["svc-acme"]), "tenants": ["acme"]},
                    {"name": "admin", "sha256": hash_token(TOKENS["admin"]), "tenants": ["*"]},
                ]
            }
        )
    )
    server = ServerProcess(root / "data", args=["--tokens-file", str(tokens_file)], http=True).start()
    yield server
    server.stop()


def test_tokens_file_holds_no_token(secured) -> None:
    text = (secured.data_dir.parent / "tokens.json").read_text()
    assert TOKENS["svc-acme"] not in text and TOKENS["admin"] not in text


def test_health_check_needs_no_token(secured) -> None:
    with grpc.insecure_channel(secured.target) as channel:
        response = health_check(channel, timeout=5)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_missing_and_wrong_tokens_are_unauthenticated(secured) -> None:
    for token, reason in ((None, "TOKEN_MISSING"), ("wrong", "TOKEN_UNKNOWN")):
        with MemoryClient(secured.target, token=token) as client:
            with pytest.raises(UnauthenticatedError) as info:
                client.recall("acme", "x")
            assert info.value.reason == reason


def test_token_for_another_tenant_is_permission_denied_before_any_lookup(secured) -> None:
    with MemoryClient(secured.target, token=TOKENS["svc-acme"]) as client:
        assert client.retain("acme", "allowed").status == "created"
        for call in (
            lambda: client.retain("beta", "not allowed"),
            lambda: client.recall("beta", "x"),
            lambda: client.get_memory("beta", 1),
            lambda: client.stats("beta"),
        ):
            with pytest.raises(PermissionDeniedError) as info:
                call()
            assert info.value.reason == "TENANT_FORBIDDEN"
    assert not (secured.data_dir / "tenants" / "beta.sqlite").exists()


# Tenant ids of the wrong form: a path, capitals, one character too many.
MALFORMED_TENANTS = ["../acme", "Acme", "a" * 64]
# Who asks: a valid token for another tenant, and nobody.
ASKERS = {"another tenant's token": TOKENS["svc-acme"], "no token": None}


def _grpc_calls() -> list[tuple[str, Any, bool, bool]]:
    """(path, request type, client streaming, server streaming) of every RPC naming a tenant."""
    return [
        (f"/{service.full_name}/{method.name}", message_factory.GetMessageClass(method.input_type), *kind)
        for service in SERVICES
        for method in service.methods
        if "tenant" in method.input_type.fields_by_name
        for kind in [(method.client_streaming, method.server_streaming)]
    ]


def _grpc_refusal(channel: grpc.Channel, call: tuple[str, Any, bool, bool], tenant: str, token: str | None) -> Any:
    path, request_type, client_streaming, server_streaming = call
    request = request_type(tenant=tenant)
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    serialize = request_type.SerializeToString
    try:
        if client_streaming:
            channel.stream_unary(path, request_serializer=serialize)(iter([request]), timeout=10, metadata=metadata)
        elif server_streaming:
            list(channel.unary_stream(path, request_serializer=serialize)(request, timeout=10, metadata=metadata))
        else:
            channel.unary_unary(path, request_serializer=serialize)(request, timeout=10, metadata=metadata)
    except grpc.RpcError as exc:
        info = error_info(exc)
        return exc.code(), info.reason if info is not None else ""
    return "answered"


def _routed_request(rpc: str, tenant: str) -> Any:
    """The request of an HTTP route for ``tenant``, its other path fields given a value (an empty
    one would leave a segment out and match no route)."""
    route = ROUTES[rpc]
    message = message_factory.GetMessageClass(route.rpc.input_type)(tenant=tenant)
    for name in route.path_fields:
        if name != "tenant":
            field = route.rpc.input_type.fields_by_name[name]
            setattr(message, name, "main" if field.type == field.TYPE_STRING else 1)
    return message


def _mem0_paths() -> list[tuple[str, str]]:
    """(verb, a path) of every mem0 route answered for a tenant: each pattern's groups filled in."""
    return [
        (verb, re.sub(r"\([^)]*\)", "1", route.path))
        for route in MEM0_ROUTES
        for verb in route.verb.split("|")
        if not route.unsupported and route.name != "ping"  # ping names no tenant; unsupported paths answer 501
    ]


@pytest.mark.parametrize("asker", ASKERS)
def test_a_malformed_tenant_is_invalid_on_every_surface_whoever_asks(secured, asker: str) -> None:
    """TENANT_INVALID, not TENANT_FORBIDDEN nor TOKEN_MISSING: the id's form is checked before the
    token, on gRPC (every RPC naming a tenant), the HTTP/JSON routes, the mem0 paths and MCP."""
    token = ASKERS[asker]
    expected: dict[str, Any] = {}
    answered: dict[str, Any] = {}
    with grpc.insecure_channel(secured.target) as channel:
        calls = _grpc_calls()
        assert len(calls) >= 30
        for call in calls:
            for tenant in [*MALFORMED_TENANTS, *([""] if call[0] != "/mnemosyne.v1.AdminService/ImportTenant" else [])]:
                key = f"grpc {call[0]} {tenant!r}"
                answered[key] = _grpc_refusal(channel, call, tenant, token)
                expected[key] = (grpc.StatusCode.INVALID_ARGUMENT, "TENANT_INVALID")
    bearer = {"authorization": f"Bearer {token}"} if token else {}
    routes = [rpc for rpc, route in ROUTES.items() if "tenant" in route.rpc.input_type.fields_by_name]
    assert len(routes) >= 25
    for rpc in routes:
        for tenant in MALFORMED_TENANTS:
            reply = call_route(secured.http_port, rpc, _routed_request(rpc, tenant), bearer)
            answered[f"http {rpc} {tenant!r}"] = (reply.status, reply.reason if reply.status >= 400 else "")
            expected[f"http {rpc} {tenant!r}"] = (400, "TENANT_INVALID")
    mem0_key = {"authorization": f"Token {token}"} if token else {}
    paths = _mem0_paths()
    assert len(paths) >= 10
    for verb, path in paths:
        for tenant in MALFORMED_TENANTS:
            reply = request(secured.http_port, verb, path, b"{}", {**mem0_key, "mnemosyne-tenant": tenant})
            answered[f"mem0 {verb} {path} {tenant!r}"] = (reply.status, reply.reason if reply.status >= 400 else "")
            expected[f"mem0 {verb} {path} {tenant!r}"] = (400, "TENANT_INVALID")
    for tenant in MALFORMED_TENANTS:
        reply = request(secured.http_port, "POST", f"/mcp?tenant={quote(tenant)}", b"{}", bearer)
        answered[f"mcp {tenant!r}"] = (reply.status, reply.reason if reply.status >= 400 else "")
        expected[f"mcp {tenant!r}"] = (400, "TENANT_INVALID")
    wrong = {key: answer for key, answer in answered.items() if answer != expected[key]}
    assert not wrong, f"{len(wrong)} of {len(answered)} answers are not TENANT_INVALID: {wrong}"


def _sent_twice(
    port: int, verb: str, path: str, body: bytes, values: list[str], header: str = "Authorization", *also: str
) -> tuple[int, str]:
    """The status and reason of an HTTP request sending ``values`` as headers named ``header``
    (and ``also``: more headers, as ``name: value``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest(verb, path)
        for value in values:
            connection.putheader(header, value)
        for line in also:
            connection.putheader(*line.split(": ", 1))
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        reply = Reply(response.status, dict(response.getheaders()), response.read())
        return reply.status, reply.reason if reply.status >= 400 else ""
    finally:
        connection.close()


def test_an_authorization_sent_twice_is_refused_on_every_surface(secured) -> None:
    """Two authorization values, a valid token among them, are UNAUTHENTICATED TOKEN_MALFORMED on
    gRPC, the HTTP/JSON routes, the mem0 paths and MCP, in either order: neither the first nor the
    last is taken silently (a proxy before the server may have checked the other)."""
    valid, other = f"Bearer {TOKENS['svc-acme']}", f"Bearer {TOKENS['admin']}"
    answered: dict[str, Any] = {}
    with grpc.insecure_channel(secured.target) as channel:
        recall = memory_pb2_grpc.MemoryServiceStub(channel).Recall
        for pair in ([valid, "Bearer wrong"], ["Bearer wrong", valid], [valid, other]):
            with pytest.raises(grpc.RpcError) as refused:
                recall(
                    memory_pb2.RecallRequest(tenant="acme", query="x"),
                    metadata=tuple(("authorization", v) for v in pair),
                )
            info = error_info(refused.value)
            answered[f"grpc {pair}"] = (refused.value.code(), info.reason if info else "", refused.value.details())
    http_verb, http_path, http_body = rpc_request(ROUTES["Recall"], memory_pb2.RecallRequest(tenant="acme", query="x"))
    for name, (verb, path, body) in {
        "http": (http_verb, http_path, http_body or b""),
        "mem0": ("POST", "/v3/memories/search/", b'{"query": "x"}'),
        "mcp": ("POST", "/mcp?tenant=acme", b"{}"),
    }.items():
        for pair in ([valid, "Bearer wrong"], ["Bearer wrong", valid]):
            answered[f"{name} {pair}"] = _sent_twice(secured.http_port, verb, path, body, pair)
    expected = (
        grpc.StatusCode.UNAUTHENTICATED,
        "TOKEN_MALFORMED",
        "authorization is sent 2 times: send it once, as 'Bearer <token>'",
    )
    wrong = {
        key: answer
        for key, answer in answered.items()
        if answer != (expected if key.startswith("grpc") else (401, "TOKEN_MALFORMED"))
    }
    assert not wrong, wrong


def test_a_tenant_header_sent_twice_is_refused_on_the_mem0_paths(secured) -> None:
    """``Mnemosyne-Tenant`` sent twice chose the tenant by its first value without a word (with
    the admin token, ``beta, acme`` searched beta; with acme's, ``acme, beta`` was served): a
    proxy that let the request through for the other value would have been bypassed. It is
    refused, 400 REQUEST_UNDECODABLE, whoever asks and in either order, before the token is
    looked at (as a tenant id of the wrong form, or ``/mcp?tenant=a&tenant=b``)."""
    answered: dict[str, Any] = {}
    for name, key in (("acme's", TOKENS["svc-acme"]), ("admin", TOKENS["admin"]), ("no", None)):
        credential = (f"Authorization: Token {key}",) if key else ()
        for verb, path, body in (("POST", "/v3/memories/search/", b'{"query": "x"}'), ("GET", "/v1/ping/", b"")):
            for pair in (["acme", "beta"], ["beta", "acme"]):
                reply = _sent_twice(secured.http_port, verb, path, body, pair, "Mnemosyne-Tenant", *credential)
                answered[f"{name} token {verb} {path} {pair}"] = reply
    wrong = {key: answer for key, answer in answered.items() if answer != (400, "REQUEST_UNDECODABLE")}
    assert not wrong, wrong


def test_admin_token_reaches_every_tenant(secured) -> None:
    with MemoryClient(secured.target, token=TOKENS["admin"]) as client:
        assert client.retain("beta", "admin wrote this").status == "created"
        assert client.stats("acme").memories >= 1


def test_unauthenticated_server_refuses_a_non_loopback_bind(tmp_path) -> None:
    import subprocess

    from tests.support import SERVE, serve_args

    result = subprocess.run(
        [*SERVE, *serve_args(tmp_path, "--host", "0.0.0.0")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "AUTH_REQUIRED" in result.stderr and "--tokens-file" in result.stderr
