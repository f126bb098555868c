"""The MCP server of memory tools for a model, written once for its two hosts: ``mnemosyne mcp``
over stdio (client/mcp_host.py: the calls go over gRPC) and ``/mcp`` on the server's HTTP port
(transport/http/mcp.py: the calls go to the servicers in process). Built with the official MCP
Python SDK (``mcp``); a module of its own so that only an MCP adapter loads the SDK.

The model expresses memory intent and never sees or carries a generation: ``read_memory``
assembles its context and records the session's observation (host/protocol.py ``read_memory``,
the session's ``agent`` standing for the model); ``memory_update`` and ``update_workspace`` go
through ``write_memory``, so a write from a session whose context is stale fails closed with a
tool error the model can act on ("read_memory again"). A new session — or one the server no
longer knows — has observed nothing and must read before it writes.

Each tool's input schema carries its limits (host/protocol.py's defaults), and an argument outside
them is refused before any call, naming the argument and its limit, by the one rule for numbers
given as text (host/numbers.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult, TextContent
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError
from pydantic_core import PydanticCustomError

from mnemosyne.host import mcp_arguments
from mnemosyne.host import protocol as host_protocol
from mnemosyne.host.consistency import caller_token_metadata
from mnemosyne.host.mcp_arguments import ARGUMENTS_INVALID, UNKNOWN_ARGUMENT
from mnemosyne.host.model_tools import MEMORY_UPDATE, UPDATE_WORKSPACE
from mnemosyne.host.numbers import decimal_number, whole_number
from mnemosyne.host.protocol import (
    CONSISTENCY_TOKEN_KEY,
    MAX_EVENT_ID,
    MAX_K,
    MAX_KEY_CHARS,
    MAX_PAGE_SIZE,
    MAX_QUERY_CHARS,
    MAX_RECORD_CHARS,
    MAX_TEXT_CHARS,
    MAX_WAIT_SECONDS,
    Answer,
    Ask,
    Flow,
    HostObservations,
    ServiceError,
    run_async,
    server_wait,
    write_memory,
)
from mnemosyne.host.token_form import MAX_TOKEN_CHARACTERS
from mnemosyne.v1 import events_pb2, hot_path_pb2, memory_pb2, types_pb2

T = TypeVar("T")
log = logging.getLogger("mnemosyne.mcp")
DEFAULT_WORKSPACE = "main"
CONTEXT_URI = "memory://context/{workspace}"  # the session's workspace
INSTRUCTIONS = (
    "Long-term memory. Call read_memory at the start of a task (and again whenever a write says "
    "memory changed): it shows MEMORY.md, this workspace's records and, for a query, memories recalled "
    "for it. Save durable facts with retain; rewrite MEMORY.md with memory_update and workspace records "
    "with update_workspace, always from what read_memory showed you. A write answers a consistency_token: "
    "pass the newest one to recall, read_memory or retain, and they see every write it covers."
)
RETAIN = "/mnemosyne.v1.MemoryService/Retain"
RECALL = "/mnemosyne.v1.MemoryService/Recall"
GET_EVENT = "/mnemosyne.v1.EventsService/GetEvent"
LIST_EVENTS = "/mnemosyne.v1.EventsService/ListEvents"
FLUSH = "/mnemosyne.v1.HotPathService/Flush"
# An event's status as the tools show it: the proto's name in lower case ("pending").
_EVENT_STATUS = {number: name.lower() for name, number in events_pb2.EventStatus.items() if number}


def _refused(name: str, limit: str, value: object, number: float | None) -> PydanticCustomError:
    """number_invalid for a value no surface reads as a number, number_out_of_range for one outside
    the limit (host/mcp_arguments.py gives each its reason)."""
    kind = "number_invalid" if number is None else "number_out_of_range"
    return PydanticCustomError(kind, f"{name} must be {limit}, not {repr(value)[:40]}")


def _whole(name: str, minimum: int, maximum: int) -> Callable[[object], int]:
    """The check of an integer argument: a JSON integer or ASCII digits, from minimum to maximum
    (never a float, even 1e11, nor a bool)."""
    limit = f"a whole number from {minimum} to {maximum}, written with the digits 0-9"

    def check(value: object) -> int:
        number = whole_number(value)
        if number is None or not minimum <= number <= maximum:
            raise _refused(name, limit, value, number)
        return number

    return check


def _decimal(name: str, minimum: float, maximum: float) -> Callable[[object], float]:
    """The check of a number argument: a JSON number or ASCII decimal text, finite, from minimum
    to maximum."""
    limit = f"a number from {minimum:g} to {maximum:g}"

    def check(value: object) -> float:
        number = decimal_number(value)
        if number is None or not (math.isfinite(number) and minimum <= number <= maximum):
            raise _refused(name, limit, value, number)
        return number

    return check


# A number the model does not give is 0, the server's default within its own limit (a lower
# --max-k or --max-page-size): a default of the tools' own would be refused by such a server.
def _k(what: str) -> Any:
    return Field(ge=0, le=MAX_K, description=f"How many memories {what}: 1 to {MAX_K}; 0: the server's default (5).")


RecallK = Annotated[int, _k("to recall"), BeforeValidator(_whole("k", 0, MAX_K))]
ReadK = Annotated[int, _k("to recall for the query"), BeforeValidator(_whole("k", 0, MAX_K))]
EventId = Annotated[
    int,
    Field(ge=1, le=MAX_EVENT_ID, description="The event id a queued retain answered."),
    BeforeValidator(_whole("event_id", 1, MAX_EVENT_ID)),
]
PageSize = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_PAGE_SIZE,
        description=f"How many events at most: 1 to {MAX_PAGE_SIZE}; 0: the server's default (100).",
    ),
    BeforeValidator(_whole("page_size", 0, MAX_PAGE_SIZE)),
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
ConsistencyToken = Annotated[
    str,
    Field(
        max_length=MAX_TOKEN_CHARACTERS,
        description="The consistency_token a write answered (the newest): the call sees every write it covers. "
        "Empty: none.",
    ),
]
Content = Annotated[
    str, Field(max_length=MAX_RECORD_CHARS, description=f"The complete document, at most {MAX_RECORD_CHARS} bytes.")
]


class RecordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field it does not have is refused, never ignored

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


class Agent:
    """Stands for the model of one MCP session in the host's observations (weakly referenced)."""


Calls = Callable[[Ask], Awaitable[Answer]]


@dataclass(frozen=True)
class ToolSession:
    """What one MCP session works on: its tenant and workspace, the object standing for its agent
    in ``observations``, and how its calls reach the service (``calls``: the caller's token goes
    with each)."""

    calls: Calls
    tenant: str
    workspace: str
    agent: object
    observations: HostObservations

    async def run(self, flow: Flow[T]) -> T:
        """A host flow's result; a refusal becomes the tool error the model reads: the server's
        message (never a generation) and reason."""
        try:
            return await run_async(flow, self.calls)
        except ServiceError as error:
            raise ToolError(f"{error.message} ({error.reason})") from None

    async def ask(self, method: str, request: Any, *, wait_seconds: float = 0.0) -> Any:
        """The response to one call."""
        return (await self.run(_one(Ask(method, request, wait_seconds=wait_seconds)))).response

    def carrying(self, token: str, answered: list[str]) -> ToolSession:
        """This session for one tool call: each of its calls sends ``token`` (the consistency token
        the model gave, in the request metadata), and the tokens the calls answer are appended to
        ``answered`` (the tool shows the last)."""
        calls = self.calls
        try:
            metadata = caller_token_metadata(token)
        except ServiceError as error:  # as the server refuses it (a stdio host could not even send it)
            raise ToolError(f"{error.message} ({error.reason})") from None

        async def carried(ask: Ask) -> Answer:
            ask = dataclasses.replace(ask, metadata=(*ask.metadata, *metadata))
            answer = await calls(ask)
            answered.extend(v for k, v in answer.trailing_metadata if k == CONSISTENCY_TOKEN_KEY)
            return answer

        return dataclasses.replace(self, calls=carried)


def _one(ask: Ask) -> Flow[Answer]:
    return (yield ask)


# The host protocol's refusals tell a host to assemble the context again; over MCP the model does
# that itself, with read_memory: the same refusals, naming the tool.
_READ_AGAIN = {
    host_protocol.STALE_REASON: "memory changed since you last read it; call read_memory, then make the change again",
    host_protocol.MISSING_REASON: "memory has not been read in this session yet; call read_memory before writing memory",
    host_protocol.UNAVAILABLE_REASON: "the memory service did not answer, so this change may not have been saved; "
    "call read_memory and check before repeating it",
}


def _written(result: dict[str, Any], answered: list[str]) -> str:
    if not result["ok"]:
        raise ToolError(f"{_READ_AGAIN.get(result['reason'], result['error'])} ({result['reason']})")
    return _with_token(str(result["result"]), answered)


def _with_token(text: str, answered: list[str]) -> str:
    """A write tool's result with the consistency token its write answered, on a line of its own."""
    return f"{text}\nconsistency_token: {answered[-1]}" if answered and answered[-1] else text


def _event(event: events_pb2.Event) -> dict[str, Any]:
    status = _EVENT_STATUS.get(event.status, "unspecified")
    described: dict[str, Any] = {"event_id": event.event_id, "status": status, "kind": event.kind}
    if event.created_memory_ids:
        described["created_memory_ids"] = list(event.created_memory_ids)
    if event.duplicate_of_memory_ids:
        described["duplicate_of_memory_ids"] = list(event.duplicate_of_memory_ids)
    if event.error_reason:
        described["error"] = f"{event.error_message} ({event.error_reason})"
    return described


def _retained(result: types_pb2.RetainResult) -> str:
    if result.status == types_pb2.RetainResult.ENQUEUED:
        return f"Queued as event {result.event_id}."
    if result.status == types_pb2.RetainResult.INVALID:
        raise ToolError(f"{result.error_message} ({result.error_reason})")
    if result.status == types_pb2.RetainResult.DUPLICATE:
        return f"Already remembered as memory {result.memory_id}."
    return f"Remembered as memory {result.memory_id}."


async def _sessions_only(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    """Refuse the stateless protocol's ``server/discover``, so that clients open a session (the
    initialize handshake): a session is what a reading of memory belongs to. A stateless request
    has no reading, so its writes fail closed."""
    if ctx.method == "server/discover":
        raise MCPError(METHOD_NOT_FOUND, "this server keeps sessions: connect with the initialize handshake")
    return await call_next(ctx)


async def _params_checked(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Refuse params the SDK's own validation refuses as invalid params naming the field at
    fault (``mcp_arguments.params_refusal``), not the SDK's bare "Invalid request parameters"."""
    try:
        return await call_next(ctx)
    except ValidationError as error:
        raise MCPError(INVALID_PARAMS, mcp_arguments.params_refusal(ctx.method, error)) from None


def _prompt_checked(server: MCPServer) -> ServerMiddleware[Any]:
    """Refuse a ``prompts/get`` the SDK would fail inside, as invalid params naming what is wrong:
    a prompt it does not have, an argument the prompt does not take, a required one missing. The
    SDK answers those with JSON-RPC code 0 and logs them as its own error, with a traceback; and
    arguments that are no object, or not strings, with "Invalid request parameters", naming nothing."""

    async def check(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "prompts/get" or not isinstance(params, Mapping) or not isinstance(params.get("name"), str):
            return await call_next(ctx)  # not a prompt, or params the SDK's own validation refuses
        name, given = params["name"], params.get("arguments") or {}
        prompts = {prompt.name: prompt for prompt in await server.list_prompts()}
        prompt = prompts.get(name)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"no prompt {name[:80]!r}: the prompts are {', '.join(sorted(prompts))}")
        takes = [argument.name for argument in prompt.arguments or []]
        if not isinstance(given, Mapping):  # the SDK: "Invalid request parameters", naming nothing
            raise _not_an_object(f"prompt {name}", given, takes)
        strings = [str(key)[:40] for key, value in given.items() if not isinstance(value, str)]
        if strings:
            raise MCPError(
                INVALID_PARAMS, f"the arguments of prompt {name} are strings, and {', '.join(strings[:5])} is not"
            )
        unknown = [str(key)[:40] for key in given if key not in takes]
        missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in given]
        if unknown:
            only = f"only {', '.join(takes)}" if takes else "no arguments"
            raise MCPError(INVALID_PARAMS, f"prompt {name} takes {only}, not {', '.join(unknown[:5])}")
        if missing:
            raise MCPError(INVALID_PARAMS, f"prompt {name} needs the argument(s) {', '.join(missing)}")
        return await call_next(ctx)

    return check


def _tool_arguments_checked(tools: Mapping[str, Tool]) -> ServerMiddleware[Any]:
    """Refuse a ``tools/call`` whose arguments its tool's input schema refuses, as a tool error of
    one sentence naming the argument, what was given and the limit, with the gRPC surface's reason
    for it (host/mcp_arguments.py), where the SDK would answer pydantic's text. An argument the tool
    does not take is refused too, naming it and the tool's arguments: the SDK ignores it without a
    word, so a misspelt ``k`` or ``fast`` would be a call other than the model meant (MemoryHost
    refuses them too), and so is a tool it does not have. No ``arguments`` are {}, as the SDK reads them; arguments that are no object
    are invalid params naming the tool's (the SDK's said "Invalid request parameters"). An argument
    given null is not given, as a null field is on the JSON API and the mem0 paths (``k: null`` is
    the default k, not NUMBER_INVALID)."""

    async def check(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping) or not isinstance(params.get("name"), str):
            return await call_next(ctx)
        name, tool = params["name"], tools.get(params["name"])
        given = {} if params.get("arguments") is None else params["arguments"]  # as the SDK reads none
        if tool is None:  # the SDK's "Unknown tool: x" named neither the tools nor a reason
            return _tool_error(f"no tool {name[:80]!r}: the tools are {', '.join(sorted(tools))} ({ARGUMENTS_INVALID})")
        takes = list(tool.parameters.get("properties", {}))
        if not isinstance(given, Mapping):  # the SDK: "Invalid request parameters", naming nothing
            raise _not_an_object(name, given, takes)
        if isinstance(params, dict) and None in given.values():  # the SDK reads what the call carries
            given = params["arguments"] = {key: value for key, value in given.items() if value is not None}
        unknown = [str(key)[:40] for key in given if key not in takes]
        if unknown:
            return _tool_error(
                f"{name} takes {', '.join(takes) or 'no arguments'}, not {', '.join(unknown[:5])} ({UNKNOWN_ARGUMENT})"
            )
        try:
            tool.fn_metadata.validate_arguments(dict(given))
        except ValidationError as error:
            return _tool_error(mcp_arguments.refusal(name, tool.parameters, error))
        return await call_next(ctx)

    return check


def _not_an_object(what: str, given: object, takes: list[str]) -> MCPError:
    return MCPError(
        INVALID_PARAMS,
        f"the arguments of {what} are one JSON object ({', '.join(takes) or 'no arguments'}), "
        f"not {mcp_arguments.described(given)}",
    )


def _tool_error(sentence: str) -> CallToolResult:
    """The result of a refused tool call: ``isError`` and the one sentence saying why, ending with
    its reason, as the model reads it."""
    return CallToolResult(content=[TextContent(type="text", text=sentence)], is_error=True)


def _tool(fn: Callable[..., Awaitable[str]]) -> Tool:
    """A tool of ``fn``, its input schema declaring that it takes no other argument
    (``additionalProperties: false``), as _tool_arguments_checked holds it to. A refusal (a
    ``ToolError``: the service's, or a write's) is its sentence alone: the SDK would answer it as
    "Error executing tool NAME: ...", unlike the refusal of an argument, and of no other surface.
    So is a crash, the gRPC surface's INTERNAL sentence (its traceback in this process's log): the
    SDK's answer to one is a bare "Error executing tool NAME"."""

    @functools.wraps(fn)
    async def refusing(*args: Any, **kwargs: Any) -> str | CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except ToolError as refused:
            return _tool_error(str(refused))
        except MCPError:
            raise  # a protocol error, as the SDK answers it
        except Exception:  # noqa: BLE001 - a crash is answered, its details stay in the log
            log.exception("the MCP tool %s failed", fn.__name__)
            return _tool_error(
                f"{fn.__name__} failed with an internal error; the memory server's log has the details (INTERNAL)"
            )

    tool = Tool.from_function(refusing)
    tool.parameters["additionalProperties"] = False
    return tool


def build_server(session_of: Callable[[Context[Any, Any]], ToolSession], *, sessions_only: bool = False) -> MCPServer:
    """The memory tools, resource and prompt; ``session_of`` gives a call's session.
    ``sessions_only`` (HTTP): refuse the stateless protocol, whose requests belong to no session."""

    def reading(s: ToolSession, query: str, k: int) -> Flow[str]:
        return host_protocol.read_memory(s.observations, s.agent, s.tenant, s.workspace, query or None, k)

    async def read(ctx: Context[Any, Any], query: str, k: int, token: str = "") -> str:
        s = session_of(ctx).carrying(token, [])
        return await s.run(reading(s, query, k))

    async def read_memory(
        ctx: Context[Any, Any], query: Query = "", k: ReadK = 0, consistency_token: ConsistencyToken = ""
    ) -> str:
        """Read your memory: the global memory document MEMORY.md, the current workspace's records and,
        when you give a query, up to k memories recalled for it. Call it before you change MEMORY.md or
        workspace records, and again whenever a write tells you memory changed since you read it."""
        return await read(ctx, query, k, consistency_token)

    tools = [_tool(fn) for fn in (read_memory, *_memory_tools(session_of), *_queue_tools(session_of))]
    server = MCPServer(
        "mnemosyne-memory",
        instructions=INSTRUCTIONS,
        tools=tools,
        middleware=[_sessions_only] if sessions_only else [],
    )
    server.middleware.extend(
        [_params_checked, _prompt_checked(server), _tool_arguments_checked({tool.name: tool for tool in tools})]
    )

    # A resource or a prompt has no error result: a refusal is a JSON-RPC error (_refusal), not the
    # SDK's crash (code 0 for a prompt; for a resource -32603, "Error reading resource" and a traceback).
    @server.resource(CONTEXT_URI, name="memory-context", mime_type="text/markdown")
    async def context_resource(workspace: str, ctx: Context[Any, Any]) -> str:
        """Your memory context: MEMORY.md and the workspace's records, as read_memory shows them."""
        s = session_of(ctx)
        if workspace != s.workspace:
            raise MCPError(
                INVALID_PARAMS,
                f"this session works on workspace {s.workspace!r}, not {workspace[:80]!r}: "
                f"read memory://context/{s.workspace}",
            )
        try:
            return await run_async(reading(s, "", 0), s.calls)
        except ServiceError as error:
            raise _refusal(error) from None

    @server.prompt(name="memory_context")
    async def context_prompt(ctx: Context[Any, Any], query: str = "") -> str:
        """Your memory context as a prompt, with memories recalled for an optional query."""
        s = session_of(ctx)
        try:
            return await run_async(reading(s, query, 0), s.calls)
        except ServiceError as error:
            raise _refusal(error) from None

    return server


def _refusal(error: ServiceError) -> MCPError:
    """A service's refusal as a JSON-RPC error: invalid params for INVALID_ARGUMENT, else an
    internal error, each with the service's message and reason."""
    code = INVALID_PARAMS if error.code_name == "INVALID_ARGUMENT" else INTERNAL_ERROR
    return MCPError(code, f"{error.message} ({error.reason})")


def _memory_tools(session_of: Callable[[Context[Any, Any]], ToolSession]) -> list[Callable[..., Awaitable[str]]]:
    """retain, recall, memory_update, update_workspace."""

    async def retain(
        ctx: Context[Any, Any], text: Text, fast: StrictBool = False, consistency_token: ConsistencyToken = ""
    ) -> str:
        """Remember a fact, decision or event for later: one self-contained statement. With fast, it is
        queued and saved shortly after (use get_event_status or flush to see it done, or pass the
        consistency_token it answers to recall or read_memory)."""
        answered: list[str] = []
        s = session_of(ctx).carrying(consistency_token, answered)
        request = memory_pb2.RetainRequest(
            tenant=s.tenant, text=text, scope="global", request_id=uuid.uuid4().hex, fast=fast
        )
        response: memory_pb2.RetainResponse = await s.ask(RETAIN, request)
        return _with_token(_retained(response.result), answered)

    async def recall(
        ctx: Context[Any, Any], query: Question, k: RecallK = 0, consistency_token: ConsistencyToken = ""
    ) -> str:
        """Find up to k memories relevant to a question or topic, best first."""
        s = session_of(ctx)
        request = memory_pb2.RecallRequest(
            tenant=s.tenant, query=query, k=k, mode=memory_pb2.RECALL_MODE_HYBRID, consistency_token=consistency_token
        )
        response: memory_pb2.RecallResponse = await s.ask(RECALL, request)
        if not response.hits:
            return "No memories found."
        return "\n".join(f"- [memory {hit.memory.id}] {hit.memory.text}" for hit in response.hits)

    async def memory_update(ctx: Context[Any, Any], content: Content) -> str:
        """Replace the global memory document MEMORY.md that read_memory showed you with new complete
        content. It replaces the whole document, so include everything that should remain."""
        answered: list[str] = []
        s = session_of(ctx).carrying("", answered)
        flow = write_memory(s.observations, s.agent, s.tenant, MEMORY_UPDATE, {"content": content})
        return _written(await s.run(flow), answered)

    async def update_workspace(ctx: Context[Any, Any], changes: list[RecordChange]) -> str:
        """Create, replace or delete records of the current workspace that read_memory showed you. All
        changes of one call are applied together, or none is."""
        answered: list[str] = []
        s = session_of(ctx).carrying("", answered)
        arguments = {"changes": [change.model_dump(exclude_none=True) for change in changes]}
        return _written(
            await s.run(write_memory(s.observations, s.agent, s.tenant, UPDATE_WORKSPACE, arguments)), answered
        )

    return [retain, recall, memory_update, update_workspace]


def _queue_tools(session_of: Callable[[Context[Any, Any]], ToolSession]) -> list[Callable[..., Awaitable[str]]]:
    """get_event_status, list_events, flush: the queued writes of the tenant's hot path."""

    async def get_event_status(ctx: Context[Any, Any], event_id: EventId) -> str:
        """The state of a queued write (pending, running, succeeded or failed) and what it created."""
        s = session_of(ctx)
        event: events_pb2.Event = await s.ask(GET_EVENT, events_pb2.GetEventRequest(tenant=s.tenant, event_id=event_id))
        return json.dumps(_event(event))

    async def list_events(
        ctx: Context[Any, Any],
        status: Literal["", "pending", "running", "succeeded", "failed"] = "",
        page_size: PageSize = 0,
    ) -> str:
        """Recent queued writes, oldest first, optionally only those with one status."""
        s = session_of(ctx)
        request = events_pb2.ListEventsRequest(tenant=s.tenant, status=status.upper() or None, page_size=page_size)
        page: events_pb2.ListEventsResponse = await s.ask(LIST_EVENTS, request)
        return json.dumps([_event(event) for event in page.events])

    async def flush(ctx: Context[Any, Any], timeout_seconds: WaitSeconds = 30.0) -> str:
        """Wait until every queued write so far is saved (at most timeout_seconds), then say how it went."""
        s = session_of(ctx)
        request = hot_path_pb2.FlushRequest(tenant=s.tenant, timeout_seconds=timeout_seconds)
        result: hot_path_pb2.FlushResponse = await s.ask(FLUSH, request, wait_seconds=server_wait(timeout_seconds))
        failed = f"; failed events: {list(result.failed_event_ids)}" if result.failed_event_ids else ""
        return f"{result.flushed} queued write(s) finished: {result.succeeded} saved, {result.failed} failed{failed}."

    return [get_event_status, list_events, flush]
