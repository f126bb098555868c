"""Host-owned generations (the agent-memory design, docs/seed-mapping.md): the model never sees or carries a generation, and stale
writes are still rejected. Every test runs a real server process and the real client."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from mnemosyne.client import HostObservations, MemoryClient, MemoryHost, Observation, RecordChange
from mnemosyne.client.errors import error_info
from mnemosyne.host.protocol import STALE_MESSAGE
from mnemosyne.v1 import workspace_pb2, workspace_pb2_grpc
from tests.docs_support import code_blocks, section
from tests.support import ServerProcess, failed_call

GENERATION_BASE = 9_000_000
REVISION_WORDS = re.compile(r"revision|generation|etag|hash|version|\brev\b|\bgen\b", re.IGNORECASE)
BIG_NUMBER = re.compile(r"9\d{6}")
GLOBAL_KEY = "mnemosyne-global-generation"
WORKSPACE_KEY = "mnemosyne-workspace-generation"


class Agent:
    """A stand-in for a live agent object of a runtime: any object that can be weakly referenced."""

    def __init__(self, name: str = "agent") -> None:
        self.name = name


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose scopes start at generation 9,000,000 (test seam), so any leak is visible."""
    process = ServerProcess(
        tmp_path_factory.mktemp("big-generations") / "data",
        env={"MNEMOSYNE_TEST_GENERATION_BASE": str(GENERATION_BASE)},
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def big_client(big_server: ServerProcess) -> Iterator[MemoryClient]:
    with MemoryClient(big_server.target) as c:
        yield c


def _global(client: MemoryClient, tenant: str) -> tuple[str | None, int]:
    listed = client.list_records(tenant, "global")
    content = {r.key: r.content for r in listed.records}.get("MEMORY.md")
    return content, listed.generation


def _assert_no_generation(text: str, generations: set[int]) -> None:
    assert not REVISION_WORDS.search(text), text
    assert not BIG_NUMBER.search(text), text
    for generation in generations:
        assert str(generation) not in text


# -- the model-facing surface never contains a generation -----------------------------------


def test_model_facing_surface_never_contains_a_generation(big_client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(big_client, tenant)
    writer, other, fresh = Agent("writer"), Agent("other"), Agent("fresh")
    seen: set[int] = set()
    surface: list[str] = []

    for format in ("openai", "anthropic"):
        surface.append(json.dumps(host.tool_schemas(format)))
    surface.append(host.assemble_context(writer, "falcon"))
    surface.append(host.assemble_context(other, "falcon"))
    observed = host.observations.read(writer)
    assert observed is not None and observed.global_generation >= GENERATION_BASE  # the seam is on
    seen |= {observed.global_generation, observed.workspace_generation}

    results = [
        host.call_tool(writer, "memory_update", {"content": "Project Falcon launches in May."}),
        host.call_tool(
            writer,
            "update_workspace",
            {"changes": [{"op": "put", "key": "plan.md", "content": "Draft the launch plan."}]},
        ),
        host.call_tool(other, "memory_update", {"content": "stale content"}),  # stale
        host.call_tool(fresh, "memory_update", {"content": "never assembled"}),  # missing
        host.call_tool(writer, "update_workspace", {"changes": [{"op": "put", "key": "../escape", "content": "x"}]}),
        host.call_tool(writer, "update_workspace", {"changes": [{"op": "delete", "key": "absent.md"}]}),
        host.call_tool(writer, "memory_update", {"content": "x", "expected_revision": "abc"}),
        host.call_tool(writer, "memory_update", "{not json"),
    ]
    assert [r["ok"] for r in results] == [True, True, False, False, False, False, False, False]
    assert results[2]["error"] == STALE_MESSAGE
    after = host.observations.read(writer)
    assert after is not None
    seen |= {after.global_generation, after.workspace_generation}
    surface += [json.dumps(r) for r in results]
    surface.append(host.assemble_context(writer, "falcon", query="When does Falcon launch?"))
    assert "Project Falcon launches in May." in surface[-1] and "Draft the launch plan." in surface[-1]
    final = host.observations.read(writer)
    assert final is not None
    seen |= {final.global_generation, final.workspace_generation}
    assert seen == {GENERATION_BASE, GENERATION_BASE + 1}

    for text in surface:
        _assert_no_generation(text, seen)


def test_generation_lives_in_metadata_only(big_client: MemoryClient, tenant: str) -> None:
    """No message of the model-facing RPCs has a generation field; the value comes in metadata."""
    for message in (
        workspace_pb2.AssembleContextRequest,
        workspace_pb2.AssembleContextResponse,
        workspace_pb2.UpdateGlobalRequest,
        workspace_pb2.UpdateGlobalResponse,
        workspace_pb2.UpdateWorkspaceRequest,
        workspace_pb2.UpdateWorkspaceResponse,
        workspace_pb2.Record,
        workspace_pb2.RecordChange,
    ):
        for field in message.DESCRIPTOR.fields:
            assert not REVISION_WORDS.search(field.name), f"{message.DESCRIPTOR.name}.{field.name}"
    stub = workspace_pb2_grpc.WorkspaceServiceStub(big_client.channel)
    response, call = stub.AssembleContext.with_call(
        workspace_pb2.AssembleContextRequest(tenant=tenant, workspace="falcon"), timeout=30
    )
    initial = dict(call.initial_metadata())
    assert initial[GLOBAL_KEY] == str(GENERATION_BASE) and initial[WORKSPACE_KEY] == str(GENERATION_BASE)
    assert GLOBAL_KEY not in dict(call.trailing_metadata())
    assert str(GENERATION_BASE) not in str(response)


# -- the observation is taken in the same snapshot as the content ---------------------------


def test_commit_during_assembly_cannot_pair_old_content_with_new_generation(server_factory: Any, tenant: str) -> None:
    process = server_factory(env={"MNEMOSYNE_TEST_COMMIT_DURING_ASSEMBLE": "1"}).start()
    with MemoryClient(process.target) as client:
        client.retain(tenant, "the tenant file exists")  # a memory: it does not touch generations
        host = MemoryHost(client, tenant)
        agent = Agent()
        # The seam commits a Global change after the records were read and before the
        # generations are: a second read would return the new generation with the old content.
        context = host.assemble_context(agent, "w")
        assert "written by the test seam" not in context
        content, generation = _global(client, tenant)
        assert content == "written by the test seam during assembly" and generation == 1
        observation = host.observations.read(agent)
        assert observation is not None and observation.global_generation == 0

        result = host.call_tool(agent, "memory_update", {"content": "generated from the old snapshot"})
        assert result == {"ok": False, "error": STALE_MESSAGE, "reason": "STALE_CONTEXT"}
        assert _global(client, tenant) == ("written by the test seam during assembly", 1)


# -- stale agents, resumed agents -----------------------------------------------------------


def test_stale_agent_is_rejected_and_succeeds_after_reassembling(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    a, b = Agent("a"), Agent("b")
    host.assemble_context(a, "w")
    host.assemble_context(b, "w")
    assert host.call_tool(b, "memory_update", {"content": "B: the launch moved to June."})["ok"]

    rejected = host.call_tool(a, "memory_update", {"content": "A: the launch is in May."})
    assert rejected == {"ok": False, "error": STALE_MESSAGE, "reason": "STALE_CONTEXT"}
    assert _global(client, tenant) == ("B: the launch moved to June.", 1)

    context = host.assemble_context(a, "w")
    assert "B: the launch moved to June." in context
    assert host.call_tool(a, "memory_update", {"content": "B said June; A confirms June."}) == {
        "ok": True,
        "result": "MEMORY.md was replaced.",
    }
    assert _global(client, tenant) == ("B said June; A confirms June.", 2)


def test_resumed_agent_cannot_write_before_assembling(client: MemoryClient, tenant: str) -> None:
    agent = Agent()
    first = MemoryHost(client, tenant)
    first.assemble_context(agent, "w")
    assert first.call_tool(agent, "memory_update", {"content": "before the restart"})["ok"]

    resumed = MemoryHost(client, tenant)  # a new host process: observations are ephemeral
    for tool, arguments in (
        ("memory_update", {"content": "after the restart"}),
        ("update_workspace", {"changes": [{"op": "put", "key": "plan.md", "content": "x"}]}),
    ):
        result = resumed.call_tool(agent, tool, arguments)
        assert result["ok"] is False and result["reason"] == "CONTEXT_NOT_ASSEMBLED"
    assert _global(client, tenant) == ("before the restart", 1)
    assert client.list_records(tenant, "workspace/w").generation == 0

    resumed.assemble_context(agent, "w")
    assert resumed.call_tool(agent, "memory_update", {"content": "after the restart"})["ok"]
    assert _global(client, tenant) == ("after the restart", 2)


def test_observation_goes_with_the_agent(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    assert len(host.observations) == 1
    del agent
    gc.collect()
    assert len(host.observations) == 0


def test_retained_memories_never_touch_a_generation(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    client.retain(tenant, "The customer prefers email.", scope="global")
    client.retain(tenant, "The build uses Bazel.", scope="workspace/w")
    memory = client.retain(tenant, "Temporary note to forget.", scope="workspace/w")
    client.forget(tenant, memory.memory_id)
    assert _global(client, tenant) == (None, 0)
    assert client.list_records(tenant, "workspace/w").generation == 0
    # Background memory work did not make the agent's observation stale.
    assert host.call_tool(agent, "memory_update", {"content": "still current"})["ok"]
    assert host.call_tool(agent, "update_workspace", {"changes": [{"op": "put", "key": "a.md", "content": "a"}]})["ok"]


def test_assembled_recall_covers_global_and_this_workspace_only(client: MemoryClient, tenant: str) -> None:
    client.retain(tenant, "Falcon launch date is in May (global).", scope="global")
    client.retain(tenant, "Falcon launch checklist lives here (workspace w).", scope="workspace/w")
    client.retain(tenant, "Falcon launch secrets of another workspace.", scope="workspace/other")
    host = MemoryHost(client, tenant)
    context = host.assemble_context(Agent(), "w", query="Falcon launch", k=10)
    assert "(global)" in context and "(workspace w)" in context
    assert "another workspace" not in context


def test_malformed_model_arguments_become_error_results(client: MemoryClient, tenant: str) -> None:
    """Each mistake has the reason every surface gives it (docs/http-api.md, "One mistake, one
    reason"; the MCP tools' and the Node host's the same): a value of another JSON type or an
    argument a tool does not take was ARGUMENTS_INVALID (a missing and a wrong-typed argument
    were one check), where the MCP update_workspace tool said REQUEST_UNDECODABLE."""
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    undecodable, put = "REQUEST_UNDECODABLE", {"op": "put", "key": "a.md", "content": "x"}
    bad_calls: list[tuple[str, Any, str]] = [
        ("memory_update", None, "ARGUMENTS_INVALID"),  # content left out: gRPC reads it as empty
        ("memory_update", {"content": None}, "ARGUMENTS_INVALID"),  # null is not given
        ("memory_update", "not json", undecodable),
        ("memory_update", "[1, 2]", undecodable),
        ("memory_update", {"content": 42}, undecodable),
        ("memory_update", {"text": "wrong name"}, undecodable),
        ("memory_update", {"content": "x", "generation": 3}, undecodable),
        ("memory_update", {"content": "nul \x00 inside"}, "RECORD_CONTENT_INVALID"),
        ("update_workspace", {}, "CHANGES_EMPTY"),
        ("update_workspace", {"changes": None}, "CHANGES_EMPTY"),
        ("update_workspace", {"changes": []}, "CHANGES_EMPTY"),
        ("update_workspace", {"changes": "put plan.md"}, undecodable),
        ("update_workspace", {"changes": [5]}, undecodable),
        ("update_workspace", {"changes": [{**put, "mode": "append"}]}, undecodable),
        ("update_workspace", {"changes": [{"op": "rename", "key": "a.md"}]}, "CHANGE_OP_INVALID"),
        ("update_workspace", {"changes": [{"key": "a.md", "content": "x"}]}, "CHANGE_OP_INVALID"),
        ("update_workspace", {"changes": [{**put, "op": 1}]}, undecodable),
        ("update_workspace", {"changes": [{"op": "delete", "key": "a.md", "content": "x"}]}, "CHANGE_OP_INVALID"),
        ("update_workspace", {"changes": [{"op": "put", "key": "a.md"}]}, "ARGUMENTS_INVALID"),
        ("update_workspace", {"changes": [{**put, "content": None}]}, "ARGUMENTS_INVALID"),
        ("update_workspace", {"changes": [{**put, "content": 5}]}, undecodable),
        ("update_workspace", {"changes": [{"op": "put", "content": "x"}]}, "RECORD_KEY_INVALID"),
        ("update_workspace", {"changes": [{**put, "key": ""}]}, "RECORD_KEY_INVALID"),
        ("update_workspace", {"changes": [{**put, "key": 7}]}, undecodable),
        ("update_workspace", {"changes": [{**put, "key": "/etc/passwd"}]}, "RECORD_KEY_INVALID"),
        ("update_workspace", {"changes": [{**put, "key": "a/../../b"}]}, "RECORD_KEY_INVALID"),
        ("update_workspace", {"changes": [put, {**put, "content": "y"}]}, "RECORD_KEY_DUPLICATE"),
        ("update_workspace", {"changes": [{**put, "key": "big.md", "content": "x" * 300_000}]}, "RECORD_TOO_LARGE"),
        ("update_workspace", {"changes": [{"op": "delete", "key": "missing.md"}]}, "RECORD_NOT_FOUND"),
        ("update_workspace", {"changes": [{**put, "key": "k" * 300}]}, "RECORD_KEY_INVALID"),
        ("delete_everything", {}, "ARGUMENTS_INVALID"),
        # What a model may send that no request can carry: they raised (the client's
        # RequestInvalidError, a RecursionError) instead of answering the model.
        ("memory_update", {"content": "half a pair \ud800"}, undecodable),
        ("memory_update", '{"content": "escaped half \\udc00"}', undecodable),
        ("update_workspace", {"changes": [{**put, "key": "a\ud800.md"}]}, undecodable),
        ("update_workspace", {"changes": [{**put, "content": "\udfff"}]}, undecodable),
        ("memory_update", "[" * 100_000 + "]" * 100_000, undecodable),
    ]
    wrong = []
    for name, arguments, reason in bad_calls:
        result = host.call_tool(agent, name, arguments)
        assert result["ok"] is False and isinstance(result["error"], str) and result["error"], (name, arguments)
        if result["reason"] != reason:
            wrong.append(f"{name} {str(arguments)[:80]}: {result['reason']} ({result['error'][:80]})")
    assert not wrong, "\n".join(wrong)
    assert _global(client, tenant) == (None, 0)
    assert client.list_records(tenant, "workspace/w").generation == 0
    # The observation is still good: nothing was written and nothing advanced.
    assert host.call_tool(agent, "memory_update", {"content": "fine"})["ok"]


def test_tool_schemas_have_only_intent_fields() -> None:
    openai = MemoryHost.tool_schemas("openai")
    anthropic = MemoryHost.tool_schemas("anthropic")
    assert [t["function"]["name"] for t in openai] == ["memory_update", "update_workspace"]
    assert [t["name"] for t in anthropic] == ["memory_update", "update_workspace"]
    update, workspace = (t["input_schema"] for t in anthropic)
    assert set(update["properties"]) == {"content"} and update["additionalProperties"] is False
    item = workspace["properties"]["changes"]["items"]
    assert set(workspace["properties"]) == {"changes"} and set(item["properties"]) == {"op", "key", "content"}
    assert openai[0]["function"]["parameters"] == update


# -- races ----------------------------------------------------------------------------------


def _race(calls: list[Any]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda f: f(), calls))


def test_eight_agents_race_memory_update(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    agents = [Agent(f"agent-{i}") for i in range(8)]
    for agent in agents:
        host.assemble_context(agent, "w")
    start = threading.Barrier(8, timeout=60)

    def call(i: int) -> Any:
        def run() -> dict[str, Any]:
            start.wait()
            return host.call_tool(agents[i], "memory_update", {"content": f"written by agent {i}"})

        return run

    results = _race([call(i) for i in range(8)])
    winners = [i for i, r in enumerate(results) if r["ok"]]
    assert len(winners) == 1
    assert all(r == {"ok": False, "error": STALE_MESSAGE, "reason": "STALE_CONTEXT"} for r in results if not r["ok"])
    assert _global(client, tenant) == (f"written by agent {winners[0]}", 1)


class BarrierObservations(HostObservations):
    """Holds every racing tool call right after it read its observation, so that all of them
    read before any of them writes (the interleaving the compare-and-set exists for)."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier: threading.Barrier | None = threading.Barrier(parties, timeout=60)

    def read(self, agent: object) -> Observation | None:
        value = super().read(agent)
        if self.barrier is not None:
            self.barrier.wait()
        return value


def test_one_agent_on_eight_threads_races_memory_update(client: MemoryClient, tenant: str) -> None:
    observations = BarrierObservations(8)
    host = MemoryHost(client, tenant, observations=observations)
    agent = Agent()
    host.assemble_context(agent, "w")

    results = _race(
        [(lambda i=i: host.call_tool(agent, "memory_update", {"content": f"written by thread {i}"})) for i in range(8)]
    )
    observations.barrier = None
    winners = [i for i, r in enumerate(results) if r["ok"]]
    assert len(winners) == 1
    assert sum(r.get("reason") == "STALE_CONTEXT" for r in results) == 7
    assert _global(client, tenant) == (f"written by thread {winners[0]}", 1)
    # The winner advanced the observation exactly once, from the value every call read.
    observation = observations.read(agent)
    assert observation is not None and observation.global_generation == 1
    assert host.call_tool(agent, "memory_update", {"content": "next write from the same agent"})["ok"]


class PausingObservations(HostObservations):
    """Holds a successful tool call between its commit and its advance, so the test can change
    the agent's observation in that window."""

    def __init__(self) -> None:
        super().__init__()
        self.committed = threading.Event()
        self.proceed = threading.Event()
        self.armed = True

    def advance(self, agent: object, read: Observation, *, scope: str, new_generation: int) -> bool:
        if self.armed:
            self.armed = False
            self.committed.set()
            assert self.proceed.wait(timeout=60)
        return super().advance(agent, read, scope=scope, new_generation=new_generation)


def _paused_call(host: MemoryHost, agent: Agent, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(host.call_tool, agent, name, arguments)
    observations = host.observations
    assert isinstance(observations, PausingObservations)
    assert observations.committed.wait(timeout=60)
    return pool, future


def test_advance_never_moves_an_observation_backwards(client: MemoryClient, tenant: str) -> None:
    observations = PausingObservations()
    host = MemoryHost(client, tenant, observations=observations)
    agent, other = Agent("agent"), Agent("other")
    host.assemble_context(agent, "w")
    pool, call = _paused_call(host, agent, "memory_update", {"content": "first, by the agent"})
    # Between the agent's commit and its advance: another agent writes, the agent reassembles.
    host.assemble_context(other, "w")
    assert host.call_tool(other, "memory_update", {"content": "second, by the other agent"})["ok"]
    assert "second, by the other agent" in host.assemble_context(agent, "w")
    observations.proceed.set()
    assert call.result(timeout=60)["ok"]
    pool.shutdown()
    # The late advance did not overwrite the newer observation with its older result.
    observation = host.observations.read(agent)
    assert observation is not None and observation.global_generation == 2
    assert host.call_tool(agent, "memory_update", {"content": "third, from the newest context"})["ok"]


def test_advance_of_one_scope_keeps_the_other(client: MemoryClient, tenant: str) -> None:
    observations = PausingObservations()
    host = MemoryHost(client, tenant, observations=observations)
    agent = Agent()
    host.assemble_context(agent, "w")
    pool, call = _paused_call(host, agent, "memory_update", {"content": "global change"})
    # A concurrent workspace call of the same agent advances the workspace side meanwhile.
    assert host.call_tool(agent, "update_workspace", {"changes": [{"op": "put", "key": "a.md", "content": "a"}]})["ok"]
    observations.proceed.set()
    assert call.result(timeout=60)["ok"]
    pool.shutdown()
    assert host.observations.read(agent) == Observation(1, "w", 1)
    assert host.call_tool(agent, "memory_update", {"content": "again"})["ok"]
    assert host.call_tool(agent, "update_workspace", {"changes": [{"op": "delete", "key": "a.md"}]})["ok"]


CHILD = r"""
import json, sys
from mnemosyne.client import MemoryClient, MemoryHost

class Agent: pass

target, tenant, label = sys.argv[1:4]
agent = Agent()
with MemoryClient(target) as client:
    host = MemoryHost(client, tenant)
    host.assemble_context(agent, "race")
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(host.call_tool(agent, "memory_update", {"content": "written by " + label})), flush=True)
"""


def test_two_client_processes_race_memory_update(
    target: str, client: MemoryClient, tenant: str, tmp_path: Path
) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, target, tenant, f"process {i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for child in children:  # both observed the same generation before either writes
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            assert child.stdout is not None
            results.append(json.loads(child.stdout.readline()))
        for child in children:
            assert child.wait(timeout=60) == 0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    winners = [i for i, r in enumerate(results) if r["ok"]]
    assert len(winners) == 1
    assert results[1 - winners[0]]["reason"] == "STALE_CONTEXT"
    assert _global(client, tenant) == (f"written by process {winners[0]}", 1)


# -- raw gRPC: the server fails closed on its own -----------------------------------------


def _raw_error(call: Callable[[], object]) -> tuple[grpc.StatusCode, str, grpc.RpcError]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    info = error_info(caught.value)
    assert info is not None and info.domain == "mnemosyne.v1"
    return caught.value.code(), info.reason, caught.value


def test_raw_grpc_call_without_metadata_fails_closed(client: MemoryClient, tenant: str) -> None:
    stub = workspace_pb2_grpc.WorkspaceServiceStub(client.channel)
    update_global = workspace_pb2.UpdateGlobalRequest(tenant=tenant, content="no observation", request_id="raw-1")
    update_workspace = workspace_pb2.UpdateWorkspaceRequest(
        tenant=tenant,
        workspace="w",
        request_id="raw-2",
        changes=[workspace_pb2.RecordChange(op=workspace_pb2.RecordChange.PUT, key="a.md", content="x")],
    )
    for call in (
        lambda: stub.UpdateGlobal(update_global, timeout=30),
        lambda: stub.UpdateWorkspace(update_workspace, timeout=30),
        # The other scope's key is not an observation of this scope.
        lambda: stub.UpdateGlobal(update_global, timeout=30, metadata=((WORKSPACE_KEY, "0"),)),
        lambda: stub.UpdateWorkspace(update_workspace, timeout=30, metadata=((GLOBAL_KEY, "0"),)),
    ):
        code, reason, _ = _raw_error(call)
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "OBSERVATION_MISSING")
    for bad in ("", "abc", "-1", "+1", " 1", "1.0", "1e3", "99999999999999999999", "0x1"):
        code, reason, _ = _raw_error(
            lambda: stub.UpdateGlobal(update_global, timeout=30, metadata=((GLOBAL_KEY, bad),))
        )
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OBSERVATION_INVALID"), bad
    code, reason, _ = _raw_error(
        lambda: stub.UpdateGlobal(update_global, timeout=30, metadata=((GLOBAL_KEY, "0"), (GLOBAL_KEY, "0")))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OBSERVATION_INVALID")
    assert _global(client, tenant) == (None, 0)
    assert client.list_records(tenant, "workspace/w").generation == 0

    # With the observation, the same raw call succeeds and returns the new generation in trailers.
    _, call = stub.UpdateGlobal.with_call(update_global, timeout=30, metadata=((GLOBAL_KEY, "0"),))
    assert dict(call.trailing_metadata())[GLOBAL_KEY] == "1"


def test_mismatch_details_never_carry_the_current_generation(big_client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(big_client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    for i in range(3):
        assert host.call_tool(agent, "memory_update", {"content": f"version {i}"})["ok"]
    current = GENERATION_BASE + 3
    stub = workspace_pb2_grpc.WorkspaceServiceStub(big_client.channel)
    request = workspace_pb2.UpdateGlobalRequest(tenant=tenant, content="stale", request_id="stale-1")
    code, reason, error = _raw_error(
        lambda: stub.UpdateGlobal(request, timeout=30, metadata=((GLOBAL_KEY, str(GENERATION_BASE + 1)),))
    )
    assert (code, reason) == (grpc.StatusCode.ABORTED, "GENERATION_MISMATCH")
    info = error_info(error)
    assert info is not None
    everything = " ".join(
        [
            error.details() or "",
            *info.metadata.keys(),
            *info.metadata.values(),
            *(f"{k}={v!r}" for k, v in failed_call(error).trailing_metadata() or ()),
        ]
    )
    assert str(current) not in everything and not BIG_NUMBER.search(everything)
    assert _global(big_client, tenant) == ("version 2", current)


# -- the documents say what the code does ---------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _code_blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_host_flow_example_runs(target: str, tenant: str, capsys: pytest.CaptureFixture[str]) -> None:
    page = (DOCS / "host-generations.md").read_text(encoding="utf-8")
    (example,) = code_blocks(section(page, "The host flow (runnable)"), "python")
    code = example.replace('"127.0.0.1:50051"', repr(target)).replace('"acme"', repr(tenant))
    exec(compile(code, "docs/host-generations.md", "exec"), {"__name__": "docs_example"})
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "{'ok': True, 'result': 'MEMORY.md was replaced.'}",
        "{'ok': False, 'error': '" + STALE_MESSAGE + "', 'reason': 'STALE_CONTEXT'}",
        "{'ok': True, 'result': '2 change(s) applied to workspace launch.'}",
    ]


def test_protocol_page_matches_the_reference_stub() -> None:
    from mnemosyne.host import model_tools
    from mnemosyne.host import protocol as reference

    page = DOCS / "host-protocol.md"
    (schemas,) = _code_blocks(page, "json")
    assert json.loads(schemas) == {t["name"]: t["input_schema"] for t in MemoryHost.tool_schemas("anthropic")}
    text = " ".join(page.read_text(encoding="utf-8").split())
    for phrase in (
        GLOBAL_KEY,
        WORKSPACE_KEY,
        reference.STALE_MESSAGE,
        reference.MISSING_MESSAGE,
        reference.UNAVAILABLE_MESSAGE,
        reference.STALE_REASON,
        reference.MISSING_REASON,
        "OBSERVATION_MISSING",
        "OBSERVATION_INVALID",
        "GENERATION_MISMATCH",
        "IDEMPOTENCY_KEY_REUSED",
        "RECEIPT_REUSED",
        *model_tools._DESCRIPTIONS.values(),
    ):
        assert phrase in text, phrase
    for method in workspace_pb2.DESCRIPTOR.services_by_name["WorkspaceService"].methods:
        assert f"`{method.name}" in text, method.name
    # Every reason the workspace engine and servicer can raise is in the error table.
    import mnemosyne.engine.workspace as engine_module
    import mnemosyne.transport.grpc.workspace as servicer_module

    for module in (engine_module, servicer_module):
        assert module.__file__ is not None
        for reason in re.findall(r'reason="([A-Z_]+)"', Path(module.__file__).read_text(encoding="utf-8")):
            assert reason in text, reason


# -- a state machine against a simple model -------------------------------------------------


@pytest.fixture
def host_machine(client: MemoryClient) -> type[RuleBasedStateMachine]:
    """Random assemblies, tool calls, retains and browser edits by a few agents: a tool call
    succeeds exactly when the agent's last assembly saw the scope's current state, and memory
    always holds what the model of the store says."""

    class HostMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tenant = f"sm-{uuid.uuid4().hex[:12]}"
            self.host = MemoryHost(client, self.tenant)
            self.agents = [Agent(f"agent-{i}") for i in range(3)]
            self.global_text: str | None = None
            self.global_changes = 0
            self.workspace: dict[str, str] = {}
            self.workspace_changes = 0
            self.seen: dict[int, tuple[int, int]] = {}  # agent index -> (global, workspace) changes seen
            self.counter = 0

        def _content(self) -> str:
            self.counter += 1
            return f"content {self.counter}"

        @rule(i=st.integers(0, 2))
        def assemble(self, i: int) -> None:
            context = self.host.assemble_context(self.agents[i], "w")
            if self.global_text is not None:
                assert self.global_text in context
            self.seen[i] = (self.global_changes, self.workspace_changes)

        @rule(i=st.integers(0, 2))
        def memory_update(self, i: int) -> None:
            content = self._content()
            result = self.host.call_tool(self.agents[i], "memory_update", {"content": content})
            seen = self.seen.get(i)
            if seen is None:
                assert result["reason"] == "CONTEXT_NOT_ASSEMBLED"
            elif seen[0] != self.global_changes:
                assert result["reason"] == "STALE_CONTEXT"
            else:
                assert result["ok"], result
                self.global_text, self.global_changes = content, self.global_changes + 1
                self.seen[i] = (self.global_changes, seen[1])

        @rule(i=st.integers(0, 2), key=st.sampled_from(["a.md", "b.md", "notes/c.md"]), delete=st.booleans())
        def update_workspace(self, i: int, key: str, delete: bool) -> None:
            change = {"op": "delete", "key": key} if delete else {"op": "put", "key": key, "content": self._content()}
            result = self.host.call_tool(self.agents[i], "update_workspace", {"changes": [change]})
            seen = self.seen.get(i)
            if seen is None:
                assert result["reason"] == "CONTEXT_NOT_ASSEMBLED"
            elif seen[1] != self.workspace_changes:
                assert result["reason"] == "STALE_CONTEXT"
            elif delete and key not in self.workspace:
                assert result["reason"] == "RECORD_NOT_FOUND"
            else:
                assert result["ok"], result
                if delete:
                    del self.workspace[key]
                else:
                    self.workspace[key] = change["content"]
                self.workspace_changes += 1
                self.seen[i] = (seen[0], self.workspace_changes)

        @rule()
        def retain(self) -> None:  # never changes a generation
            client.retain(self.tenant, self._content(), scope="workspace/w")

        @rule()
        def browser_edit(self) -> None:
            content = self._content()
            generation = client.list_records(self.tenant, "global").generation
            assert (
                client.edit_records(self.tenant, "global", [RecordChange("put", "MEMORY.md", content)], generation)
                == generation + 1
            )
            self.global_text, self.global_changes = content, self.global_changes + 1

        @invariant()
        def store_matches_model(self) -> None:
            if not self.counter:
                return
            assert _global(client, self.tenant) == (self.global_text, self.global_changes)
            listed = client.list_records(self.tenant, "workspace/w")
            assert ({r.key: r.content for r in listed.records}, listed.generation) == (
                self.workspace,
                self.workspace_changes,
            )

    return HostMachine


def test_host_state_machine(host_machine: type[RuleBasedStateMachine]) -> None:
    run_state_machine_as_test(
        host_machine,
        settings=settings(
            max_examples=12,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
