"""Recall's names prior (issue 25, multi-hop): of two memories that match a question about as
well, the one naming particulars (places, people, works: words written as names are) ranks first
(``MNEMOSYNE_TEST_RECALL_OFF=names`` switches it off); the tenant's speakers and the names of
months and weekdays are no such names, and the text mode takes no part. Through a real server
with the default embedder; which words count is shown on ``terms.capitalised_words`` itself."""

from __future__ import annotations

import pytest

from mnemosyne.client import MemoryClient, RetainItem
from mnemosyne.engine.terms import capitalised_words

QUERY = "Where did Melanie go on her long trip?"
PLAIN = "We went on a long trip last summer and visited two old towns by the sea"


def _trip(client: MemoryClient, tenant: str, second: str) -> tuple[int, int]:
    """A memory naming nothing (retained first: the lower id wins a tie), one as close to the
    query that is ``second``, and memories matching none of it, by two speakers."""
    texts = [
        ("Melanie", PLAIN),
        ("Melanie", second),
        ("Caroline", "The weather was cold all week"),
        ("Caroline", "Sam cooked paella for the whole family"),
        ("Caroline", "My pottery class starts again soon"),
        ("Melanie", "We drove to the lake on Sunday"),
    ]
    results = client.retain_batch(tenant, [RetainItem(text, speaker=speaker) for speaker, text in texts])
    return results[0].memory_id, results[1].memory_id


def _ranked(client: MemoryClient, tenant: str, mode: str = "hybrid") -> list[tuple[int, float]]:
    return [(h.memory.id, h.score) for h in client.recall(tenant, QUERY, k=2, mode=mode)]


def test_a_memory_naming_places_ranks_above_an_equal_match_naming_none(server_factory, tenant: str) -> None:
    named = "We went on a long trip last summer and visited Lisbon and Porto by the sea"
    with MemoryClient(server_factory(env={"MNEMOSYNE_TEST_RECALL_OFF": "names"}).start().target) as client:
        plain, places = _trip(client, tenant, named)
        assert [i for i, _ in _ranked(client, tenant)] == [plain, places]  # without the step
    with MemoryClient(server_factory().start().target) as client:
        plain, places = _trip(client, tenant, named)
        assert [i for i, _ in _ranked(client, tenant)] == [places, plain]
        # Text only takes no part (its figures are without the step).
        assert [i for i, _ in _ranked(client, tenant, "text")] == [plain, places]


def test_speakers_months_and_weekdays_are_no_names(server_factory, tenant: str) -> None:
    # Its only capitalised words inside sentences are a speaker of the tenant, a month and a weekday.
    second = "We went on a long trip last May and visited Caroline on a Friday by the sea"
    ranked = []
    for env in ({"MNEMOSYNE_TEST_RECALL_OFF": "names"}, {}):
        with MemoryClient(server_factory(env=env).start().target) as client:
            _trip(client, tenant, second)
            ranked.append(_ranked(client, tenant))
    assert ranked[0] == ranked[1] and len(ranked[0]) == 2  # the same hits, scores included


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("I went to Seattle with Nicole.", {"seattle", "nicole"}),
        ("Seattle was great. Nicole came too!", set()),  # each opens a sentence
        (
            "Caroline (8 May, 2023): Hey Mel, I read 'Becoming Nicole' in Paris",
            {"may", "mel", "paris", "becoming", "nicole"},
        ),
        ('Yes: "Summer Sounds" played. OK, the UK and I', {"sounds"}),  # after a colon, all capitals, one letter
        ("Then Zoë and Ödön came; Émile did not", {"zoë", "ödön"}),  # letters beyond ASCII
        ("Ich habe Anna im Garten getroffen", {"anna", "garten"}),  # German nouns count too: a limit
        ("我昨天去了北京。", set()),  # a script without case
    ],
)
def test_words_written_as_names_are_found_inside_sentences(text: str, names: set[str]) -> None:
    assert capitalised_words(text) == names
