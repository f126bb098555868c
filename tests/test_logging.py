"""Structured logs: JSON lines with request ids; memory text, queries, metadata and tokens never
appear in the server's output."""

from __future__ import annotations

import json

import grpc
import pytest

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.transport.auth import hash_token
from mnemosyne.v1 import memory_pb2
from tests.support import ServerProcess, failed_call, tokens_json

TOKEN = "tok-Zq8VnQ2sLx7Wm4Rc"
WRONG_TOKEN = "tok-Pw3KdY9tHb6Nf1Gs"
SECRET_TEXT = "my bank PIN is 4417 and the passphrase is correct-horse-battery-staple"
SECRET_QUERY = "passphrase battery staple"
SECRET_META = "meta-secret-Ux81Tq"


def _traffic(server: ServerProcess, tenant: str) -> None:
    with MemoryClient(server.target, TOKEN, retries=0) as c:
        memory_id = c.retain(tenant, SECRET_TEXT, metadata={"note": SECRET_META}).memory_id
        c.retain(tenant, SECRET_TEXT)  # duplicate
        c.retain_batch(tenant, [SECRET_TEXT + " (batch)", "x" * 40_000])  # one item invalid
        assert c.recall(tenant, SECRET_QUERY, k=2)
        assert c.get_memory(tenant, memory_id).text == SECRET_TEXT
        with pytest.raises(MnemosyneClientError):
            c.retain(tenant, SECRET_TEXT + "\x00")  # INVALID_ARGUMENT about the text
        with pytest.raises(grpc.RpcError) as missing:
            c.memory.GetMemory(
                memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=999_999),
                metadata=(*c.call_metadata, ("x-request-id", "req-logtest-42")),
                timeout=10,
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert ("x-request-id", "req-logtest-42") in tuple(failed_call(missing.value).initial_metadata())
        c.forget(tenant, memory_id)
    with MemoryClient(server.target, WRONG_TOKEN, retries=0) as wrong:
        with pytest.raises(MnemosyneClientError):
            wrong.recall(tenant, SECRET_QUERY)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_logs_carry_request_ids_and_no_secrets(server_factory, tenant: str, log_format: str) -> None:
    server: ServerProcess = server_factory(
        env={
            "MNEMOSYNE_TOKENS": tokens_json({TOKEN: [tenant]}),
            "MNEMOSYNE_LOG_FORMAT": log_format,
            "MNEMOSYNE_LOG_LEVEL": "DEBUG",  # the most the server ever logs
        }
    ).start()
    _traffic(server, tenant)
    server.stop()
    output = server.stderr_path.read_text()
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) > 10  # one access line per call at DEBUG, and start/stop lines

    # Pieces of the text too, but none made of digits alone: a pid or port such as 24417 would
    # match them (a flaky failure seen once).
    for secret in (
        SECRET_TEXT,
        "PIN is 4417",
        "correct-horse",
        SECRET_QUERY,
        SECRET_META,
        TOKEN,
        WRONG_TOKEN,
        hash_token(TOKEN),
        hash_token(WRONG_TOKEN),
    ):
        assert secret not in output, f"{secret!r} leaked into the server log"

    if log_format == "json":
        records = [json.loads(line) for line in lines]  # every line is one JSON object
        rpc = [r for r in records if r.get("event") == "rpc"]
        assert all(r["request_id"] and r["method"].startswith("/") and "duration_ms" in r for r in rpc)
        assert len({r["request_id"] for r in rpc}) == len(rpc)  # a fresh id per call
        missing = [r for r in rpc if r["request_id"] == "req-logtest-42"]
        assert [(r["code"], r["level"]) for r in missing] == [("NOT_FOUND", "INFO")]
        assert {"UNAUTHENTICATED", "INVALID_ARGUMENT", "OK"} <= {r["code"] for r in rpc}
        assert any(r["msg"].startswith("stopped") for r in records)
    else:
        assert any("NOT_FOUND" in line and "request_id=req-logtest-42" in line for line in lines)


def test_request_id_echo_merges_with_assemble_context_metadata(client, tenant: str) -> None:
    # AssembleContext sends its generations as initial metadata; a call has only one set, so the
    # echoed request id must join it rather than collide with it.
    from mnemosyne.v1 import workspace_pb2

    _, call = client.workspace.AssembleContext.with_call(
        workspace_pb2.AssembleContextRequest(tenant=tenant, workspace="w"),
        metadata=(*client.call_metadata, ("x-request-id", "req-merge-7")),
        timeout=10,
    )
    keys = dict(call.initial_metadata())
    assert keys["x-request-id"] == "req-merge-7"
    assert keys["mnemosyne-global-generation"] == "0" and keys["mnemosyne-workspace-generation"] == "0"
