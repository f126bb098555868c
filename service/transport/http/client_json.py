"""JSON text from a client (a body, a JSON value in a query parameter), read by one rule on every
HTTP surface (the JSON API, the mem0 paths).

JSON's ``\\uXXXX`` escapes can spell half of a UTF-16 surrogate pair on its own (``"\\ud800"``);
Python's ``json`` reads it into a ``str`` that is not Unicode, which no protobuf field, SQLite
text or UTF-8 response can hold. Such a document is refused here, as invalid UTF-8 is, before any
of its strings reaches a field, a metadata key or an error message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# A backslash-u escape of a surrogate code unit (D800-DFFF), paired or not: only a document that
# holds one is checked whole.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotUnicode(ValueError):
    """A client's JSON whose strings are not Unicode."""


def parse(text: str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The value of ``text``; raises ValueError (``json.JSONDecodeError``, ``NotUnicode``) or
    RecursionError."""
    document = json.loads(text, object_pairs_hook=object_pairs_hook)
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotUnicode(
                "a string holds an unpaired surrogate escape (such as \\ud800): JSON strings must be "
                "Unicode text, a surrogate escape only as the first half of a pair followed by its second"
            ) from None
    return document
