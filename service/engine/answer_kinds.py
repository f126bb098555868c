"""The kind of answer a question asks for, and whether a text holds one (English wording, no
model): a time for "When ...?" and "How often ...?", a cause for "Why ...?" and "What caused
...?", a number for "How much ...?". A sentence model matches a question to the memory about the
same thing, but among several memories about that thing it does not see which one says *when* or
*why* (MiniLM puts "Backups are kept for thirty days" as near "When does the backup happen?" as
"The backup job runs every night at 2 am"); the question's form does. Classic question answering
weighs candidates by the answer type the question expects in the same way."""

from __future__ import annotations

import re
from enum import StrEnum


class AnswerKind(StrEnum):
    TIME = "time"
    CAUSE = "cause"
    AMOUNT = "amount"


_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|fifteenth|twentieth|last"
_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty"
    "|hundred|thousand|million|billion|dozen|half"
)

# The question's head: its first words say what it asks for.
_ASKS = (
    (
        AnswerKind.TIME,
        re.compile(
            r"^(?:\W*)(?:when|until when|since when|by when|how often|how soon"
            r"|(?:what|which) (?:time|day|date|days|dates|month|year|hour|weekday|season))\b"
        ),
    ),
    (
        AnswerKind.CAUSE,
        re.compile(
            r"^(?:\W*)(?:why|how come|what (?:caused|causes|made|makes|led to|leads to)"
            r"|(?:what|which) (?:is|was|were|are) the (?:reason|cause)s?|for what reason)\b"
        ),
    ),
    (
        AnswerKind.AMOUNT,
        re.compile(r"^(?:\W*)(?:how (?:much|many|old|far|long|big|tall|heavy)|what (?:amount|price|number))\b"),
    ),
)

# What a text holds that answers each kind.
_HOLDS = {
    AnswerKind.TIME: re.compile(
        rf"\b(?:{_WEEKDAYS}|{_MONTHS})s?\b"
        r"|\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.|o'clock|h)\b|\b\d{1,2}:\d{2}\b"
        r"|\b(?:noon|midnight|tonight|today|tomorrow|yesterday|daily|nightly|weekly|monthly|yearly|annually|hourly"
        r"|weekends?|mornings|evenings|nights|ago)\b"
        r"|\b(?:every|each|last|next|this) (?:other )?(?:day|night|morning|afternoon|evening|week|weekend|month"
        rf"|year|hour|quarter|spring|summer|autumn|fall|winter|{_WEEKDAYS})\b"
        rf"|\bthe (?:\d{{1,2}}(?:st|nd|rd|th)|{_ORDINALS}) (?:of|day|week|weekend)\b"
        r"|\b(?:in|since|until|by|before|after) (?:19|20)\d\d\b"
        r"|\b(?:at|in the|during the|before|after|until|by) (?:dawn|dusk|morning|afternoon|evening|night|lunch"
        r"|lunchtime|breakfast|dinner|bedtime)\b",
        re.IGNORECASE,
    ),
    AnswerKind.CAUSE: re.compile(
        r"\b(?:because|due to|owing to|thanks to|as a result|caused|causes|so that|that's why|which is why"
        r"|therefore|led to|leads to|the reason|since (?:the|a|an|it|he|she|they|we|i|his|her|their|our|my))\b",
        re.IGNORECASE,
    ),
    AnswerKind.AMOUNT: re.compile(rf"\d|[$€£¥%]|\b(?:{_NUMBER_WORDS})\b", re.IGNORECASE),
}


def asked_kind(query: str) -> AnswerKind | None:
    """The kind of answer ``query`` asks for by its first words, None for any other question
    (and for wording other than English)."""
    head = query.lstrip().lower()
    for kind, asks in _ASKS:
        if asks.match(head):
            return kind
    return None


def holds(kind: AnswerKind, text: str) -> bool:
    """Whether ``text`` holds an answer of ``kind``: a time, a cause, a number."""
    return _HOLDS[kind].search(text) is not None
