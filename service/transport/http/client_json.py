"""JSON text from a client (a body, a JSON value in a query parameter), read by one rule on every
HTTP surface (the JSON API, the mem0 paths): host/json_text.py's, which the MCP messages share,
from the client's bytes (``parse_body``, ``percent_decoded``, ``query_pairs``); and what is wrong
with a value said in JSON's words (``json_kind``, ``in_json_terms``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from mnemosyne.host.json_text import NESTED_TOO_DEEP as NESTED_TOO_DEEP
from mnemosyne.host.json_text import NestedTooDeep as NestedTooDeep
from mnemosyne.host.json_text import NotUnicode as NotUnicode
from mnemosyne.host.json_text import parse as parse


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
    # Its kind told by Python's repr of it: True, 5, nan, {'a': 1}, [1].
    (
        re.compile(r"Timestamp JSON value not a string: (.*) at [\w.\[\]]+?\.?$", re.DOTALL),
        'must be a string (an RFC 3339 time such as "2024-01-02T03:04:05Z"), not {kind}',
    ),
)
_REPR_KINDS = {"{": "dict", "[": "list", "T": "bool", "F": "bool"}


def in_json_terms(problem: str) -> str:
    """protobuf's complaint of a request's JSON, ``problem``, in JSON's words: a value "must be a
    string, not a number", never "expected string or bytes-like object, got 'int'"."""
    for pattern, words in _PYTHON_WORDS:
        found = pattern.search(problem)
        if found:
            kind = _JSON_KINDS.get(_kind_name(found.group(1)), "another kind") if pattern.groups else ""
            problem = problem[: found.start()] + words.format(kind=kind) + problem[found.end() :]
    return problem


def _kind_name(said: str) -> str:
    """The Python type's name in a complaint: as said ('int'), or that of a value's repr there."""
    if said in _JSON_KINDS:
        return said
    return _REPR_KINDS.get(said[:1], "float")  # what else a time's value can be: a number
