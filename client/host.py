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

from collections.abc import Mapping
from typing import Any

from mnemosyne.client.memory_client import MemoryClient
from mnemosyne.client.unsendable import refusing_unsendable
from mnemosyne.host import model_tools
from mnemosyne.host import protocol as host_protocol
from mnemosyne.host.protocol import HostObservations, Observation, render_context


@refusing_unsendable  # an argument no request can carry is the client's refusal, as MemoryClient's
class MemoryHost:
    """Memory tools for the agents of one tenant: ``client`` makes the calls, ``tenant`` is whose
    memory they read and write.

    ``observations`` may be shared between hosts of one process (it is thread-safe); by default
    each host has its own, so a new ``MemoryHost`` — a resumed agent — has observed nothing.
    The flows are the shared host module's (host/protocol.py), which the server's MCP endpoint
    runs too; here their calls are the client's (``MemoryClient.ask``).
    """

    def __init__(self, client: MemoryClient, tenant: str, *, observations: HostObservations | None = None) -> None:
        self.client = client
        self.tenant = tenant
        self.observations = observations if observations is not None else HostObservations()

    # -- context --------------------------------------------------------------------------------

    def assemble_context(
        self,
        agent: object,
        workspace: str,
        query: str | None = None,
        k: int = 0,
        *,
        consistency_token: str | None = None,
    ) -> str:
        """The memory part of ``agent``'s prompt: the Global records, ``workspace``'s records and,
        for ``query``, the ``k`` most relevant memories (0: the server's default), as text for the model (no generation in
        it). Records the generations it was read at as ``agent``'s observation (``agent`` is the
        live object of one agent: its tool calls write against what it last read). It waits for
        the client's own writes of the tenant still queued (the client's session consistency;
        ``consistency_token``: as for ``MemoryClient.recall``). Raises the client's errors
        (``InvalidArgumentError`` WORKSPACE_INVALID, the token's, the server's unavailability)."""
        flow = host_protocol.read_memory(self.observations, agent, self.tenant, workspace, query, k)
        return self.client.run(flow, consistency_token=consistency_token)

    # -- tools ----------------------------------------------------------------------------------

    @staticmethod
    def tool_schemas(format: str = "openai") -> list[dict[str, Any]]:
        """Function-calling schemas of the memory tools: ``openai`` (Chat Completions ``tools``)
        or ``anthropic`` (Messages API ``tools``). No revision, generation, hash or etag field."""
        return model_tools.tool_schemas(format)

    def call_tool(self, agent: object, name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run one model tool call for ``agent``: ``name`` "memory_update" or "update_workspace"
        (``tool_schemas`` describes them), ``arguments`` as the model sent them (a mapping or its
        JSON text). Writes against the generations ``agent`` last read (``assemble_context``).

        Returns ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": ..., "reason": ...}``
        for the model to read: ARGUMENTS_INVALID, CONTEXT_NOT_ASSEMBLED (assemble first),
        STALE_CONTEXT (another write came first: assemble again), MEMORY_UNAVAILABLE, or the
        server's reason for bad content (RECORD_TOO_LARGE, ...); never a generation, never an
        exception for what the model sent. Raises the client's error for a refusal that is not
        the model's to read (a forbidden tenant, a missing token)."""
        return self.client.run(host_protocol.write_memory(self.observations, agent, self.tenant, name, arguments))


__all__ = ["HostObservations", "MemoryHost", "Observation", "render_context"]
