"""``mnemosyne mcp``: the MCP server of memory tools (host/mcp_tools.py, shared with the server's
``/mcp`` endpoint) over stdio, its calls made by a ``MemoryClient``: the adapter is the host.

One process serves one session: the tenant and workspace of the command line, and one agent
standing for the model in the ``MemoryHost``'s observations, so a write from a stale reading
fails closed and a new process has read nothing. The client blocks (gRPC): each call runs on a
thread so that the event loop keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mnemosyne.client.host import MemoryHost
from mnemosyne.client.memory_client import MemoryClient
from mnemosyne.host.mcp_tools import DEFAULT_WORKSPACE, Agent, Calls, ToolSession
from mnemosyne.host.mcp_tools import build_server as build_tools
from mnemosyne.host.protocol import Answer, Ask


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


__all__ = ["DEFAULT_WORKSPACE", "Agent", "Session", "build_server"]
