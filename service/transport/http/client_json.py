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
from urllib.parse import parse_qsl, quote, unquote

from mnemosyne.host.unicode import unicode_json

# A backslash-u escape of a surrogate code unit (D800-DFFF), paired or not: only a document that
# holds one is checked whole.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotUnicode(ValueError):
    """A client's JSON whose strings are not Unicode."""


NESTED_TOO_DEEP = (
    "arrays or objects are nested too deep (hundreds of levels within each other): send a flatter document"
)


class NestedTooDeep(ValueError):
    """A client's JSON of arrays or objects within each other deeper than Python's reader goes."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"the key {key[:80]!r} appears twice")
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


def parse(text: str) -> Any:
    """The value of ``text``; raises ValueError (``json.JSONDecodeError``, ``NotUnicode``,
    ``NestedTooDeep``, a key given twice in one object)."""
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=_integer)
        unicode = not _SURROGATE_ESCAPE.search(text) or unicode_json(document)
    except RecursionError:  # json's reader, or the walk over the document: one limit for both
        raise NestedTooDeep(NESTED_TOO_DEEP) from None
    if not unicode:
        raise NotUnicode(
            "a string holds an unpaired surrogate escape (such as \\ud800): JSON strings must be "
            "Unicode text, a surrogate escape only as the first half of a pair followed by its second"
        )
    return document


class NotText(ValueError):
    """A client's bytes that are not the UTF-8 text they must be, said in our words, not Python's
    codec's ("'utf-8' codec can't decode byte 0xff", "decode using utf-8-sig")."""


_SEND_UTF8 = "percent-encode the UTF-8 bytes of the text (é is %C3%A9)"


def parse_body(body: bytes) -> Any:
    """The value of a request's JSON body: ``parse`` of its UTF-8 text; NotText for bytes that
    are not UTF-8 or a leading byte order mark (JSON over HTTP has none, RFC 8259 §8.1)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotText(
            f"the body is not UTF-8 text (its byte 0x{body[exc.start]:02x} at offset {exc.start} is not part of a "
            "UTF-8 character): send JSON encoded as UTF-8"
        ) from None
    if text.startswith("\ufeff"):
        raise NotText("the body starts with a byte order mark (EF BB BF): send the JSON without it")
    return parse(text)


def percent_decoded(raw: str, what: str) -> str:
    """``raw`` (a path segment) percent-decoded as UTF-8; NotText naming ``what`` when its bytes
    are not UTF-8."""
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise NotText(f"{what} {raw[:60]!r} is not UTF-8 once percent-decoded: {_SEND_UTF8}") from None


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """A query string's parameters, percent-decoded as UTF-8; NotText naming the parameter whose
    name or value is not UTF-8."""
    pairs = parse_qsl(query_string.decode("utf-8", "surrogateescape"), keep_blank_values=True, errors="surrogateescape")
    for key, value in pairs:
        for part in (key, value):
            try:
                part.encode("utf-8")
            except UnicodeEncodeError:
                shown = quote(key.encode("utf-8", "surrogateescape"))[:60]
                raise NotText(
                    f"the query parameter {shown!r} is not UTF-8 once percent-decoded: {_SEND_UTF8}"
                ) from None
    return pairs


# What a JSON value is, by the Python type its reader made of it.
_JSON_KINDS = {
    "int": "a number",
    "float": "a number",
    "str": "a string",
    "list": "an array",
    "dict": "an object",
    "NoneType": "null",
    "bool": "true or false",
}


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words ("a number", "null"), never Python's
    ("int", "NoneType"), for a refusal's message."""
    return _JSON_KINDS.get(type(value).__name__, "another kind")


# protobuf's JSON reader (json_format) says a value of the wrong kind in Python's words.
_PYTHON_WORDS = (
    (re.compile(r"expected string or bytes-like object, got '(\w+)'"), "must be a string, not {kind}"),
    (
        re.compile(r"int\(\) argument must be a string, a bytes-like object or a real number, not '(\w+)'"),
        "must be a number, not {kind}",
    ),
    (re.compile(r"repeated field \w+ must be in \[\] which is .* at \S+"), "must be an array"),
    (re.compile(r"Map field \w+ must be in a dict which is .* at \S+"), "must be an object"),
)


def in_json_terms(problem: str) -> str:
    """protobuf's complaint of a request's JSON, ``problem``, in JSON's words: a value "must be a
    string, not a number", never "expected string or bytes-like object, got 'int'"."""
    for pattern, words in _PYTHON_WORDS:
        found = pattern.search(problem)
        if found:
            kind = _JSON_KINDS.get(found.group(1), "another kind") if pattern.groups else ""
            problem = problem[: found.start()] + words.format(kind=kind) + problem[found.end() :]
    return problem
