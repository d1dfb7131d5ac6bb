"""Relative and absolute time expressions (zh + en), resolved against the message's local date.

"下个月" said on 2026-01-01 becomes February 2026, "2 月 10 号到 14 号" becomes 2026-02-10..14,
"next week" becomes the Monday..Sunday after the message. Fragments store the resolved date, so a
plan read a month later still says when it happens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Literal

from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.scripts import contains_any

__all__ = [
    "Period",
    "TimeMatch",
    "cn_int",
    "find_en",
    "find_zh",
    "past_date_en",
    "past_date_zh",
    "local_date",
    "period_end_ms",
    "render_en",
    "render_zh",
]

PeriodKind = Literal["day", "range", "week", "weekend", "month", "year"]


@dataclass(frozen=True, slots=True)
class Period:
    """A calendar period in the user's local time; ``end`` is inclusive."""

    start: date
    end: date
    kind: PeriodKind


@dataclass(frozen=True, slots=True)
class TimeMatch:
    """A time expression found in a text: the resolved period and where it was."""

    period: Period
    start: int
    end: int


_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}


def cn_int(text: str) -> int | None:
    """Parse ``29``, ``二十九``, ``两`` or ``一百零五`` into an int; ``None`` if it is not a number.

    Example:
        >>> cn_int("二十九"), cn_int("两"), cn_int("14")
        (29, 2, 14)
    """
    if not text:
        return None
    if text.isdigit():
        return int(text)
    total = 0
    current = 0
    for ch in text:
        if ch in _CN_DIGITS:
            current = _CN_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        elif ch == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


_EPOCH = date(1970, 1, 1)


def local_date(ts_ms: int, offset_minutes: int) -> date:
    """Return the calendar date of ``ts_ms`` at a fixed UTC offset."""
    return _EPOCH + timedelta(days=(ts_ms + offset_minutes * 60_000) // 86_400_000)


def period_end_ms(period: Period, offset_minutes: int, grace_days: int = 0) -> int:
    """Return the ms timestamp of local midnight after the period's last day (+ grace days)."""
    tz = timezone(timedelta(minutes=offset_minutes))
    end = datetime.combine(period.end + timedelta(days=1 + grace_days), datetime.min.time(), tz)
    return int(end.timestamp() * 1000)


def _month_period(year: int, month: int) -> Period:
    start = date(year, month, 1)
    nxt = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
    return Period(start, nxt - timedelta(days=1), "month")


def _add_months(today: date, n: int) -> Period:
    index = today.year * 12 + today.month - 1 + n
    return _month_period(index // 12, index % 12 + 1)


def _week(today: date, weeks_ahead: int) -> Period:
    monday = today - timedelta(days=today.weekday()) + timedelta(weeks=weeks_ahead)
    return Period(monday, monday + timedelta(days=6), "week")


def _weekend(today: date, weeks_ahead: int) -> Period:
    monday = today - timedelta(days=today.weekday()) + timedelta(weeks=weeks_ahead)
    return Period(monday + timedelta(days=5), monday + timedelta(days=6), "weekend")


def _weekday(today: date, weekday: int, weeks_ahead: int | None) -> Period:
    monday = today - timedelta(days=today.weekday())
    if weeks_ahead is None:  # a bare weekday means its next occurrence (today included)
        day = monday + timedelta(days=weekday)
        if day < today:
            day += timedelta(weeks=1)
    else:
        day = monday + timedelta(weeks=weeks_ahead, days=weekday)
    return Period(day, day, "day")


def _day(today: date, days: int) -> Period:
    d = today + timedelta(days=days)
    return Period(d, d, "day")


def _safe_date(year: int, month: int | None, day: int | None) -> date | None:
    if month is None or day is None:
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _infer_year(today: date, month: int, day: int) -> int:
    """Dates said without a year are this year's, or next year's if more than 60 days past."""
    candidate = _safe_date(today.year, month, day)
    if candidate is not None and candidate < today - timedelta(days=60):
        return today.year + 1
    return today.year


def _range(today: date, m1: int | None, d1: int | None, m2: int | None, d2: int | None) -> Period | None:
    month1 = m1 or m2 or today.month
    month2 = m2 or month1
    if d1 is None or d2 is None:
        return None
    year1 = _infer_year(today, month1, d1)
    start = _safe_date(year1, month1, d1)
    end = _safe_date(year1, month2, d2)
    if start is not None and end is not None and end < start:
        end = _safe_date(year1 + 1, month2, d2)
    if start is None or end is None or (end - start).days > 120:
        return None
    return Period(start, end, "range" if end != start else "day")


# ---------------------------------------------------------------- Chinese

_N = r"(?:\d{1,2}|[一二三四五六七八九十两]{1,3})"
_ZH_WD = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_WHEN = lazy_compile(
    rf"(?P<range>(?:(?P<rm1>{_N})月)?(?P<rd1>{_N})[日号]?(?:到|至|-|~|～|—|–)(?:(?P<rm2>{_N})月)?(?P<rd2>{_N})[日号])"
    rf"|(?P<date>(?P<dm>{_N})月(?P<dd>{_N})[日号]?)"
    rf"|(?P<month>(?P<mm>{_N})月份?)"
    r"|(?P<nnmonth>下下个?月)|(?P<nmonth>下个?月)|(?P<tmonth>这个?月|本月|月底)"
    r"|(?P<nweekend>下个?(?:周|星期|礼拜)末)"
    r"|(?P<nwday>下个?(?:周|星期|礼拜)(?P<nwd>[一二三四五六日天]))"
    r"|(?P<nweek>下个?(?:周|星期|礼拜))"
    r"|(?P<tweekend>(?<!每)(?<!每个)(?:这个?|本)?(?:周|星期|礼拜)末)"
    r"|(?P<twday>(?<!每)(?:这个?|本)?(?:周|星期|礼拜)(?P<twd>[一二三四五六日天]))"
    r"|(?P<tweek>(?:这个?|本)(?:周|星期|礼拜))"
    r"|(?P<d3>大后天)|(?P<d2>后天)|(?P<d1>明天|明早|明晚|明儿)|(?P<d0>今天|今晚|今早|今儿)"
    r"|(?P<nyear>明年)|(?P<tyear>今年|年底)"
)


_ZH_TRIGGERS = "月周期拜天号日年早晚儿"


def find_zh(text: str, today: date) -> TimeMatch | None:
    """Find and resolve the first Chinese time expression in ``text``.

    Example:
        >>> m = find_zh("我下个月要去成都出差", date(2026, 1, 1))
        >>> m.period.start, m.period.end
        (datetime.date(2026, 2, 1), datetime.date(2026, 2, 28))
    """
    if not contains_any(text, _ZH_TRIGGERS):
        return None
    for m in _ZH_WHEN.finditer(text):
        period = _resolve_zh(m, today)
        if period is not None:
            return TimeMatch(period, m.start(), m.end())
    return None


def _resolve_zh(m: re.Match[str], today: date) -> Period | None:
    g = m.lastgroup
    if g == "range":
        return _range(today, _opt(m["rm1"]), cn_int(m["rd1"]), _opt(m["rm2"]), cn_int(m["rd2"]))
    if g == "date":
        month, day = cn_int(m["dm"]), cn_int(m["dd"])
        if month is None or day is None:
            return None
        d = _safe_date(_infer_year(today, month, day), month, day)
        return Period(d, d, "day") if d else None
    if g == "month":
        month = cn_int(m["mm"])
        if month is None or not 1 <= month <= 12:
            return None
        year = today.year + 1 if month < today.month - 2 else today.year
        return _month_period(year, month)
    simple = {
        "nnmonth": lambda: _add_months(today, 2),
        "nmonth": lambda: _add_months(today, 1),
        "tmonth": lambda: _add_months(today, 0),
        "nweekend": lambda: _weekend(today, 1),
        "nweek": lambda: _week(today, 1),
        "tweekend": lambda: _weekend(today, 0),
        "tweek": lambda: _week(today, 0),
        "d3": lambda: _day(today, 3),
        "d2": lambda: _day(today, 2),
        "d1": lambda: _day(today, 1),
        "d0": lambda: _day(today, 0),
        "nyear": lambda: Period(date(today.year + 1, 1, 1), date(today.year + 1, 12, 31), "year"),
        "tyear": lambda: Period(date(today.year, 1, 1), date(today.year, 12, 31), "year"),
    }
    if g == "nwday":
        return _weekday(today, _ZH_WD[m["nwd"]], 1)
    if g == "twday":
        return _weekday(today, _ZH_WD[m["twd"]], None)
    maker = simple.get(g or "")
    return maker() if maker else None


def _opt(text: str | None) -> int | None:
    return cn_int(text) if text else None


def render_zh(p: Period) -> str:
    """Render a period in Chinese: ``2026年2月10日至14日``, ``2026年2月``, ``2026年1月3日至4日（周末）``."""
    s, e = p.start, p.end
    if p.kind == "month":
        return f"{s.year}年{s.month}月"
    if p.kind == "year":
        return f"{s.year}年"
    if s == e:
        return f"{s.year}年{s.month}月{s.day}日"
    if s.year != e.year:
        text = f"{s.year}年{s.month}月{s.day}日至{e.year}年{e.month}月{e.day}日"
    elif s.month != e.month:
        text = f"{s.year}年{s.month}月{s.day}日至{e.month}月{e.day}日"
    else:
        text = f"{s.year}年{s.month}月{s.day}日至{e.day}日"
    return text + "（周末）" if p.kind == "weekend" else text


# ---------------------------------------------------------------- English

_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_MONTH_NAMES = [
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
]
_DAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6}
_MON = "(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + ")"
_DAY = "(?:" + "|".join(_DAYS) + ")"
_ORD = r"(?:st|nd|rd|th)?"
_TO = r"\s*(?:-|–|to|through|until|till)\s*"
_EN_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_EN_WHEN = lazy_compile(
    r"\b(?:"
    rf"(?P<mdrange>(?P<m1>{_MON})\.?\s+(?P<d1>\d{{1,2}}){_ORD}{_TO}(?:(?P<m2>{_MON})\.?\s+)?(?P<d2>\d{{1,2}}){_ORD})"
    rf"|(?P<dmrange>(?P<d3>\d{{1,2}}){_ORD}{_TO}(?P<d4>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<m3>{_MON}))"
    rf"|(?P<md>(?P<m4>{_MON})\.?\s+(?P<d5>\d{{1,2}}){_ORD}(?!\d))"
    rf"|(?P<dm>(?P<d6>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<m5>{_MON}))"
    rf"|(?P<inmonth>(?:in|this|next)\s+(?P<m6>{_MON}))"
    r"|(?P<nweekend>next\s+weekend)"
    rf"|(?P<nwday>next\s+(?P<wd1>{_DAY}))"
    r"|(?P<nweek>next\s+week)"
    r"|(?P<tweekend>this\s+weekend|over\s+the\s+weekend)"
    rf"|(?P<twday>(?:this|on)\s+(?P<wd2>{_DAY}))"
    r"|(?P<tweek>this\s+week)"
    r"|(?P<nmonth>next\s+month)|(?P<tmonth>this\s+month|later\s+this\s+month)"
    r"|(?P<nyear>next\s+year)|(?P<tyear>this\s+year|later\s+this\s+year)"
    r"|(?P<d2w>the\s+day\s+after\s+tomorrow)|(?P<d1w>tomorrow)|(?P<d0w>today|tonight)"
    r"|(?P<inn>in\s+(?P<n>a|an|one|two|three|four|five|six|\d{1,2})\s+(?P<unit>days?|weeks?|months?))"
    r")\b",
    re.IGNORECASE,
)


# Cheap substring gate: the big regex only runs on text that could hold a time expression.
_EN_TRIGGERS = (
    "tomorrow",
    "tonight",
    "day",
    "week",
    "month",
    "year",
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)


def find_en(text: str, today: date) -> TimeMatch | None:
    """Find and resolve the first English time expression in ``text``.

    Example:
        >>> m = find_en("the trip is Feb 10 to 14", date(2026, 1, 1))
        >>> m.period.start, m.period.end
        (datetime.date(2026, 2, 10), datetime.date(2026, 2, 14))
    """
    low = text.lower()
    if not contains_any(low, _EN_TRIGGERS):
        return None
    for m in _EN_WHEN.finditer(text):
        period = _resolve_en(m, today)
        if period is not None:
            return TimeMatch(period, m.start(), m.end())
    return None


def _month_of(text: str | None) -> int | None:
    return _MONTHS.get(text.lower()) if text else None


def _resolve_en(m: re.Match[str], today: date) -> Period | None:
    g = m.lastgroup
    if g == "mdrange":
        return _range(today, _month_of(m["m1"]), int(m["d1"]), _month_of(m["m2"]), int(m["d2"]))
    if g == "dmrange":
        month = _month_of(m["m3"])
        return _range(today, month, int(m["d3"]), month, int(m["d4"]))
    if g in ("md", "dm"):
        month = _month_of(m["m4"] or m["m5"])
        day = int(m["d5"] or m["d6"])
        if month is None:
            return None
        d = _safe_date(_infer_year(today, month, day), month, day)
        return Period(d, d, "day") if d else None
    if g == "inmonth":
        month = _month_of(m["m6"])
        if month is None:
            return None
        return _month_period(today.year + 1 if month < today.month else today.year, month)
    if g == "nwday":
        return _weekday(today, _DAYS[m["wd1"].lower()], 1)
    if g == "twday":
        return _weekday(today, _DAYS[m["wd2"].lower()], None)
    if g == "inn":
        n = int(m["n"]) if m["n"].isdigit() else _EN_NUM[m["n"].lower()]
        unit = m["unit"].lower()
        if unit.startswith("day"):
            return _day(today, n)
        if unit.startswith("week"):
            return _week(today, n)
        return _add_months(today, n)
    simple = {
        "nweekend": lambda: _weekend(today, 1),
        "nweek": lambda: _week(today, 1),
        "tweekend": lambda: _weekend(today, 0),
        "tweek": lambda: _week(today, 0),
        "nmonth": lambda: _add_months(today, 1),
        "tmonth": lambda: _add_months(today, 0),
        "nyear": lambda: Period(date(today.year + 1, 1, 1), date(today.year + 1, 12, 31), "year"),
        "tyear": lambda: Period(date(today.year, 1, 1), date(today.year, 12, 31), "year"),
        "d2w": lambda: _day(today, 2),
        "d1w": lambda: _day(today, 1),
        "d0w": lambda: _day(today, 0),
    }
    maker = simple.get(g or "")
    return maker() if maker else None


def render_en(p: Period) -> str:
    """Render a period in English: ``from 10 to 14 February 2026``, ``in February 2026``."""
    s, e = p.start, p.end
    ms, me = _MONTH_NAMES[s.month - 1], _MONTH_NAMES[e.month - 1]
    if p.kind == "month":
        return f"in {ms} {s.year}"
    if p.kind == "year":
        return f"in {s.year}"
    if p.kind == "week":
        return f"in the week of {s.day} {ms} {s.year}"
    if s == e:
        return f"on {s.day} {ms} {s.year}"
    prefix = "on the weekend of " if p.kind == "weekend" else "from "
    joiner = "-" if p.kind == "weekend" else " to "
    if s.year != e.year:
        return f"{prefix}{s.day} {ms} {s.year}{joiner}{e.day} {me} {e.year}"
    if s.month != e.month:
        return f"{prefix}{s.day} {ms}{joiner}{e.day} {me} {e.year}"
    return f"{prefix}{s.day}{joiner}{e.day} {ms} {s.year}"


# ---------------------------------------------------------------- the recent past

_ZH_PAST = lazy_compile(
    r"^(?:(?P<lm>上个?月)|(?P<lw>上个?(?:星期|周|礼拜)末?)|(?P<d1>昨天|昨晚)|(?P<d2>前天)|(?P<y1>去年)|(?P<y2>前年)"
    r"|(?P<n>\d{1,2}|[一二两三四五六七八九十几]{1,3})(?:个)?(?P<unit>天|星期|周|月|年)(?:以)?前)$"
)
_EN_PAST = lazy_compile(
    r"^(?:(?P<lm>last month)|(?P<lw>last week(?:end)?)|(?P<d1>yesterday|last night)|(?P<y1>last year)"
    rf"|(?P<mon>(?:in|this|last) (?P<month>{_MON}))"
    r"|(?P<n>a|an|one|two|three|four|five|six|a few|a couple of|\d{1,2})"
    r" (?P<unit>days?|weeks?|months?|years?) ago"
    r"|(?P<recent>recently|just now|the other day|earlier this (?:week|month|year)))$",
    re.IGNORECASE,
)


def _back(today: date, unit: str, n: int) -> date:
    if unit in ("day", "天"):
        return today - timedelta(days=n)
    if unit in ("week", "星期", "周"):
        return today - timedelta(weeks=n)
    if unit in ("month", "月"):
        index = today.year * 12 + today.month - 1 - n
        return date(index // 12, index % 12 + 1, 1)
    return date(today.year - n, 1, 1)


def past_date_zh(text: str, today: date) -> date | None:
    """Resolve a recent-past expression that is the whole of ``text`` ("上个月", "去年", "三天前").

    Example:
        >>> past_date_zh("上个月", date(2026, 1, 15)), past_date_zh("去年", date(2026, 1, 15)).year
        (datetime.date(2025, 12, 1), 2025)
    """
    m = _ZH_PAST.match(text)
    if m is None:
        return None
    if m["lm"]:
        return _back(today, "月", 1)
    if m["lw"]:
        return _back(today, "周", 1)
    if m["d1"] or m["d2"]:
        return _back(today, "天", 1 if m["d1"] else 2)
    if m["y1"] or m["y2"]:
        return _back(today, "年", 1 if m["y1"] else 2)
    n = 3 if m["n"] == "几" else cn_int(m["n"])
    return _back(today, m["unit"], n) if n is not None else None


def past_date_en(text: str, today: date) -> date | None:
    """Resolve a recent-past expression that is the whole of ``text`` ("last month", "in March").

    A month name means its latest occurrence up to today.

    Example:
        >>> past_date_en("last month", date(2026, 1, 15)), past_date_en("in March", date(2026, 1, 15))
        (datetime.date(2025, 12, 1), datetime.date(2025, 3, 1))
    """
    m = _EN_PAST.match(text.strip())
    if m is None:
        return None
    if m["lm"]:
        return _back(today, "month", 1)
    if m["lw"]:
        return _back(today, "week", 1)
    if m["d1"]:
        return _back(today, "day", 1)
    if m["y1"]:
        return _back(today, "year", 1)
    if m["recent"]:
        return today
    if m["mon"]:
        month = _MONTHS[m["month"].lower()]
        return date(today.year if month <= today.month else today.year - 1, month, 1)
    word = m["n"].lower()
    n = int(word) if word.isdigit() else {"a few": 3, "a couple of": 2}.get(word) or _EN_NUM[word]
    return _back(today, m["unit"].lower().rstrip("s"), n)
