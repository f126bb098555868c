"""``MemoryHost``: the agent-runtime side of host-owned generations (the agent-memory design, docs/seed-mapping.md).

The model expresses memory intent (``memory_update``, ``update_workspace``) and never sees or
carries a revision. The host keeps, per live Agent object, the exact Global and Workspace
generations it observed when it assembled that agent's context (``HostObservations``), sends
them as request metadata with each tool call, and lets the server reject a stale write.

Rules (docs/host-protocol.md states them for hosts in any language):

* an observation exists only after ``assemble_context`` for that agent object; a new or resumed
  agent must assemble before it can write;
* a tool call reads the agent's observation ONCE, at entry, and sends exactly that value;
* on success the observation advances by compare-and-set from the value that call read, so a
  concurrent call whose content came from the old snapshot is never carried forward;
* the host never reads the latest generation to retry: a stale call returns an ``error`` the
  model can read, and the fix is to assemble context again;
* tool results and errors never contain a generation.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mnemosyne.client import types
from mnemosyne.client.errors import (
    AbortedError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
)
from mnemosyne.client.memory_client import MemoryClient, new_request_id

MEMORY_UPDATE = "memory_update"
UPDATE_WORKSPACE = "update_workspace"

# Reasons in tool results are for the host's code and visible to the model, so they name the
# situation, not the mechanism (no "generation" word that would send a model hunting for one).
STALE_REASON = "STALE_CONTEXT"
MISSING_REASON = "CONTEXT_NOT_ASSEMBLED"
STALE_MESSAGE = "memory changed since your context was assembled; assemble context again"
MISSING_MESSAGE = (
    "no memory context has been assembled for this agent yet; assemble context again before writing memory"
)
UNAVAILABLE_MESSAGE = (
    "the memory service did not answer, so this change may not have been saved; assemble context again "
    "and check before repeating it"
)

_PARAMETERS: dict[str, dict[str, Any]] = {
    MEMORY_UPDATE: {
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "description": "The complete new text of the global memory document MEMORY.md. It replaces the "
                "whole document, so include everything that should remain.",
            }
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    UPDATE_WORKSPACE: {
        "type": "object",
        "properties": {
            "changes": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100,
                "description": "Changes applied together, all or nothing.",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {
                            "type": "string",
                            "enum": ["put", "delete"],
                            "description": "put: create or replace the record; delete: remove it.",
                        },
                        "key": {
                            "type": "string",
                            "description": "Record name, a relative path such as plan.md or notes/plan.md.",
                        },
                        "content": {"type": "string", "description": "The complete new text of the record (put only)."},
                    },
                    "required": ["op", "key"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["changes"],
        "additionalProperties": False,
    },
}
_DESCRIPTIONS = {
    MEMORY_UPDATE: "Replace the global memory document (MEMORY.md) shown in your context with new complete content.",
    UPDATE_WORKSPACE: "Create, replace or delete records of the current workspace shown in your context. "
    "All changes of one call are applied together.",
}


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
        with self._lock:
            entry = self._entries.get(id(agent))
            return entry[1] if entry is not None and entry[0]() is agent else None

    def forget(self, agent: object) -> None:
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


class _ModelError(Exception):
    """Arguments from the model that cannot be sent: becomes an ``error`` result, not an exception."""


def _error(message: str, reason: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "reason": reason}


class MemoryHost:
    """Memory tools for the agents of one tenant.

    ``observations`` may be shared between hosts of one process (it is thread-safe); by default
    each host has its own, so a new ``MemoryHost`` — a resumed agent — has observed nothing.
    """

    def __init__(self, client: MemoryClient, tenant: str, *, observations: HostObservations | None = None) -> None:
        self.client = client
        self.tenant = tenant
        self.observations = observations if observations is not None else HostObservations()

    # -- context --------------------------------------------------------------------------------

    def assemble_context(self, agent: object, workspace: str, query: str | None = None, k: int = 5) -> str:
        """The memory part of the agent's prompt; records the generations it was read at."""
        assembled = self.client.assemble_context(self.tenant, workspace, query, k)
        self.observations.record(
            agent, Observation(assembled.global_generation, workspace, assembled.workspace_generation)
        )
        return render_context(assembled, workspace)

    # -- tools ----------------------------------------------------------------------------------

    @staticmethod
    def tool_schemas(format: str = "openai") -> list[dict[str, Any]]:
        """Function-calling schemas of the memory tools: ``openai`` (Chat Completions ``tools``)
        or ``anthropic`` (Messages API ``tools``). No revision, generation, hash or etag field."""
        names = (MEMORY_UPDATE, UPDATE_WORKSPACE)
        if format == "openai":
            return [
                {
                    "type": "function",
                    "function": {"name": n, "description": _DESCRIPTIONS[n], "parameters": _PARAMETERS[n]},
                }
                for n in names
            ]
        if format == "anthropic":
            return [{"name": n, "description": _DESCRIPTIONS[n], "input_schema": _PARAMETERS[n]} for n in names]
        raise ValueError(f"format must be 'openai' or 'anthropic', not {format!r}")

    def call_tool(self, agent: object, name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run one model tool call. Returns ``{"ok": True, ...}`` or ``{"ok": False, "error": ...,
        "reason": ...}``; never a generation, never an exception for what the model sent."""
        observation = self.observations.read(agent)  # once, at entry: this call's precondition
        try:
            parsed = _parse_arguments(name, arguments)
        except _ModelError as exc:
            return _error(str(exc), "ARGUMENTS_INVALID")
        if observation is None:
            return _error(MISSING_MESSAGE, MISSING_REASON)
        request_id = new_request_id()  # fresh per tool call: a transport retry replays, never re-applies
        try:
            if name == MEMORY_UPDATE:
                new = self.client.update_global(
                    self.tenant, parsed, observed_generation=observation.global_generation, request_id=request_id
                )
                self.observations.advance(agent, observation, scope="global", new_generation=new)
                return {"ok": True, "result": "MEMORY.md was replaced."}
            new = self.client.update_workspace(
                self.tenant,
                observation.workspace,
                parsed,
                observed_generation=observation.workspace_generation,
                request_id=request_id,
            )
            self.observations.advance(agent, observation, scope="workspace", new_generation=new)
            return {"ok": True, "result": f"{len(parsed)} change(s) applied to workspace {observation.workspace}."}
        except AbortedError as exc:
            if exc.reason == "GENERATION_MISMATCH":
                return _error(STALE_MESSAGE, STALE_REASON)
            raise
        except FailedPreconditionError as exc:
            if exc.reason == "OBSERVATION_MISSING":
                return _error(MISSING_MESSAGE, MISSING_REASON)
            raise
        except (InvalidArgumentError, NotFoundError, ResourceExhaustedError) as exc:
            # The server's message is about the model's arguments (a key, a size); it names no generation.
            return _error(exc.message, exc.reason)
        except (UnavailableError, DeadlineExceededError):
            return _error(UNAVAILABLE_MESSAGE, "MEMORY_UNAVAILABLE")


def _parse_arguments(name: str, arguments: Mapping[str, Any] | str | None) -> Any:
    if name not in _PARAMETERS:
        raise _ModelError(
            f"unknown tool {str(name)[:80]!r}; the memory tools are {MEMORY_UPDATE} and {UPDATE_WORKSPACE}"
        )
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise _ModelError(f"the arguments of {name} are not valid JSON") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise _ModelError(f"the arguments of {name} must be a JSON object")
    allowed = set(_PARAMETERS[name]["properties"])
    # Unknown names are not echoed back: the reply names only what the tool takes.
    if any(k not in allowed for k in arguments):
        raise _ModelError(f"{name} takes exactly one argument, {', '.join(sorted(allowed))}, and nothing else")
    if name == MEMORY_UPDATE:
        content = arguments.get("content")
        if not isinstance(content, str):
            raise _ModelError("memory_update needs content: the complete new text of MEMORY.md, as a string")
        return content
    changes = arguments.get("changes")
    if not isinstance(changes, list) or not changes:
        raise _ModelError(
            'update_workspace needs changes: a non-empty list like [{"op": "put", "key": "plan.md", "content": "..."}]'
        )
    parsed = []
    for position, change in enumerate(changes):
        if not isinstance(change, Mapping):
            raise _ModelError(f"change {position} must be an object with op, key and (for put) content")
        op, key, content = change.get("op"), change.get("key"), change.get("content", "")
        if any(k not in ("op", "key", "content") for k in change):
            raise _ModelError(f"change {position} may only have op, key and content")
        if op not in ("put", "delete"):
            raise _ModelError(f'change {position}: op must be "put" or "delete"')
        if not isinstance(key, str) or not key:
            raise _ModelError(f"change {position}: key must be a record name such as plan.md")
        if not isinstance(content, str) or (op == "put" and "content" not in change):
            raise _ModelError(f"change {position}: a put needs content, the complete text of the record, as a string")
        if op == "delete" and content:
            raise _ModelError(f"change {position}: a delete takes no content")
        parsed.append(types.RecordChange(op, key, content if op == "put" else ""))
    return parsed


def render_context(assembled: types.AssembledContext, workspace: str) -> str:
    """Prompt text of an assembly: records and memories only (no generation, by construction)."""
    lines = ["# Global memory"]
    lines += _render_records(assembled.global_records)
    lines += ["", f"# Workspace {workspace}"]
    lines += _render_records(assembled.workspace_records)
    if assembled.memories:
        lines += ["", "# Recalled memories"]
        lines += [f"- {h.memory.text}" for h in assembled.memories]
    return "\n".join(lines) + "\n"


def _render_records(records: list[types.Record]) -> list[str]:
    if not records:
        return ["(empty)"]
    lines: list[str] = []
    for record in records:
        lines += ["", f"## {record.key}", record.content.rstrip("\n")]
    return lines


__all__ = ["HostObservations", "MemoryHost", "Observation", "render_context"]
