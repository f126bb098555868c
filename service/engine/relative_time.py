"""Relative time resolved at write time: "yesterday", "the day after tomorrow", "last week", "two
days ago", "in three weeks", "two weeks from now", "last Friday", and days written without their
year ("on 16 March", "March 3rd": the nearest such day to the anchor) in a memory's text, read
against the memory's ``occurred_at``; and the time a question names (``query_span``).

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

import calendar
import datetime
import re
from typing import NamedTuple

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
_MONTHS = f"({'|'.join(_MONTH_NAMES)})"  # matched case aside, in a question
# In a memory's text a month is written with its capital ("I may 5 times" names no day).
_CAPITAL_MONTHS = f"(?-i:{_MONTHS})"
_ORDINAL = r"(?:st|nd|rd|th)?"
# A day of a month written without its year ("on 16 March", "March 3rd", "the 3rd of March"); one
# followed by a year is a whole date, the extractor's (engine/extractor.py).
_NO_YEAR = r"(?!,? ?\d)"
_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<daybefore>the day before yesterday)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<today>today|tonight|this (?:morning|afternoon|evening))"
    r"|(?P<dayafter>the day after tomorrow)"
    r"|(?P<tomorrow>tomorrow)"
    rf"|(?P<ago_n>{_COUNT}) (?P<ago_unit>{_UNIT}) ago"
    rf"|(?P<from_n>{_COUNT}) (?P<from_unit>{_UNIT}) from (?:now|today)"
    rf"|in (?P<in_n>{_COUNT}) (?P<in_unit>{_UNIT})"
    r"|(?P<rel>last|this|next|past) (?P<rel_unit>weekend|week|month|year"
    rf"|{'|'.join(_WEEKDAYS)})"
    rf"|(?:the )?(?P<day_d>\d{{1,2}}){_ORDINAL}(?: of)? (?P<day_m>{_CAPITAL_MONTHS}){_NO_YEAR}"
    rf"|(?P<month_m>{_CAPITAL_MONTHS}) (?:the )?(?P<month_d>\d{{1,2}}){_ORDINAL}\b{_NO_YEAR}"
    r")\b",
    re.IGNORECASE,
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
    elif m["dayafter"]:
        day = anchor + datetime.timedelta(days=2)
    elif m["day_d"] or m["month_d"]:
        day = _nearest(anchor, _month_number(m["day_m"] or m["month_m"]), int(m["day_d"] or m["month_d"]))
        if day is None:  # "31 February"
            return None
    if day is not None:
        return _day(day)
    ahead = m["in_n"] or m["from_n"]
    if m["ago_n"] or ahead:
        n = _count(m["ago_n"] or ahead) * (-1 if m["ago_n"] else 1)
        unit = (m["ago_unit"] or m["in_unit"] or m["from_unit"]).lower().rstrip("s")
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


def _nearest(anchor: datetime.date, month: int, day: int) -> datetime.date | None:
    """The ``day`` of ``month`` nearest ``anchor``, in its year or the one before or after ("28
    December" said on 2 January is the last one), or None when the month has no such day."""
    days = []
    for year in (anchor.year - 1, anchor.year, anchor.year + 1):
        try:
            days.append(datetime.date(year, month, day))
        except ValueError:  # no such day (31 April, 29 February of a common year), or past year 9999
            continue
    return min(days, key=lambda d: abs(d - anchor)) if days else None


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


def day_of(occurred_at_us: int) -> datetime.date:
    """The day (UTC) of an ``occurred_at`` in unix microseconds (validate_occurred_at keeps it
    within years 1-9999)."""
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=occurred_at_us)).date()


def resolve(text: str, occurred_at_us: int | None) -> tuple[list[Fact], str]:
    """The ``date`` facts of the relative times in ``text`` read against ``occurred_at_us`` (unix
    microseconds, UTC), and their index words ("" when there are none)."""
    if occurred_at_us is None:
        return [], ""
    anchor = day_of(occurred_at_us)
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
# Without a year: full month names only ("may" alone is a verb as often), and never before a year.
_QUERY_DAY_NO_YEAR = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}}){_ORDINAL} (?:of )?{_MONTHS.replace('(', '(?P<m1>', 1)}{_NO_YEAR}"
    rf"|{_MONTHS.replace('(', '(?P<m2>', 1)} (?:the )?(?P<d2>\d{{1,2}}){_ORDINAL}\b{_NO_YEAR})",
    re.IGNORECASE,
)
_QUERY_MONTH_NO_YEAR = re.compile(
    rf"\b(?:in|during) (?:the month of )?{_MONTHS.replace('(', '(?P<m>', 1)}\b{_NO_YEAR}", re.IGNORECASE
)
_QUERY_YEAR = re.compile(r"\b(?:in|during|of|since|before|after) (?P<y>\d{4})\b", re.IGNORECASE)


def _month_number(word: str) -> int:
    return next(i for i, name in enumerate(_MONTH_NAMES, 1) if name.lower().startswith(word.lower()[:3]))


class QuerySpan(NamedTuple):
    """The days a question names, first to last; with ``every_year`` their month and day in any
    year (a question naming none: "on 16 March", "in May"), the year of ``first`` and ``last``
    then being only a leap year's placeholder."""

    first: datetime.date
    last: datetime.date
    every_year: bool = False

    def overlaps(self, covered: tuple[datetime.date, datetime.date]) -> bool:
        """Whether the days ``covered`` (a fact's ``fact_span``, a memory's day) meet this span."""
        if not self.every_year:
            return covered[0] <= self.last and self.first <= covered[1]
        for year in range(covered[0].year, covered[1].year + 1):
            try:
                first = self.first.replace(year=year)
            except ValueError:  # "on 29 February" in a common year: no such day
                continue
            # A month's last day stays its last: February's is the 28th in a common year.
            last = self.last.replace(year=year, day=min(self.last.day, calendar.monthrange(year, self.last.month)[1]))
            if covered[0] <= last and first <= covered[1]:
                return True
        return False


# A leap year: "29 February" without a year is a day of it.
_PLACEHOLDER_YEAR = 2000


def query_span(query: str) -> QuerySpan | None:
    """The time a question names: a day ("on March 16, 2022", "16 March 2022", or "on 16 March"
    in any year), a month ("in May 2023", or "in May" in any year) or a year ("in 2023"); None
    when it names none (or several at its most precise: then it is not one constraint)."""
    spans: list[QuerySpan] = []
    try:
        for m in _QUERY_DAY.finditer(query):
            day = datetime.date(int(m["y1"] or m["y2"]), _month_number(m["m1"] or m["m2"]), int(m["d1"] or m["d2"]))
            spans.append(QuerySpan(day, day))
        for m in _QUERY_DAY_NO_YEAR.finditer(query):
            month, number = _month_number(m["m1"] or m["m2"]), int(m["d1"] or m["d2"])
            day = datetime.date(_PLACEHOLDER_YEAR, month, number)
            spans.append(QuerySpan(day, day, every_year=True))
        if not spans:
            for m in _QUERY_MONTH.finditer(query):
                first = datetime.date(int(m["y"]), _month_number(m["m"]), 1)
                spans.append(QuerySpan(first, _shift_months(first, 1) - datetime.timedelta(days=1)))
            for m in _QUERY_MONTH_NO_YEAR.finditer(query):
                first = datetime.date(_PLACEHOLDER_YEAR, _month_number(m["m"]), 1)
                spans.append(QuerySpan(first, _shift_months(first, 1) - datetime.timedelta(days=1), every_year=True))
        if not spans:
            for m in _QUERY_YEAR.finditer(query):
                year = int(m["y"])
                spans.append(QuerySpan(datetime.date(year, 1, 1), datetime.date(year, 12, 31)))
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
