"""When a memory was said (``occurred_at``) and its place in a thread: given on Retain,
RetainBatch items and conversations, returned by Get, List and Recall, kept through the hot path,
listed in thread order by ListMemories(thread), and refused with a clear reason when invalid.
(The HTTP JSON form: tests/test_http_api.py; export and import: tests/test_export_import.py.)"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from mnemosyne.client import AbortedError, InvalidArgumentError, MemoryClient, Message, RetainItem, ThreadRef
from mnemosyne.v1 import memory_pb2, memory_pb2_grpc, types_pb2

MAY_8 = 1_683_554_160.123456  # 2023-05-08T13:56:00.123456Z


def test_retain_batch_and_conversation_carry_time_and_thread(client: MemoryClient, tenant: str) -> None:
    one = client.retain(
        tenant, "Caroline went to the LGBTQ support group", occurred_at=MAY_8, thread=ThreadRef("s1", 2)
    )
    batch = client.retain_batch(
        tenant,
        [
            RetainItem("Melanie painted a lake sunrise", occurred_at=MAY_8 + 60, thread=ThreadRef("s1", 0)),
            RetainItem("A note without time or thread"),
        ],
    )
    talk = client.retain_conversation(
        tenant,
        [Message("user", "Where is the pottery class?"), Message("assistant", "In the old mill")],
        occurred_at=MAY_8 - 86_400,
        thread=ThreadRef("s1", 1),
    )
    got = client.get_memory(tenant, one.memory_id)
    assert got.occurred_at == pytest.approx(MAY_8, abs=1e-6) and got.thread == ThreadRef("s1", 2)
    plain = client.get_memory(tenant, batch[1].memory_id)
    assert plain.occurred_at is None and plain.thread is None
    conversation = client.get_memory(tenant, talk.memory_id)
    assert conversation.thread == ThreadRef("s1", 1)
    assert conversation.occurred_at == pytest.approx(MAY_8 - 86_400, abs=1e-6)
    hit = client.recall(tenant, "lake sunrise painting", k=1)[0].memory
    assert hit.id == batch[0].memory_id and hit.thread == ThreadRef("s1", 0)
    assert hit.occurred_at == pytest.approx(MAY_8 + 60, abs=1e-6)
    # The thread in order, whatever the order of writing; nothing without a thread.
    listed = client.list_memories(tenant, thread="s1").memories
    assert [m.id for m in listed] == [batch[0].memory_id, talk.memory_id, one.memory_id]
    backwards = client.list_memories(tenant, thread="s1", newest_first=True).memories
    assert [m.id for m in backwards] == [one.memory_id, talk.memory_id, batch[0].memory_id]
    assert client.list_memories(tenant, thread="s2").memories == []


def test_a_thread_is_listed_page_by_page_in_order_and_its_token_is_bound_to_it(
    client: MemoryClient, tenant: str
) -> None:
    # Positions out of order, with a tie (ids break it), and another thread interleaved.
    positions = [5, 1, 9, 1, 0, 7, 3]
    ids = {}
    for i, position in enumerate(positions):
        ids[i] = client.retain(tenant, f"turn number {i} of the long thread", thread=ThreadRef("t", position)).memory_id
        client.retain(tenant, f"turn number {i} of the other thread", thread=ThreadRef("u", i))
    expected = [ids[i] for i in sorted(range(len(positions)), key=lambda i: (positions[i], ids[i]))]
    for newest_first in (False, True):
        seen, token = [], ""
        while True:
            page = client.list_memories(tenant, thread="t", page_size=2, page_token=token, newest_first=newest_first)
            seen += [m.id for m in page.memories]
            token = page.next_page_token
            if not token:
                break
        assert seen == (expected[::-1] if newest_first else expected)
    token = client.list_memories(tenant, thread="t", page_size=2).next_page_token
    others: list[dict[str, Any]] = [{"thread": "u"}, {}]
    for other in others:
        with pytest.raises(InvalidArgumentError) as info:
            client.list_memories(tenant, page_size=2, page_token=token, **other)
        assert info.value.reason == "PAGE_TOKEN_INVALID"


def test_fast_writes_keep_time_and_thread(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    client.retain(tenant, "fast: the second turn", fast=True, occurred_at=MAY_8, thread=ThreadRef("fast", 1))
    client.retain_batch(tenant, [RetainItem("fast: the first turn", thread=ThreadRef("fast", 0))], fast=True)
    assert client.hot_path(tenant, "flush").failed == 0
    listed = client.list_memories(tenant, thread="fast").memories
    assert [(m.text, m.thread, m.occurred_at) for m in listed] == [
        ("fast: the first turn", ThreadRef("fast", 0), None),
        ("fast: the second turn", ThreadRef("fast", 1), pytest.approx(MAY_8, abs=1e-6)),
    ]


@pytest.mark.parametrize(
    "thread",
    [
        ThreadRef("", 0),
        ThreadRef("x" * 129, 0),
        ThreadRef("has space", 0),
        ThreadRef("-leading", 0),
        ThreadRef("nul\x00", 0),
        ThreadRef("é", 0),
        ThreadRef("ok", -1),
        ThreadRef("ok", 2**53),
    ],
)
def test_an_invalid_thread_is_refused_with_its_reason(client: MemoryClient, tenant: str, thread: ThreadRef) -> None:
    reason = "THREAD_INVALID"
    with pytest.raises(InvalidArgumentError) as info:
        client.retain(tenant, "some text", thread=thread)
    assert info.value.reason == reason
    # In a batch, only that item is invalid.
    results = client.retain_batch(
        tenant,
        [
            RetainItem("a good item", thread=ThreadRef("good", 0)),
            RetainItem("bad", thread=thread),
        ],
    )
    assert [r.status for r in results] == ["created", "invalid"] and results[1].error_reason == reason


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(253_402_300_800, 0), (-62_135_596_801, 999_999_999), (1, -5), (1, 1_000_000_000)],
)
def test_a_timestamp_out_of_range_is_invalid_argument(target: str, tenant: str, seconds: int, nanos: int) -> None:
    """Raw messages (a client library refuses these times itself): years 1-9999 and nanos in range."""
    with grpc.insecure_channel(target) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        request = memory_pb2.RetainRequest(tenant=tenant, text="x")
        request.occurred_at.seconds, request.occurred_at.nanos = seconds, nanos
        with pytest.raises(grpc.RpcError) as info:
            stub.Retain(request, timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "occurred_at" in (info.value.details() or "")
        if 0 <= nanos < 1_000_000_000:  # in a batch, only that item is invalid
            batch = memory_pb2.RetainBatchRequest(
                tenant=tenant, items=[memory_pb2.RetainItem(text="fine"), memory_pb2.RetainItem(text="late")]
            )
            batch.items[1].occurred_at.seconds = seconds
            results = stub.RetainBatch(batch, timeout=30).results
            assert [r.status for r in results] == [types_pb2.RetainResult.CREATED, types_pb2.RetainResult.INVALID]
            assert results[1].error_reason == "OCCURRED_AT_INVALID"


def test_a_thread_filter_is_checked_like_a_thread(client: MemoryClient, tenant: str) -> None:
    for bad in ("a b", "x" * 129, "/lead"):
        with pytest.raises(InvalidArgumentError) as info:
            client.list_memories(tenant, thread=bad)
        assert info.value.reason == "THREAD_INVALID"


def test_a_request_id_covers_time_and_thread(client: MemoryClient, tenant: str) -> None:
    first = client.retain(tenant, "said once", request_id="rq-thread-1", thread=ThreadRef("a", 1))
    assert client.retain(tenant, "said once", request_id="rq-thread-1", thread=ThreadRef("a", 1)) == first
    with pytest.raises(AbortedError) as info:
        client.retain(tenant, "said once", request_id="rq-thread-1", thread=ThreadRef("a", 2))
    assert info.value.reason == "IDEMPOTENCY_KEY_REUSED"
    # The same text without a request id is a duplicate that keeps the first memory's thread.
    again = client.retain(tenant, "said once", thread=ThreadRef("b", 0))
    assert again.status == "duplicate" and client.get_memory(tenant, again.memory_id).thread == ThreadRef("a", 1)
