"""JSON text from a client, read by one rule on every surface that takes it: the HTTP surfaces'
bodies and parameters (transport/http/client_json.py) and the MCP messages, over HTTP and stdio
(host/mcp_messages.py). It imports only host/unicode.py, so that both may import it.

An object that names a key twice is refused: which of its values was meant is the writer's to say
(Python's ``json`` and pydantic's reader keep the last without a word).

JSON's ``\\uXXXX`` escapes can spell half of a UTF-16 surrogate pair on its own (``"\\ud800"``);
Python's ``json`` reads it into a ``str`` that is not Unicode, which no protobuf field, SQLite
text or UTF-8 response can hold. Such a document is refused here, as invalid UTF-8 is, before any
of its strings reaches a field, a metadata key or an error message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mnemosyne.host.unicode import unicode_json

# A backslash-u escape of a surrogate code unit (D800-DFFF), paired or not: only a document that
# holds one is checked whole.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# A JSON string, to leave out of a count of brackets.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
# Digits Python's int() reads (sys.get_int_max_str_digits()), pydantic's reader too.
INTEGER_DIGITS = 4300


class NotUnicode(ValueError):
    """A client's JSON whose strings are not Unicode."""


NESTED_TOO_DEEP = (
    "arrays or objects are nested too deep (hundreds of levels within each other): send a flatter document"
)


class NestedTooDeep(ValueError):
    """A client's JSON of arrays or objects within each other deeper than its reader goes."""


class KeyTwice(ValueError):
    """A client's JSON object that names a key twice."""


class HugeInteger(ValueError):
    """A client's JSON integer of more digits than a reader takes (``huge_integers=False``)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise KeyTwice(f"the key {key[:80]!r} appears twice in one object: give it once")
        document[key] = value
    return document


def _integer(text: str) -> int | float:
    """A JSON integer; past the digits Python's int() reads (4,300), the float it is (infinite),
    which every number field refuses as NUMBER_INVALID as it does 1e400 (int() said "use
    sys.set_int_max_str_digits() to increase the limit", REQUEST_UNDECODABLE)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _bounded_integer(text: str) -> int:
    if len(text.lstrip("-")) > INTEGER_DIGITS:
        raise HugeInteger(
            f"an integer of {len(text.lstrip('-')):,} digits: integers of up to {INTEGER_DIGITS:,} digits are read: send a shorter one"
        )
    return int(text)


def _depth(text: str) -> int:
    """How deep arrays and objects are nested in ``text`` (its strings left out)."""
    depth = deepest = 0
    for bracket in re.findall(r"[\[\]{}]", _STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse(text: str, *, max_depth: int | None = None, huge_integers: bool = True) -> Any:
    """The value of ``text``; raises ValueError (``json.JSONDecodeError``, ``NotUnicode``,
    ``NestedTooDeep`` past Python's reader or ``max_depth``, ``KeyTwice``, ``HugeInteger`` for
    an integer of over 4,300 digits unless ``huge_integers``, which reads it as infinite)."""
    if max_depth is not None and text.count("[") + text.count("{") > max_depth and _depth(text) > max_depth:
        raise NestedTooDeep(NESTED_TOO_DEEP)
    try:
        document = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_int=_integer if huge_integers else _bounded_integer
        )
        unicode = not _SURROGATE_ESCAPE.search(text) or unicode_json(document)
    except RecursionError:  # json's reader, or the walk over the document: one limit for both
        raise NestedTooDeep(NESTED_TOO_DEEP) from None
    if not unicode:
        raise NotUnicode(
            "a string holds an unpaired surrogate escape (such as \\ud800): JSON strings must be "
            "Unicode text, a surrogate escape only as the first half of a pair followed by its second"
        )
    return document
