"""Workspace records: batches as one generation, idempotent retries after a lost reply, browser
edits and consolidation receipts with explicit durable preconditions, and the audit ledger."""

from __future__ import annotations

import functools
import random
import threading
import time
from typing import Any

import apsw
import pytest

from mnemosyne.client import MemoryClient, MemoryHost, RecordChange
from mnemosyne.client.errors import (
    AbortedError,
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
    UnavailableError,
)
from tests.support import writers_through_kills


class Agent:
    pass


def _records(client: MemoryClient, tenant: str, scope: str) -> tuple[dict[str, str], int]:
    listed = client.list_records(tenant, scope)
    return {r.key: r.content for r in listed.records}, listed.generation


def test_put_and_delete_in_one_tool_call_publish_one_generation(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    first = host.call_tool(
        agent,
        "update_workspace",
        {
            "changes": [
                {"op": "put", "key": "notes/a.md", "content": "A"},
                {"op": "put", "key": "old.md", "content": "old"},
            ]
        },
    )
    assert first["ok"]
    assert _records(client, tenant, "workspace/w") == ({"notes/a.md": "A", "old.md": "old"}, 1)
    entries_before = client.stats(tenant).ledger_entries

    second = host.call_tool(
        agent,
        "update_workspace",
        {
            "changes": [
                {"op": "put", "key": "plan.md", "content": "the plan"},
                {"op": "delete", "key": "old.md"},
            ]
        },
    )
    assert second == {"ok": True, "result": "2 change(s) applied to workspace w."}
    assert _records(client, tenant, "workspace/w") == ({"notes/a.md": "A", "plan.md": "the plan"}, 2)
    assert client.stats(tenant).ledger_entries == entries_before + 1
    assert client.verify_integrity(tenant).valid


def test_a_failing_change_fails_the_whole_batch(client: MemoryClient, tenant: str) -> None:
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "w")
    result = host.call_tool(
        agent,
        "update_workspace",
        {
            "changes": [
                {"op": "put", "key": "plan.md", "content": "kept?"},
                {"op": "delete", "key": "missing.md"},
            ]
        },
    )
    assert result["ok"] is False and result["reason"] == "RECORD_NOT_FOUND"
    assert _records(client, tenant, "workspace/w") == ({}, 0)


def test_update_global_replaces_only_memory_md(client: MemoryClient, tenant: str) -> None:
    generation = client.edit_records(tenant, "global", [RecordChange("put", "people.md", "Ada")], expected_generation=0)
    client.retain(tenant, "A retained global memory.", scope="global")
    assert client.update_global(tenant, "the main memory", observed_generation=generation) == 2
    records, generation = _records(client, tenant, "global")
    assert records == {"MEMORY.md": "the main memory", "people.md": "Ada"} and generation == 2
    assert [m.text for m in client.list_memories(tenant, scope="global").memories] == ["A retained global memory."]


@pytest.mark.parametrize("method", ["update_global", "update_workspace"])
def test_killed_after_commit_then_retried_returns_the_first_result(
    server_factory: Any, tenant: str, method: str
) -> None:
    process = server_factory(env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": method}).start()
    scope = "global" if method == "update_global" else "workspace/w"

    def write(client: MemoryClient) -> int:
        if method == "update_global":
            return client.update_global(tenant, "committed once", observed_generation=0, request_id="tool-call-1")
        return client.update_workspace(
            tenant,
            "w",
            [RecordChange("put", "a.md", "committed once"), RecordChange("put", "b.md", "too")],
            observed_generation=0,
            request_id="tool-call-1",
        )

    with MemoryClient(process.target, retries=0) as client:
        with pytest.raises(UnavailableError):
            write(client)  # the server committed, then died before replying
    assert process.wait_exit() != 0
    process.restart()
    with MemoryClient(process.target) as client:
        # Same request id, same observation: the first result, not a false mismatch.
        assert write(client) == 1
        assert write(client) == 1
        records, generation = _records(client, tenant, scope)
        assert generation == 1 and "committed once" in records.values()
        assert client.stats(tenant).ledger_entries == 1
        # A new request with the now-stale observation is rejected, never applied on the latest.
        with pytest.raises(AbortedError) as stale:
            client.update_global(
                tenant, "other", observed_generation=0
            ) if method == "update_global" else client.update_workspace(
                tenant, "w", [RecordChange("put", "c.md", "x")], observed_generation=0
            )
        assert stale.value.reason == "GENERATION_MISMATCH"
        # Reusing the request id for different content is refused.
        with pytest.raises(AbortedError) as reused:
            client.update_global(tenant, "different", observed_generation=0, request_id="tool-call-1")
        assert reused.value.reason == "IDEMPOTENCY_KEY_REUSED"
        assert client.verify_integrity(tenant).valid


def test_consolidation_receipt_applies_once_across_a_sigkill(server_factory: Any, tenant: str) -> None:
    process = server_factory(env={"MNEMOSYNE_TEST_CRASH_AFTER_COMMIT": "consolidate"}).start()
    changes = [
        RecordChange("put", "MEMORY.md", "consolidated session 7"),
        RecordChange("put", "sessions/7.md", "summary"),
    ]
    with MemoryClient(process.target) as client:
        client.edit_records(tenant, "global", [RecordChange("put", "MEMORY.md", "before")], expected_generation=0)
    with MemoryClient(process.target, retries=0) as client:
        with pytest.raises(UnavailableError):
            client.consolidate(tenant, "global", changes, expected_generation=1, receipt_id="session-7")
    process.wait_exit()
    process.env.pop("MNEMOSYNE_TEST_CRASH_AFTER_COMMIT")
    process.restart()
    with MemoryClient(process.target) as client:
        # The recovered consolidator retries with the same receipt (and its now-stale precondition).
        for _ in range(2):
            result = client.consolidate(tenant, "global", changes, expected_generation=1, receipt_id="session-7")
            assert (result.generation, result.already_applied) == (2, True)
        assert _records(client, tenant, "global") == (
            {"MEMORY.md": "consolidated session 7", "sessions/7.md": "summary"},
            2,
        )
        assert client.stats(tenant).ledger_entries == 2
        with pytest.raises(AbortedError) as reused:
            client.consolidate(tenant, "global", [RecordChange("put", "MEMORY.md", "other")], 1, "session-7")
        assert reused.value.reason == "RECEIPT_REUSED"
        # A new receipt still obeys the precondition.
        with pytest.raises(AbortedError) as stale:
            client.consolidate(tenant, "global", changes, expected_generation=1, receipt_id="session-8")
        assert stale.value.reason == "GENERATION_MISMATCH"
        fresh = client.consolidate(tenant, "global", [RecordChange("delete", "sessions/7.md")], 2, "session-8")
        assert (fresh.generation, fresh.already_applied) == (3, False)
        assert client.verify_integrity(tenant).valid


def test_consolidate_requires_a_receipt(client: MemoryClient, tenant: str) -> None:
    with pytest.raises(InvalidArgumentError) as missing:
        client.consolidate(tenant, "global", [RecordChange("put", "MEMORY.md", "x")], 0, "")
    assert missing.value.reason == "RECEIPT_ID_INVALID"


def test_stale_browser_edit_is_rejected_and_changes_nothing(client: MemoryClient, tenant: str) -> None:
    scope = "workspace/docs"
    assert client.edit_records(tenant, scope, [RecordChange("put", "readme.md", "v1")], expected_generation=0) == 1
    record, generation = client.get_record(tenant, scope, "readme.md")
    assert (record.content, generation) == ("v1", 1)
    # Another writer (an agent's tool call) changes the workspace in between.
    host = MemoryHost(client, tenant)
    agent = Agent()
    host.assemble_context(agent, "docs")
    assert host.call_tool(
        agent, "update_workspace", {"changes": [{"op": "put", "key": "readme.md", "content": "v2 by agent"}]}
    )["ok"]

    with pytest.raises(AbortedError) as stale:
        client.edit_records(
            tenant, scope, [RecordChange("put", "readme.md", "v2 by browser")], expected_generation=generation
        )
    assert stale.value.reason == "GENERATION_MISMATCH" and "2" not in stale.value.message
    assert _records(client, tenant, scope) == ({"readme.md": "v2 by agent"}, 2)
    assert (
        client.edit_records(tenant, scope, [RecordChange("put", "readme.md", "v3 by browser")], expected_generation=2)
        == 3
    )


def test_browser_edit_retry_with_the_same_request_id_is_idempotent(client: MemoryClient, tenant: str) -> None:
    change = [RecordChange("put", "a.md", "x")]
    assert client.edit_records(tenant, "global", change, expected_generation=0, request_id="edit-1") == 1
    assert client.edit_records(tenant, "global", change, expected_generation=0, request_id="edit-1") == 1
    assert _records(client, tenant, "global") == ({"a.md": "x"}, 1)


def test_record_reads(client: MemoryClient, tenant: str) -> None:
    assert _records(client, tenant, "workspace/none") == ({}, 0)
    with pytest.raises(NotFoundError) as missing:
        client.get_record(tenant, "global", "MEMORY.md")
    assert missing.value.reason == "RECORD_NOT_FOUND"
    with pytest.raises(InvalidArgumentError) as bad_scope:
        client.list_records(tenant, "workspace/../x")
    assert bad_scope.value.reason == "SCOPE_INVALID"


@pytest.mark.parametrize(
    "key, reason",
    [
        ("", "RECORD_KEY_INVALID"),
        ("/abs.md", "RECORD_KEY_INVALID"),
        ("../up.md", "RECORD_KEY_INVALID"),
        ("a/../../up.md", "RECORD_KEY_INVALID"),
        ("a//b.md", "RECORD_KEY_INVALID"),
        ("./a.md", "RECORD_KEY_INVALID"),
        ("a\\b.md", "RECORD_KEY_INVALID"),
        ("nul\x00.md", "RECORD_KEY_INVALID"),
        ("tab\t.md", "RECORD_KEY_INVALID"),
        ("k" * 257, "RECORD_KEY_INVALID"),
    ],
)
def test_record_keys_are_validated(client: MemoryClient, tenant: str, key: str, reason: str) -> None:
    with pytest.raises(InvalidArgumentError) as bad:
        client.edit_records(tenant, "global", [RecordChange("put", key, "x")], expected_generation=0)
    assert bad.value.reason == reason
    assert _records(client, tenant, "global") == ({}, 0)


def test_batch_and_content_limits(client: MemoryClient, tenant: str) -> None:
    cases = [
        ([RecordChange("put", "big.md", "x" * (256 * 1024 + 1))], "RECORD_TOO_LARGE"),
        ([RecordChange("put", f"{i}.md", "x") for i in range(101)], "CHANGES_TOO_MANY"),
        ([], "CHANGES_EMPTY"),
        ([RecordChange("put", "a.md", "1"), RecordChange("delete", "a.md")], "RECORD_KEY_DUPLICATE"),
        ([RecordChange("rename", "a.md")], "CHANGE_OP_INVALID"),
    ]
    for changes, reason in cases:
        with pytest.raises(InvalidArgumentError) as bad:
            client.edit_records(tenant, "global", changes, expected_generation=0)
        assert bad.value.reason == reason
    with pytest.raises(InvalidArgumentError) as bad_workspace:
        client.update_workspace(tenant, "a/b", [RecordChange("put", "a.md", "x")], observed_generation=0)
    assert bad_workspace.value.reason == "WORKSPACE_INVALID"
    assert client.edit_records(tenant, "global", [RecordChange("put", "ok.md", "x" * (256 * 1024))], 0) == 1


def test_tampering_a_record_breaks_integrity(server_factory: Any, tenant: str) -> None:
    process = server_factory().start()
    with MemoryClient(process.target) as client:
        client.retain(tenant, "A retained memory next to the records.")
        client.edit_records(tenant, "global", [RecordChange("put", "MEMORY.md", "honest")], expected_generation=0)
        client.edit_records(tenant, "workspace/w", [RecordChange("put", "plan.md", "plan")], expected_generation=0)
        client.edit_records(
            tenant, "workspace/w", [RecordChange("delete", "plan.md"), RecordChange("put", "b.md", "b")], 1
        )
        report = client.verify_integrity(tenant)
        assert report.valid and report.checked == 4

        connection = apsw.Connection(str(process.tenant_file(tenant)))
        connection.set_busy_timeout(10_000)
        connection.execute("UPDATE records SET content = 'tampered' WHERE scope = 'global' AND key = 'MEMORY.md'")
        report = client.verify_integrity(tenant)
        assert not report.valid
        assert [(p.kind, p.ledger_seq) for p in report.problems] == [("RECORD_MISMATCH", 2)]

        connection.execute("UPDATE records SET content = 'honest' WHERE scope = 'global'")
        assert client.verify_integrity(tenant).valid
        connection.execute("UPDATE scopes SET generation = 7 WHERE scope = 'workspace/w'")
        assert [p.kind for p in client.verify_integrity(tenant).problems] == ["GENERATION_UNRECORDED"]
        connection.execute("UPDATE scopes SET generation = 2 WHERE scope = 'workspace/w'")
        connection.execute(
            "INSERT INTO records(scope, key, content, ledger_seq) VALUES('workspace/w', 'sneaky.md', 'x', 0)"
        )
        assert [p.kind for p in client.verify_integrity(tenant).problems] == ["UNRECORDED_RECORD"]
        connection.execute("DELETE FROM records WHERE key IN ('sneaky.md', 'b.md')")
        assert [p.kind for p in client.verify_integrity(tenant).problems] == ["RECORD_MISSING"]
        connection.close()


def test_a_fault_inside_the_write_leaves_records_and_generation_unchanged(server_factory: Any, tenant: str) -> None:
    process = server_factory(env={"MNEMOSYNE_TEST_FAULTS": "after_records:BOOM"}).start()
    with MemoryClient(process.target) as client:
        host = MemoryHost(client, tenant)
        agent = Agent()
        host.assemble_context(agent, "w")
        assert host.call_tool(
            agent, "update_workspace", {"changes": [{"op": "put", "key": "a.md", "content": "fine"}]}
        )["ok"]
        entries = client.stats(tenant).ledger_entries
        # The store fails after writing the records, before the generation: nothing of it stays.
        with pytest.raises(ServerError):  # a fault of ours, not of the model: the host raises
            host.call_tool(
                agent,
                "update_workspace",
                {
                    "changes": [
                        {"op": "delete", "key": "a.md"},
                        {"op": "put", "key": "b.md", "content": "BOOM"},
                    ]
                },
            )
        assert _records(client, tenant, "workspace/w") == ({"a.md": "fine"}, 1)
        assert client.stats(tenant).ledger_entries == entries
        assert client.verify_integrity(tenant).valid
        assert host.call_tool(agent, "update_workspace", {"changes": [{"op": "put", "key": "b.md", "content": "ok"}]})[
            "ok"
        ]


def test_record_edits_through_sigkills_at_random_moments_lose_nothing_acknowledged(
    server_factory: Any, tenant: str
) -> None:
    """Two writers edit the records of a workspace each (puts of a few KB, deletes) while the
    server is SIGKILLed at random moments and restarted; a writer whose call died sends it again,
    the same request id and observed generation, once the server is back. Afterwards each scope
    holds what its acknowledged edits made and its generation is their count, each edit sent again
    answers its first generation, the chain verifies with one entry per edit, and the data
    directory holds no file a write left half-made."""
    server = server_factory().start()
    made: dict[str, tuple[dict[str, str], int]] = {}  # scope -> its records and generation, as acknowledged
    sent: list[tuple[str, list[RecordChange], int, str]] = []  # scope, changes, observed generation, request id

    def writer(seed: int, stop: threading.Event) -> None:
        scope, draw, generation = f"workspace/w{seed}", random.Random(seed), 0
        records: dict[str, str] = {}
        while not stop.is_set():
            key = f"notes/{draw.randrange(4)}.md"
            if key in records and draw.random() < 0.3:
                changes = [RecordChange("delete", key)]
            else:
                text = f"w{seed} edit {generation} " + "x" * draw.randrange(4000)
                changes = [RecordChange("put", key, text), RecordChange("put", "last.md", str(generation))]
            request_id = f"w{seed}-{generation}"
            while True:  # the server is down: the same call again once it is back
                try:
                    with MemoryClient(server.target, retries=0, timeout=10) as client:
                        assert client.edit_records(tenant, scope, changes, generation, request_id) == generation + 1
                    break
                except (UnavailableError, DeadlineExceededError):
                    time.sleep(0.05)
            for change in changes:
                if change.op == "delete":
                    del records[change.key]
                else:
                    records[change.key] = change.content
            sent.append((scope, changes, generation, request_id))
            generation += 1
        made[scope] = (records, generation)

    rng = random.Random(20261207)
    writers_through_kills(
        server, [functools.partial(writer, seed) for seed in range(2)], [rng.uniform(0.2, 0.6) for _ in range(2)]
    )
    assert len(made) == 2 and len(sent) > 20, len(sent)
    with MemoryClient(server.target) as client:
        for scope, (records, generation) in made.items():
            assert _records(client, tenant, scope) == (records, generation)
        for scope, changes, observed, request_id in sent:
            assert client.edit_records(tenant, scope, changes, observed, request_id) == observed + 1
        assert client.verify_integrity(tenant).valid
        assert client.stats(tenant).ledger_entries == len(sent)
    server.stop()
    # Nothing half-made: no new tenant file under a temporary name, no install, no WAL left.
    assert [p.name for p in (server.data_dir / "tenants").iterdir()] == [f"{tenant}.sqlite"]
