"""Times in a JSON request (proto3 JSON's ``google.protobuf.Timestamp``: an RFC 3339 string).

json_format reads a time with ``strptime``, which takes more than RFC 3339 (other scripts' digits,
single-digit fields, an offset of +99:99), refuses the rest in its own words, and cannot hold a time
outside Timestamp's range (years 1 to 9999). The first two are refused here by the rule for numbers
given as text; the second is decoded to
its seconds and nanos (``beyond_range``), so the RPC refuses it in its own words, as it refuses the
same moment sent over gRPC (``EXPIRES_AT_INVALID``, ``OCCURRED_AT_INVALID``, ``TIMESTAMP_INVALID``),
not as an undecodable request."""

from __future__ import annotations

import re

from google.protobuf import timestamp_pb2

from mnemosyne.engine.limits import MAX_OCCURRED_AT_US, MIN_OCCURRED_AT_US

_RFC_3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
# RFC 3339's form with a year of up to nine digits (its seconds still fit Timestamp's int64).
_ANY_YEAR = re.compile(
    r"(?P<year>[0-9]{4,9})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"T(?P<hour>[01][0-9]|2[0-3]):(?P<minute>[0-5][0-9]):(?P<second>[0-5][0-9])(?:\.(?P<fraction>[0-9]{1,9}))?"
    r"(?:Z|(?P<sign>[+-])(?P<offset_hours>[01][0-9]|2[0-3]):(?P<offset_minutes>[0-5][0-9]))"
)
# A date, or a date and time, with no offset: a local time of nowhere in particular.
_NO_OFFSET = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{0,9})?)?)?")
_FIRST_SECOND = MIN_OCCURRED_AT_US // 1_000_000  # 0001-01-01T00:00:00Z, Timestamp's first second
_LAST_SECOND = MAX_OCCURRED_AT_US // 1_000_000  # 9999-12-31T23:59:59Z, its last


def no_time(text: str) -> bool:
    """Whether ``text`` is no RFC 3339 time of a real day. json_format's parser takes some such
    text (other scripts' digits, single-digit fields, an empty fraction, an offset of +99:99,
    shifting the time by four days), and refuses the rest in strptime's words ("time data
    '2026-13-45T99:99:99' does not match format '%Y-%m-%dT%H:%M:%S'", "day is out of range for
    month"): both are refused by the rule for numbers given as text instead."""
    if not _RFC_3339.fullmatch(text):
        return True
    try:
        timestamp_pb2.Timestamp().FromJsonString(text)
    except ValueError:
        return True
    return False


def without_offset(text: str) -> bool:
    """Whether ``text`` is a date, or a date and time, that gives no offset (json_format's refusal
    of it reads "time data '2030-01' does not match format", taking a hyphen of the date for one)."""
    return _NO_OFFSET.fullmatch(text) is not None


def beyond_range(text: str) -> tuple[int, int] | None:
    """(seconds, nanos) of an RFC 3339 time (a year of four to nine digits) that names a real day
    outside Timestamp's range; None for any other text."""
    found = _ANY_YEAR.fullmatch(text)
    if found is None:
        return None
    year, month, day = int(found["year"]), int(found["month"]), int(found["day"])
    if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
        return None
    seconds = _days_since_1970(year, month, day) * 86_400
    seconds += int(found["hour"]) * 3_600 + int(found["minute"]) * 60 + int(found["second"])
    if found["sign"]:
        offset = int(found["offset_hours"]) * 3_600 + int(found["offset_minutes"]) * 60
        seconds -= offset if found["sign"] == "+" else -offset
    if _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    return seconds, int((found["fraction"] or "0").ljust(9, "0"))


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if _leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_since_1970(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 in the proleptic Gregorian calendar (year 0 included, a leap year):
    the civil-from-days algorithm's inverse, in eras of 400 years."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468
