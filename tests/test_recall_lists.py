"""Recall's list and count questions (issue 25, multi-hop): for a question whose answer is several
things ("What books has Tim read?") the memories read for the response take the embedder's
larger ``list_length_prior``, so the memory that says more ranks above an equal short match;
the same question asking for one thing keeps the usual prior (``MNEMOSYNE_TEST_RECALL_OFF=lists``
switches the step off). Through a real server with the default embedder; which questions count is
shown on ``question_form.asks_for_many`` itself."""

from __future__ import annotations

import pytest

from mnemosyne.client import MemoryClient, RetainItem
from mnemosyne.engine.question_form import asks_for_many

SHORT = "I read some books."
LONG = "I read a few books: a fantasy saga about dragons, a biography of a chess player, and a cookbook."
LIST_QUESTION = "What books has Tim read?"
ONE_THING = "What book has Tim read?"  # the same words once stemmed: only the question's form differs


def _books(client: MemoryClient, tenant: str) -> tuple[int, int]:
    """The short and the long answer (the short retained first: the lower id wins a tie) among
    memories matching none of the question, by two speakers."""
    texts = [
        ("Tim", SHORT),
        ("Tim", LONG),
        ("John", "The weather was cold all week"),
        ("John", "My pottery class starts again soon"),
        ("Tim", "We drove to the lake on Sunday"),
        ("John", "Sam cooked paella for the whole family"),
    ]
    results = client.retain_batch(tenant, [RetainItem(text, speaker=speaker) for speaker, text in texts])
    return results[0].memory_id, results[1].memory_id


def _order(client: MemoryClient, tenant: str, query: str, mode: str = "hybrid") -> list[int]:
    return [h.memory.id for h in client.recall(tenant, query, k=2, mode=mode)]


def test_a_list_question_ranks_the_memory_that_says_more_first(server_factory, tenant: str) -> None:
    with MemoryClient(server_factory().start().target) as client:
        short, long = _books(client, tenant)
        assert _order(client, tenant, LIST_QUESTION) == [long, short]
        assert _order(client, tenant, ONE_THING) == [short, long]  # the usual length prior
        # Text only takes no part (its figures are without the step).
        assert _order(client, tenant, LIST_QUESTION, "text") == _order(client, tenant, ONE_THING, "text")


def test_switched_off_a_list_question_ranks_as_any_other(server_factory, tenant: str) -> None:
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "lists"}).start().target) as client:
        short, long = _books(client, tenant)
        assert _order(client, tenant, LIST_QUESTION) == [short, long]
        assert client.recall(tenant, LIST_QUESTION, k=2)[0].score == client.recall(tenant, ONE_THING, k=2)[0].score


@pytest.mark.parametrize(
    "query",
    [
        "What books has Tim read?",
        "which cities did they visit in 2023",
        "What LGBTQ+ events has Caroline participated in?",  # words in capitals before the plural
        "What kind of books does Nate enjoy?",
        "What are Joanna's hobbies?",
        "What are the names of John's children?",
        "So, what recipes has Nate made?",  # the question word need not open the query
        "How many times has Melanie gone to the beach?",
        "What do Jon and Gina both like?",
    ],
)
def test_list_and_count_questions(query: str) -> None:
    assert asks_for_many(query)


@pytest.mark.parametrize(
    "query",
    [
        "What book has Tim read?",
        "What is Caroline's identity?",
        "What motivates Joanna to keep writing?",  # a verb in -s: no auxiliary follows the phrase
        "What has Melanie painted?",
        "What class does she take?",  # "ss" is no plural
        "Where has Maria made friends?",  # asks where, not what
        "When did Nate get Tilly for Joanna?",
        "Quels livres Tim a-t-il lus ?",  # English only
        "",
    ],
)
def test_questions_asking_for_one_thing(query: str) -> None:
    assert not asks_for_many(query)
