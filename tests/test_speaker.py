"""Who said or wrote a memory (``speaker``): given on Retain, RetainBatch items and conversations
(each message's ``name``), returned by Get, List and Recall, kept through the hot path, refused
with SPEAKER_INVALID when it is no name; and Recall's use of it: a question naming a speaker
ranks what that speaker said first, and a question naming none ranks exactly as without the
step. (The HTTP JSON form: tests/test_http_api.py; mem0's ``name``: tests/test_mem0_api.py;
export and import: tests/test_export_import.py.)"""

from __future__ import annotations

import pytest

from mnemosyne.client import InvalidArgumentError, MemoryClient, Message, RetainItem


def test_retain_batch_and_conversation_carry_the_speaker(client: MemoryClient, tenant: str) -> None:
    one = client.retain(tenant, "I went to the support group yesterday", speaker="  Caroline \t")
    batch = client.retain_batch(
        tenant,
        [RetainItem("I painted a lake sunrise", speaker="Melanie"), RetainItem("A note nobody signed", speaker="  ")],
    )
    named = client.retain_conversation(
        tenant,
        [
            Message("user", "Where is the pottery class?", name="Melanie"),
            Message("assistant", "In the old mill"),
            {"role": "user", "content": "Thanks!", "name": "melanie"},
        ],
    )
    two = client.retain_conversation(
        tenant, [Message("user", "Shall we hike?", name="Jon"), Message("user", "Yes, Sunday", name="Gina")]
    )
    chosen = client.retain_conversation(
        tenant, [Message("user", "Meet at noon", name="Jon"), Message("user", "Fine")], speaker="Gina"
    )
    assert client.get_memory(tenant, one.memory_id).speaker == "Caroline"  # trimmed
    assert [client.get_memory(tenant, r.memory_id).speaker for r in batch] == ["Melanie", ""]  # blank: none
    conversation = client.get_memory(tenant, named.memory_id)
    # The one name its messages share (its first spelling), each named line "role (name): content".
    assert conversation.speaker == "Melanie"
    assert (
        conversation.text
        == "user (Melanie): Where is the pottery class?\nassistant: In the old mill\nuser (melanie): Thanks!"
    )
    assert client.get_memory(tenant, two.memory_id).speaker == ""  # two people: their names are in the text
    assert client.get_memory(tenant, chosen.memory_id).speaker == "Gina"  # the conversation's own speaker
    hit = client.recall(tenant, "lake sunrise painting", k=1)[0].memory
    assert hit.id == batch[0].memory_id and hit.speaker == "Melanie"
    listed = {m.id: m.speaker for m in client.list_memories(tenant).memories}
    assert listed[one.memory_id] == "Caroline"
    # Not part of a memory's identity: the same text from someone else is a duplicate of the first.
    again = client.retain(tenant, "I painted a lake sunrise", speaker="Caroline")
    assert again.status == "duplicate" and client.get_memory(tenant, again.memory_id).speaker == "Melanie"


def test_fast_writes_keep_the_speaker(client: MemoryClient, tenant: str) -> None:
    client.hot_path(tenant, "enable")
    client.retain(tenant, "fast: a turn by Zoë", fast=True, speaker="Zoë")
    client.retain_batch(tenant, [RetainItem("fast: a turn by Jon", speaker="Jon")], fast=True)
    client.retain_conversation(tenant, [Message("user", "fast: a talk", name="Gina")], fast=True)
    assert client.hot_path(tenant, "flush").failed == 0
    listed = client.list_memories(tenant).memories
    assert [(m.text, m.speaker) for m in listed] == [
        ("fast: a turn by Zoë", "Zoë"),
        ("fast: a turn by Jon", "Jon"),
        ("user (Gina): fast: a talk", "Gina"),
    ]


@pytest.mark.parametrize(
    "speaker",
    [
        "x" * 201,
        "Caro\nline",
        "nul\x00",
        "tab\tinside",
        "del\x7f",
        "sep\u2028arated",
        "\u200b",
        "Caro\u202eline",
        "\ufeffJon",
    ],
)
def test_a_bad_speaker_is_refused_with_its_reason(client: MemoryClient, tenant: str, speaker: str) -> None:
    reason = "SPEAKER_INVALID"
    with pytest.raises(InvalidArgumentError) as info:
        client.retain(tenant, "some text", speaker=speaker)
    assert info.value.reason == reason and "speaker" in info.value.message
    with pytest.raises(InvalidArgumentError) as info:
        client.retain_conversation(tenant, [Message("user", "hello", name=speaker)])
    assert info.value.reason == reason and "messages[0].name" in info.value.message
    # In a batch, only that item is invalid.
    results = client.retain_batch(
        tenant, [RetainItem("a good item", speaker="Jon"), RetainItem("bad", speaker=speaker)]
    )
    assert [r.status for r in results] == ["created", "invalid"] and results[1].error_reason == reason
    assert client.retain(tenant, "the longest name is fine", speaker=" " + "x" * 200 + " ").status == "created"


# Persian needs ZWNJ, Devanagari and emoji ZWJ; a flag of Scotland is tag characters.
JOINED_NAMES = [
    "می\u200cخواهم",
    "क्\u200dष",
    "👩\u200d🚀",
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
]


def test_a_name_may_hold_the_joiners_its_script_needs(client: MemoryClient, tenant: str) -> None:
    for name in JOINED_NAMES:
        assert client.retain(tenant, f"a turn by {name}", speaker=name).status == "created", repr(name)
    assert {m.speaker for m in client.list_memories(tenant).memories} == set(JOINED_NAMES)


def _pottery(client: MemoryClient, tenant: str) -> dict[str, int]:
    """Two memories alike but for their speaker (and a day), the other speaker's first (lower id)."""
    ids = {}
    for speaker, day in (("Melanie", "Sunday"), ("Caroline", "Friday")):
        ids[speaker] = client.retain(tenant, f"I went to the pottery class on {day}", speaker=speaker).memory_id
    client.retain(tenant, "Jon opened a dance studio downtown", speaker="Jon")
    client.retain(tenant, "The weather was cold all week")
    return ids


def test_a_question_naming_a_speaker_ranks_that_speaker_s_memory_first(server_factory, tenant: str) -> None:
    queries = [
        "When did Caroline go to the pottery class?",
        "what did CAROLINE's pottery class make",
        "caroline pottery",
    ]
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "speaker"}).start().target) as client:
        ids = _pottery(client, tenant)
        for query in queries:  # without the step: the other speaker's (lower id) first
            assert client.recall(tenant, query, k=2)[0].memory.id == ids["Melanie"], query
    with MemoryClient(server_factory().start().target) as client:
        ids = _pottery(client, tenant)
        for query in queries:
            hits = client.recall(tenant, query, k=2)
            assert [h.memory.id for h in hits] == [ids["Caroline"], ids["Melanie"]], query
        # Whole words only: "Carol" and "Carolines" name nobody here.
        assert client.recall(tenant, "When did Carol go to the pottery class?", k=1)[0].memory.id == ids["Melanie"]
        # Text only takes no part (its figures are without the step).
        assert client.recall(tenant, queries[0], k=1, mode="text")[0].memory.id == ids["Melanie"]


def test_a_speaker_of_several_words_and_letters_beyond_ascii_is_named_case_aside(
    client: MemoryClient, tenant: str
) -> None:
    first = client.retain(tenant, "I went to the pottery class on Sunday", speaker="Mary Ann").memory_id
    named = client.retain(tenant, "I went to the pottery class on Friday", speaker="Zoë Martín").memory_id
    assert client.recall(tenant, "did ZOË MARTÍN go to the pottery class", k=1)[0].memory.id == named
    # Part of a name is not the name: "Zoë" alone names nobody here (the lower id first).
    assert client.recall(tenant, "did Zoë go to the pottery class", k=1)[0].memory.id == first
    assert client.recall(tenant, "did Martín Zoë go to the pottery class", k=1)[0].memory.id == first  # in order


def test_a_question_naming_no_speaker_ranks_as_without_the_step(server_factory, tenant: str) -> None:
    queries = ["When did she go to the pottery class?", "dance studio", "cold weather", "pottery Friday"]
    ranked = []
    for env in ({"MNEMOSYNE_TEST_RECALL_OFF": "speaker"}, {}):
        with MemoryClient(server_factory(env=env).start().target) as client:
            _pottery(client, tenant)
            ranked.append([[(h.memory.id, h.score) for h in client.recall(tenant, q, k=4)] for q in queries])
    assert ranked[0] == ranked[1] and all(ranked[0])
