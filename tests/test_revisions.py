"""Revisions (docs/revisions.md): every change to a memory and to a record is listed with who made
it through which surface, when, what changed and its ledger entry; a revert is a new revision;
RevertRecord keeps the browser's revision contract; erasure reaches revisions; retention bounds
them. A real server, the real client, HTTP/JSON and the official mem0 client."""

from __future__ import annotations

import functools
import itertools
import json
import random
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mnemosyne.client import MemoryClient, RecordChange
from mnemosyne.client.errors import (
    AbortedError,
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    UnavailableError,
)
from mnemosyne.v1 import revisions_pb2
from tests.mem0_support import Mem0Client
from tests.support import tokens_json, writers_through_kills
from tests.test_erasure import texts_left


def _ledger_ops(client: MemoryClient, tenant: str, seqs: list[int]) -> list[int]:
    """The ledger entries named exist: each is at most the chain's length, which verifies."""
    report = client.verify_integrity(tenant)
    assert report.valid, report.problems
    assert all(0 < seq <= report.checked for seq in seqs), (seqs, report.checked)
    return seqs


def test_update_twice_revert_to_the_first_four_revisions_in_order(
    server_factory: Any, tenant: str, tmp_path: Path
) -> None:
    server = server_factory(env={"MNEMOSYNE_TOKENS": tokens_json({"alice-token": [tenant]})}, http=True).start()
    headers = {"Mnemosyne-Tenant": tenant}
    with MemoryClient(server.target, token="alice-token") as client:
        memory_id = client.retain(tenant, "The gate code is 4711", metadata={"room": "a"}).memory_id
        client.update_memory(tenant, memory_id, "The gate code is 5822")
        client.update_memory(tenant, memory_id, metadata={"room": "b"})
        reverted = client.revert_memory(tenant, memory_id, 1)
        assert reverted.updated and reverted.memory.text == "The gate code is 4711"
        assert reverted.memory.metadata == {"room": "a"}

        revisions = client.list_memory_revisions(tenant, memory_id)
        assert [(r.revision, r.kind) for r in revisions] == [
            (1, "retained"),
            (2, "updated"),
            (3, "updated"),
            (4, "reverted"),
        ]
        assert [r.text for r in revisions] == [
            "The gate code is 4711",
            "The gate code is 5822",
            "The gate code is 5822",
            "The gate code is 4711",
        ]
        assert [r.changed for r in revisions] == [(), ("text",), ("metadata",), ("text", "metadata")]
        assert revisions[3].reverted_to == 1
        assert {(r.surface, r.token_name) for r in revisions} == {("grpc", "tok0")}
        assert [r.at for r in revisions] == sorted(r.at for r in revisions)
        seqs = [r.ledger_seq for r in revisions]
        assert seqs == sorted(set(seqs))
        _ledger_ops(client, tenant, seqs)

        # Reverting to what it holds writes nothing.
        assert not client.revert_memory(tenant, memory_id, 4).updated
        with pytest.raises(NotFoundError) as missing:
            client.revert_memory(tenant, memory_id, 99)
        assert missing.value.reason == "REVISION_NOT_FOUND"
        # A revert to text another live memory holds is refused, naming it (as an update is).
        other = client.retain(tenant, "The gate code is 5822").memory_id
        with pytest.raises(FailedPreconditionError) as held:
            client.revert_memory(tenant, memory_id, 2)
        assert held.value.reason == "MEMORY_DUPLICATE" and held.value.metadata["memory_id"] == str(other)

    # The same revisions over HTTP/JSON and as mem0's history.
    request = urllib.request.Request(
        f"{server.http_url}/v1/tenants/{tenant}/memories/{memory_id}/revisions",
        headers={"Authorization": "Bearer alice-token"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        listed = json.loads(answer.read())["revisions"]
    assert [r["kind"] for r in listed] == [revisions_pb2.RevisionKind.Name(k) for k in (1, 2, 2, 3)]
    with Mem0Client(server.http_url, "alice-token", tmp_path, headers) as mem0:
        history = mem0.call("history", memory_id=str(memory_id))
        assert [(h["event"], h["new_memory"]) for h in history] == [
            ("ADD", "The gate code is 4711"),
            ("UPDATE", "The gate code is 5822"),
            ("UPDATE", "The gate code is 5822"),
            ("UPDATE", "The gate code is 4711"),
        ]
        assert [h["revision"] for h in history] == [1, 2, 3, 4]
        mem0.call("update", memory_id=str(memory_id), text="The gate code is 6933")
        assert mem0.call("history", memory_id=str(memory_id))[-1]["by"] == {
            "surface": "mem0",
            "token_name": "tok0",
        }

    # Erasure wins: a forgotten memory has no revisions left, and no byte of any version.
    with MemoryClient(server.target, token="alice-token") as client:
        assert client.forget(tenant, memory_id)
        assert client.list_memory_revisions(tenant, memory_id) == []
        assert client.verify_integrity(tenant).valid
    server.stop()
    assert texts_left(server.data_dir, ["code is 4711", "code is 6933"]) == {}  # (bare digits occur in random files)


def test_record_revisions_and_a_stale_revert_changes_nothing(client: MemoryClient, tenant: str) -> None:
    scope = "workspace/notes"
    g1 = client.edit_records(tenant, scope, [RecordChange("put", "plan.md", "first plan")], expected_generation=0)
    g2 = client.edit_records(tenant, scope, [RecordChange("put", "plan.md", "second plan")], expected_generation=g1)
    g3 = client.edit_records(tenant, scope, [RecordChange("put", "plan.md", "third plan")], expected_generation=g2)
    revisions, generation = client.list_record_revisions(tenant, scope, "plan.md")
    assert generation == g3
    assert [(r.generation, r.op, r.content, r.source) for r in revisions] == [
        (g1, "put", "first plan", "edit_records"),
        (g2, "put", "second plan", "edit_records"),
        (g3, "put", "third plan", "edit_records"),
    ]
    assert all(r.surface == "grpc" for r in revisions)

    # A stale expected generation: ABORTED, nothing written.
    with pytest.raises(AbortedError) as stale:
        client.revert_record(tenant, scope, "plan.md", g1, expected_generation=g2)
    assert stale.value.reason == "GENERATION_MISMATCH"
    assert client.get_record(tenant, scope, "plan.md")[0].content == "third plan"
    assert client.list_record_revisions(tenant, scope, "plan.md")[1] == g3

    g4 = client.revert_record(tenant, scope, "plan.md", g1, expected_generation=g3)
    assert g4 == g3 + 1
    assert client.get_record(tenant, scope, "plan.md")[0].content == "first plan"
    revisions, _ = client.list_record_revisions(tenant, scope, "plan.md")
    assert [(r.generation, r.content, r.source) for r in revisions][-1] == (g4, "first plan", "revert_record")
    assert client.verify_integrity(tenant).valid

    # A delete erases the record's revisions with it: nothing to revert to afterwards.
    g5 = client.edit_records(tenant, scope, [RecordChange("delete", "plan.md", "")], expected_generation=g4)
    revisions, _ = client.list_record_revisions(tenant, scope, "plan.md")
    assert [(r.generation, r.op, r.content) for r in revisions] == [(g5, "delete", "")]
    with pytest.raises(NotFoundError) as gone:
        client.revert_record(tenant, scope, "plan.md", g1, expected_generation=g5)
    assert gone.value.reason == "REVISION_NOT_FOUND"


def test_revisions_are_kept_to_a_bound(client: MemoryClient, tenant: str) -> None:
    """Record generations and memory updates no longer grow a history without bound: each keeps
    its newest 100 revisions (store/revisions.py REVISIONS_KEPT), and the older versions' text
    goes with them."""
    scope = "global"
    generation = 0
    for i in range(105):
        generation = client.edit_records(
            tenant, scope, [RecordChange("put", "log.md", f"entry {i}")], expected_generation=generation
        )
    revisions, _ = client.list_record_revisions(tenant, scope, "log.md")
    assert len(revisions) == 100
    assert revisions[0].content == "entry 5" and revisions[-1].content == "entry 104"

    memory_id = client.retain(tenant, "counter value 0").memory_id
    for i in range(1, 102):
        client.update_memory(tenant, memory_id, f"counter value {i}")
    kept = client.list_memory_revisions(tenant, memory_id)
    assert len(kept) == 100
    assert [r.text for r in kept[:2]] == ["counter value 2", "counter value 3"]
    versions = client.list_memory_versions(tenant, memory_id)
    assert [v.text for v in versions][0] == "counter value 2" and len(versions) == 100
    assert client.verify_integrity(tenant).valid


def test_updates_reverts_and_forgets_racing_through_sigkills_keep_every_first_result(
    server_factory, tenant: str
) -> None:
    """Three writers update, revert and now and then forget the same few memories while the server
    is killed (SIGKILL) at random moments and restarted. Afterwards every acknowledged write sent
    again with its request id answers its first result (a retry after the memory's forget or
    another change answered NOT_FOUND or IDEMPOTENCY_KEY_REUSED), the chain verifies, and a
    forgotten memory has no revision left."""
    rng = random.Random(20261206)
    server = server_factory().start()
    with MemoryClient(server.target) as client:
        ids = [client.retain(tenant, f"Locker {i} holds the spare badge {i}").memory_id for i in range(4)]
    acknowledged: list[tuple[Callable[[MemoryClient], bool], bool]] = []

    def writer(seed: int, stop: threading.Event) -> None:
        draw = random.Random(seed)
        for n in itertools.count():
            if stop.is_set():
                return
            memory_id, request_id, roll = draw.choice(ids), f"w{seed}-{n}", draw.random()
            if roll < 0.03:
                call = functools.partial(_forget, memory_id=memory_id, tenant=tenant, request_id=request_id)
            elif roll < 0.35:
                call = functools.partial(_revert, memory_id=memory_id, tenant=tenant, request_id=request_id, revision=1)
            else:
                text = f"Locker {memory_id} holds badge {draw.randrange(10**6)}"
                call = functools.partial(_update, memory_id=memory_id, tenant=tenant, request_id=request_id, text=text)
            try:
                with MemoryClient(server.target, retries=0, timeout=10) as client:
                    acknowledged.append((call, call(client)))
            except (UnavailableError, DeadlineExceededError):  # the server is down: unknown, not retried here
                time.sleep(0.05)
            except (NotFoundError, FailedPreconditionError):  # forgotten, or the text another memory's
                pass

    writers = [functools.partial(writer, seed) for seed in range(3)]
    writers_through_kills(server, writers, [rng.uniform(0.3, 1.0) for _ in range(3)])
    assert len(acknowledged) > 20
    with MemoryClient(server.target) as client:
        for call, first in acknowledged:
            if first:  # a write that changed nothing kept no result (docs/revisions.md)
                assert call(client) is True, call
        assert client.verify_integrity(tenant).valid
        for memory_id in ids:
            if client.get_memory(tenant, memory_id).forgotten:
                assert client.list_memory_revisions(tenant, memory_id) == []


def _forget(client: MemoryClient, *, tenant: str, memory_id: int, request_id: str) -> bool:
    return client.forget(tenant, memory_id, request_id=request_id)


def _revert(client: MemoryClient, *, tenant: str, memory_id: int, request_id: str, revision: int) -> bool:
    return client.revert_memory(tenant, memory_id, revision, request_id=request_id).updated


def _update(client: MemoryClient, *, tenant: str, memory_id: int, request_id: str, text: str) -> bool:
    return client.update_memory(tenant, memory_id, text, request_id=request_id).updated
