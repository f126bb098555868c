"""``mnemosyne mcp``: the MCP server of memory tools (host/mcp_tools.py, shared with the server's
``/mcp`` endpoint) over stdio, its calls made by a ``MemoryClient``: the adapter is the host.

One process serves one session: the tenant and workspace of the command line, and one agent
standing for the model in the ``MemoryHost``'s observations, so a write from a stale reading
fails closed and a new process has read nothing. The client blocks (gRPC): each call runs on a
thread so that the event loop keeps serving.

Every line on stdin is answered: the SDK's stdio transport drops a line it cannot read as a
message without a word (it logs it at DEBUG), and its client would wait for ever, so ``run_stdio``
reads stdin itself and answers such a line with a JSON-RPC error (``host/mcp_messages.py``).
"""

from __future__ import annotations

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

from mnemosyne.client.host import MemoryHost
from mnemosyne.client.memory_client import MemoryClient
from mnemosyne.host.mcp_messages import refusal, unreadable
from mnemosyne.host.mcp_tools import DEFAULT_WORKSPACE, Agent, Calls, ToolSession
from mnemosyne.host.mcp_tools import build_server as build_tools
from mnemosyne.host.protocol import Answer, Ask

logger = logging.getLogger(__name__)
NOT_JSON = "a message is one JSON object on one line"


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
            error = unreadable(line, not_json=NOT_JSON)
            if error is None:
                try:
                    yield line.decode("utf-8")
                    continue
                except UnicodeDecodeError:
                    error = refusal(line, not_json=NOT_JSON)
            logger.warning("answered a line of stdin that is no MCP message: %s", error.error.message)
            await self._ready.wait()
            assert self._send is not None  # set with _ready
            await self._send(SessionMessage(error))


__all__ = ["DEFAULT_WORKSPACE", "Agent", "Session", "build_server", "run_stdio"]
