"""Conversations retained as ONE operation (one memory, one fingerprint, one idempotency unit),
against a real server. Seed 001 §9.6 drill 3: the same conversation submitted three times is
reported as 2 duplicates, stored once, and the repeats cost no model call."""

from __future__ import annotations

import pytest

from mnemosyne.client import InvalidArgumentError, MemoryClient, Message
from mnemosyne.v1 import memory_pb2, types_pb2

CONVERSATION = [
    Message("user", "Hi, I was charged twice for order 5521."),
    Message("assistant", "Sorry about that. I opened ticket RF-88213 for the refund."),
    Message("user", "ticket RF-88213 status: awaiting review"),
    Message("assistant", "Refunds take 5 days to reach your card."),
]


def test_same_conversation_three_times_is_two_duplicates(client: MemoryClient, tenant: str) -> None:
    first = client.retain_conversation(tenant, CONVERSATION, request_id="conv-1")
    assert first.status == "created"
    calls = client.stats(tenant).model_calls
    second = client.retain_conversation(tenant, CONVERSATION, request_id="conv-2")
    third = client.retain_conversation(tenant, CONVERSATION, request_id="conv-3")
    assert [second.status, third.status] == ["duplicate", "duplicate"]
    assert second.memory_id == third.memory_id == first.memory_id
    stats = client.stats(tenant)
    assert stats.duplicates == 2 and stats.memories == 1 and stats.writes == 1
    assert stats.model_calls == calls == 1  # one extraction for the conversation, none for repeats
    assert len(client.list_memories(tenant).memories) == 1
    # A retry of one submission (same request id) replays its result and counts nothing new.
    assert client.retain_conversation(tenant, CONVERSATION, request_id="conv-2") == second
    assert client.stats(tenant).duplicates == 2


def test_conversation_is_one_memory_with_what_extraction_found(client: MemoryClient, tenant: str) -> None:
    result = client.retain_conversation(
        tenant, [{"role": "user", "content": m.content} if i == 0 else m for i, m in enumerate(CONVERSATION)]
    )
    memory = client.get_memory(tenant, result.memory_id)
    assert memory.text.splitlines()[0] == "user: Hi, I was charged twice for order 5521."
    assert len(memory.text.splitlines()) == len(CONVERSATION)
    facts = {(f.kind, f.normalized) for f in memory.facts}
    assert {("identifier", "RF-88213"), ("quantity", "5 days")} <= facts
    assert ("ticket rf-88213", "status", "awaiting review") in {
        (t.subject, t.predicate, t.object) for t in memory.triples
    }
    hits = client.recall(tenant, "refund ticket RF-88213", k=3)
    assert hits and hits[0].memory.id == result.memory_id
    # Its facts take part in conflict adjudication like any other memory's.
    later = client.retain(tenant, "ticket RF-88213 status: refunded")
    assert later.supersedes == (result.memory_id,)


def test_a_different_conversation_is_not_a_duplicate(client: MemoryClient, tenant: str) -> None:
    first = client.retain_conversation(tenant, CONVERSATION)
    changed = [*CONVERSATION[:-1], Message("assistant", "Refunds take 15 days to reach your card.")]
    second = client.retain_conversation(tenant, changed)
    assert second.status == "created" and second.memory_id != first.memory_id
    assert second.near_duplicate_of == ()  # 5 days is not 15 days
    # Whitespace and case do not make a new conversation.
    same = [Message(m.role.upper(), "  " + m.content.lower() + " ") for m in CONVERSATION]
    assert client.retain_conversation(tenant, same).status == "duplicate"


def test_bad_conversations_are_rejected_with_a_reason(client: MemoryClient, tenant: str) -> None:
    cases = [
        ([Message("user", "   ")], "MESSAGE_EMPTY"),
        ([Message("us:er", "hello")], "MESSAGE_ROLE_INVALID"),
        ([Message("", "hello")], "MESSAGE_ROLE_INVALID"),
        ([], "MESSAGES_EMPTY"),  # on the wire no messages at all: the client tells it apart
        ([{"role": "user"}], "MESSAGE_EMPTY"),  # a part left out of a mapping goes empty
        ([{"content": "hello"}], "MESSAGE_ROLE_INVALID"),
        ([("user", "hello", "x")], "REQUEST_UNDECODABLE"),  # no shape a message takes
        (["user: hello"], "REQUEST_UNDECODABLE"),
        ([{"role": "user", "content": 5}], "REQUEST_UNDECODABLE"),
        ([("user", None)], "REQUEST_UNDECODABLE"),
    ]
    for messages, reason in cases:
        with pytest.raises(InvalidArgumentError) as info:
            client.retain_conversation(tenant, messages)  # type: ignore[arg-type]  # wrong shapes on purpose
        assert info.value.reason == reason, (messages, info.value)
    assert client.list_memories(tenant).memories == []
    request = memory_pb2.RetainRequest(
        tenant=tenant, text="both", messages=[types_pb2.ConversationMessage(role="user", content="hi")]
    )
    with pytest.raises(InvalidArgumentError) as info:
        client.call(client.memory.Retain, request, retry=False)
    assert info.value.reason == "TEXT_AND_MESSAGES"
    assert client.stats(tenant).model_calls == 0
