"""Session consolidation (docs/consolidation.md) against real servers: a finished session's
memories become a section of each scope's MEMORY.md, one receipt per scope, applied exactly once —
with the rules and with a model (the local OpenAI-compatible chat server), across SIGKILLs after a
commit and after the model answered, on top of an agent's write made meanwhile, and in the
background only once a thread is idle."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from mnemosyne.cli.server_process import LocalMembers
from mnemosyne.client import (
    InvalidArgumentError,
    MemoryClient,
    MemoryHost,
    MnemosyneClientError,
    NotFoundError,
    PermissionDeniedError,
    RetainItem,
    SessionOutcome,
    ThreadRef,
    UnavailableError,
)
from mnemosyne.engine import consolidator
from mnemosyne.v1 import memory_pb2, types_pb2
from tests.chat_server import Behaviour, ChatServer
from tests.docs_support import DOCS
from tests.support import ServerFactory, ServerProcess, tokens_json, wait_until

THREAD = "chat-42"
# 2026-11-30T10:00:00Z, a minute apart.
T0 = 1_796_032_800.0
TURNS = [
    ("global", "The staging database is db-stage-2"),
    ("global", "We decided to ship the release on Thursday"),
    ("global", "Who owns the rollback plan?"),
    ("workspace/w1", "The build uses Python 3.12"),
    ("workspace/w1", "TODO: pin the grpcio version"),
]


def _retain_session(client: MemoryClient, tenant: str, thread: str = THREAD, turns: Any = TURNS) -> None:
    for position, (scope, text) in enumerate(turns):
        result = client.retain(
            tenant, text, scope=scope, occurred_at=T0 + 60 * position, thread=ThreadRef(thread, position)
        )
        assert result.status == "created", result


def _record(client: MemoryClient, tenant: str, scope: str) -> tuple[str, int]:
    record, generation = client.get_record(tenant, scope, "MEMORY.md")
    return record.content, generation


def _by_scope(outcomes: list[SessionOutcome]) -> dict[str, SessionOutcome]:
    return {o.scope: o for o in outcomes}


def _model_server(
    server_factory: ServerFactory, chat: ChatServer, *, args_extra: tuple[str, ...] | list[str] = (), **kwargs: Any
) -> ServerProcess:
    args = ["--extractor", "openai", "--llm-base-url", chat.base_url, "--llm-model", "test-model", *args_extra]
    return server_factory(args=args, **kwargs)


def _mnemosyne(*args: str) -> list[str]:
    """The command line of ``mnemosyne ARGS`` in this interpreter."""
    return [sys.executable, "-m", "mnemosyne.cli", *args]


# The client commands' environment, without a token (the servers here have none).
_CLI_ENV = {k: v for k, v in os.environ.items() if k != "MNEMOSYNE_TOKEN"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_mnemosyne(*args), capture_output=True, text=True, timeout=60, env=_CLI_ENV)


class _Agent:
    """A live agent of a host (weakly referenced by its observations)."""


def _held_server(server_factory: ServerFactory, tmp_path: Path) -> tuple[ServerProcess, Path]:
    """A server whose consolidator holds before each commit while the returned file exists."""
    hold = tmp_path / "hold"
    return server_factory(env={"MNEMOSYNE_TEST_HOLD_CONSOLIDATION": str(hold)}).start(), hold


def _consolidation_calls(chat: ChatServer) -> int:
    return sum(1 for r in chat.requests if r["messages"][0]["content"] == consolidator.SYSTEM_PROMPT)


# -- the rules default ----------------------------------------------------------------------------


def test_a_session_consolidated_once_changes_each_scope_once(server_factory: Any, tenant: str) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant)
        first = _by_scope(client.consolidate_session(tenant, THREAD))
        assert set(first) == {"global", "workspace/w1"}
        assert [o.outcome for o in first.values()] == ["applied", "applied"]
        assert all(o.generation == 1 and o.model_calls == 0 and o.conflicts == 0 for o in first.values())
        content, generation = _record(client, tenant, "global")
        assert generation == 1
        assert content == (
            "## Session chat-42 — 2026-11-30 (3 memories, positions 0-2)\n"
            "- learned: The staging database is db-stage-2\n"
            "- decided: We decided to ship the release on Thursday\n"
            "- open: Who owns the rollback plan?\n"
        )
        workspace, generation = _record(client, tenant, "workspace/w1")
        assert generation == 1 and "- learned: The build uses Python 3.12" in workspace
        assert "- open: TODO: pin the grpcio version" in workspace and "db-stage-2" not in workspace

        # Again, with the thread or without one: the receipts are applied, nothing changes.
        again = _by_scope(client.consolidate_session(tenant, THREAD))
        assert {s: (o.outcome, o.generation, o.receipt_id) for s, o in again.items()} == {
            s: ("already_applied", 1, o.receipt_id) for s, o in first.items()
        }
        assert client.consolidate_session(tenant) == []  # idle time not reached, and nothing new
        assert _record(client, tenant, "global") == (content, 1)

        # The session grows: a new receipt, and only the new line is added (no line twice).
        client.retain(tenant, "The staging database is db-stage-2 again", thread=ThreadRef(THREAD, 9))
        grown = _by_scope(client.consolidate_session(tenant, THREAD))
        assert grown["global"].outcome == "applied" and grown["global"].receipt_id != first["global"].receipt_id
        assert grown["workspace/w1"].outcome == "already_applied"
        content, generation = _record(client, tenant, "global")
        assert generation == 2
        assert content.endswith(
            "\n\n## Session chat-42 — 2026-11-30 (4 memories, positions 0-9)\n"
            "- learned: The staging database is db-stage-2 again\n"
        )
        assert len(content.splitlines()) == len(set(line for line in content.splitlines() if line)) + 1
        assert client.verify_integrity(tenant).valid


def test_a_session_at_the_ends_of_time_is_consolidated(server_factory: Any, tenant: str) -> None:
    """occurred_at holds 0001-01-01 to 9999-12-31's last microsecond, which as a float is the year
    10000: the heading once made a datetime of that float, and the consolidation failed."""
    server = server_factory().start()
    ends = (Timestamp(seconds=-62_135_596_800), Timestamp(seconds=253_402_300_799, nanos=999_999_000))
    with MemoryClient(server.target) as client:
        for position, occurred_at in enumerate(ends):
            request = memory_pb2.RetainRequest(
                tenant=tenant,
                text=f"We decided on the plan at the end number {position}",
                occurred_at=occurred_at,
                thread=types_pb2.ThreadRef(id=THREAD, position=position),
            )
            client.call(client.memory.Retain, request, retry=False)
        assert [o.outcome for o in client.consolidate_session(tenant, THREAD)] == ["applied"]
        content, _ = _record(client, tenant, "global")
        assert content.startswith(f"## Session {THREAD} — 0001-01-01 to 9999-12-31 (2 memories, positions 0-1)\n")


def test_the_rules_output_is_byte_identical_on_a_re_run(server_factory: Any, tmp_path: Path) -> None:
    """The same memories give the same records, byte for byte: on a second tenant, and on a
    second server started from scratch."""
    contents = []
    for data in ("one", "two"):
        server = server_factory(tmp_path / data).start()
        with MemoryClient(server.target) as client:
            for tenant in ("alpha", "beta"):
                _retain_session(client, tenant)
                client.consolidate_session(tenant, THREAD)
                contents.append(
                    (
                        _record(client, tenant, "global")[0].encode(),
                        _record(client, tenant, "workspace/w1")[0].encode(),
                    )
                )
        server.stop()
    assert len(set(contents)) == 1, contents


def test_consolidation_fails_clearly_on_hostile_input(server_factory: Any) -> None:
    tokens = tokens_json({"token-a": ["alpha"], "token-b": ["beta"]})
    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens}).start()
    with MemoryClient(server.target, "token-a") as client:
        _retain_session(client, "alpha")
        with pytest.raises(InvalidArgumentError) as bad:
            client.consolidate_session("alpha", "chat 42; DROP TABLE")
        assert bad.value.reason == "THREAD_INVALID"
        with pytest.raises(InvalidArgumentError) as long:
            client.consolidate_session("alpha", "x" * 129)
        assert long.value.reason == "THREAD_INVALID"
        with pytest.raises(NotFoundError) as unknown:
            client.consolidate_session("alpha", "no-such-thread")
        assert unknown.value.reason == "THREAD_NOT_FOUND"
        with pytest.raises(PermissionDeniedError):
            client.consolidate_session("beta", THREAD)  # a tenant this token does not reach
        with pytest.raises(InvalidArgumentError) as tenant:
            client.consolidate_session("Bad!Tenant", THREAD)  # its form is wrong whoever asks
        assert tenant.value.reason == "TENANT_INVALID"
    with MemoryClient(server.target, "token-b") as other:
        with pytest.raises(PermissionDeniedError):
            other.consolidate_session("alpha", THREAD)  # another tenant's session
        assert other.consolidate_session("beta") == []  # a tenant with no file: nothing, no file made
    assert not server.tenant_file("beta").exists()
    with MemoryClient(server.target, "token-a") as client:
        with pytest.raises(NotFoundError):
            client.get_record("alpha", "global", "MEMORY.md")  # nothing was consolidated by the refusals


def test_the_cli_prints_each_scope_and_exits_zero(server_factory: Any, tenant: str) -> None:
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant)
    command = ["consolidate", "--target", server.target, "--tenant", tenant]
    ran = _cli(*command, "--thread", THREAD)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 2
    assert (
        lines[0].startswith("chat-42 global: applied (receipt session-")
        and "generation 1, 0 model call(s))" in lines[0]
    )
    assert lines[1].startswith("chat-42 workspace/w1: applied (receipt session-")
    again = _cli(*command, "--thread", THREAD)
    assert again.stdout.count("already applied") == 2
    none = _cli(*command)
    assert none.returncode == 0 and none.stdout == f"{tenant}: no finished session to consolidate\n"
    bad = _cli(*command, "--thread", "bad thread")
    assert bad.returncode == 2 and "THREAD_INVALID" in bad.stderr


# -- exactly once, with a model --------------------------------------------------------------------


@pytest.fixture
def chat() -> Any:
    with ChatServer() as server:
        yield server


def test_with_a_model_each_scope_costs_one_call_and_a_re_run_none(
    server_factory: Any, chat: ChatServer, tenant: str
) -> None:
    server = _model_server(server_factory, chat, metrics=True).start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant)
        outcomes = _by_scope(client.consolidate_session(tenant, THREAD))
        assert [(o.outcome, o.model_calls) for o in outcomes.values()] == [("applied", 1), ("applied", 1)]
        assert _consolidation_calls(chat) == 2
        content, _ = _record(client, tenant, "global")
        assert "- learned: (model) The staging database is db-stage-2" in content
        assert "- open: (model) Who owns the rollback plan?" in content
        client.consolidate_session(tenant, THREAD)
        assert _consolidation_calls(chat) == 2
    metrics = _scrape(server)
    assert "mnemosyne_consolidation_model_calls_total 2.0" in metrics
    assert "mnemosyne_consolidation_proposals_total 2.0" in metrics


def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _killed_consolidation(server: ServerProcess, tenant: str) -> None:
    """A consolidation whose server dies of SIGKILL (a test seam) before it answers."""
    with MemoryClient(server.target, retries=0) as client:
        with pytest.raises(MnemosyneClientError):
            client.consolidate_session(tenant, THREAD)
    assert server.process is not None
    assert server.process.wait(timeout=10) == -9


@pytest.mark.parametrize(
    "seam",
    [
        "consolidate",  # killed after the Global commit, before the reply: the receipt is applied
        "consolidation_proposal",  # killed after the model answered, before the commit: it is journaled
    ],
)
def test_a_run_killed_mid_way_is_completed_by_a_re_run_without_a_second_model_call(
    server_factory: Any, chat: ChatServer, tenant: str, seam: str
) -> None:
    server = _model_server(server_factory, chat, env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": seam}).start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant)
    _killed_consolidation(server, tenant)
    assert _consolidation_calls(chat) == 1  # Global's, answered; the kill came before the workspace's
    server.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    server.restart()
    with MemoryClient(server.target) as client:
        if seam == "consolidate":
            assert _record(client, tenant, "global")[1] == 1  # committed before the kill
        else:
            with pytest.raises(NotFoundError):
                client.get_record(tenant, "global", "MEMORY.md")  # proposed, not committed
        rerun = _by_scope(client.consolidate_session(tenant, THREAD))
        expected_global = "already_applied" if seam == "consolidate" else "applied"
        assert (rerun["global"].outcome, rerun["global"].model_calls) == (expected_global, 0)  # no second call
        assert (rerun["workspace/w1"].outcome, rerun["workspace/w1"].model_calls) == ("applied", 1)
        assert _consolidation_calls(chat) == 2  # one per scope, over both runs
        content, generation = _record(client, tenant, "global")
        assert generation == 1 and content.count("## Session chat-42") == 1
        assert "(model) The staging database is db-stage-2" in content
        assert _record(client, tenant, "workspace/w1")[1] == 1
        final = _by_scope(client.consolidate_session(tenant, THREAD))
        assert {o.outcome for o in final.values()} == {"already_applied"}
        assert _consolidation_calls(chat) == 2
        assert client.verify_integrity(tenant).valid


def test_a_malformed_model_answer_writes_and_journals_nothing(
    server_factory: Any, chat: ChatServer, tenant: str
) -> None:
    server = _model_server(server_factory, chat).start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant, turns=TURNS[:3])
        chat.script.append(Behaviour(kind="content", content='{"learned": "not a list"}'))
        with pytest.raises(MnemosyneClientError) as failed:
            client.consolidate_session(tenant, THREAD)
        assert failed.value.reason == "CONSOLIDATION_FAILED"
        with pytest.raises(NotFoundError):
            client.get_record(tenant, "global", "MEMORY.md")
        outcome = client.consolidate_session(tenant, THREAD)  # not journaled: the model is asked again
        assert [(o.outcome, o.model_calls) for o in outcome] == [("applied", 1)]
        assert _consolidation_calls(chat) == 2


def test_with_the_fallback_a_malformed_answer_gives_the_rules_section(
    server_factory: Any, chat: ChatServer, tenant: str
) -> None:
    server = _model_server(server_factory, chat, args_extra=["--llm-fallback", "rules"]).start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant, turns=TURNS[:3])
        chat.script.append(Behaviour(kind="content", content="not json at all"))
        (outcome,) = client.consolidate_session(tenant, THREAD)
        assert (outcome.outcome, outcome.model_calls) == ("applied", 1)
        content, _ = _record(client, tenant, "global")
        assert "- learned: The staging database is db-stage-2" in content and "(model)" not in content


def test_a_section_past_the_record_limit_fails_and_writes_nothing(server_factory: Any, tenant: str) -> None:
    server = server_factory(args=["--max-record-bytes", "100"]).start()
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant, turns=TURNS[:3])
        with pytest.raises(InvalidArgumentError) as refused:
            client.consolidate_session(tenant, THREAD)
        assert refused.value.reason == "RECORD_TOO_LARGE"
        with pytest.raises(NotFoundError):
            client.get_record(tenant, "global", "MEMORY.md")


# -- never over a newer write ----------------------------------------------------------------------


def test_an_agent_s_memory_update_during_consolidation_is_kept_and_the_section_lands_on_top(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    server, hold = _held_server(server_factory, tmp_path)
    agent = _Agent()
    with MemoryClient(server.target) as client:
        host = MemoryHost(client, tenant)
        host.assemble_context(agent, "w1")
        assert host.call_tool(agent, "memory_update", {"content": "# Memory\n- agent note one\n"})["ok"]
        _retain_session(client, tenant, turns=TURNS[:3])
        hold.touch()
        outcomes: list[list[SessionOutcome]] = []
        running = threading.Thread(target=lambda: outcomes.append(client.consolidate_session(tenant, THREAD)))
        running.start()
        wait_until((tmp_path / "hold.held1").exists)  # it read generation 1 and waits before its commit
        host.assemble_context(agent, "w1")
        written = host.call_tool(agent, "memory_update", {"content": "# Memory\n- agent note one\n- agent note two\n"})
        assert written["ok"], written
        hold.unlink()
        running.join(timeout=60)
        ((outcome,),) = outcomes
        assert (outcome.outcome, outcome.conflicts, outcome.generation) == ("applied", 1, 3)
        content, generation = _record(client, tenant, "global")
        assert generation == 3
        assert content.startswith("# Memory\n- agent note one\n- agent note two\n\n## Session chat-42")
        assert "- open: Who owns the rollback plan?" in content


@pytest.mark.parametrize("change", ["forget", "update"])
def test_a_memory_forgotten_or_updated_before_its_proposal_is_applied_is_not_quoted(
    server_factory: Any, tenant: str, tmp_path: Path, change: str
) -> None:
    """A consolidation held before its commit, its proposal journaled: a forget (or an update) of
    a memory it quotes, acknowledged meanwhile, deleted the thread's journal rows, yet the held run
    applied the proposal it had read, so the forgotten text (or the text replaced) landed in
    MEMORY.md after the forget answered. The commit now requires the journaled proposal, and the
    run proposes again from the session as it is."""
    server, hold = _held_server(server_factory, tmp_path)
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant, turns=[*TURNS[:2], ("global", "The deploy password is hunter2")])
        secret = client.list_memories(tenant, page_size=10).memories[-1].id
        hold.touch()
        outcomes: list[list[SessionOutcome]] = []
        running = threading.Thread(target=lambda: outcomes.append(client.consolidate_session(tenant, THREAD)))
        running.start()
        wait_until((tmp_path / "hold.held1").exists)  # journaled, waiting before its commit
        if change == "forget":
            assert client.forget(tenant, secret)
        else:
            assert client.update_memory(tenant, secret, "The deploy password was rotated").updated
        hold.unlink()
        running.join(timeout=60)
        ((outcome,),) = outcomes
        assert outcome.outcome == "applied"
        content, _ = _record(client, tenant, "global")
        assert "hunter2" not in content and "db-stage-2" in content
        assert ("The deploy password was rotated" in content) == (change == "update")
        assert client.consolidate_session(tenant, THREAD)[0].outcome == "already_applied"


def test_a_proposal_journaled_before_a_kill_is_not_applied_over_a_later_update(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    """A run killed after journaling its proposal; the memory it quotes updated after the restart;
    a consolidation asked after the update applied the journaled proposal, with the text the
    update had replaced. The update now withdraws its thread's proposals, as a forget does."""
    server, hold = _held_server(server_factory, tmp_path)
    with MemoryClient(server.target, retries=0) as client:
        _retain_session(client, tenant, turns=[*TURNS[:2], ("global", "The deploy password is hunter2")])
        secret = client.list_memories(tenant, page_size=10).memories[-1].id
        hold.touch()
        ended: list[str] = []

        def consolidate() -> None:
            try:
                client.consolidate_session(tenant, THREAD)
            except UnavailableError as exc:
                ended.append(exc.reason or "UNAVAILABLE")

        running = threading.Thread(target=consolidate)
        running.start()
        wait_until((tmp_path / "hold.held1").exists)  # journaled, waiting before its commit
        server.kill()
        running.join(timeout=60)
        assert ended, "the run died with the server"
    server.env.pop("MNEMOSYNE_TEST_HOLD_CONSOLIDATION")
    server.start()
    with MemoryClient(server.target) as client:
        assert client.update_memory(tenant, secret, "The deploy password was rotated").updated
        assert client.consolidate_session(tenant, THREAD)[0].outcome == "applied"
        content, _ = _record(client, tenant, "global")
        assert "hunter2" not in content and "The deploy password was rotated" in content


def test_a_session_with_a_memory_updated_since_its_consolidation_is_consolidated_again(
    client: MemoryClient, tenant: str
) -> None:
    """A receipt named the session's memory ids only, and an update keeps its memory's id: a session
    consolidated, then a memory of it updated, was answered already_applied, and the update's text
    never reached MEMORY.md. An updated memory's text is part of the receipt now."""
    _retain_session(client, tenant, turns=TURNS[:2])
    (first,) = client.consolidate_session(tenant, THREAD)
    staging = client.list_memories(tenant, page_size=10).memories[0]
    assert staging.text == "The staging database is db-stage-2"
    assert client.update_memory(tenant, staging.id, "The staging database is db-stage-3").updated
    (second,) = client.consolidate_session(tenant, THREAD)
    assert (first.outcome, second.outcome) == ("applied", "applied") and second.receipt_id != first.receipt_id
    assert "- learned: The staging database is db-stage-3" in _record(client, tenant, "global")[0]
    assert client.consolidate_session(tenant, THREAD)[0].outcome == "already_applied"


def test_a_session_whose_lines_the_record_holds_already_is_nothing_new(server_factory: Any, tenant: str) -> None:
    server = server_factory().start()
    agent = _Agent()
    with MemoryClient(server.target) as client:
        host = MemoryHost(client, tenant)
        _retain_session(client, tenant, turns=TURNS[:1])
        host.assemble_context(agent, "w1")
        noted = "# Memory\n- learned: The staging database is db-stage-2\n"
        assert host.call_tool(agent, "memory_update", {"content": noted})["ok"]
        (outcome,) = client.consolidate_session(tenant, THREAD)
        assert (outcome.outcome, outcome.generation, outcome.model_calls) == ("nothing_new", 1, 0)
        assert _record(client, tenant, "global") == (noted, 1)
        (again,) = client.consolidate_session(tenant, THREAD)
        assert again.outcome == "nothing_new" and again.receipt_id == outcome.receipt_id


def test_after_three_newer_writes_in_a_row_it_gives_up_without_writing(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    server, hold = _held_server(server_factory, tmp_path)
    agent = _Agent()
    with MemoryClient(server.target) as client:
        host = MemoryHost(client, tenant)
        _retain_session(client, tenant, turns=TURNS[:3])
        hold.touch()
        command = ["consolidate", "--target", server.target, "--tenant", tenant, "--thread", THREAD]
        running = subprocess.Popen(_mnemosyne(*command), stdout=subprocess.PIPE, text=True, env=_CLI_ENV)
        for attempt in (1, 2, 3):
            wait_until((tmp_path / f"hold.held{attempt}").exists)
            host.assemble_context(agent, "w1")
            assert host.call_tool(agent, "memory_update", {"content": f"# Memory\n- agent write {attempt}\n"})["ok"]
            (tmp_path / f"hold.go{attempt}").touch()
        printed, _ = running.communicate(timeout=60)
        assert running.returncode == 1  # the command says a scope gave up
        assert printed.startswith("chat-42 global: gave up (receipt session-") and "3 newer write(s) kept" in printed
        assert _record(client, tenant, "global") == ("# Memory\n- agent write 3\n", 3)  # nothing over it
        hold.unlink()
        (again,) = client.consolidate_session(tenant, THREAD)  # the journaled proposal, on top
        assert (again.outcome, again.conflicts, again.generation) == ("applied", 0, 4)
        assert _record(client, tenant, "global")[0].startswith("# Memory\n- agent write 3\n\n## Session chat-42")


# -- the background ---------------------------------------------------------------------------------


def test_the_background_mode_waits_for_a_thread_to_go_idle_then_consolidates_it_once(
    server_factory: Any, tenant: str
) -> None:
    idle = 3.0
    server = server_factory(args=["--consolidate-tenant", tenant, "--consolidate-idle-seconds", str(idle)]).start()
    with MemoryClient(server.target) as client:
        # A turn every 0.3 s for 5 s: the thread is never idle for 3 s, so it is never consolidated.
        started = time.monotonic()
        position = 0
        while time.monotonic() - started < 5.0:
            client.retain(tenant, f"turn {position} of the active session", thread=ThreadRef("active", position))
            position += 1
            with pytest.raises(NotFoundError):
                client.get_record(tenant, "global", "MEMORY.md")
            time.sleep(0.3)
        stopped = time.monotonic()

        def consolidated() -> bool:
            try:
                return _record(client, tenant, "global")[1] >= 1
            except NotFoundError:
                return False

        wait_until(consolidated, seconds=30)
        assert time.monotonic() - stopped >= idle - 0.5  # not before the thread went idle
        content, generation = _record(client, tenant, "global")
        assert generation == 1 and f"- learned: turn {position - 1} of the active session" in content
        time.sleep(3 * idle / 4 + 0.5)  # a few more background passes: the receipt stays applied
        assert _record(client, tenant, "global") == (content, 1)
        (outcome,) = client.consolidate_session(tenant, "active")
        assert outcome.outcome == "already_applied"


def test_a_tenant_named_for_the_background_is_validated_at_start(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", args=["--consolidate-tenant", "Bad!Tenant"])
    with pytest.raises(RuntimeError, match="TENANT_INVALID"):
        server.start()


def test_forgetting_a_memory_drops_its_thread_s_journaled_proposals(
    server_factory: Any, chat: ChatServer, tenant: str
) -> None:
    """A proposal may quote a memory: when one of the thread's memories is forgotten, the thread's
    journaled proposals go with it (no byte of the memory survives in the journal)."""
    server = _model_server(server_factory, chat, env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": "consolidation_proposal"})
    server.start()
    secret = "The vault code is 4417-ALPHA"
    with MemoryClient(server.target) as client:
        _retain_session(client, tenant, turns=[("global", secret), ("global", "The door is blue")])
        memory_id = client.list_memories(tenant, thread=THREAD).memories[0].id
    _killed_consolidation(server, tenant)  # journaled, not committed
    server.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    server.restart()
    with MemoryClient(server.target) as client:
        assert client.forget(tenant, memory_id)
        (outcome,) = client.consolidate_session(tenant, THREAD)
        assert (outcome.outcome, outcome.model_calls) == ("applied", 1)  # proposed again, without it
        content, _ = _record(client, tenant, "global")
        assert "4417" not in content and "The door is blue" in content
    server.stop()
    for path in server.data_dir.rglob("*"):
        if path.is_file():
            assert b"4417-ALPHA" not in path.read_bytes(), path


# -- the docs -------------------------------------------------------------------------------------

CONSOLIDATION_DOC = DOCS / "consolidation.md"


def test_the_documented_prompt_is_the_one_sent() -> None:
    assert f"```text\n{consolidator.SYSTEM_PROMPT}\n```" in CONSOLIDATION_DOC.read_text()


def test_a_call_without_a_thread_takes_only_threads_with_new_memories(server_factory: Any, tenant: str) -> None:
    """100 threads a call, then the rest; a consolidated thread is not taken again (so old threads
    never hide new ones) until it has a new memory and is idle again."""
    server = server_factory(args=["--consolidate-idle-seconds", "1"]).start()
    with MemoryClient(server.target) as client:
        items = [RetainItem(f"fact number {i} of thread {i}", thread=ThreadRef(f"t{i:03d}", 0)) for i in range(120)]
        client.retain_batch(tenant, items)
        time.sleep(1.2)
        first = client.consolidate_session(tenant)
        assert [o.thread for o in first] == [f"t{i:03d}" for i in range(100)]
        assert {o.outcome for o in first} == {"applied"}
        assert [o.thread for o in client.consolidate_session(tenant)] == [f"t{i:03d}" for i in range(100, 120)]
        assert client.consolidate_session(tenant) == []
        client.retain(tenant, "a late fact of thread 7", thread=ThreadRef("t007", 1))
        assert client.consolidate_session(tenant) == []  # not idle yet
        time.sleep(1.2)
        (late,) = client.consolidate_session(tenant)
        assert (late.thread, late.outcome, late.generation) == ("t007", "applied", 121)
        assert client.consolidate_session(tenant) == []


def test_with_members_each_tenant_is_consolidated_by_its_owner_once(tmp_path: Path) -> None:
    """Every member given the same tenants: each consolidates those it owns, once; a call through
    any member is forwarded to the owner."""
    tenants = ["alpha", "beta", "gamma"]
    args = ["--consolidate-idle-seconds", "1", *(f"--consolidate-tenant={t}" for t in tenants)]
    members = LocalMembers(tmp_path / "members", 2, args=args).start()
    try:
        with MemoryClient(members.processes[0].target) as client:
            for tenant in tenants:
                _retain_session(client, tenant, turns=TURNS[:3])

            def all_consolidated() -> bool:
                try:
                    return all(_record(client, t, "global")[1] == 1 for t in tenants)
                except NotFoundError:
                    return False

            wait_until(all_consolidated, seconds=30)
            for tenant in tenants:
                (outcome,) = client.consolidate_session(tenant, THREAD)  # forwarded when another owns it
                assert outcome.outcome == "already_applied"
        time.sleep(1.0)  # more background passes
        with MemoryClient(members.processes[1].target) as client:
            assert all(_record(client, t, "global")[1] == 1 for t in tenants)
    finally:
        members.stop()
    owners = {t: members.ids[[p.tenant_file(t).exists() for p in members.processes].index(True)] for t in tenants}
    assert len(set(owners.values())) == 2, owners  # both members own some (else the test proves less)
    for process in members.processes:
        assert "background consolidation failed" not in process.stderr_path.read_text()
