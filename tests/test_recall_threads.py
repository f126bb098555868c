"""Recall's second wave for questions spread over a conversation (issue 25): a candidate in a
thread holding several good matches ranks above an equal match alone in its thread (thread
support, ``MNEMOSYNE_TEST_RECALL_OFF=threads``), and a memory that ends by asking a question ranks
below one that tells (the question penalty, ``...=questions``); each shown against the same
memories with the step off, through a real server, and each a no-op where it does not apply."""

from __future__ import annotations

import pytest

from mnemosyne.client import Hit, MemoryClient, RetainItem, ThreadRef
from mnemosyne.engine.recall.priors import asks

QUERY = "pottery class glaze kiln"


def _threads(client: MemoryClient, tenant: str, *, threaded: bool = True) -> dict[str, int]:
    """A match alone in its thread (retained first: the lower id wins a tie), and a slightly
    weaker one in a thread that holds two more matches, none of them its neighbour."""
    turns = [
        ("solo", "At the pottery class we tried a new glaze and the kiln"),
        ("busy", "This morning at the pottery class we tried the glaze and the kiln with friends from work"),
        ("busy", "The weather was cold all week"),
        ("busy", "My pottery class teacher fired the kiln twice"),
        ("busy", "We drove to the lake on Sunday"),
        ("busy", "The glaze on my pottery bowl came out blue"),
    ]
    for i in range(8):
        turns.append((f"other{i}", f"Film number {i} about cooking was long"))
    items = [
        RetainItem(text, thread=ThreadRef(thread, i) if threaded else None) for i, (thread, text) in enumerate(turns)
    ]
    return {
        thread + str(i): r.memory_id
        for i, ((thread, _), r) in enumerate(zip(turns, client.retain_batch(tenant, items)))
    }


def _order(hits: list[Hit], *ids: int) -> list[int]:
    ranked = [h.memory.id for h in hits]
    return sorted(ids, key=ranked.index)


def test_a_match_in_a_thread_of_matches_ranks_above_a_match_alone(server_factory, tenant: str) -> None:
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "threads"}).start().target) as client:
        ids = _threads(client, tenant)
        hits = client.recall(tenant, QUERY, k=10)
        assert _order(hits, ids["solo0"], ids["busy1"]) == [ids["solo0"], ids["busy1"]]  # without the step
    with MemoryClient(server_factory().start().target) as client:
        ids = _threads(client, tenant)
        hits = client.recall(tenant, QUERY, k=10)
        assert _order(hits, ids["solo0"], ids["busy1"]) == [ids["busy1"], ids["solo0"]]
        # Text only takes no part (its figures are without the step).
        text = client.recall(tenant, QUERY, k=10, mode="text")
        assert _order(text, ids["solo0"], ids["busy1"]) == [ids["solo0"], ids["busy1"]]


def _same_on_and_off(server_factory, tenant: str, step: str, threaded: bool, queries: tuple[str, ...]) -> None:
    """The same hits, scores included, with ``step`` off and on."""
    ranked = []
    for env in ({"MNEMOSYNE_TEST_RECALL_OFF": step}, {}):
        with MemoryClient(server_factory(env=env).start().target) as client:
            _threads(client, tenant, threaded=threaded)
            ranked.append([[(h.memory.id, h.score) for h in client.recall(tenant, q, k=6)] for q in queries])
    assert ranked[0] == ranked[1] and all(ranked[0])


def test_memories_without_threads_rank_as_without_thread_support(server_factory, tenant: str) -> None:
    _same_on_and_off(server_factory, tenant, "threads", False, (QUERY, "cold lake"))


def _asked(client: MemoryClient, tenant: str) -> tuple[int, int]:
    """A question matching more of the query (retained first) and the statement answering it."""
    question = client.retain(tenant, "Did Jo go to the pottery class with Sam on Friday?").memory_id
    answer = client.retain(tenant, "Jo went to the pottery class on Friday").memory_id
    for text in ("The weather was cold all week", "We drove to the lake on Sunday", "Sam cooked paella"):
        client.retain(tenant, text)
    return question, answer


def test_a_memory_that_asks_ranks_below_one_that_tells(server_factory, tenant: str) -> None:
    query = "pottery class Jo Sam Friday"
    # The names prior off on both sides: the question names Jo and Sam inside its sentence, the
    # answer only opens with Jo, and that prior alone would lift the question (tests/test_recall_names.py).
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "questions,names"}).start().target) as client:
        question, answer = _asked(client, tenant)
        assert [h.memory.id for h in client.recall(tenant, query, k=2)] == [question, answer]  # without the step
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "names"}).start().target) as client:
        question, answer = _asked(client, tenant)
        hits = client.recall(tenant, query, k=2)
        assert [h.memory.id for h in hits] == [answer, question] and all(h.score > 0 for h in hits)
        # Hybrid only (its figures are with it).
        assert [h.memory.id for h in client.recall(tenant, query, k=2, mode="text")] == [question, answer]


def test_memories_that_ask_nothing_rank_as_without_the_question_penalty(server_factory, tenant: str) -> None:
    # No memory of these ends with a question (a question as the query changes nothing).
    _same_on_and_off(server_factory, tenant, "questions", True, (QUERY, "Is it cold?"))


@pytest.mark.parametrize(
    ("text", "asking"),
    [
        ("What's her name?", True),
        ("Great photo! Where was it taken?", True),
        ("Where was it? The lake, I think.", False),  # answered after asking
        ("I went hiking", False),  # no mark at all
        ("¿Dónde está la clase?", True),
        ("你昨天去哪儿了？", True),  # full-width
        ("هل ذهبت إلى الصف؟", True),  # Arabic
        ("我去了。", False),
        ("Did you see it? [shares a photo: a lake at dawn]", True),  # a trailing caption without a mark
    ],
)
def test_a_memory_asks_when_its_last_sentence_mark_is_a_question_mark(text: str, asking: bool) -> None:
    assert asks(text) is asking
