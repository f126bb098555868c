"""The one rule for numbers given as text (a JSON string, a query string, a mem0 parameter, a
command-line flag, a model's tool argument): ASCII digits only, no float where a whole number is
meant, no NaN or Infinity. engine/limits.py reads every number a client sends by it
(``parse_integer``, ``parse_number``: with the range and the refusal), and so do the MCP tools
(host/mcp_tools.py), which the client runs too and which cannot import the engine. It imports nothing.
"""

from __future__ import annotations

import re

# A number written as text (a JSON string, a query string, a mem0 parameter, a command-line flag,
# a tool argument) uses ASCII only: Python's int() and float() also take other scripts' digits
# ("٣", "３") and str.isdigit() passes superscripts ("²") that int() then refuses.
_WHOLE_TEXT = re.compile(r"-?[0-9]+")
# 40 digits pass every 64-bit range: a longer number is out of range before int() reads it (int()
# refuses 4,300 digits).
_WHOLE_DIGITS = 40
_BEYOND_EVERY_RANGE: int = 10**_WHOLE_DIGITS
_DECIMAL_TEXT = re.compile(r"-?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][-+]?[0-9]{1,4})?")


def whole_number(value: object) -> int | None:
    """The integer of a JSON integer or of text of ASCII digits with an optional leading '-'; None
    for anything else: a float (even 1.0 or 1e11), a bool, other scripts' digits, spaces, '+',
    hex, underscores, the empty string. Text of more than 40 digits is ±10**40, outside every
    range a caller checks."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    if isinstance(value, str):
        if not _WHOLE_TEXT.fullmatch(value):
            return None
        if len(value.lstrip("-")) > _WHOLE_DIGITS:
            return -_BEYOND_EVERY_RANGE if value.startswith("-") else _BEYOND_EVERY_RANGE
    return int(value)


def decimal_number(value: object) -> float | None:
    """The float of a JSON number or of text of ASCII digits (a decimal point and an exponent
    allowed: "1.5", "2e3"); None for anything else (a bool, "NaN", "Infinity", other scripts'
    digits, spaces, hex, the empty string). What it returns may still be infinite (1e999, an
    integer past the largest float) or NaN (a JSON NaN): the caller's range check refuses those."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if isinstance(value, str) and not _DECIMAL_TEXT.fullmatch(value):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past the largest float
        return float("inf")
