"""What a query asks for, read from its English wording (no model): recall weighs the memories
read for the response differently for a question whose answer is several things."""

from __future__ import annotations

from mnemosyne.engine.terms import STOP_WORDS, words

# The auxiliaries that end the phrase naming what a "what ..." or "which ..." question asks for:
# "What books has Tim read?", "Which cities did they visit?".
_AUXILIARIES = frozenset(
    "am are is was were has have had do does did can could will would shall should may might must".split()
)
# Past this many words without an auxiliary, the question asks about its subject, not for things
# ("What motivates Joanna to keep writing?": "motivates" is a verb, not a plural).
HEAD_WORDS = 5
# "What are <the things asked for> ...": this many words after "are" or "were".
ARE_WORDS = 4


def plural(word: str) -> bool:
    """Whether a lower-case word looks like an English plural noun: four letters or more ending
    in "s", not in "ss", "us" or "is" (class, campus, analysis), and no function word (this, does)."""
    return len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word not in STOP_WORDS


def asks_for_many(query: str) -> bool:
    """Whether ``query`` is a list or count question, its answer spread over several memories:
    "What books has Tim read?", "What are Joanna's hobbies?", "Which TV series does he watch?",
    "How many times did she go?", "What do Jon and Gina both like?". English only: any other
    wording, and any question asking for one thing ("What is Caroline's identity?"), is not."""
    tokens = words(query)
    if "both" in tokens or any(a == "how" and b == "many" for a, b in zip(tokens, tokens[1:])):
        return True
    asks = next((i for i, token in enumerate(tokens) if token in ("what", "which")), None)
    if asks is None:
        return False
    rest = tokens[asks + 1 :]
    if rest and rest[0] in ("are", "were"):
        return any(plural(token) for token in rest[1 : 1 + ARE_WORDS])
    end = next((i for i, token in enumerate(rest[: HEAD_WORDS + 1]) if token in _AUXILIARIES), None)
    return end is not None and any(plural(token) for token in rest[:end])
