"""Quoted turns: the date a turn was said, and its relative times resolved against that date.

A turn quoted weeks later ("I went to the support group yesterday") only answers "when" if the
reader knows when *yesterday* was, so the quote carries its date and each relative time it holds
gets the date it meant: ``yesterday (7 May 2023)``, ``上周（2023-05-01 那周）``. Only the common
relative expressions are resolved (days, weeks, weekends, months, years, named weekdays, "N days
ago"); anything else is left as said.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

from convmem_graph.payloads._sanitize import Language
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import IDEOGRAPHS
from convmem_graph.text.timeexpr import cn_int, local_date

__all__ = ["format_date", "local_date", "resolve_relative_times", "utc_offset_minutes"]

_MONTHS = ("January February March April May June July August September October November December").split()
_CJK = lazy_compile(f"[{IDEOGRAPHS}]")
_LATIN = lazy_compile("[A-Za-z]")
_WEEKDAYS_EN = {
    "monday": 0,
    "tuesday": 1,
    "wednesday": 2,
    "thursday": 3,
    "friday": 4,
    "saturday": 5,
    "sunday": 6,
}
_WEEKDAYS_ZH = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3}


def utc_offset_minutes(text: str, metadata: dict[str, object] | None = None) -> int:
    """The UTC offset a turn's date is read in: its metadata's, else UTC+8 for Chinese, else UTC.

    The same guess the heuristic extractor makes, so a quote and a fact agree on the day.
    """
    value = (metadata or {}).get("utc_offset_minutes")
    if isinstance(value, int) and not isinstance(value, bool) and -900 <= value <= 900:
        return value
    return 480 if _CJK.search(text) else 0


def format_date(day: date, language: Language) -> str:
    """A date as a reader of the block writes it: ``2023-05-08`` (zh) or ``8 May 2023`` (en).

    Example:
        >>> format_date(date(2023, 5, 8), "en"), format_date(date(2023, 5, 8), "zh")
        ('8 May 2023', '2023-05-08')
    """
    if language == "zh":
        return day.isoformat()
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _month(day: date, delta: int) -> str:
    index = day.year * 12 + day.month - 1 + delta
    return f"{_MONTHS[index % 12]} {index // 12}"


def _month_zh(day: date, delta: int) -> str:
    index = day.year * 12 + day.month - 1 + delta
    return f"{index // 12}年{index % 12 + 1}月"


def _monday(day: date, weeks: int) -> date:
    return day - timedelta(days=day.weekday()) + timedelta(weeks=weeks)


def _last_weekday(day: date, weekday: int) -> date:
    back = (day.weekday() - weekday) % 7 or 7
    return day - timedelta(days=back)


def _next_weekday(day: date, weekday: int) -> date:
    ahead = (weekday - day.weekday()) % 7 or 7
    return day + timedelta(days=ahead)


_EN = lazy_compile(
    r"\b(?:(?P<yesterday>yesterday)|(?P<today>today|tonight|this morning|this afternoon|this evening)"
    r"|(?P<tomorrow>tomorrow)"
    r"|(?P<lastweekend>last weekend)|(?P<thisweekend>this weekend)|(?P<nextweekend>next weekend)"
    r"|(?P<lastweek>last week)|(?P<thisweek>this week)|(?P<nextweek>next week)"
    r"|(?P<lastmonth>last month)|(?P<thismonth>this month)|(?P<nextmonth>next month)"
    r"|(?P<lastyear>last year)|(?P<thisyear>this year)|(?P<nextyear>next year)"
    r"|(?P<lastwd>last (?P<wd1>monday|tuesday|wednesday|thursday|friday|saturday|sunday))"
    r"|(?P<nextwd>next (?P<wd2>monday|tuesday|wednesday|thursday|friday|saturday|sunday))"
    r"|(?P<ago>(?P<n>a|an|one|two|three|four|five|six|few|\d{1,2}) "
    r"(?P<unit>days?|weeks?|months?|years?) ago)"
    r")\b",
    re.IGNORECASE,
)
_ZH = lazy_compile(
    r"(?P<d2>前天)|(?P<d1>昨天|昨晚|昨日)|(?P<d0>今天|今晚|今早)|(?P<t1>明天|明晚)|(?P<t2>后天)"
    r"|(?P<lastwd>上(?:个)?(?:周|星期|礼拜)(?P<wd1>[一二三四五六日天]))"
    r"|(?P<lastweek>上(?:个)?(?:周|星期|礼拜))|(?P<thisweek>这(?:个)?(?:周|星期|礼拜)|本周)"
    r"|(?P<nextweek>下(?:个)?(?:周|星期|礼拜))"
    r"|(?P<lastmonth>上(?:个)?月)|(?P<thismonth>这个月|本月)|(?P<nextmonth>下(?:个)?月)"
    r"|(?P<lastyear>去年)|(?P<thisyear>今年)|(?P<nextyear>明年)|(?P<yearbefore>前年)"
    r"|(?P<ago>(?P<n>[一两二三四五六七八九十]|\d{1,2})(?P<unit>天|周|个星期|个月|年)前)"
)


def _en_value(m: re.Match[str], day: date) -> str | None:
    g = m.lastgroup
    fmt: Callable[[date], str] = lambda d: format_date(d, "en")  # noqa: E731
    simple: dict[str, Callable[[], str]] = {
        "yesterday": lambda: fmt(day - timedelta(days=1)),
        "today": lambda: fmt(day),
        "tomorrow": lambda: fmt(day + timedelta(days=1)),
        "lastweekend": lambda: "weekend of " + fmt(_monday(day, -1) + timedelta(days=5)),
        "thisweekend": lambda: "weekend of " + fmt(_monday(day, 0) + timedelta(days=5)),
        "nextweekend": lambda: "weekend of " + fmt(_monday(day, 1) + timedelta(days=5)),
        "lastweek": lambda: "week of " + fmt(_monday(day, -1)),
        "thisweek": lambda: "week of " + fmt(_monday(day, 0)),
        "nextweek": lambda: "week of " + fmt(_monday(day, 1)),
        "lastmonth": lambda: _month(day, -1),
        "thismonth": lambda: _month(day, 0),
        "nextmonth": lambda: _month(day, 1),
        "lastyear": lambda: str(day.year - 1),
        "thisyear": lambda: str(day.year),
        "nextyear": lambda: str(day.year + 1),
    }
    if g in simple:
        return simple[g]()
    if g == "lastwd":
        return fmt(_last_weekday(day, _WEEKDAYS_EN[m["wd1"].lower()]))
    if g == "nextwd":
        return fmt(_next_weekday(day, _WEEKDAYS_EN[m["wd2"].lower()]))
    if g == "ago":
        raw = m["n"].lower()
        n = int(raw) if raw.isdigit() else _EN_NUMBERS[raw]
        unit = m["unit"].lower()
        if unit.startswith("day"):
            return fmt(day - timedelta(days=n))
        if unit.startswith("week"):
            return "week of " + fmt(_monday(day, -n))
        if unit.startswith("month"):
            return _month(day, -n)
        return str(day.year - n)
    return None


def _zh_value(m: re.Match[str], day: date) -> str | None:
    g = m.lastgroup
    iso = date.isoformat
    simple: dict[str, Callable[[], str]] = {
        "d2": lambda: iso(day - timedelta(days=2)),
        "d1": lambda: iso(day - timedelta(days=1)),
        "d0": lambda: iso(day),
        "t1": lambda: iso(day + timedelta(days=1)),
        "t2": lambda: iso(day + timedelta(days=2)),
        "lastweek": lambda: iso(_monday(day, -1)) + " 那周",
        "thisweek": lambda: iso(_monday(day, 0)) + " 那周",
        "nextweek": lambda: iso(_monday(day, 1)) + " 那周",
        "lastmonth": lambda: _month_zh(day, -1),
        "thismonth": lambda: _month_zh(day, 0),
        "nextmonth": lambda: _month_zh(day, 1),
        "lastyear": lambda: f"{day.year - 1}年",
        "thisyear": lambda: f"{day.year}年",
        "nextyear": lambda: f"{day.year + 1}年",
        "yearbefore": lambda: f"{day.year - 2}年",
    }
    if g in simple:
        return simple[g]()
    if g == "lastwd":
        return iso(_monday(day, -1) + timedelta(days=_WEEKDAYS_ZH[m["wd1"]]))
    if g == "ago":
        raw = m["n"]
        n = int(raw) if raw.isdigit() else (cn_int(raw) or 1)
        unit = m["unit"]
        if unit == "天":
            return iso(day - timedelta(days=n))
        if unit in ("周", "个星期"):
            return iso(_monday(day, -n)) + " 那周"
        if unit == "个月":
            return _month_zh(day, -n)
        return f"{day.year - n}年"
    return None


def resolve_relative_times(text: str, day: date, language: Language) -> str:
    """Annotate each relative time in ``text`` with the date it meant when said on ``day``.

    Both Chinese and English expressions are resolved whatever ``language`` is; ``language``
    only picks the brackets.

    Example:
        >>> resolve_relative_times("I went there yesterday.", date(2023, 5, 8), "en")
        'I went there yesterday (7 May 2023).'
        >>> resolve_relative_times("我上周去了成都", date(2023, 5, 8), "zh")
        '我上周（2023-05-01 那周）去了成都'
    """
    open_, close = ("（", "）") if language == "zh" else (" (", ")")

    def annotate(value: Callable[[re.Match[str], date], str | None]) -> Callable[[re.Match[str]], str]:
        def repl(m: re.Match[str]) -> str:
            resolved = value(m, day)
            return m.group(0) if resolved is None else f"{m.group(0)}{open_}{resolved}{close}"

        return repl

    out = _EN.sub(annotate(_en_value), text) if _LATIN.search(text) else text
    return _ZH.sub(annotate(_zh_value), out) if _CJK.search(out) else out
