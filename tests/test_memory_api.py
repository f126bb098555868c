"""Every MemoryService and AdminService RPC of the foundation: happy paths and bad input, with
the exact status code and reason, through the real client against a real server."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from mnemosyne.client import (
    AbortedError,
    InvalidArgumentError,
    MemoryClient,
    NotFoundError,
    RetainItem,
)
from mnemosyne.v1 import admin_pb2, admin_pb2_grpc, memory_pb2, memory_pb2_grpc

BAD_TENANTS = ["../x", "a/b", "", "x" * 200, "a\x00b", "UPPER", "-lead", "a b", "tenant.sqlite"]


@pytest.mark.parametrize("bad", BAD_TENANTS)
def test_bad_tenant_ids_are_invalid_argument_and_create_no_file(client: MemoryClient, server, bad: str) -> None:
    before = set(server.data_dir.rglob("*"))
    for call in (
        lambda: client.retain(bad, "hello"),
        lambda: client.retain_batch(bad, ["hello"]),
        lambda: client.recall(bad, "hello"),
        lambda: client.get_memory(bad, 1),
        lambda: client.list_memories(bad),
        lambda: client.forget(bad, 1),
        lambda: client.verify_integrity(bad),
        lambda: client.stats(bad),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert info.value.reason == "TENANT_INVALID"
        assert "tenant id" in info.value.message
    assert set(server.data_dir.rglob("*")) == before


def test_retain_returns_created_and_get_memory_returns_everything(client: MemoryClient, tenant: str) -> None:
    text = "Ticket RF-88213: the customer alice@example.com asked for a refund of $120 on 8 May 2023."
    result = client.retain(tenant, text, scope="workspace/support", metadata={"source": "chat"})
    assert result.status == "created" and result.memory_id > 0
    memory = client.get_memory(tenant, result.memory_id)
    assert memory.text == text
    assert memory.scope == "workspace/support"
    assert memory.metadata == {"source": "chat"}
    assert memory.created_at > 0 and not memory.forgotten
    kinds = {(f.kind, f.normalized) for f in memory.facts}
    assert ("identifier", "RF-88213") in kinds
    assert ("email", "alice@example.com") in kinds
    assert ("date", "2023-05-08") in kinds
    assert ("quantity", "$120") in kinds


def test_retain_extracts_statements_as_triples(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "Alice's favourite colour is green. The office is in Lisbon.").memory_id
    triples = {(t.subject, t.predicate, t.object) for t in client.get_memory(tenant, memory_id).triples}
    assert ("alice", "favourite colour", "green") in triples
    assert ("the office", "is", "in lisbon") in triples


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"text": ""}, "TEXT_EMPTY"),
        ({"text": "   "}, "TEXT_EMPTY"),
        ({"text": "\x01\x02\x1f"}, "TEXT_EMPTY"),  # control characters alone
        ({"text": "\u200b\ufeff \u2060\u00ad"}, "TEXT_EMPTY"),  # format characters and a space
        ({"text": "\u2028\u3000\t\x7f"}, "TEXT_EMPTY"),
        ({"text": "x" * 40_000}, "TEXT_TOO_LONG"),
        ({"text": "ok", "scope": "../etc"}, "SCOPE_INVALID"),
        ({"text": "ok", "scope": "workspace/"}, "SCOPE_INVALID"),
        ({"text": "ok", "metadata": {"": "v"}}, "METADATA_INVALID"),
        ({"text": "ok", "metadata": {f"k{i}": "v" for i in range(40)}}, "METADATA_TOO_LARGE"),
        ({"text": "ok", "request_id": "has space"}, "REQUEST_ID_INVALID"),
    ],
)
def test_retain_bad_input_is_invalid_argument(
    client: MemoryClient, tenant: str, kwargs: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.retain(tenant, **kwargs)
    assert info.value.reason == reason
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_text_of_one_visible_character_of_any_kind_is_kept(client: MemoryClient, tenant: str) -> None:
    # Only white space, control and format characters are nothing: a mark, an emoji, an ideograph,
    # a private-use or unassigned character is something.
    for text in ["\u0301", "🎂", "中", "\ue000", "\U000e0001x", "\u200bx", "\U0010fffd"]:
        assert client.retain(tenant, text).status == "created", repr(text)
        client.recall(tenant, text)  # and what a memory may say, a query may ask


def test_retain_same_text_same_scope_is_a_duplicate_of_the_first(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, "The invoice is due on Friday.")
    again = client.retain(tenant, "  the INVOICE is due on   Friday. ", metadata={"other": "metadata"})
    other_scope = client.retain(tenant, "The invoice is due on Friday.", scope="workspace/w1")
    assert again.status == "duplicate" and again.memory_id == first.memory_id
    assert other_scope.status == "created" and other_scope.memory_id != first.memory_id
    assert client.stats(tenant).duplicates == 1


def test_retain_batch_items_are_independent(client: MemoryClient, tenant: str) -> None:
    results = client.retain_batch(
        tenant,
        [
            RetainItem("first good item"),
            RetainItem(""),
            RetainItem("second good item", scope="bad scope"),
            RetainItem("first good item"),
            RetainItem("third good item", scope="workspace/x", metadata={"k": "v"}),
        ],
    )
    assert [r.status for r in results] == ["created", "invalid", "invalid", "duplicate", "created"]
    assert results[1].error_reason == "TEXT_EMPTY" and results[1].error_message
    assert results[2].error_reason == "SCOPE_INVALID"
    assert results[3].memory_id == results[0].memory_id
    assert client.stats(tenant).memories == 2


def test_retain_batch_limits(client: MemoryClient, tenant: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.retain_batch(tenant, [])
    assert info.value.reason == "BATCH_EMPTY"
    with pytest.raises(InvalidArgumentError) as info:
        client.retain_batch(tenant, [f"item {i}" for i in range(1001)])
    assert info.value.reason == "BATCH_TOO_LARGE"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"query": ""}, "QUERY_EMPTY"),
        ({"query": " \t\n"}, "QUERY_EMPTY"),
        ({"query": "\u200b\ufeff\x01"}, "QUERY_EMPTY"),
        ({"query": "tea\x00coffee"}, "QUERY_INVALID"),
        ({"query": "x" * 5000}, "QUERY_TOO_LONG"),
        ({"query": "x", "k": 101}, "K_OUT_OF_RANGE"),
        ({"query": "x", "k": -1}, "K_OUT_OF_RANGE"),
        ({"query": "x", "scopes": ["nope/x"]}, "SCOPE_INVALID"),
    ],
)
def test_recall_bad_input_is_invalid_argument(
    client: MemoryClient, tenant: str, kwargs: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.recall(tenant, **kwargs)
    assert info.value.reason == reason


def test_recall_of_a_tenant_never_written_is_empty_and_creates_no_file(
    client: MemoryClient, server, tenant: str
) -> None:
    assert client.recall(tenant, "anything") == []
    assert client.list_memories(tenant).memories == []
    assert client.stats(tenant).memories == 0
    assert not server.tenant_file(tenant).exists()


def test_recall_filters_apply_before_the_top_k_cut(client: MemoryClient, tenant: str) -> None:
    # 30 memories mention "deploy"; only 3 are in the filtered scope, and they are the weakest
    # matches. A filter applied after the cut would return fewer than k hits.
    client.retain_batch(tenant, [RetainItem(f"deploy deploy deploy pipeline run {i}") for i in range(30)])
    wanted = client.retain_batch(
        tenant,
        [
            RetainItem(f"a note that mentions deploy once, number {i}", scope="workspace/ops", metadata={"team": "sre"})
            for i in range(3)
        ],
    )
    hits = client.recall(tenant, "deploy", k=3, scopes=["workspace/ops"])
    assert sorted(h.memory.id for h in hits) == sorted(r.memory_id for r in wanted)
    hits = client.recall(tenant, "deploy", k=3, filters={"team": "sre"})
    assert sorted(h.memory.id for h in hits) == sorted(r.memory_id for r in wanted)
    assert client.recall(tenant, "deploy", k=3, filters={"team": "nobody"}) == []


def test_recall_hit_carries_id_text_scope_metadata_score_time_and_facts(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "Order ORD-5521 ships in 3 days", metadata={"channel": "email"}).memory_id
    (hit,) = client.recall(tenant, "when does the order ship", k=1)
    assert hit.memory.id == memory_id
    assert hit.memory.text == "Order ORD-5521 ships in 3 days"
    assert hit.memory.scope == "global" and hit.memory.metadata == {"channel": "email"}
    assert hit.score > 0 and hit.memory.created_at > 0
    assert {f.normalized for f in hit.memory.facts} >= {"ORD-5521", "3 days"}


def test_get_memory_unknown_id_is_not_found(client: MemoryClient, tenant: str) -> None:
    client.retain(tenant, "something")
    with pytest.raises(NotFoundError) as info:
        client.get_memory(tenant, 999_999)
    assert info.value.reason == "MEMORY_NOT_FOUND"


def test_list_memories_pages_in_id_order(client: MemoryClient, tenant: str) -> None:
    ids = [r.memory_id for r in client.retain_batch(tenant, [f"listed memory {i}" for i in range(7)])]
    seen, token = [], ""
    while True:
        page = client.list_memories(tenant, page_size=3, page_token=token)
        seen += [m.id for m in page.memories]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids
    scoped = client.list_memories(tenant, scope="workspace/none")
    assert scoped.memories == [] and scoped.next_page_token == ""


def test_list_memories_newest_first_pages_in_descending_order(client: MemoryClient, tenant: str) -> None:
    ids = [r.memory_id for r in client.retain_batch(tenant, [f"newest memory {i}" for i in range(7)])]
    client.forget(tenant, ids[3])
    seen, token, tokens = [], "", []
    while True:
        page = client.list_memories(tenant, page_size=2, page_token=token, newest_first=True)
        seen += [m.id for m in page.memories]
        token = page.next_page_token
        if not token:
            break
        tokens.append(token)
    assert seen == [i for i in reversed(ids) if i != ids[3]]
    with_forgotten = client.list_memories(tenant, page_size=10, newest_first=True, include_forgotten=True)
    assert [m.id for m in with_forgotten.memories] == list(reversed(ids))
    # A token is bound to its order: one from the newest-first listing does not page the other.
    with pytest.raises(InvalidArgumentError) as info:
        client.list_memories(tenant, page_size=2, page_token=tokens[0])
    assert info.value.reason == "PAGE_TOKEN_INVALID"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [({"page_token": "garbage!"}, "PAGE_TOKEN_INVALID"), ({"page_size": 5000}, "PAGE_SIZE_OUT_OF_RANGE")],
)
def test_list_memories_bad_input(client: MemoryClient, tenant: str, kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        client.list_memories(tenant, **kwargs)
    assert info.value.reason == reason


def test_forget_erases_text_and_allows_retaining_it_again(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "The door code is 4417").memory_id
    assert client.forget(tenant, memory_id) is True
    assert client.forget(tenant, memory_id) is False
    forgotten = client.get_memory(tenant, memory_id)
    assert forgotten.forgotten and forgotten.text == "" and forgotten.facts == []
    assert client.recall(tenant, "door code") == []
    assert client.list_memories(tenant).memories == []
    assert [m.id for m in client.list_memories(tenant, include_forgotten=True).memories] == [memory_id]
    again = client.retain(tenant, "The door code is 4417")
    assert again.status == "created" and again.memory_id != memory_id
    assert client.verify_integrity(tenant).valid


def test_forget_unknown_memory_is_not_found(client: MemoryClient, tenant: str) -> None:
    with pytest.raises(NotFoundError):
        client.forget(tenant, 12345)
    client.retain(tenant, "exists")
    with pytest.raises(NotFoundError):
        client.forget(tenant, 12345)


def test_request_id_replay_returns_first_result_and_reuse_is_rejected(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, "idempotent text", request_id="req-1")
    again = client.retain(tenant, "idempotent text", request_id="req-1")
    assert again == first and again.status == "created"
    with pytest.raises(AbortedError) as info:
        client.retain(tenant, "different text", request_id="req-1")
    assert info.value.reason == "IDEMPOTENCY_KEY_REUSED"
    batch = client.retain_batch(tenant, ["b1", "b2"], request_id="req-2")
    assert client.retain_batch(tenant, ["b1", "b2"], request_id="req-2") == batch
    assert client.stats(tenant).writes == 3


def test_stats_and_verify_integrity(client: MemoryClient, tenant: str) -> None:
    client.retain_batch(tenant, ["one fact", "two facts", "one fact"])
    client.forget(tenant, client.retain(tenant, "to forget").memory_id)
    stats = client.stats(tenant)
    assert (stats.memories, stats.forgotten, stats.writes, stats.duplicates) == (2, 1, 3, 1)
    assert stats.model_calls == 3 and stats.ledger_entries == 4 and stats.file_bytes > 0
    report = client.verify_integrity(tenant)
    assert report.valid and report.first_broken_at == 0 and report.checked == 4
    assert len(report.head_hash) == 64 and report.problems == []


def test_fts_syntax_in_queries_is_searched_as_text(client: MemoryClient, tenant: str) -> None:
    memory_id = client.retain(tenant, "The customer requested a refund, ticket number RF-88213").memory_id
    client.retain(tenant, "An unrelated note about gardening")
    # Text-only mode: these hits can only come from BM25, so a silent fallback to vectors fails.
    for query in [
        '"refund',
        "refund*",
        "refund AND",
        "NEAR(refund",
        "ticket: refund",
        "(refund",
        "refund)",
        "-refund",
        "^refund",
        "refund OR",
        'NEAR("refund" ticket*) AND :x',
        "RF-88213",
        "{refund}",
    ]:
        hits = client.recall(tenant, query, k=1, mode="text")
        assert [h.memory.id for h in hits] == [memory_id], query
        assert hits[0].text_score > 0
    for query in ['""', "()", "*", ":", "^-"]:  # syntax with no word in it: no error, no hit
        assert client.recall(tenant, query, k=1, mode="text") == []


def test_raw_grpc_errors_carry_error_info_reason(target: str) -> None:
    from mnemosyne.client.errors import error_info

    with grpc.insecure_channel(target) as channel:
        with pytest.raises(grpc.RpcError) as info:
            memory_pb2_grpc.MemoryServiceStub(channel).Retain(memory_pb2.RetainRequest(tenant="../x", text="a"))
        detail = error_info(info.value)
        assert detail is not None and detail.reason == "TENANT_INVALID" and detail.domain == "mnemosyne.v1"
        admin_pb2_grpc.AdminServiceStub(channel).Ping(admin_pb2.PingRequest())


def test_recall_retain_and_ping_report_their_server_side_time_when_asked(client: MemoryClient, tenant: str) -> None:
    """The benchmarks separate the server's own time from the gRPC floor with this trailer; a
    caller that does not ask for it gets none (it would cost every call)."""
    calls = [
        (
            client.memory.Retain,
            memory_pb2.RetainRequest(tenant=tenant, text="timed write: crate CR-1", request_id="t1"),
        ),
        (client.memory.Recall, memory_pb2.RecallRequest(tenant=tenant, query="crate CR-1", k=3)),
        (client.admin.Ping, admin_pb2.PingRequest()),
    ]
    ask = (("mnemosyne-ask-server-time", "1"),)
    for method, request in calls:
        _, call = method.with_call(request, metadata=(*client.call_metadata, *ask), timeout=30)
        micros = float(dict(call.trailing_metadata())["mnemosyne-server-time-us"])
        assert 0 < micros < 30e6
        _, call = method.with_call(request, metadata=client.call_metadata, timeout=30)
        assert "mnemosyne-server-time-us" not in dict(call.trailing_metadata())
