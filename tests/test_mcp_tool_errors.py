"""Every MCP tool error tells the model what was wrong (host/mcp_tools.py): the tool table's
schemas carry their limits (minimum, maximum, maxLength) and refuse other arguments
(additionalProperties: false), and an argument outside them, or of another type, is an ``isError``
result of one sentence naming the argument, what was given (a string's length) and the limit it
broke, ending with the reason the gRPC surface gives for that limit (QUERY_TOO_LONG, ...), never
pydantic's text; no value gets a bare "Error executing tool <name>" (the SDK's answer to a crash). A prompt asked for by a name the
server does not have, with an argument it does not take or one the service refuses is a JSON-RPC
invalid-params error naming it, never the SDK's code 0 with a traceback in the server's log.

Generated from the tools' own input schemas, as the official MCP SDK client lists them, over
stdio (``mnemosyne mcp``) and streamable HTTP (``/mcp`` on the HTTP port)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from mnemosyne.client import MemoryClient
from mnemosyne.client.errors import InvalidArgumentError, NotFoundError
from mnemosyne.engine import limits
from mnemosyne.engine.workspace import MAX_KEY_CHARS
from mnemosyne.host import mcp_tools
from mnemosyne.host import protocol as host_protocol
from tests.http_support import request
from tests.support import ServerProcess

_ASCII_INTEGER = re.compile(r"-?[0-9]+")
_ASCII_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
TEXT_NUMBERS = ["٣", "３", "²", "1e11", "NaN", "Infinity", "1.5", " 1", "", "0x10", "1_000", "-1", "7"]
NUMBERS = [1e11, 1.5, 7.0, -1, 0, 2**70, True, [1], {"n": 1}]  # None: not given (_null_is_not_given)
# The gRPC surface's reason for each limit (engine/limits.py, workspace.py, consistency.py): the
# tool error for the same limit ends with it.
TOO_LONG = {
    "query": "QUERY_TOO_LONG",
    "text": "TEXT_TOO_LONG",
    "content": "RECORD_TOO_LARGE",
    "consistency_token": "TOKEN_INVALID",
}
EMPTY = {"query": "QUERY_EMPTY", "text": "TEXT_EMPTY"}
OUT_OF_RANGE = {"k": "K_OUT_OF_RANGE", "page_size": "PAGE_SIZE_OUT_OF_RANGE", "timeout_seconds": "TIMEOUT_INVALID"}
# One sentence ending with an ErrorInfo-style reason: "query has 4097 characters; ... (QUERY_TOO_LONG)".
_SENTENCE = re.compile(r"[^\n]+ \(([A-Z][A-Z_]+)\)")
QUOTA = 2


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # A quota of two memories a tenant: a refusal for a limit, RESOURCE_EXHAUSTED (each test's tenant is new).
    process = ServerProcess(
        tmp_path_factory.mktemp("mcp-errors") / "data", http=True, args=["--max-tenant-memories", str(QUOTA)]
    )
    process.start()
    yield process
    process.stop()


def _client(server: ServerProcess, transport: str, tenant: str) -> Client:
    if transport == "http":
        url = f"{server.http_url}/mcp?tenant={tenant}"
        return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30)))
    command = ["-m", "mnemosyne.cli", "mcp", "--target", server.target, "--tenant", tenant]
    return Client(StdioServerParameters(command=sys.executable, args=command, env=dict(os.environ)))


def _text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


async def _null_is_not_given(
    client: Client, tool: str, argument: str, base: dict[str, Any], schema: dict[str, Any]
) -> list[str]:
    """An argument given null is not given, as a null field on the JSON API: a required one is
    refused as left out ("needs the argument"), an optional one takes its default."""
    result = await client.call_tool(tool, {**base, argument: None})
    text = _text(result)
    if argument in schema.get("required", []):
        refused = result.is_error and f"needs the argument {argument}" in text
        return [] if refused else [f"{tool}({argument}=None): not refused as left out: {text[:300]}"]
    return [f"{tool}({argument}=None): refused: {text[:300]}"] if result.is_error and argument in text else []


def _hostile(name: str, schema: dict[str, Any]) -> Iterator[tuple[Any, str | None, str | None]]:
    """(value, what it breaks, reason) for the argument ``name`` of a tool: None when the value is
    within the schema (read by the rule for numbers given as text), else the limit to name ("" for a
    type) and the reason its error ends with (None: any)."""
    kind = schema.get("type")
    if kind in ("integer", "number"):
        low, high = schema["minimum"], schema["maximum"]
        pattern = _ASCII_INTEGER if kind == "integer" else _ASCII_DECIMAL
        for value in [*TEXT_NUMBERS, *NUMBERS, low - 1, high + 1]:
            if isinstance(value, str):
                ok = bool(pattern.fullmatch(value)) and math.isfinite(float(value)) and low <= float(value) <= high
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                ok = False
            else:
                ok = (kind == "number" or isinstance(value, int)) and low <= value <= high
            shown = str(int(low if value == low - 1 else high)) if kind == "integer" else f"{high:g}"
            reason = OUT_OF_RANGE.get(name) if value in (low - 1, high + 1) else None
            yield value, None if ok else shown, reason
    elif kind == "string" and "enum" in schema:
        yield "bogus", "'pending'", "EVENT_STATUS_INVALID"
        yield 5, "", "REQUEST_UNDECODABLE"
    elif kind == "string":
        if "maxLength" in schema:
            yield "x" * (schema["maxLength"] + 1), str(schema["maxLength"]), TOO_LONG[name]
        if schema.get("minLength", 0) >= 1:
            yield "", str(schema["minLength"]), EMPTY[name]
        yield "a NUL \x00 inside", None, None
        for wrong in (5, 1.5, True, ["x"], {"x": 1}):
            yield wrong, "", None
    elif kind == "boolean":
        for not_boolean in ("maybe", 2, "false", [True]):
            yield not_boolean, "", None
    elif kind == "array":
        # As MemoryHost refuses them (tests/test_host_generations.py), by the reasons of every surface.
        yield "everything", "", "REQUEST_UNDECODABLE"
        yield [], "", "CHANGES_EMPTY"
        yield [{"op": "put"}], "key", "RECORD_KEY_INVALID"
        yield [{"op": "erase", "key": "plan.md"}], "op", "CHANGE_OP_INVALID"
        yield [{"key": "plan.md", "content": "x"}], "op", "CHANGE_OP_INVALID"
        yield [{"op": 1, "key": "plan.md"}], "op", "REQUEST_UNDECODABLE"
        yield [{"op": "put", "key": "", "content": "x"}], "1", "RECORD_KEY_INVALID"
        yield (
            [{"op": "put", "key": "k" * (MAX_KEY_CHARS + 1), "content": "x"}],
            str(MAX_KEY_CHARS),
            "RECORD_KEY_INVALID",
        )
        yield (
            [{"op": "put", "key": "p.md", "content": "x" * (host_protocol.MAX_RECORD_CHARS + 1)}],
            "262144",
            "RECORD_TOO_LARGE",
        )
        yield [{"op": "put", "key": "plan.md", "content": "x", "mode": "append"}], "mode", "REQUEST_UNDECODABLE"
        yield None, "", "CHANGES_EMPTY"


def _valid(schema: dict[str, Any]) -> Any:
    kind = schema.get("type", "")
    return {"integer": schema.get("minimum", 1), "number": 1, "boolean": False, "array": []}.get(kind, "hello")


def test_the_tool_table_carries_the_servers_default_limits() -> None:
    defaults = limits.Limits()
    assert (host_protocol.MAX_K, host_protocol.MAX_PAGE_SIZE) == (defaults.max_k, defaults.max_page_size)
    assert (host_protocol.MAX_TEXT_CHARS, host_protocol.MAX_QUERY_CHARS) == (
        defaults.max_text_chars,
        defaults.max_query_chars,
    )
    assert (host_protocol.MAX_RECORD_CHARS, host_protocol.MAX_KEY_CHARS) == (defaults.max_record_bytes, MAX_KEY_CHARS)
    assert host_protocol.MAX_WAIT_SECONDS == limits.MAX_WAIT_SECONDS


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_every_tool_argument_outside_its_limits_is_an_error_naming_them(
    mcp_server: ServerProcess, transport: str
) -> None:
    tenant = f"mcp-{uuid.uuid4().hex[:10]}"

    async def run() -> list[str]:
        failures: list[str] = []
        async with _client(mcp_server, transport, tenant) as client:
            tools = (await client.list_tools()).tools
            assert len(tools) == 8
            # The three the issue found: a bare error, a bare error, and a deadline for a bad argument.
            cases: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
                ("recall", {"query": "x", "k": 1e11}, ("k", "100")),
                ("get_event_status", {"event_id": 1e11}, ("event_id", str(2**63 - 1))),
                ("flush", {"timeout_seconds": 1e11}, ("timeout_seconds", "3600")),
            ]
            for name, arguments, named in cases:
                result = await client.call_tool(name, arguments)
                text = _text(result)
                assert result.is_error and all(part in text for part in named), text
                assert _SENTENCE.fullmatch(text), text
                assert "DEADLINE" not in text.upper(), text
            await client.call_tool("read_memory", {})  # so a write is judged on its argument alone
            for tool in tools:
                properties = tool.input_schema["properties"]
                # An argument the tool does not take (a misspelt k or fast) was ignored without a word.
                base = {a: _valid(properties[a]) for a in tool.input_schema.get("required", [])}
                result = await client.call_tool(tool.name, {**base, "top_k": 3})
                text = _text(result)
                if not result.is_error or "top_k" not in text or not all(a in text for a in properties):
                    failures.append(f"{tool.name}(top_k=3): not refused naming it and the arguments: {text[:300]}")
                if tool.input_schema.get("additionalProperties") is not False:
                    failures.append(f"{tool.name}: its input schema does not say additionalProperties: false")
                for argument, schema in properties.items():
                    kind = schema.get("type")
                    if kind in ("integer", "number"):
                        assert "minimum" in schema and "maximum" in schema, (tool.name, argument, schema)
                    if kind == "string" and "enum" not in schema:
                        assert "maxLength" in schema, (tool.name, argument, schema)
                    base = {a: _valid(properties[a]) for a in tool.input_schema.get("required", []) if a != argument}
                    failures += await _null_is_not_given(client, tool.name, argument, base, tool.input_schema)
                    for value, broken, reason in _hostile(argument, schema):
                        result = await client.call_tool(tool.name, {**base, argument: value})
                        text = _text(result)
                        shown = f"{tool.name}({argument}={str(value)[:30]!r})"
                        sentence = _SENTENCE.fullmatch(text)
                        if result.is_error and text.strip() == f"Error executing tool {tool.name}":
                            failures.append(f"{shown}: a bare error")
                        elif broken is not None and not result.is_error:
                            failures.append(f"{shown}: accepted")
                        elif broken is not None and (argument not in text or broken not in text):
                            failures.append(f"{shown}: does not name {argument} and {broken!r}: {text[:300]}")
                        elif broken is not None and (sentence is None or reason not in (None, sentence[1])):
                            failures.append(
                                f"{shown}: not one sentence ending with ({reason or 'a reason'}): {text[:300]}"
                            )
                        elif broken is not None and isinstance(value, str) and len(value) > 1000:
                            if str(len(value)) not in text:  # what was given: its length
                                failures.append(f"{shown}: does not say it has {len(value)} characters: {text[:300]}")
        return failures

    failures = anyio.run(run)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_refusal_of_the_service_is_one_sentence_with_its_reason_as_an_arguments_is(
    mcp_server: ServerProcess, transport: str
) -> None:
    """What the service refuses (a memory or record not found, a quota reached, a write without a
    reading, text or a token it does not take) is an ``isError`` result of the service's sentence
    ending with the reason the gRPC surface gives: it began "Error executing tool NAME: ", unlike
    the refusal of an argument."""
    tenant = f"mcp-{uuid.uuid4().hex[:10]}"
    calls: list[tuple[str, dict[str, Any], str | None]] = [
        ("get_event_status", {"event_id": 999_999}, "EVENT_NOT_FOUND"),
        ("memory_update", {"content": "never read"}, "CONTEXT_NOT_ASSEMBLED"),
        ("retain", {"text": "a NUL \x00 inside"}, "TEXT_INVALID"),
        ("recall", {"query": "x", "consistency_token": "not-a-token"}, "TOKEN_INVALID"),
        # No token, and none gRPC metadata can carry (stdio): refused as the server refuses it.
        *[
            (tool, {**arguments, "consistency_token": token}, "TOKEN_INVALID")
            for token in ("é", "a\x01b", "\u2028")
            for tool, arguments in (("read_memory", {}), ("retain", {"text": "x"}), ("recall", {"query": "x"}))
        ],
        ("read_memory", {}, None),
        ("update_workspace", {"changes": [{"op": "delete", "key": "never-written.md"}]}, "RECORD_NOT_FOUND"),
        *[("retain", {"text": f"memory {n} of the quota"}, None) for n in range(QUOTA)],
        ("retain", {"text": "one memory past the quota"}, "QUOTA_MEMORIES"),
    ]

    async def run() -> list[tuple[bool, str]]:
        async with _client(mcp_server, transport, tenant) as client:
            return [
                (result.is_error, _text(result))
                for result in [await client.call_tool(name, arguments) for name, arguments, _ in calls]
            ]

    answers = anyio.run(run)
    for (name, _, reason), (is_error, text) in zip(calls, answers, strict=True):
        if reason is None:
            assert not is_error, (name, text)
            continue
        sentence = _SENTENCE.fullmatch(text)
        assert is_error and sentence is not None and sentence[1] == reason, (name, text)
        assert "Error executing tool" not in text and "Traceback" not in text, (name, text)
    # Every token refused, by the host or the server, in the server's one sentence.
    assert len({text for (*_, reason), (_, text) in zip(calls, answers, strict=True) if reason == "TOKEN_INVALID"}) == 1
    with MemoryClient(mcp_server.target) as client, pytest.raises(NotFoundError) as missing:
        client.get_event(tenant, 999_999)
    assert missing.value.reason == "EVENT_NOT_FOUND"  # the gRPC surface's reason, as the tool's


def test_arguments_missing_or_of_no_object_are_refused_naming_what_is_wanted(mcp_server: ServerProcess) -> None:
    """A ``tools/call`` with no ``arguments`` (the SDK's client always sends an object; another
    client may not) is read as {}: its refusal is the same one sentence naming the argument it
    needs (was pydantic's "1 validation error for recallArguments ... Field required"). Arguments
    that are no object, for a tool or a prompt, or a prompt's that are not strings, are invalid
    params naming what is wanted (the SDK's "Invalid request parameters" named nothing)."""
    path, headers = f"/mcp?tenant=mcp-{uuid.uuid4().hex[:10]}", {"accept": "application/json, text/event-stream"}

    def post(method: str, params: dict[str, Any] | None = None) -> Any:
        message = {"jsonrpc": "2.0", "method": method, **({"id": 1, "params": params} if params is not None else {})}
        answered = request(mcp_server.http_port, "POST", path, json_body=message, headers=headers)
        return json.loads(answered.body.decode().partition("data: ")[2] or "{}")

    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    opened = request(
        mcp_server.http_port,
        "POST",
        path,
        json_body={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        headers=headers,
    )
    headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    post("notifications/initialized")
    # A query left out is empty, as over gRPC (QUERY_EMPTY); an event id has no reason of its own.
    for name, needs, reason in (
        ("recall", "query", "QUERY_EMPTY"),
        ("get_event_status", "event_id", "ARGUMENTS_INVALID"),
    ):
        result = post("tools/call", {"name": name})["result"]
        text = result["content"][0]["text"]
        assert result["isError"] and f"{name} needs the argument {needs}" in text, text
        assert _SENTENCE.fullmatch(text) and text.endswith(f"({reason})"), text
    # A tool it does not have: the SDK said "Unknown tool: nope", naming neither the tools nor a reason.
    result = post("tools/call", {"name": "nope", "arguments": {}})["result"]
    text = result["content"][0]["text"]
    assert result["isError"] and text.startswith("no tool 'nope': the tools are ") and "recall" in text, text
    assert _SENTENCE.fullmatch(text) and text.endswith("(ARGUMENTS_INVALID)"), text
    refused = [
        (
            post("tools/call", {"name": "recall", "arguments": ["x"]}),
            "recall are one JSON object (query, k, consistency_token), not a list",
        ),
        (
            post("tools/call", {"name": "flush", "arguments": "x"}),
            "flush are one JSON object (timeout_seconds), not the string 'x'",
        ),
        (
            post("prompts/get", {"name": "memory_context", "arguments": ["q"]}),
            "prompt memory_context are one JSON object (query)",
        ),
        (post("prompts/get", {"name": "memory_context", "arguments": {"query": 5}}), "are strings, and query is not"),
        # Params the SDK's own validation refuses: its "Invalid request parameters" named nothing.
        (post("tools/call", {}), "tools/call needs params.name"),
        (post("tools/call", {"name": 5}), "params.name of tools/call must be a string, not the number 5"),
        (post("prompts/get", {"name": None}), "params.name of prompts/get must be a string, not null"),
        (post("resources/read", {}), "resources/read needs params.uri"),
        (post("tools/list", {"cursor": 7}), "params.cursor of tools/list must be a string, not the number 7"),
    ]
    for answer, words in refused:
        assert answer["error"]["code"] == INVALID_PARAMS and words in answer["error"]["message"], answer


def test_a_client_flush_past_the_longest_wait_is_refused_as_invalid_not_a_missed_deadline(
    mcp_server: ServerProcess,
) -> None:
    with MemoryClient(mcp_server.target) as client:
        for timeout in (1e11, math.inf, math.nan, 3601.0):
            with pytest.raises(InvalidArgumentError) as caught:
                client.hot_path(f"flush-{uuid.uuid4().hex[:8]}", "flush", timeout_seconds=timeout)
            assert caught.value.reason == "TIMEOUT_INVALID" and "3600" in caught.value.message


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_prompt_asked_for_by_a_wrong_name_or_with_a_wrong_argument_is_refused_as_invalid_params(
    mcp_server: ServerProcess, transport: str
) -> None:
    tenant = f"mcp-{uuid.uuid4().hex[:10]}"
    cases: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
        ("nope", {}, ("'nope'", "memory_context")),
        ("memory_context", {"x": "1"}, ("only query", "not x")),
        ("memory_context", {"query": "q", "x": "1", "y": "2"}, ("only query", "not x, y")),
        ("memory_context", {"query": "q" * (host_protocol.MAX_QUERY_CHARS + 1)}, ("query", "QUERY_TOO_LONG")),
    ]

    async def run() -> list[tuple[int, str]]:
        refusals = []
        async with _client(mcp_server, transport, tenant) as client:
            for name, arguments, _ in cases:
                with pytest.raises(MCPError) as refused:
                    await client.get_prompt(name, arguments)
                refusals.append((refused.value.code, refused.value.message))
            # The prompt itself still renders, with or without its argument.
            assert (await client.get_prompt("memory_context", {"query": "q"})).messages
            assert (await client.get_prompt("memory_context")).messages
        return refusals

    for (code, message), (_, _, named) in zip(anyio.run(run), cases, strict=True):
        assert code == INVALID_PARAMS and all(part in message for part in named), (code, message)
    log = mcp_server.stderr_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def test_a_tool_that_crashes_is_one_sentence_with_its_reason_not_the_sdks_prefix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool whose call fails with what is no refusal (a bug, a reply it cannot read) answers the
    gRPC surface's INTERNAL sentence, as a refusal does: not the SDK's bare "Error executing tool
    NAME", and nothing of the exception, whose traceback goes to the log. The official SDK's
    client, in process, on the tools every host builds (their service replaced by one that fails)."""

    async def crashing(ask: host_protocol.Ask) -> host_protocol.Answer:
        raise RuntimeError("secret detail of /var/lib/mnemosyne")

    observations = host_protocol.HostObservations()
    agent = mcp_tools.Agent()
    observations.record(agent, host_protocol.Observation(1, "main", 1))  # the writes get as far as their call
    server = mcp_tools.build_server(lambda ctx: mcp_tools.ToolSession(crashing, "acme", "main", agent, observations))

    async def run() -> list[tuple[str, bool, str]]:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            needed = [(t.name, t.input_schema["properties"], t.input_schema.get("required", [])) for t in tools]
            calls = [(name, {n: _valid(schema[n]) for n in required}) for name, schema, required in needed]
            calls = [
                (n, {"changes": [{"op": "delete", "key": "a.md"}]} if n == "update_workspace" else a) for n, a in calls
            ]
            return [
                (name, (r := await client.call_tool(name, arguments)).is_error, _text(r)) for name, arguments in calls
            ]

    answers = anyio.run(run)
    assert len(answers) == 8
    for name, is_error, text in answers:
        expected = f"{name} failed with an internal error; the memory server's log has the details (INTERNAL)"
        assert is_error and text == expected, (name, text)
    assert "secret detail" in caplog.text  # the log has what the model is not shown
