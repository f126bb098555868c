"""Consistency tokens on the fixed-schema surfaces (issue 40, docs/hot-path.md "Read your own
writes"): the mem0-compatible paths answer a write's token in the ``Mnemosyne-Consistency-Token``
header and their reads (search, get, get_all) take it in that header; the server's MCP endpoint's
write tools answer it in their result and its read tools take it as an argument. Behind a backlog
held by the test seam (MNEMOSYNE_TEST_HOLD_BACKLOG), so without the token the write is not seen.
The clients that carry the token by default are tested with them (their session consistency)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anyio
import grpc
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import error_info
from mnemosyne.v1 import hot_path_pb2, memory_pb2, workspace_pb2
from tests.http_support import Reply, request
from tests.http_support import call as http_call
from tests.support import ServerProcess, tokens_json

HEADER = "mnemosyne-consistency-token"
KEY = "surfaces-key"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("surfaces")
    hold = root / "hold-backlog"
    hold.touch()
    server = ServerProcess(
        root / "data",
        http=True,
        env={"MNEMOSYNE_TOKENS": tokens_json({KEY: ["mem0t", "mcpt"]}), "MNEMOSYNE_TEST_HOLD_BACKLOG": str(hold)},
    ).start()
    with MemoryClient(server.target, KEY) as client:
        for tenant in ("mem0t", "mcpt"):
            client.hot_path(tenant, "enable")
            client.retain_batch(tenant, [f"held note {i} on shelf S-{i % 30}" for i in range(500)], fast=True)
    try:
        yield server
    finally:
        server.stop()


def _mem0(server: ServerProcess, verb: str, path: str, body: Any = None, token: str = "") -> Reply:
    headers = {"authorization": f"Token {KEY}", "mnemosyne-tenant": "mem0t"}
    if token:
        headers["Mnemosyne-Consistency-Token"] = token
    return request(server.http_port, verb, path, headers=headers, json_body=body)


def test_the_mem0_paths_answer_and_take_the_token(held: ServerProcess) -> None:
    added = _mem0(held, "POST", "/v3/memories/add/", {"messages": "Dana's locker is L-31", "user_id": "dana"})
    assert added.status == 200 and added.json()["status"] == "PENDING", added.body
    token = added.headers[HEADER]
    query = {"query": "Dana locker L-31", "filters": {"user_id": "dana"}}
    assert _mem0(held, "POST", "/v3/memories/search/", query).json()["results"] == []  # held, not seen
    found = _mem0(held, "POST", "/v3/memories/search/", query, token).json()["results"]
    assert [r["memory"] for r in found] == ["Dana's locker is L-31"]
    listed = _mem0(held, "POST", "/v3/memories/", {"filters": {"user_id": "dana"}}, token).json()
    assert [r["memory"] for r in listed["results"]] == ["Dana's locker is L-31"]
    got = _mem0(held, "GET", f"/v1/memories/{found[0]['id']}/", token=token)
    assert got.status == 200 and got.json()["memory"] == "Dana's locker is L-31"
    # A delete of queued writes: ordered, answered at once, its token carries on the session.
    queued = _mem0(held, "POST", "/v3/memories/add/", {"messages": "Dana's bike is blue", "user_id": "dana"})
    deleted = _mem0(held, "DELETE", "/v1/memories/?user_id=dana", token=queued.headers[HEADER])
    assert deleted.status == 200 and deleted.json()["deleted_count"] == 1 and deleted.headers[HEADER]
    after = _mem0(held, "POST", "/v3/memories/search/", {"query": "Dana bike", "filters": {"user_id": "dana"}})
    assert after.json()["results"] == []
    event = _mem0(held, "GET", f"/v1/event/{queued.json()['event_id']}/").json()
    assert event["status"] == "FAILED"
    forged = _mem0(held, "POST", "/v3/memories/search/", query, token[:-3] + "AAA")
    assert forged.status == 400 and "TOKEN_INVALID" in forged.body.decode()


def _text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def test_the_mcp_endpoint_answers_and_takes_the_token(held: ServerProcess) -> None:
    """A write tool answers a token; its own MCP session reads the write without it (the
    endpoint's session consistency), another session misses it unless given the token."""

    def connect() -> Client:
        return Client(
            streamable_http_client(
                f"{held.http_url}/mcp?tenant=mcpt",
                http_client=httpx2.AsyncClient(headers={"authorization": f"Bearer {KEY}"}, timeout=30),
            )
        )

    async def sessions() -> tuple[str, str, str, str, str]:
        async with connect() as writer:
            written = _text(await writer.call_tool("retain", {"text": "Eli parks in bay P-4", "fast": True}))
            token = re.search(r"consistency_token: (\S+)", written)
            assert token, written
            async with connect() as other:
                plain = _text(await other.call_tool("recall", {"query": "Eli parks bay P-4"}))
                found = _text(
                    await other.call_tool("recall", {"query": "Eli parks bay P-4", "consistency_token": token[1]})
                )
                read = _text(
                    await other.call_tool("read_memory", {"query": "Eli parks", "consistency_token": token[1]})
                )
            own = _text(await writer.call_tool("recall", {"query": "Eli parks bay P-4"}))
            return written, plain, found, read, own

    written, plain, found, read, own = anyio.run(sessions)
    assert written.startswith("Queued as event")
    assert "Eli parks in bay P-4" not in plain
    assert "Eli parks in bay P-4" in found and "Eli parks in bay P-4" in read
    assert "Eli parks in bay P-4" in own


def test_the_mcp_tools_say_what_the_token_is(held: ServerProcess) -> None:
    async def tools() -> dict[str, Any]:
        transport = streamable_http_client(
            f"{held.http_url}/mcp?tenant=mcpt",
            http_client=httpx2.AsyncClient(headers={"authorization": f"Bearer {KEY}"}, timeout=30),
        )
        async with Client(transport) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    schemas = anyio.run(tools)
    for name in ("retain", "recall", "read_memory"):
        assert "consistency_token" in json.dumps(schemas[name]["properties"]), name


def test_every_method_refuses_a_token_of_white_space_or_padded_the_same_way(held: ServerProcess) -> None:
    """A token is the server's text, passed back unchanged: one padded with white space or made of
    it (U+2028, a no-break space, NEL) is refused TOKEN_INVALID by every method that takes one,
    whether given in the request field or in the metadata (an HTTP header). The metadata's was
    stripped first (a U+2028 token read as none, a padded one as the token), the field's not."""
    tenant, auth = "mem0t", (("authorization", f"Bearer {KEY}"),)
    client = MemoryClient(held.target, KEY)
    written = memory_pb2.RetainRequest(tenant=tenant, text="a note written for its token")
    good = client.memory.Retain(written, metadata=auth).consistency_token
    assert good
    stubs = {"memory": client.memory, "workspace": client.workspace, "hot": client.hot_path_stub}
    reads: dict[str, Any] = {
        "Recall": memory_pb2.RecallRequest(tenant=tenant, query="note"),
        "GetMemory": memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=1),
        "ListMemories": memory_pb2.ListMemoriesRequest(tenant=tenant),
        "AssembleContext": workspace_pb2.AssembleContextRequest(tenant=tenant, workspace="w"),
        "Flush": hot_path_pb2.FlushRequest(tenant=tenant),
    }
    retain = memory_pb2.RetainRequest(tenant=tenant, text="never written with a padded token")
    grpc_methods = {"Recall": "memory", "GetMemory": "memory", "ListMemories": "memory"}
    grpc_methods |= {"AssembleContext": "workspace", "Flush": "hot"}
    outcomes: dict[tuple[str, str, str], str] = {}

    def grpc_reason(rpc: str, message: Any, metadata: tuple[tuple[str, str], ...] = ()) -> str:
        try:
            getattr(stubs[grpc_methods.get(rpc, "memory")], rpc)(message, metadata=(*auth, *metadata), timeout=10)
        except grpc.RpcError as error:
            info = error_info(error)
            return info.reason if info is not None else str(error.code())
        return "answered"

    for token in (" ", f" {good} ", f"{good} "):  # what gRPC metadata can carry of white space
        for rpc, asked in reads.items():
            given = type(asked)()
            given.CopyFrom(asked)
            given.consistency_token = token
            outcomes[rpc, "grpc field", repr(token)] = grpc_reason(rpc, given)
            outcomes[rpc, "grpc metadata", repr(token)] = grpc_reason(rpc, asked, ((HEADER, token),))
        outcomes["Retain", "grpc metadata", repr(token)] = grpc_reason("Retain", retain, ((HEADER, token),))
    headers = {"authorization": f"Bearer {KEY}"}
    for token in ("\u2028", "\u00a0", "\u3000", f"{good}\u2028", f"{good}\u00a0"):
        for rpc, asked in reads.items():
            given = type(asked)()
            given.CopyFrom(asked)
            given.consistency_token = token
            outcomes[rpc, "http field", repr(token)] = http_call(held.http_port, rpc, given, headers).reason
    for token in ("\xa0", "\x85", f"{good}\xa0"):  # a header's bytes are latin-1
        for rpc, asked in [*reads.items(), ("Retain", retain)]:
            reply = http_call(held.http_port, rpc, asked, {**headers, HEADER: token})
            outcomes[rpc, "http header", repr(token)] = reply.reason if reply.status == 400 else str(reply.status)
    client.close()
    wrong = {case: reason for case, reason in outcomes.items() if reason != "TOKEN_INVALID"}
    assert not wrong, wrong
    assert len(outcomes) == 76
