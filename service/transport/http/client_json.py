"""JSON text from a client (a body, a JSON value in a query parameter), read by one rule on every
HTTP surface (the JSON API, the mem0 paths).

An object that names a key twice is refused: which of its values was meant is the writer's to say
(Python's ``json`` keeps the last without a word).

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


class NotUnicode(ValueError):
    """A client's JSON whose strings are not Unicode."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"the key {key[:80]!r} appears twice")
        document[key] = value
    return document


def parse(text: str) -> Any:
    """The value of ``text``; raises ValueError (``json.JSONDecodeError``, ``NotUnicode``, a key
    given twice in one object) or RecursionError."""
    document = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    if _SURROGATE_ESCAPE.search(text) and not unicode_json(document):
        raise NotUnicode(
            "a string holds an unpaired surrogate escape (such as \\ud800): JSON strings must be "
            "Unicode text, a surrogate escape only as the first half of a pair followed by its second"
        )
    return document
