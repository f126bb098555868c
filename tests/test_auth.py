"""Bearer tokens, per-tenant authorisation, and health checks that need no token."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mnemosyne.client import MemoryClient, PermissionDeniedError, UnauthenticatedError
from mnemosyne.transport.auth import hash_token

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
    server = ServerProcess(root / "data", args=["--tokens-file", str(tokens_file)]).start()
    yield server
    server.stop()


def test_tokens_file_holds_no_token(secured) -> None:
    text = (secured.data_dir.parent / "tokens.json").read_text()
    assert TOKENS["svc-acme"] not in text and TOKENS["admin"] not in text


def test_health_check_needs_no_token(secured) -> None:
    with grpc.insecure_channel(secured.target) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
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
            # Even a malformed id is refused as forbidden, not described as invalid.
            lambda: client.recall("../acme", "x"),
        ):
            with pytest.raises(PermissionDeniedError) as info:
                call()
            assert info.value.reason == "TENANT_FORBIDDEN"
    assert not (secured.data_dir / "tenants" / "beta.sqlite").exists()


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
