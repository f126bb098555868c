"""Relative time resolved at write time: "yesterday", "last week", "two days ago", "in three
weeks", "last Friday" in a memory's text, read against the memory's ``occurred_at``.

Each expression found becomes a ``date`` fact whose value is the expression as written and whose
normalized form is the time it names: a day (``2023-03-16``), a week (``2023-03-06/2023-03-12``,
Monday to Sunday), a month (``2023-03``) or a year (``2023``). The same times are spelled as words
("16 March 2023", "March 2023") and indexed with the memory's text, so a question naming the date
("on March 16, 2023", "in March 2023") finds the turn that said "yesterday" on 17 March.

Without ``occurred_at`` nothing is resolved: there is no honest anchor (``created_at`` is when
the server wrote it, not when it was said). The expressions are English; anything not matched is
left alone.
"""

from __future__ import annotations

import datetime
import re

from mnemosyne.engine.extractor import Fact

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNT = r"(\d{1,3}|a couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_UNIT = r"(day|week|month|year)s?"
_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<daybefore>the day before yesterday)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<today>today|tonight|this (?:morning|afternoon|evening))"
    r"|(?P<tomorrow>tomorrow)"
    rf"|(?P<ago_n>{_COUNT}) (?P<ago_unit>{_UNIT}) ago"
    rf"|in (?P<in_n>{_COUNT}) (?P<in_unit>{_UNIT})"
    r"|(?P<rel>last|this|next|past) (?P<rel_unit>weekend|week|month|year"
    rf"|{'|'.join(_WEEKDAYS)})"
    r")\b",
    re.IGNORECASE,
)
# A day's, a month's and a year's index words, e.g. "16 March 2023".
_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# The names of months and weekdays, lower-cased: a date's words, not a name's (recall.with_names_prior).
CALENDAR_WORDS = frozenset(name.lower() for name in (*_MONTH_NAMES, *_WEEKDAYS))


def _count(text: str) -> int:
    text = text.lower()
    return int(text) if text.isdigit() else _NUMBERS[text]


def _shift_months(day: datetime.date, months: int) -> datetime.date:
    index = day.year * 12 + day.month - 1 + months
    return datetime.date(index // 12, index % 12 + 1, 1)


def _week(day: datetime.date) -> tuple[datetime.date, datetime.date]:
    monday = day - datetime.timedelta(days=day.weekday())
    return monday, monday + datetime.timedelta(days=6)


def _named(m: re.Match[str], anchor: datetime.date) -> tuple[str, str] | None:
    """(normalized time, index words) of one expression, or None."""
    day: datetime.date | None = None
    if m["daybefore"]:
        day = anchor - datetime.timedelta(days=2)
    elif m["yesterday"]:
        day = anchor - datetime.timedelta(days=1)
    elif m["today"]:
        day = anchor
    elif m["tomorrow"]:
        day = anchor + datetime.timedelta(days=1)
    if day is not None:
        return _day(day)
    if m["ago_n"] or m["in_n"]:
        n = _count(m["ago_n"] or m["in_n"]) * (-1 if m["ago_n"] else 1)
        unit = (m["ago_unit"] or m["in_unit"]).lower().rstrip("s")
        if unit == "day":
            return _day(anchor + datetime.timedelta(days=n))
        if unit == "week":
            return _week_named(anchor + datetime.timedelta(weeks=n))
        if unit == "month":
            return _month(_shift_months(anchor, n))
        return _year(anchor.year + n)
    rel, unit = m["rel"].lower(), m["rel_unit"].lower()
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[rel]
    if unit == "week":
        return _week_named(anchor + datetime.timedelta(weeks=step))
    if unit == "weekend":
        saturday = _week(anchor + datetime.timedelta(weeks=step))[0] + datetime.timedelta(days=5)
        return _day(saturday)
    if unit == "month":
        return _month(_shift_months(anchor, step))
    if unit == "year":
        return _year(anchor.year + step)
    # A weekday: "last Friday" is the latest Friday before the anchor's day, "next Friday" the
    # first after it, "this Friday" the one of the anchor's week.
    target = _WEEKDAYS.index(unit)
    if step == 0:
        return _day(_week(anchor)[0] + datetime.timedelta(days=target))
    if step < 0:
        return _day(anchor - datetime.timedelta(days=(anchor.weekday() - target) % 7 or 7))
    return _day(anchor + datetime.timedelta(days=(target - anchor.weekday()) % 7 or 7))


def _day(day: datetime.date) -> tuple[str, str]:
    return day.isoformat(), f"{day.day} {_MONTH_NAMES[day.month - 1]} {day.year}"


def _year(year: int) -> tuple[str, str]:
    if not datetime.MINYEAR <= year <= datetime.MAXYEAR:
        raise ValueError(f"year {year} is out of range")
    return f"{year:04d}", str(year)


def _month(day: datetime.date) -> tuple[str, str]:
    return f"{day.year:04d}-{day.month:02d}", f"{_MONTH_NAMES[day.month - 1]} {day.year}"


def _week_named(day: datetime.date) -> tuple[str, str]:
    monday, sunday = _week(day)
    months = dict.fromkeys(f"{_MONTH_NAMES[d.month - 1]} {d.year}" for d in (monday, sunday))
    return f"{monday.isoformat()}/{sunday.isoformat()}", " ".join(months)


def resolve(text: str, occurred_at_us: int | None) -> tuple[list[Fact], str]:
    """The ``date`` facts of the relative times in ``text`` read against ``occurred_at_us`` (unix
    microseconds, UTC), and their index words ("" when there are none)."""
    if occurred_at_us is None:
        return [], ""
    try:
        anchor = (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=occurred_at_us)).date()
    except OverflowError:  # pragma: no cover - validate_occurred_at keeps it within years 1-9999
        return [], ""
    facts: list[Fact] = []
    words: list[str] = []
    for m in _PATTERN.finditer(text):
        try:
            named = _named(m, anchor)
        except (OverflowError, ValueError):  # past year 9999 or before year 1
            continue
        if named is None:
            continue
        fact = ("date", m.group(0), named[0])
        if fact not in facts:
            facts.append(fact)
            words.append(named[1])
    return facts, " ".join(dict.fromkeys(words))


_MONTH_WORD = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_QUERY_DAY = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH_WORD.replace('(', '(?P<m1>', 1)},? (?P<y1>\d{{4}})"
    rf"|{_MONTH_WORD.replace('(', '(?P<m2>', 1)} (?P<d2>\d{{1,2}})(?:st|nd|rd|th)?,? (?P<y2>\d{{4}}))\b",
    re.IGNORECASE,
)
_QUERY_MONTH = re.compile(rf"\b{_MONTH_WORD.replace('(', '(?P<m>', 1)},? (?P<y>\d{{4}})\b", re.IGNORECASE)
_QUERY_YEAR = re.compile(r"\b(?:in|during|of|since|before|after) (?P<y>\d{4})\b", re.IGNORECASE)


def _month_number(word: str) -> int:
    return next(i for i, name in enumerate(_MONTH_NAMES, 1) if name.lower().startswith(word.lower()[:3]))


def query_span(query: str) -> tuple[datetime.date, datetime.date] | None:
    """The time a question names, as (first day, last day): a day ("on March 16, 2022", "16 March
    2022"), a month ("in May 2023") or a year ("in 2023"); None when it names none (or several:
    then it is not one constraint)."""
    spans = []
    try:
        for m in _QUERY_DAY.finditer(query):
            day = datetime.date(int(m["y1"] or m["y2"]), _month_number(m["m1"] or m["m2"]), int(m["d1"] or m["d2"]))
            spans.append((day, day))
        if not spans:
            for m in _QUERY_MONTH.finditer(query):
                first = datetime.date(int(m["y"]), _month_number(m["m"]), 1)
                spans.append((first, _shift_months(first, 1) - datetime.timedelta(days=1)))
        if not spans:
            for m in _QUERY_YEAR.finditer(query):
                year = int(m["y"])
                spans.append((datetime.date(year, 1, 1), datetime.date(year, 12, 31)))
    except ValueError:  # "31 February 2023", year 0
        return None
    return spans[0] if len(set(spans)) == 1 else None


def fact_span(normalized: str) -> tuple[datetime.date, datetime.date] | None:
    """The days a ``date`` fact's normalized form covers (a day, a Monday/Sunday week, a month, a
    year), or None for a form it is not."""
    try:
        if "/" in normalized:
            start, _, end = normalized.partition("/")
            return datetime.date.fromisoformat(start), datetime.date.fromisoformat(end)
        if len(normalized) == 10:
            day = datetime.date.fromisoformat(normalized)
            return day, day
        if len(normalized) == 7:
            first = datetime.date(int(normalized[:4]), int(normalized[5:]), 1)
            return first, _shift_months(first, 1) - datetime.timedelta(days=1)
        if len(normalized) == 4:
            return datetime.date(int(normalized), 1, 1), datetime.date(int(normalized), 12, 31)
    except ValueError:
        return None
    return None
