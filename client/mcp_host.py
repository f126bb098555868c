"""An MCP server of memory tools for a model, built on ``MemoryHost``: the adapter is the host.

The model expresses memory intent and never sees or carries a generation: ``read_memory``
assembles its context and records the MCP session's observation (``MemoryHost.assemble_context``,
the session object standing for the agent); ``memory_update`` and ``update_workspace`` go through
``MemoryHost.call_tool``, so a write from a session whose context is stale fails closed with a
tool error the model can act on ("read_memory again"). A new session — or one the server no
longer knows — has observed nothing and must read before it writes.

One server serves one tenant and workspace per session: over stdio (``mnemosyne mcp``) those of
the command line; over streamable HTTP (``/mcp`` on the server's HTTP port) those its session
was opened with, which the transport binds to the caller's token (service/transport/mcp_endpoint.py).
Built with the official MCP Python SDK (``mcp``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import METHOD_NOT_FOUND
from pydantic import BaseModel, Field

from mnemosyne.client import types
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.client.host import MEMORY_UPDATE, UPDATE_WORKSPACE, MemoryHost

T = TypeVar("T")
DEFAULT_WORKSPACE = "main"
CONTEXT_URI = "memory://context/{workspace}"  # the session's workspace
INSTRUCTIONS = (
    "Long-term memory. Call read_memory at the start of a task (and again whenever a write says "
    "memory changed): it shows MEMORY.md, this workspace's records and, for a query, memories recalled "
    "for it. Save durable facts with retain; rewrite MEMORY.md with memory_update and workspace records "
    "with update_workspace, always from what read_memory showed you."
)


class Agent:
    """Stands for the model of one MCP session in the host's observations (weakly referenced)."""


@dataclass(frozen=True)
class Session:
    """What one MCP session works on: a host (client and tenant), a workspace, and the object that
    stands for the session's agent in the host's observations (one per MCP session)."""

    host: MemoryHost
    workspace: str
    agent: Agent


class RecordChange(BaseModel):
    op: Literal["put", "delete"] = Field(description="put: create or replace the record; delete: remove it.")
    key: str = Field(description="Record name, a relative path such as plan.md or notes/plan.md.")
    content: str | None = Field(default=None, description="The complete new text of the record (put only).")


def _tool_error(error: MnemosyneClientError) -> ToolError:
    """A service error as the model reads it: the server's message (never a generation) and reason."""
    return ToolError(f"{error.message} ({error.reason})")


async def _off_loop(work: Callable[[], T]) -> T:
    """The client blocks (gRPC); run it on a thread so the event loop keeps serving."""
    try:
        return await anyio.to_thread.run_sync(work)
    except MnemosyneClientError as error:
        raise _tool_error(error) from None


def _host_result(result: dict[str, Any]) -> str:
    if not result["ok"]:
        raise ToolError(f"{result['error']} ({result['reason']})")
    return str(result["result"])


def _event(event: types.Event) -> dict[str, Any]:
    described: dict[str, Any] = {"event_id": event.event_id, "status": event.status, "kind": event.kind}
    if event.created_memory_ids:
        described["created_memory_ids"] = list(event.created_memory_ids)
    if event.duplicate_of_memory_ids:
        described["duplicate_of_memory_ids"] = list(event.duplicate_of_memory_ids)
    if event.error_reason:
        described["error"] = f"{event.error_message} ({event.error_reason})"
    return described


async def _sessions_only(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Refuse the stateless protocol's ``server/discover``, so that clients open a session (the
    initialize handshake): a session is what a reading of memory belongs to. A stateless request
    has no reading, so its writes fail closed."""
    if ctx.method == "server/discover":
        raise MCPError(METHOD_NOT_FOUND, "this server keeps sessions: connect with the initialize handshake")
    return await call_next(ctx)


def build_server(session_of: Callable[[Context[Any, Any]], Session], *, sessions_only: bool = False) -> MCPServer:
    """The memory tools, resource and prompt; ``session_of`` gives a call's session.
    ``sessions_only`` (HTTP): refuse the stateless protocol, whose requests belong to no session."""
    server = MCPServer(
        "mnemosyne-memory", instructions=INSTRUCTIONS, middleware=[_sessions_only] if sessions_only else []
    )

    async def read(ctx: Context[Any, Any], query: str, k: int) -> str:
        session = session_of(ctx)
        return await _off_loop(
            lambda: session.host.assemble_context(session.agent, session.workspace, query or None, k)
        )

    @server.tool()
    async def read_memory(ctx: Context[Any, Any], query: str = "", k: int = 5) -> str:
        """Read your memory: the global memory document MEMORY.md, the current workspace's records and,
        when you give a query, up to k memories recalled for it. Call it before you change MEMORY.md or
        workspace records, and again whenever a write tells you memory changed since you read it."""
        return await read(ctx, query, k)

    @server.tool()
    async def retain(ctx: Context[Any, Any], text: str, fast: bool = False) -> str:
        """Remember a fact, decision or event for later: one self-contained statement. With fast, it is
        queued and saved shortly after (use get_event_status or flush to see it done)."""
        session = session_of(ctx)
        result = await _off_loop(lambda: session.host.client.retain(session.host.tenant, text, fast=fast))
        if result.status == "enqueued":
            return f"Queued as event {result.event_id}."
        if result.status == "invalid":
            raise ToolError(f"{result.error_message} ({result.error_reason})")
        if result.status == "duplicate":
            return f"Already remembered as memory {result.memory_id}."
        return f"Remembered as memory {result.memory_id}."

    @server.tool()
    async def recall(ctx: Context[Any, Any], query: str, k: int = 5) -> str:
        """Find up to k memories relevant to a question or topic, best first."""
        session = session_of(ctx)
        hits = await _off_loop(lambda: session.host.client.recall(session.host.tenant, query, k=k))
        if not hits:
            return "No memories found."
        return "\n".join(f"- [memory {hit.memory.id}] {hit.memory.text}" for hit in hits)

    @server.tool()
    async def memory_update(ctx: Context[Any, Any], content: str) -> str:
        """Replace the global memory document MEMORY.md that read_memory showed you with new complete
        content. It replaces the whole document, so include everything that should remain."""
        session = session_of(ctx)
        arguments = {"content": content}
        return _host_result(await _off_loop(lambda: session.host.call_tool(session.agent, MEMORY_UPDATE, arguments)))

    @server.tool()
    async def update_workspace(ctx: Context[Any, Any], changes: list[RecordChange]) -> str:
        """Create, replace or delete records of the current workspace that read_memory showed you. All
        changes of one call are applied together, or none is."""
        session = session_of(ctx)
        arguments = {"changes": [change.model_dump(exclude_none=True) for change in changes]}
        return _host_result(await _off_loop(lambda: session.host.call_tool(session.agent, UPDATE_WORKSPACE, arguments)))

    @server.tool()
    async def get_event_status(ctx: Context[Any, Any], event_id: int) -> str:
        """The state of a queued write (pending, running, succeeded or failed) and what it created."""
        session = session_of(ctx)
        event = await _off_loop(lambda: session.host.client.get_event(session.host.tenant, event_id))
        return json.dumps(_event(event))

    @server.tool()
    async def list_events(
        ctx: Context[Any, Any],
        status: Literal["", "pending", "running", "succeeded", "failed"] = "",
        page_size: int = 20,
    ) -> str:
        """Recent queued writes, oldest first, optionally only those with one status."""
        session = session_of(ctx)
        page = await _off_loop(
            lambda: session.host.client.list_events(session.host.tenant, status or None, page_size=page_size)
        )
        return json.dumps([_event(event) for event in page.events])

    @server.tool()
    async def flush(ctx: Context[Any, Any], timeout_seconds: float = 30.0) -> str:
        """Wait until every queued write so far is saved (at most timeout_seconds), then say how it went."""
        session = session_of(ctx)
        result = await _off_loop(
            lambda: session.host.client.hot_path(session.host.tenant, "flush", timeout_seconds=timeout_seconds)
        )
        assert isinstance(result, types.FlushResult)
        failed = f"; failed events: {result.failed_event_ids}" if result.failed_event_ids else ""
        return f"{result.flushed} queued write(s) finished: {result.succeeded} saved, {result.failed} failed{failed}."

    @server.resource(CONTEXT_URI, name="memory-context", mime_type="text/markdown")
    async def context_resource(workspace: str, ctx: Context[Any, Any]) -> str:
        """Your memory context: MEMORY.md and the workspace's records, as read_memory shows them."""
        if workspace != session_of(ctx).workspace:
            raise ResourceError(
                f"this session works on workspace {session_of(ctx).workspace!r}, not {workspace[:80]!r}"
            )
        return await read(ctx, "", 5)

    @server.prompt(name="memory_context")
    async def context_prompt(ctx: Context[Any, Any], query: str = "") -> str:
        """Your memory context as a prompt, with memories recalled for an optional query."""
        return await read(ctx, query, 5)

    return server
