"""What a host of Mnemosyne does, written once for every host in this repository: the Python
client (``MemoryHost``, ``mnemosyne mcp``: client/) and the server's MCP endpoint
(transport/http/mcp.py). It imports only the generated protos, so both may import it (the import
contracts in pyproject.toml: the client never imports the server, nor the server the client).

* the metadata keys of host-owned generations (docs/host-protocol.md);
* observations: per live agent object, the generations it saw (``HostObservations``);
* host flows: what a host asks of the service, as generators of the calls they make (``Ask``,
  answered by an ``Answer`` or a ``ServiceError``), so that the logic is written once whatever
  carries the calls: the client's blocking gRPC (``run``) or the server's event loop, in process
  (``run_async``);
* the model's writes (``write_memory``): its arguments read by host/model_tools.py, which has its
  tool table for function calling too.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from mnemosyne.host.model_tools import ArgumentsInvalid, parse_arguments
from mnemosyne.v1 import memory_pb2, workspace_pb2

T = TypeVar("T")

# -- the server's default limits, as the model's tool tables show them --------------------------

# Each tool's input schema carries them (minimum, maximum, maxLength), so the model sees them, and
# an argument outside them is refused before any call, naming the argument and its limit. A
# server configured with other limits refuses by its own, naming them. tests/test_mcp_tool_errors.py
# checks them against engine/limits.py, which this module cannot import.
MAX_K = 100  # Limits.max_k
MAX_PAGE_SIZE = 1_000  # Limits.max_page_size
MAX_EVENT_ID = 2**63 - 1  # an event id is an int64
MAX_GENERATION = 2**63 - 1  # a generation is an int64
MAX_TEXT_CHARS = 32_768  # Limits.max_text_chars
MAX_QUERY_CHARS = 4_096  # Limits.max_query_chars
MAX_RECORD_CHARS = 262_144  # Limits.max_record_bytes: a record has at most that many characters
MAX_KEY_CHARS = 256  # engine/workspace.py MAX_KEY_CHARS
MAX_WAIT_SECONDS = 3600.0  # engine/limits.py MAX_WAIT_SECONDS: the longest a flush waits


def usable_query(text: str | None) -> str | None:
    """A person's words (a user's message, a store's search) as a query every surface sends: no
    NUL and no half surrogate pairs (no request carries them), its last MAX_QUERY_CHARS characters
    (a question often ends a long message); None for no text. The server may still refuse it
    (QUERY_EMPTY for only white space, a shorter --max-query-chars): the caller then does without."""
    if text is None:
        return None
    text = text.replace("\x00", " ").encode("utf-8", errors="ignore").decode("utf-8")
    return text[-MAX_QUERY_CHARS:] or None


def server_wait(timeout_seconds: float) -> float:
    """How long a waiting call (Flush, Disable) asked to wait ``timeout_seconds`` may wait on the
    server, which a call's own deadline must outlast: 0 (and NaN, which compares false) is 30."""
    return timeout_seconds if 0 < timeout_seconds <= MAX_WAIT_SECONDS else 30.0


# -- the metadata of host-owned generations (docs/host-protocol.md) -----------------------------

# A write's consistency token (its response's trailing metadata), and a call's (its request's):
# docs/hot-path.md "Read your own writes".
CONSISTENCY_TOKEN_KEY = "mnemosyne-consistency-token"
GLOBAL_GENERATION_KEY = "mnemosyne-global-generation"
WORKSPACE_GENERATION_KEY = "mnemosyne-workspace-generation"

# -- observations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What one agent saw at assembly: host-only, never shown to the model."""

    global_generation: int
    workspace: str
    workspace_generation: int


class HostObservations:
    """Live Agent object → Observation, held weakly and thread-safely.

    Keyed by the object's identity (not ``__eq__``/``__hash__``), so two equal-looking agents never
    share an observation; the entry disappears when the agent is garbage collected.
    """

    def __init__(self) -> None:
        # Re-entrant: a garbage collection inside a locked section may run an agent's removal
        # callback on this same thread (it only ever removes that dead agent's own entry).
        self._lock = threading.RLock()
        self._entries: dict[int, tuple[weakref.ref[Any], Observation]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def record(self, agent: object, observation: Observation) -> None:
        """Store the observation of a fresh assembly (replaces any older one)."""
        key = id(agent)

        def gone(ref: weakref.ref[Any], key: int = key) -> None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry[0] is ref:
                    del self._entries[key]

        try:
            ref = weakref.ref(agent, gone)
        except TypeError:
            raise TypeError(
                f"an agent must be an object that supports weak references, not {type(agent).__name__}"
            ) from None
        with self._lock:
            self._entries[key] = (ref, observation)

    def read(self, agent: object) -> Observation | None:
        """``agent``'s observation, or None before its first assembly (or after ``forget``)."""
        with self._lock:
            entry = self._entries.get(id(agent))
            return entry[1] if entry is not None and entry[0]() is agent else None

    def forget(self, agent: object) -> None:
        """Drop ``agent``'s observation: its next write needs a new assembly."""
        with self._lock:
            entry = self._entries.get(id(agent))
            if entry is not None and entry[0]() is agent:
                del self._entries[id(agent)]

    def advance(self, agent: object, read: Observation, *, scope: str, new_generation: int) -> bool:
        """Compare-and-set after a successful write of ``scope`` ("global" or "workspace"): set that
        scope's generation to ``new_generation`` only if the agent's observation of that scope is
        still the one ``read`` at the tool call's entry. False, and nothing changed, otherwise
        (a concurrent call or a reassembly replaced it; never move it backwards or sideways)."""
        with self._lock:
            entry = self._entries.get(id(agent))
            if entry is None or entry[0]() is not agent:
                return False
            current = entry[1]
            if scope == "global":
                if current.global_generation != read.global_generation:
                    return False
                updated = replace(current, global_generation=new_generation)
            else:
                if (current.workspace, current.workspace_generation) != (read.workspace, read.workspace_generation):
                    return False
                updated = replace(current, workspace_generation=new_generation)
            self._entries[id(agent)] = (entry[0], updated)
            return True


# -- the calls of a host flow, and how a transport runs them ------------------------------------


class ServiceError(Exception):
    """A call the service refused, or that failed on the way, as a host reads it: ``code_name``
    the gRPC status code's name (``ABORTED``), ``reason`` the ErrorInfo reason
    (``GENERATION_MISMATCH``), ``message`` the server's words. The client's errors are of this
    kind (client/errors.py); the server's MCP endpoint raises it for a refusal in process."""

    def __init__(self, code_name: str, reason: str, message: str, metadata: Mapping[str, str] | None = None) -> None:
        # A transport failure carries no ErrorInfo and its reason is the code's name: said once.
        heading = code_name if reason == code_name else f"{code_name} {reason}"
        super().__init__(f"{heading}: {message}")
        self.code_name = code_name
        self.reason = reason
        self.message = message
        self.metadata = dict(metadata or {})


@dataclass(frozen=True)
class Ask:
    """One call a flow makes: the RPC (``/mnemosyne.v1.WorkspaceService/AssembleContext``), its
    request, the metadata it sends besides the caller's token, and how long it may wait on the
    server (a flush: the call's deadline must outlast it)."""

    method: str
    request: Any
    metadata: tuple[tuple[str, str], ...] = ()
    wait_seconds: float = 0.0


@dataclass(frozen=True)
class Answer:
    """The response to an ``Ask``, with the response's metadata (initial, then trailing)."""

    response: Any
    initial_metadata: Sequence[tuple[str, str]] = ()
    trailing_metadata: Sequence[tuple[str, str]] = ()


# A host flow: yields each call it makes, is sent its answer (or thrown its ServiceError), returns
# its result.
Flow = Generator[Ask, Answer, T]

_WORKSPACE = "/mnemosyne.v1.WorkspaceService/"
ASSEMBLE_CONTEXT = _WORKSPACE + "AssembleContext"
GET_RECORD = _WORKSPACE + "GetRecord"
UPDATE_GLOBAL = _WORKSPACE + "UpdateGlobal"
UPDATE_WORKSPACE_METHOD = _WORKSPACE + "UpdateWorkspace"


async def run_async(flow: Flow[T], call: Callable[[Ask], Awaitable[Answer]]) -> T:
    """Run a flow on an event loop, making its calls with ``call`` (the server's, in process)."""
    try:
        ask = next(flow)
        while True:
            try:
                answer = await call(ask)
            except ServiceError as error:
                ask = flow.throw(error)
            else:
                ask = flow.send(answer)
    except StopIteration as finished:
        result: T = finished.value
        return result


def run(flow: Flow[T], call: Callable[[Ask], Answer]) -> T:
    """Run a flow, making its calls with ``call``, which blocks (the client's gRPC): the same
    driver, whose coroutine never suspends, so that one send runs it to its end."""

    async def answered(ask: Ask) -> Answer:
        return call(ask)

    driver = run_async(flow, answered)
    try:
        driver.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    driver.close()
    raise RuntimeError("a blocking call of a host flow suspended")


def generation_from(metadata: Sequence[tuple[str, str | bytes]] | None, key: str) -> int:
    """The decimal generation under ``key`` (an int64, as the server keeps it); a reply without it
    is a server fault (fail closed)."""
    values = [v for k, v in metadata or () if k == key]
    if (
        len(values) != 1
        or not isinstance(values[0], str)
        or not values[0].isascii()
        or not values[0].isdigit()
        or int(values[0]) > MAX_GENERATION
    ):
        raise ServiceError(
            "INTERNAL",
            "GENERATION_METADATA_INVALID",
            f"the server's reply did not carry exactly one decimal {key!r} metadata value",
        )
    return int(values[0])


# -- assembling context -------------------------------------------------------------------------


@dataclass
class Assembly:
    """An assembled context: the records of Global and of the workspace, complete, and the
    recalled memories, with the generations they were read at (host-only: never shown to a model)."""

    global_records: list[workspace_pb2.Record]
    workspace_records: list[workspace_pb2.Record]
    memories: Sequence[memory_pb2.RecallHit]
    global_generation: int
    workspace_generation: int
    # Recalled memories the server left out to keep its response under ~3 MiB (GetMemory each).
    omitted_memory_ids: tuple[int, ...] = ()


def assemble(tenant: str, workspace: str, query: str | None = None, k: int = 0) -> Flow[Assembly]:
    """Records of Global and ``workspace`` (and memories recalled for ``query``), with the exact
    generations read in the same snapshot (from the response metadata). ``k`` 0 is the server's
    default (5, or its --max-k when lower): a host never sends a number of its own the server's
    lower limit would refuse.

    Records the server left out to keep its response small (``omitted_records``) are fetched one
    by one and must carry the same generation; if one changed meanwhile, the context is assembled
    again (up to three times), so records and generations always belong together."""
    request = workspace_pb2.AssembleContextRequest(tenant=tenant, workspace=workspace, query=query or "", k=k)
    for _attempt in range(3):
        answer = yield Ask(ASSEMBLE_CONTEXT, request)
        response: workspace_pb2.AssembleContextResponse = answer.response
        generations = {
            "global": generation_from(answer.initial_metadata, GLOBAL_GENERATION_KEY),
            f"workspace/{workspace}": generation_from(answer.initial_metadata, WORKSPACE_GENERATION_KEY),
        }
        records = {"global": list(response.global_records), f"workspace/{workspace}": list(response.workspace_records)}
        if (yield from _complete_records(tenant, response.omitted_records, generations, records)):
            return Assembly(
                global_records=records["global"],
                workspace_records=records[f"workspace/{workspace}"],
                memories=response.memories,
                global_generation=generations["global"],
                workspace_generation=generations[f"workspace/{workspace}"],
                omitted_memory_ids=tuple(response.omitted_memory_ids),
            )
    raise ServiceError(
        "ABORTED", "RECORDS_CHANGED", "the records kept changing while their context was assembled; assemble it again"
    )


def _complete_records(
    tenant: str,
    omitted: Sequence[workspace_pb2.OmittedRecord],
    generations: Mapping[str, int],
    records: dict[str, list[workspace_pb2.Record]],
) -> Flow[bool]:
    """Fetch the records an assembly left out into ``records``; False if one was read at another
    generation than the assembly's (it changed meanwhile)."""
    for o in omitted:
        try:
            answer = yield Ask(GET_RECORD, workspace_pb2.GetRecordRequest(tenant=tenant, scope=o.scope, key=o.key))
        except ServiceError as error:
            if error.code_name == "NOT_FOUND":
                return False  # deleted since the assembly
            raise
        if answer.response.generation != generations[o.scope]:
            return False
        records[o.scope].append(answer.response.record)
    for scoped in records.values():
        scoped.sort(key=lambda r: r.key.encode("utf-8"))  # the server's order (SQLite's binary collation)
    return True


def read_memory(
    observations: HostObservations, agent: object, tenant: str, workspace: str, query: str | None = None, k: int = 0
) -> Flow[str]:
    """The memory part of the agent's prompt; records the generations it was read at."""
    assembled = yield from assemble(tenant, workspace, query, k)
    observations.record(agent, Observation(assembled.global_generation, workspace, assembled.workspace_generation))
    return render_context(assembled, workspace)


class _Record(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def content(self) -> str: ...


class _Text(Protocol):
    @property
    def text(self) -> str: ...


class _Recalled(Protocol):
    @property
    def memory(self) -> _Text: ...


class Assembled(Protocol):
    """What a prompt shows of an assembly (an ``Assembly``, or the client's ``AssembledContext``)."""

    @property
    def global_records(self) -> Sequence[_Record]: ...
    @property
    def workspace_records(self) -> Sequence[_Record]: ...
    @property
    def memories(self) -> Sequence[_Recalled]: ...


def render_context(assembled: Assembled, workspace: str) -> str:
    """Prompt text of an assembly: records and memories only (no generation, by construction)."""
    lines = ["# Global memory"]
    lines += _render_records(assembled.global_records)
    lines += ["", f"# Workspace {workspace}"]
    lines += _render_records(assembled.workspace_records)
    if assembled.memories:
        lines += ["", "# Recalled memories"]
        lines += [f"- {h.memory.text}" for h in assembled.memories]
    return "\n".join(lines) + "\n"


def _render_records(records: Sequence[_Record]) -> list[str]:
    if not records:
        return ["(empty)"]
    lines: list[str] = []
    for record in records:
        lines += ["", f"## {record.key}", record.content.rstrip("\n")]
    return lines


# -- the model's writes: memory_update and update_workspace -------------------------------------

# Reasons in tool results are for the host's code and visible to the model, so they name the
# situation, not the mechanism (no "generation" word that would send a model hunting for one).
STALE_REASON = "STALE_CONTEXT"
MISSING_REASON = "CONTEXT_NOT_ASSEMBLED"
UNAVAILABLE_REASON = "MEMORY_UNAVAILABLE"
STALE_MESSAGE = "memory changed since your context was assembled; assemble context again"
MISSING_MESSAGE = (
    "no memory context has been assembled for this agent yet; assemble context again before writing memory"
)
UNAVAILABLE_MESSAGE = (
    "the memory service did not answer, so this change may not have been saved; assemble context again "
    "and check before repeating it"
)
# Refusals whose message is about the model's arguments (a key, a size); it names no generation.
_ABOUT_THE_ARGUMENTS = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
_UNANSWERED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def write_memory(
    observations: HostObservations, agent: object, tenant: str, name: str, arguments: Mapping[str, Any] | str | None
) -> Flow[dict[str, Any]]:
    """Run one model tool call. Returns ``{"ok": True, ...}`` or ``{"ok": False, "error": ...,
    "reason": ...}``; never a generation, never an exception for what the model sent (a refusal
    that is not the model's to read, such as a forbidden tenant, is raised)."""
    observation = observations.read(agent)  # once, at entry: this call's precondition
    try:
        parsed = parse_arguments(name, arguments)
    except ArgumentsInvalid as exc:
        return _error(str(exc), exc.reason)
    if observation is None:
        return _error(MISSING_MESSAGE, MISSING_REASON)
    request_id = uuid.uuid4().hex  # fresh per tool call: a transport retry replays, never re-applies
    try:
        if isinstance(parsed, str):
            request: Any = workspace_pb2.UpdateGlobalRequest(tenant=tenant, content=parsed, request_id=request_id)
            observed = (GLOBAL_GENERATION_KEY, str(observation.global_generation))
            answer = yield Ask(UPDATE_GLOBAL, request, (observed,))
            new = generation_from(answer.trailing_metadata, GLOBAL_GENERATION_KEY)
            observations.advance(agent, observation, scope="global", new_generation=new)
            return {"ok": True, "result": "MEMORY.md was replaced."}
        request = workspace_pb2.UpdateWorkspaceRequest(
            tenant=tenant, workspace=observation.workspace, changes=parsed, request_id=request_id
        )
        observed = (WORKSPACE_GENERATION_KEY, str(observation.workspace_generation))
        answer = yield Ask(UPDATE_WORKSPACE_METHOD, request, (observed,))
        new = generation_from(answer.trailing_metadata, WORKSPACE_GENERATION_KEY)
        observations.advance(agent, observation, scope="workspace", new_generation=new)
        return {"ok": True, "result": f"{len(parsed)} change(s) applied to workspace {observation.workspace}."}
    except ServiceError as exc:
        return _refusal(exc)


def _refusal(exc: ServiceError) -> dict[str, Any]:
    """The result a refused write answers the model with; raises what is not the model's to read."""
    if exc.code_name == "ABORTED" and exc.reason == "GENERATION_MISMATCH":
        return _error(STALE_MESSAGE, STALE_REASON)
    if exc.code_name == "FAILED_PRECONDITION" and exc.reason == "OBSERVATION_MISSING":
        return _error(MISSING_MESSAGE, MISSING_REASON)
    if exc.code_name in _ABOUT_THE_ARGUMENTS:
        return _error(exc.message, exc.reason)
    if exc.code_name in _UNANSWERED:
        return _error(UNAVAILABLE_MESSAGE, UNAVAILABLE_REASON)
    raise exc


def _error(message: str, reason: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "reason": reason}
