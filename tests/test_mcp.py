"""The MCP server, through the official MCP SDK's own client against real servers: over stdio
(``mnemosyne mcp``) and over streamable HTTP (``/mcp`` on the HTTP port). The adapter is the host:
the model never sees a generation, and a write from a session whose reading is stale fails closed.

The servers start their scopes at generation 9,000,000 (a test seam), so a generation that leaked
into a schema, a result or an error would be visible as one of those numbers."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, TextResourceContents

from mnemosyne.client import MemoryClient
from tests.http_support import request
from tests.support import ServerProcess, gauge, tokens_json

GENERATION_BASE = 9_000_000
TOOLS = {
    "read_memory",
    "retain",
    "recall",
    "memory_update",
    "update_workspace",
    "get_event_status",
    "list_events",
    "flush",
}
REVISION_WORDS = re.compile(r"generation|revision|etag|\bhash\b|version_id", re.IGNORECASE)
TOKEN, OTHER = "mcp-token-acme", "mcp-token-other"
ID_NO_ANSWER_CAN_CARRY = (b"1.5", b"true", b"null", b'{"a":1}', b"[1]")  # the SDK took each for a notification


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("mcp") / "data",
        http=True,
        env={
            "MNEMOSYNE_TEST_GENERATION_BASE": str(GENERATION_BASE),
            "MNEMOSYNE_TOKENS": tokens_json({TOKEN: ["acme", "beta"], OTHER: ["other"]}),
        },
    )
    process.start()
    yield process
    process.stop()


def _http(
    server: ServerProcess, tenant: str, token: str | None = TOKEN, headers: dict[str, str] | None = None
) -> Client:
    sent = {**({"authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    transport = streamable_http_client(
        f"{server.http_url}/mcp?tenant={tenant}", http_client=httpx2.AsyncClient(headers=sent, timeout=30)
    )
    return Client(transport)


def _stdio(server: ServerProcess, tenant: str) -> Client:
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=["-m", "mnemosyne.cli", "mcp", "--target", server.target, "--tenant", tenant, "--workspace", "main"],
            env={**os.environ, "MNEMOSYNE_TOKEN": TOKEN},
        )
    )


def _text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def _no_generation(text: str) -> None:
    assert not re.search(r"900000\d", text), text
    assert not REVISION_WORDS.search(text), text


def _global_record(server: ServerProcess, tenant: str) -> str:
    with MemoryClient(server.target, TOKEN) as client:
        return client.get_record(tenant, "global", "MEMORY.md")[0].content


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_every_tool_resource_and_prompt_works_and_shows_no_generation(
    mcp_server: ServerProcess, transport: str
) -> None:
    tenant = "acme" if transport == "http" else "beta"
    with MemoryClient(mcp_server.target, TOKEN) as grpc_client:
        grpc_client.hot_path(tenant, "enable")  # so that a fast retain is queued

    async def run() -> None:
        client = _http(mcp_server, tenant) if transport == "http" else _stdio(mcp_server, tenant)
        async with client as c:
            tools = await c.list_tools()
            assert {tool.name for tool in tools.tools} == TOOLS
            for tool in tools.tools:
                assert tool.description and len(tool.description) > 40, tool.name  # written for a model
                _no_generation(json.dumps(tool.input_schema) + tool.description)
            templates = await c.list_resource_templates()
            assert [t.uri_template for t in templates.resource_templates] == ["memory://context/{workspace}"]
            prompts = await c.list_prompts()
            assert [p.name for p in prompts.prompts] == ["memory_context"]

            outputs = []
            read = await c.call_tool("read_memory", {})
            assert not read.is_error and "# Global memory" in _text(read)
            outputs.append(_text(read))
            calls: list[tuple[str, dict[str, Any]]] = [
                ("retain", {"text": f"The {transport} courier delivers on Tuesdays"}),
                ("memory_update", {"content": f"# Memory\n- {transport} notes"}),
                ("update_workspace", {"changes": [{"op": "put", "key": "plan.md", "content": "ship it"}]}),
                ("recall", {"query": "courier Tuesdays", "k": 3}),
                ("retain", {"text": f"A queued {transport} note about Lisbon", "fast": True}),
                ("flush", {"timeout_seconds": 30}),
                ("list_events", {"status": "succeeded"}),
            ]
            for name, arguments in calls:
                result = await c.call_tool(name, arguments)
                assert not result.is_error, (name, _text(result))
                outputs.append(_text(result))
            assert "courier" in outputs[4]
            queued = re.search(r"event (\d+)", outputs[5])
            assert queued is not None, outputs[5]
            event_id = int(queued.group(1))
            status = await c.call_tool("get_event_status", {"event_id": event_id})
            assert json.loads(_text(status))["status"] == "succeeded"
            outputs.append(_text(status))
            context = (await c.read_resource("memory://context/main")).contents[0]
            assert isinstance(context, TextResourceContents), context
            assert "plan.md" in context.text and f"{transport} notes" in context.text
            outputs.append(context.text)
            prompt = await c.get_prompt("memory_context", {"query": "courier"})
            outputs.append(json.dumps(prompt.model_dump(mode="json")))
            # Malformed arguments are a tool error the model reads, never a crash.
            bad = await c.call_tool("update_workspace", {"changes": "everything"})
            assert bad.is_error
            outputs.append(_text(bad))
            for output in outputs:
                _no_generation(output)

        assert _global_record(mcp_server, tenant) == f"# Memory\n- {transport} notes"

    anyio.run(run)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_of_two_sessions_that_read_the_same_memory_exactly_one_update_wins(
    mcp_server: ServerProcess, transport: str
) -> None:
    tenant = "acme" if transport == "http" else "beta"

    def make() -> Client:
        return _http(mcp_server, tenant) if transport == "http" else _stdio(mcp_server, tenant)

    async def run() -> None:
        async with make() as first, make() as second:
            await first.call_tool("read_memory", {})
            await second.call_tool("read_memory", {})
            one = await first.call_tool("memory_update", {"content": "first session's memory"})
            two = await second.call_tool("memory_update", {"content": "second session's memory"})
            assert not one.is_error
            # The model is told what to do in its own tools' words: read again.
            assert two.is_error and "call read_memory" in _text(two) and "STALE_CONTEXT" in _text(two), _text(two)
            _no_generation(_text(two))
            assert _global_record(mcp_server, tenant) == "first session's memory"
            # A third writer (gRPC) between a reading and a write: the write fails closed ...
            await first.call_tool("read_memory", {})
            with MemoryClient(mcp_server.target, TOKEN) as grpc_client:
                generation = grpc_client.assemble_context(tenant, "main").global_generation
                grpc_client.update_global(tenant, "the third writer's memory", observed_generation=generation)
            stale = await first.call_tool("memory_update", {"content": "from a stale reading"})
            assert stale.is_error
            assert _global_record(mcp_server, tenant) == "the third writer's memory"
            # ... and after reading again it succeeds.
            await first.call_tool("read_memory", {})
            fresh = await first.call_tool("memory_update", {"content": "read again, then written"})
            assert not fresh.is_error, _text(fresh)
        assert _global_record(mcp_server, tenant) == "read again, then written"

    anyio.run(run)


def test_a_new_session_must_read_before_it_writes(mcp_server: ServerProcess) -> None:
    async def run() -> None:
        async with _http(mcp_server, "acme") as c:
            result = await c.call_tool("memory_update", {"content": "never read"})
            assert result.is_error and "CONTEXT_NOT_ASSEMBLED" in _text(result)
            assert "call read_memory" in _text(result) and "assemble" not in _text(result), _text(result)

    anyio.run(run)


def test_a_resource_the_session_cannot_read_is_refused_saying_why(mcp_server: ServerProcess) -> None:
    """Another workspace's context is invalid params naming the session's (it was the SDK's
    internal error, -32603); a refusal of the read itself (here the stdio token does not reach the
    tenant) carries the service's message and reason, not "Error reading resource" and a traceback
    in the log. A tool the tenant's refusal fails is an error result of its sentence and reason alone
    (it began "Error executing tool recall: ")."""

    async def run() -> tuple[list[tuple[int, str]], Any]:
        refusals = []
        for client, uri in [
            (_http(mcp_server, "acme"), "memory://context/elsewhere"),
            (_stdio(mcp_server, "other"), "memory://context/main"),
        ]:
            async with client as c:
                with pytest.raises(MCPError) as refused:
                    await c.read_resource(uri)
                refusals.append((refused.value.code, refused.value.message))
                tool = await c.call_tool("recall", {"query": "x"})
        return refusals, tool

    [(code, message), (_, forbidden)], tool = anyio.run(run)
    assert code == INVALID_PARAMS and "works on workspace 'main', not 'elsewhere'" in message, (code, message)
    assert "TENANT_FORBIDDEN" in forbidden and "other" in forbidden, forbidden
    refused = re.fullmatch(r"token '\w+' may not access tenant 'other' \(TENANT_FORBIDDEN\)", _text(tool))
    assert tool.is_error and refused, _text(tool)
    log = mcp_server.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_http_sessions_without_a_token_for_another_tenant_or_from_a_foreign_origin_are_refused(
    mcp_server: ServerProcess,
) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    port = mcp_server.http_port
    headers = {"accept": "application/json, text/event-stream"}
    no_token = request(port, "POST", "/mcp?tenant=acme", json_body=initialize, headers=headers)
    assert (no_token.status, no_token.reason) == (401, "TOKEN_MISSING")
    other = request(
        port, "POST", "/mcp?tenant=acme", json_body=initialize, headers={**headers, "authorization": f"Bearer {OTHER}"}
    )
    assert (other.status, other.reason) == (403, "TENANT_FORBIDDEN")
    foreign = request(
        port,
        "POST",
        "/mcp?tenant=acme",
        json_body=initialize,
        headers={**headers, "authorization": f"Bearer {TOKEN}", "origin": "https://evil.example"},
    )
    assert (foreign.status, foreign.reason) == (403, "ORIGIN_FORBIDDEN")
    no_tenant = request(
        port, "POST", "/mcp", json_body=initialize, headers={**headers, "authorization": f"Bearer {TOKEN}"}
    )
    assert (no_tenant.status, no_tenant.reason) == (400, "TENANT_INVALID")

    async def sdk_client_is_refused() -> None:
        with pytest.raises(Exception):  # noqa: B017  (the SDK raises its own transport error)
            async with _http(mcp_server, "acme", token=None) as c:
                await c.list_tools()

    anyio.run(sdk_client_is_refused)


@pytest.mark.parametrize("workspace", ["..%2F..", "a" * 65, "%E2%80%AE", "w%2Fx", "%00", ""])
def test_an_http_session_naming_an_invalid_workspace_is_refused_before_it_opens(
    mcp_server: ServerProcess, workspace: str
) -> None:
    """The workspace of ``/mcp?tenant=T&workspace=W`` is checked with the tenant, before a session
    is opened (and counted against the tenant's share): not accepted, then failing each of its
    workspace tools with WORKSPACE_INVALID; an empty one (``&workspace=``) is no workspace, as on
    the JSON API, never taken for main."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {TOKEN}"}
    path = f"/mcp?tenant=acme&workspace={workspace}"
    refused = request(mcp_server.http_port, "POST", path, json_body=initialize, headers=headers)
    assert (refused.status, refused.reason) == (400, "WORKSPACE_INVALID"), refused.body[:300]
    assert "mcp-session-id" not in refused.headers


@pytest.mark.parametrize(
    "query", ["tenant=acme&tenant=beta", "tenant=beta&tenant=acme", "tenant=acme&workspace=a&workspace=b"]
)
def test_an_http_session_naming_its_tenant_or_workspace_twice_is_refused(mcp_server: ServerProcess, query: str) -> None:
    """The first of two was taken silently (a session on acme for ?tenant=acme&tenant=beta); the
    JSON API and mem0's paths refuse a query parameter given twice, and so does /mcp; and, as they
    do, one it does not take (?worksapce=notes opened a session on main without a word)."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {TOKEN}"}
    refused = request(mcp_server.http_port, "POST", f"/mcp?{query}", json_body=initialize, headers=headers)
    assert (refused.status, refused.reason) == (400, "REQUEST_UNDECODABLE"), refused.body[:300]
    assert "appears twice" in refused.json()["message"] and "mcp-session-id" not in refused.headers
    misspelt = query.replace("tenant=beta", "worksapce=notes").replace("workspace=b", "token=x")
    refused = request(mcp_server.http_port, "POST", f"/mcp?{misspelt}", json_body=initialize, headers=headers)
    assert (refused.status, refused.reason) == (400, "REQUEST_UNDECODABLE"), (misspelt, refused.body[:300])
    assert "is not a query parameter of /mcp" in refused.json()["message"] and "mcp-session-id" not in refused.headers


def _raw_session(server: ServerProcess) -> dict[str, str]:
    """The headers of requests in an MCP session on acme, opened with the handshake by hand."""
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {TOKEN}"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    opened = request(server.http_port, "POST", "/mcp?tenant=acme", json_body=initialize, headers=headers)
    headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert request(server.http_port, "POST", "/mcp?tenant=acme", json_body=initialized, headers=headers).status == 202
    return headers


def test_an_http_body_that_is_no_message_is_answered_as_over_stdio(mcp_server: ServerProcess) -> None:
    """A request with an id that is no string or whole number was taken by the SDK for a
    notification: 202 and no answer, ever. Text that is not Unicode got the SDK's parser's words
    ("unexpected end of hex escape") and a list pydantic's validation errors. Each is answered as
    over stdio (host/mcp_messages.py), 400."""
    headers = _raw_session(mcp_server)
    misread = "a request's id is a string or a whole number"
    bodies: list[tuple[bytes, int, Any, str]] = [
        *((b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % i, -32600, None, misread) for i in ID_NO_ANSWER_CAN_CARRY),
        (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"\\ud800"}}', -32602, 9, "not Unicode"),
        (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"caf\xe9"}}', -32602, 9, "not Unicode"),
        (b"[]", -32600, None, "not a JSON-RPC 2.0 request"),
        (b'{"jsonrpc":"2.0","id":', -32700, None, "the body is not one JSON object"),
        # Each was "the body is not one JSON object" (the SDK's reader refused it), or, a key
        # given twice, taken: the last value won, where the JSON API refuses it.
        (b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}', -32600, None, "of 5,000 digits"),
        # The id was null though it could be read: it is the answer's (JSON-RPC 2.0), unless the
        # id is the key given twice or itself too long.
        (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"n":-' + b"9" * 5000 + b"}}", -32600, 9, "4,300"),
        (b'{"jsonrpc":"2.0","id":9,"id":10,"method":"ping"}', -32600, None, "the key 'id' appears twice"),
        (b'{"jsonrpc":"2.0","id":"r","method":"ping","method":"x"}', -32600, "r", "'method' appears twice"),
        (b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"id":1,"id":2}}', -32600, 9, "'id' appears twice"),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping","x":{"a":1,"a":2}}', -32600, None, "'a' appears twice"),
        (b'{"jsonrpc":"2.0","id":9,"method":"ping","x":{"a":1,"a":2},', -32600, None, "'a' appears twice"),
        (
            b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}}",
            -32700,
            None,
            "nested too deep",
        ),
        (
            b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":' + b"[" * 250 + b"]" * 250 + b"}}",
            -32700,
            None,
            "nested too deep",
        ),
        (b'\xef\xbb\xbf{"jsonrpc":"2.0","id":9,"method":"ping"}', -32700, None, "byte order mark"),
    ]
    for body, code, request_id, words in bodies:
        refused = request(mcp_server.http_port, "POST", "/mcp?tenant=acme", body, headers=headers)
        assert refused.status == 400, (body, refused.status, refused.body[:300])
        answer = refused.json()
        assert (answer["error"]["code"], answer["id"]) == (code, request_id), (body, answer)
        assert words in answer["error"]["message"], (body, answer)


def test_an_http_body_past_the_sdks_own_limit_is_the_servers_to_judge(mcp_server: ServerProcess) -> None:
    """The SDK refuses a body over 4 MiB itself, in plain text ("Request body too large", no
    reason); the endpoint reads bodies up to twice --max-request-bytes and refuses past that with
    REQUEST_TOO_LARGE. A 5 MB tool call is the tool's to refuse, naming its argument's limit."""
    headers = _raw_session(mcp_server)
    call = {"name": "retain", "arguments": {"text": "x" * 5_000_000}}
    retain = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
    answered = request(mcp_server.http_port, "POST", "/mcp?tenant=acme", json_body=retain, headers=headers)
    assert answered.status == 200, (answered.status, answered.body[:300])
    result = json.loads(answered.body.decode().partition("data: ")[2])["result"]
    assert result["isError"] and "32768" in result["content"][0]["text"], result


async def _acme_session(http: httpx2.AsyncClient, server: ServerProcess) -> dict[str, str]:
    """The headers of a request of a new MCP session on tenant acme, opened over plain HTTP."""
    base = {
        "authorization": f"Bearer {TOKEN}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    opened = await http.post(f"{server.http_url}/mcp?tenant=acme", headers=base, json=INITIALIZE)
    return {**base, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}


def test_a_session_id_presented_for_another_tenant_is_unknown(mcp_server: ServerProcess) -> None:
    """The session is bound to its token and tenant: its id with another tenant is a session the
    server does not know (404), so nothing read in one tenant's session can write another."""

    async def run() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            session = await _acme_session(http, mcp_server)
            moved = await http.post(
                f"{mcp_server.http_url}/mcp?tenant=beta",
                headers=session,
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            )
            assert moved.status_code == 404

    anyio.run(run)


def test_a_path_below_mcp_is_no_route_and_leaves_the_session_it_names_as_it_was(mcp_server: ServerProcess) -> None:
    """Only ``/mcp`` is the endpoint: ``/mcp/x`` was the SDK's plain-text 404, which the session
    count took for the end of the session named (so a tenant could open sessions past its share,
    and the session's reading was forgotten: its next write failed CONTEXT_NOT_ASSEMBLED), and
    ``/mcp/`` a redirect. Both are our 404 ROUTE_NOT_FOUND now, naming the endpoint."""

    async def run() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            session = await _acme_session(http, mcp_server)

            async def tool(name: str, arguments: dict[str, Any], path: str = "/mcp") -> httpx2.Response:
                message = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments},
                }
                return await http.post(f"{mcp_server.http_url}{path}?tenant=acme", headers=session, json=message)

            assert '"isError":false' in (await tool("read_memory", {})).text
            below = [await tool("read_memory", {}, path) for path in ("/mcp/x", "/mcp/")]
            written = await tool("memory_update", {"content": "kept across a stray path"})
            assert '"isError":false' in written.text, written.text
            for answer in below:
                assert answer.status_code == 404, answer.text
                assert answer.json()["details"][0]["reason"] == "ROUTE_NOT_FOUND"
                assert "/mcp?tenant=" in answer.json()["message"]

    anyio.run(run)


def _unix_socket_paths(pid: int) -> list[str]:
    """The paths of the Unix sockets process ``pid`` holds (bound to a name)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing (the server's other threads open and close files)
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    paths = []
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes:
            paths.append(fields[7])
    return paths


def test_the_http_tools_reach_the_servicers_in_process(tmp_path: Path) -> None:
    """The endpoint's tools call the servicers in process, through the same edge as a gRPC call:
    the server holds no socket of its own for them (they used to call its gRPC API over a private
    Unix socket), and each call the tools make is recorded as the RPC it is, with its code."""
    server = ServerProcess(tmp_path / "data", http=True, metrics=True).start()
    try:
        assert server.process is not None

        async def run() -> None:
            async with _http(server, "acme", token=None) as client:
                assert not (await client.call_tool("read_memory", {})).is_error
                assert not (await client.call_tool("recall", {"query": "anything at all"})).is_error
                assert (await client.call_tool("memory_update", {"content": "x" * 10})).is_error is False

        anyio.run(run)
        with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
            exposed = response.read().decode()
        for method in ("WorkspaceService/AssembleContext", "MemoryService/Recall", "WorkspaceService/UpdateGlobal"):
            sample = f'mnemosyne_rpc_duration_seconds_count{{code="OK",method="/mnemosyne.v1.{method}"}} 1.0'
            assert sample in exposed, method
        assert _unix_socket_paths(server.pid) == []
    finally:
        server.stop()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}


def test_a_tenant_holds_at_most_its_share_of_sessions_and_the_others_are_not_locked_out(tmp_path: Path) -> None:
    """Past ``--mcp-sessions-per-tenant`` a tenant's new session is refused (429, with the limit in
    ErrorInfo) while another tenant's opens and the tenant's open sessions work; a session ended by
    its client (DELETE), or idle past ``--mcp-session-idle-seconds``, gives its place back; a
    session id shown with another workspace (a 404) ends nothing."""
    server = ServerProcess(
        tmp_path / "data",
        http=True,
        metrics=True,
        args=["--mcp-sessions-per-tenant", "2", "--mcp-session-idle-seconds", "3"],
        env={"MNEMOSYNE_TOKENS": tokens_json({TOKEN: ["acme", "beta"], OTHER: ["other"]})},
    ).start()
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    def url(tenant: str, workspace: str = "main") -> str:
        return f"{server.http_url}/mcp?tenant={tenant}&workspace={workspace}"

    def of(session_id: str) -> dict[str, str]:
        return {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}

    async def run() -> None:
        # The SDK's client ends its session when it closes: three in turn fit in two places.
        for _ in range(3):
            async with _http(server, "acme") as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        async with httpx2.AsyncClient(timeout=30) as http:

            async def opening(tenant: str, token: str = TOKEN, workspace: str = "main") -> httpx2.Response:
                headers = {**accept, "authorization": f"Bearer {token}"}
                return await http.post(url(tenant, workspace), headers=headers, json=INITIALIZE)

            first, second = await opening("acme"), await opening("acme", workspace="notes")
            assert (first.status_code, second.status_code) == (200, 200)
            refused = await opening("acme")
            assert refused.status_code == 429, refused.text
            details = refused.json()["details"][0]
            assert details["reason"] == "MCP_SESSIONS_PER_TENANT_REACHED"
            assert details["metadata"] == {"limit": "mcp-sessions-per-tenant", "value": "2"}
            assert "--mcp-sessions-per-tenant" in refused.json()["message"]
            assert refused.headers["retry-after"] == "1"
            # Another tenant, of the same token or another, is not locked out.
            assert (await opening("beta")).status_code == 200
            assert (await opening("other", OTHER)).status_code == 200
            # The tenant's open sessions go on working.
            listed = await http.post(
                url("acme"),
                headers={**accept, "authorization": f"Bearer {TOKEN}", **of(first.headers["mcp-session-id"])},
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            )
            assert listed.status_code == 200, listed.text
            # Its id shown with another workspace is unknown there, and ends nothing.
            elsewhere = await http.post(
                url("acme", "notes"),
                headers={**accept, "authorization": f"Bearer {TOKEN}", **of(first.headers["mcp-session-id"])},
                json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            )
            assert elsewhere.status_code == 404
            assert (await opening("acme")).status_code == 429
            assert gauge(server, "mnemosyne_mcp_sessions") == 4
            # A DELETE by its owner ends one.
            ended = await http.delete(
                url("acme", "notes"),
                headers={**accept, "authorization": f"Bearer {TOKEN}", **of(second.headers["mcp-session-id"])},
            )
            assert ended.status_code == 200, ended.text
            assert (await opening("acme")).status_code == 200
            assert (await opening("acme")).status_code == 429
            # With no request for longer than the idle time every session has ended, and so has its place.
            await anyio.sleep(4.5)
            assert [(await opening("acme")).status_code for _ in range(3)] == [200, 200, 429]
            assert gauge(server, "mnemosyne_mcp_sessions") == 2

    try:
        anyio.run(run)
        assert gauge(server, "mnemosyne_admission_refusals", reason="MCP_SESSIONS_PER_TENANT_REACHED") == 4
    finally:
        server.stop()


def test_sessions_opened_and_ended_by_one_tenant_leave_another_tenants_reading_in_place(tmp_path: Path) -> None:
    """A session's reading (what its writes send) is kept until the session ends, not in a shared
    list one tenant's sessions could push another's out of: here the server keeps at most three
    sessions, and four of one tenant come and go while another tenant's session, which read memory
    before them, then writes."""
    server = ServerProcess(
        tmp_path / "data",
        http=True,
        args=["--mcp-sessions", "3"],
        env={"MNEMOSYNE_TOKENS": tokens_json({TOKEN: ["acme", "beta"]})},
    ).start()

    async def run() -> None:
        async with _http(server, "beta") as beta:
            assert not (await beta.call_tool("read_memory", {})).is_error
            for _ in range(4):
                async with _http(server, "acme") as acme:
                    assert not (await acme.call_tool("read_memory", {})).is_error
            written = await beta.call_tool("memory_update", {"content": "beta's own memory"})
            assert not written.is_error, _text(written)

    try:
        anyio.run(run)
    finally:
        server.stop()


def _stdio_answers(server: ServerProcess, lines: list[bytes], ids: set[Any]) -> list[dict[str, Any]]:
    """What ``mnemosyne mcp`` writes after the initialize handshake for raw stdin ``lines``, up to
    the answers to every request of ``ids`` (stdin stays open until then: its end would end the
    session, and in-flight calls with it). An answer that does not come fails the test in half a
    minute instead of waiting for ever, as the SDK's own client would."""
    initialize = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    process = subprocess.Popen(
        [sys.executable, "-m", "mnemosyne.cli", "mcp", "--target", server.target, "--tenant", "beta"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MNEMOSYNE_TOKEN": TOKEN},
    )
    assert process.stdin is not None and process.stdout is not None
    stdout, answers = process.stdout, queue.Queue[bytes]()

    def read() -> None:
        for line in stdout:
            answers.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in (initialize, initialized)))
        process.stdin.write(b"".join(line + b"\n" for line in lines))
        process.stdin.flush()
        received: list[dict[str, Any]] = []
        while not ids <= {answer.get("id") for answer in received}:
            try:
                received.append(json.loads(answers.get(timeout=30)))
            except queue.Empty:
                raise AssertionError(f"no answer to every line: {received}") from None
        return [answer for answer in received if answer.get("id") != "init"]
    finally:
        process.kill()
        process.wait()


def test_every_line_on_stdio_is_answered_even_one_that_is_no_message(mcp_server: ServerProcess) -> None:
    """The SDK's stdio transport drops a line it cannot read without a word; ``mnemosyne mcp``
    answers each: a parse error (id null) for a line that is not JSON, invalid params for one
    whose text is not Unicode, invalid request for JSON that is no JSON-RPC message (the id when
    it can be read), and goes on serving the calls around them."""

    def call(request_id: Any, name: str, arguments: str) -> bytes:
        return (
            f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":"tools/call",'
            f'"params":{{"name":"{name}","arguments":{arguments}}}}}'
        ).encode()

    lines = [
        call(1, "recall", '{"query":"courier"}'),
        call(2, "retain", '{"text":"abc \\ud800 def"}'),  # half a surrogate pair
        call("low", "retain", '{"text":"\\udc00"}'),
        call(3, "retain", '{"text":"cafe"}').replace(b"cafe", b"caf\xe9"),  # a byte that is not UTF-8
        call(4, "recall", '{"query":"abc"}')[:-1],  # truncated
        b"not json at all",
        b"",  # a blank line is no message: skipped, unanswered
        b"[]",
        b"42",
        b'{"jsonrpc":"2.0","id":5,"method":7}',
        b'{"jsonrpc":"1.0","id":"six","method":"ping"}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',  # an id that cannot be read
        call(7, "retain", '{"text":"a paired escape \\ud83d\\ude00 is Unicode"}'),
        # ids no answer can carry (the SDK read each as a notification and answered nothing)
        *(b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % i for i in ID_NO_ANSWER_CAN_CARRY),
        b'{"jsonrpc":"2.0","id":8,"method":"ping"}',
    ]
    answers = _stdio_answers(mcp_server, lines, {1, 2, "low", 3, 5, "six", 7, 8})
    by_id = {answer["id"]: answer for answer in answers if answer["id"] is not None}
    codes = {request_id: answer.get("error", {}).get("code") for request_id, answer in by_id.items()}
    assert codes == {1: None, 2: -32602, "low": -32602, 3: -32602, 5: -32600, "six": -32600, 7: None, 8: None}
    assert "Unicode" in by_id[2]["error"]["message"]
    assert not by_id[1]["result"]["isError"] and not by_id[7]["result"]["isError"], by_id
    assert by_id[8]["result"] == {}
    unnamed = sorted(answer["error"]["code"] for answer in answers if answer["id"] is None)
    # the truncated line and the text, then [] and 42, then the unreadable id, then the five ids
    assert unnamed == [-32700, -32700, -32602, -32600, -32600] + [-32600] * 5, answers
    refusals = [a["error"]["message"] for a in answers if "error" in a]
    assert sum("a request's id is a string or a whole number" in m for m in refusals) == 5, refusals
