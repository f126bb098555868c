"""``mnemosyne mcp``: the MCP server of memory tools (host/mcp_tools.py, shared with the server's
``/mcp`` endpoint) over stdio, its calls made by a ``MemoryClient``: the adapter is the host.

One process serves one session: the tenant and workspace of the command line, and one agent
standing for the model in the ``MemoryHost``'s observations, so a write from a stale reading
fails closed and a new process has read nothing. The client blocks (gRPC): each call runs on a
thread so that the event loop keeps serving.

Every line on stdin is answered: the SDK's stdio transport drops a line it cannot read as a
message without a word (it logs it at DEBUG), and its client would wait for ever, so ``run_stdio``
reads stdin itself and answers such a line with a JSON-RPC error (``refusal``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    RequestId,
    jsonrpc_message_adapter,
)

from mnemosyne.client.host import MemoryHost
from mnemosyne.client.memory_client import MemoryClient
from mnemosyne.host.mcp_tools import DEFAULT_WORKSPACE, Agent, Calls, ToolSession, unanswerable_id
from mnemosyne.host.mcp_tools import build_server as build_tools
from mnemosyne.host.protocol import Answer, Ask

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Session:
    """What one MCP session works on: a host (client and tenant), a workspace, and the object that
    stands for the session's agent in the host's observations (one per MCP session)."""

    host: MemoryHost
    workspace: str
    agent: Agent


def _calls(client: MemoryClient) -> Calls:
    async def call(ask: Ask) -> Answer:
        return await anyio.to_thread.run_sync(client.ask, ask)

    return call


def build_server(session_of: Callable[[Context[Any, Any]], Session]) -> MCPServer:
    """The memory tools, resource and prompt; ``session_of`` gives a call's session."""

    def tool_session(ctx: Context[Any, Any]) -> ToolSession:
        session = session_of(ctx)
        host = session.host
        return ToolSession(_calls(host.client), host.tenant, session.workspace, session.agent, host.observations)

    return build_tools(tool_session)


async def run_stdio(server: MCPServer, stdin: BinaryIO | None = None) -> None:
    """``server`` over stdio until stdin ends, as the SDK's ``run_stdio_async`` serves it, but
    reading ``stdin`` (default: this process's) itself so that every line is answered: a line the
    SDK cannot read as a message is answered with ``refusal`` and never reaches it."""
    lines = _Lines(stdin or sys.stdin.buffer)
    # run_stdio_async takes no stdin of ours: this is its body, with our reader of the lines.
    lowlevel = server._lowlevel_server
    async with stdio_server(stdin=cast(anyio.AsyncFile[str], lines)) as (read_stream, write_stream):
        lines.answer_with(write_stream.send)
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


class _Lines:
    """The lines of ``stdin`` the SDK's transport reads (``async for``), without those it cannot
    read as messages: each of those is answered with its ``refusal`` instead (through the
    transport's own writer: one writer, so answers never interleave). A blank line is no message
    and is skipped."""

    def __init__(self, stdin: BinaryIO) -> None:
        self._stdin = anyio.wrap_file(stdin)
        self._send: Callable[[SessionMessage], Awaitable[None]] | None = None
        self._ready = anyio.Event()  # the transport's writer is known: its reader may start first

    def answer_with(self, send: Callable[[SessionMessage], Awaitable[None]]) -> None:
        self._send = send
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self._stdin:
            if not line.strip():
                continue
            try:
                # The SDK's own reading of a line, so that a line passed on is one it reads.
                text = line.decode("utf-8")
                message = jsonrpc_message_adapter.validate_json(text, by_name=False)
                misread = unanswerable_id(json.loads(text)) if isinstance(message, JSONRPCNotification) else None
                error = None if misread is None else _error(None, INVALID_REQUEST, misread)
            except (ValueError, RecursionError):  # UnicodeDecodeError, pydantic's ValidationError
                error = refusal(line)
            if error is None:
                yield text
                continue
            logger.warning("answered a line of stdin that is no MCP message: %s", error.error.message)
            await self._ready.wait()
            assert self._send is not None  # set with _ready
            await self._send(SessionMessage(error))


def refusal(line: bytes) -> JSONRPCError:
    r"""The JSON-RPC error answering ``line``, which is not a JSON-RPC message: a parse error
    (id null) if it is not JSON; invalid params if its text is not Unicode (bytes that are not
    UTF-8, a string escape of half a surrogate pair such as ``\ud800``, which no protobuf field
    can hold); else invalid request. The last two carry the request's id when it can be read."""
    try:
        # Bytes that are not UTF-8 become lone surrogates here, found as the escapes are.
        document = json.loads(line.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, "Parse error: a message is one JSON object on one line")
    request_id = _id_of(document)
    if not _is_unicode(document):
        return _error(
            request_id,
            INVALID_PARAMS,
            "Invalid params: the message's text is not Unicode (bytes that are not UTF-8, or a string escape of "
            "half a surrogate pair, such as \\ud800, without its other half)",
        )
    return _error(request_id, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request, notification or response")


def _id_of(document: Any) -> RequestId | None:
    """The id of a request (a whole number or a Unicode string), None if it has none that can be read."""
    request_id = document.get("id") if isinstance(document, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str) or not _is_unicode(request_id):
        return None
    return request_id


def _is_unicode(document: Any) -> bool:
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


__all__ = ["DEFAULT_WORKSPACE", "Agent", "Session", "build_server", "refusal", "run_stdio"]
