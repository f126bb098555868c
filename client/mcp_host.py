"""An MCP server of memory tools for a model, built on ``MemoryHost``: the adapter is the host.

The model expresses memory intent and never sees or carries a generation: ``read_memory``
assembles its context and records the MCP session's observation (``MemoryHost.assemble_context``,
the session object standing for the agent); ``memory_update`` and ``update_workspace`` go through
``MemoryHost.call_tool``, so a write from a session whose context is stale fails closed with a
tool error the model can act on ("read_memory again"). A new session — or one the server no
longer knows — has observed nothing and must read before it writes.

One server serves one tenant and workspace per session: over stdio (``mnemosyne mcp``) those of
the command line; over streamable HTTP (``/mcp`` on the server's HTTP port) those its session
was opened with, which the transport binds to the caller's token (service/transport/http/mcp.py).
Built with the official MCP Python SDK (``mcp``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import METHOD_NOT_FOUND
from pydantic import BaseModel, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from mnemosyne.client import types
from mnemosyne.client.errors import MnemosyneClientError
from mnemosyne.client.host import MEMORY_UPDATE, UPDATE_WORKSPACE, MemoryHost
from mnemosyne.client.memory_client import MAX_WAIT_SECONDS

T = TypeVar("T")
DEFAULT_WORKSPACE = "main"
CONTEXT_URI = "memory://context/{workspace}"  # the session's workspace
INSTRUCTIONS = (
    "Long-term memory. Call read_memory at the start of a task (and again whenever a write says "
    "memory changed): it shows MEMORY.md, this workspace's records and, for a query, memories recalled "
    "for it. Save durable facts with retain; rewrite MEMORY.md with memory_update and workspace records "
    "with update_workspace, always from what read_memory showed you."
)


# The tool table's limits: the server's default limits (engine/limits.py), which this package
# cannot import. Each tool's input schema carries them (minimum, maximum, maxLength), so the model
# sees them, and an argument outside them is refused before any call, naming the argument and its
# limit. A server configured with other limits refuses by its own, naming them.
MAX_K = 100  # Limits.max_k
MAX_PAGE_SIZE = 1_000  # Limits.max_page_size
MAX_EVENT_ID = 2**63 - 1  # an event id is an int64
MAX_TEXT_CHARS = 32_768  # Limits.max_text_chars
MAX_QUERY_CHARS = 4_096  # Limits.max_query_chars
MAX_RECORD_CHARS = 262_144  # Limits.max_record_bytes: a record has at most that many characters
MAX_KEY_CHARS = 256  # engine/workspace.py MAX_KEY_CHARS
# A number written as text takes ASCII digits only, the server's rule (engine/limits.py
# ``parse_integer`` and ``parse_number``): pydantic alone would take " 1", "1_000", 1e11 and True
# for an integer, and "NaN" for a float.
_WHOLE = re.compile(r"-?[0-9]{1,40}")
_DECIMAL = re.compile(r"-?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][-+]?[0-9]{1,4})?")


def _refused(name: str, limit: str, value: object) -> PydanticCustomError:
    return PydanticCustomError("number_invalid", f"{name} must be {limit}, not {repr(value)[:40]}")


def _whole(name: str, minimum: int, maximum: int) -> Callable[[object], int]:
    """The check of an integer argument: a JSON integer or ASCII digits, from minimum to maximum
    (never a float, even 1e11, nor a bool)."""
    limit = f"a whole number from {minimum} to {maximum}, written with the digits 0-9"

    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _refused(name, limit, value)
        if isinstance(value, str) and not _WHOLE.fullmatch(value) or not minimum <= int(value) <= maximum:
            raise _refused(name, limit, value)
        return int(value)

    return check


def _decimal(name: str, minimum: float, maximum: float) -> Callable[[object], float]:
    """The check of a number argument: a JSON number or ASCII decimal text, finite, from minimum
    to maximum."""
    limit = f"a number from {minimum:g} to {maximum:g}"

    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _refused(name, limit, value)
        if isinstance(value, str) and not _DECIMAL.fullmatch(value):
            raise _refused(name, limit, value)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not (math.isfinite(number) and minimum <= number <= maximum):
            raise _refused(name, limit, value)
        return number

    return check


def _k(what: str) -> Any:
    return Field(ge=1, le=MAX_K, description=f"How many memories {what}: 1 to {MAX_K}.")


RecallK = Annotated[int, _k("to recall"), BeforeValidator(_whole("k", 1, MAX_K))]
ReadK = Annotated[int, _k("to recall for the query"), BeforeValidator(_whole("k", 1, MAX_K))]
EventId = Annotated[
    int,
    Field(ge=1, le=MAX_EVENT_ID, description="The event id a queued retain answered."),
    BeforeValidator(_whole("event_id", 1, MAX_EVENT_ID)),
]
PageSize = Annotated[
    int,
    Field(ge=1, le=MAX_PAGE_SIZE, description=f"How many events at most: 1 to {MAX_PAGE_SIZE}."),
    BeforeValidator(_whole("page_size", 1, MAX_PAGE_SIZE)),
]
WaitSeconds = Annotated[
    float,
    Field(ge=0, le=MAX_WAIT_SECONDS, description=f"Seconds to wait at most: 0 (30) to {MAX_WAIT_SECONDS:g}."),
    BeforeValidator(_decimal("timeout_seconds", 0.0, MAX_WAIT_SECONDS)),
]
Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS, description=f"At most {MAX_QUERY_CHARS} characters.")]
Question = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUERY_CHARS, description=f"1 to {MAX_QUERY_CHARS} characters."),
]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS, description=f"1 to {MAX_TEXT_CHARS} characters.")]
Content = Annotated[
    str, Field(max_length=MAX_RECORD_CHARS, description=f"The complete document, at most {MAX_RECORD_CHARS} bytes.")
]


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
    key: str = Field(
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description=f"Record name, a relative path such as plan.md or notes/plan.md ({MAX_KEY_CHARS} characters at most).",
    )
    content: str | None = Field(
        default=None,
        max_length=MAX_RECORD_CHARS,
        description=f"The complete new text of the record (put only), at most {MAX_RECORD_CHARS} bytes.",
    )


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
    async def read_memory(ctx: Context[Any, Any], query: Query = "", k: ReadK = 5) -> str:
        """Read your memory: the global memory document MEMORY.md, the current workspace's records and,
        when you give a query, up to k memories recalled for it. Call it before you change MEMORY.md or
        workspace records, and again whenever a write tells you memory changed since you read it."""
        return await read(ctx, query, k)

    @server.tool()
    async def retain(ctx: Context[Any, Any], text: Text, fast: bool = False) -> str:
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
    async def recall(ctx: Context[Any, Any], query: Question, k: RecallK = 5) -> str:
        """Find up to k memories relevant to a question or topic, best first."""
        session = session_of(ctx)
        hits = await _off_loop(lambda: session.host.client.recall(session.host.tenant, query, k=k))
        if not hits:
            return "No memories found."
        return "\n".join(f"- [memory {hit.memory.id}] {hit.memory.text}" for hit in hits)

    @server.tool()
    async def memory_update(ctx: Context[Any, Any], content: Content) -> str:
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
    async def get_event_status(ctx: Context[Any, Any], event_id: EventId) -> str:
        """The state of a queued write (pending, running, succeeded or failed) and what it created."""
        session = session_of(ctx)
        event = await _off_loop(lambda: session.host.client.get_event(session.host.tenant, event_id))
        return json.dumps(_event(event))

    @server.tool()
    async def list_events(
        ctx: Context[Any, Any],
        status: Literal["", "pending", "running", "succeeded", "failed"] = "",
        page_size: PageSize = 20,
    ) -> str:
        """Recent queued writes, oldest first, optionally only those with one status."""
        session = session_of(ctx)
        page = await _off_loop(
            lambda: session.host.client.list_events(session.host.tenant, status or None, page_size=page_size)
        )
        return json.dumps([_event(event) for event in page.events])

    @server.tool()
    async def flush(ctx: Context[Any, Any], timeout_seconds: WaitSeconds = 30.0) -> str:
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
