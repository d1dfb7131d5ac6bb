"""Calendar dates named in a query, as time spans the episodic search can look turns up by.

"What did Sam cook on 19 August 2023?" names a day; the turn that answers it rarely says the date
(it says "today" or nothing), but it was *stored* on that day. A named date is therefore searched
like a term whose postings are the memory's turns stored within its span (see
:func:`convmem_graph.store._episode_search.collect`). Absolute dates only: a day (``19 August
2023``, ``August 19, 2023``, ``2023-08-19``, ``2023年8月19日``), a month (``August 2023``,
``2023年8月``) or a year (``in 2023``, ``2023年``). A relative date ("last Saturday", "上周六")
needs the asking time, which the index search does not have; it is not turned into a span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import IDEOGRAPHS

__all__ = ["DateSpan", "date_spans"]

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        (
            "january jan",
            "february feb",
            "march mar",
            "april apr",
            "may",
            "june jun",
            "july jul",
            "august aug",
            "september sep sept",
            "october oct",
            "november nov",
            "december dec",
        )
    )
    for name in names.split()
}
_MONTH = r"(?P<{g}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<{g}>(?:19|20)\d\d)"
_DAY = r"(?P<{g}>[0-3]?\d)(?:st|nd|rd|th)?"
_PATTERNS = [
    # 19 August 2023, 19 Aug, 2023
    lazy_compile(
        rf"\b{_DAY.format(g='d')}\s+(?:of\s+)?{_MONTH.format(g='m')},?\s+{_YEAR.format(g='y')}\b", re.I
    ),
    # August 19, 2023 / August 19th 2023
    lazy_compile(rf"\b{_MONTH.format(g='m')}\s+{_DAY.format(g='d')},?\s+{_YEAR.format(g='y')}\b", re.I),
    # 2023-08-19
    lazy_compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b"),
    # 2023年8月19日 / 2023年8月19号
    lazy_compile(r"(?P<y>(?:19|20)\d\d)\s*年\s*(?P<m>[01]?\d)\s*月\s*(?P<d>[0-3]?\d)\s*[日号]"),
    # August 2023
    lazy_compile(rf"\b{_MONTH.format(g='m')},?\s+{_YEAR.format(g='y')}\b", re.I),
    # 2023年8月
    lazy_compile(r"(?P<y>(?:19|20)\d\d)\s*年\s*(?P<m>[01]?\d)\s*月"),
    # a year on its own
    lazy_compile(r"(?<![0-9A-Za-z-])(?P<y>(?:19|20)\d\d)(?![0-9A-Za-z-])"),
]
_CJK = lazy_compile(f"[{IDEOGRAPHS}]")
#: The literal openings of :data:`_YEAR` (``(?:19|20)``), which every pattern holds.
_CENTURIES = ("19", "20")


@dataclass(frozen=True)
class DateSpan:
    """A calendar span named in a query: ``start_ms <= t < end_ms`` in the query's time zone.

    Attributes:
        label: The span as a search key (``@2023-08-19``, ``@2023-08``, ``@2023``): never a word,
            so it cannot collide with a query term.
        start_ms: First millisecond (UTC epoch).
        end_ms: First millisecond after the span.
    """

    label: str
    start_ms: int
    end_ms: int


def _ms(day: date, offset_minutes: int) -> int:
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(minutes=offset_minutes)
    return int(midnight.timestamp() * 1000)


def _month_value(raw: str) -> int | None:
    if raw.isdigit():
        value = int(raw)
        return value if 1 <= value <= 12 else None
    return _MONTHS.get(raw.lower().rstrip("."))


def date_spans(query: str, *, utc_offset_minutes: int | None = None, limit: int = 4) -> list[DateSpan]:
    """The absolute dates ``query`` names, as spans (most precise first, at most ``limit``).

    Args:
        query: Free text.
        utc_offset_minutes: The time zone days are read in; default UTC+8 for Chinese text, UTC
            otherwise (the guess the quotes and the heuristic extractor make).
        limit: Most spans returned.

    Example:
        >>> [s.label for s in date_spans("What did Sam cook on 19 August, 2023 and in July 2023?")]
        ['@2023-08-19', '@2023-07']
        >>> [s.label for s in date_spans("我2023年8月19日去了成都")]
        ['@2023-08-19']
    """
    if _CENTURIES[0] not in query and _CENTURIES[1] not in query:
        # Every pattern's year starts with one of these two literal pairs: a query holding
        # neither names no date (most queries), and the seven patterns need not run.
        return []
    offset = utc_offset_minutes if utc_offset_minutes is not None else (480 if _CJK.search(query) else 0)
    taken: list[tuple[int, int]] = []  # character ranges already read as a date
    found: dict[str, DateSpan] = {}
    for pattern in _PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            groups = m.groupdict()
            year = int(groups["y"])
            month = _month_value(groups["m"]) if groups.get("m") else None
            if groups.get("m") and month is None:
                continue
            try:
                if groups.get("d") and month is not None:
                    first = date(year, month, int(groups["d"]))
                    last, label = first + timedelta(days=1), f"@{first.isoformat()}"
                elif month is not None:
                    first = date(year, month, 1)
                    last = date(year + (month == 12), month % 12 + 1, 1)
                    label = f"@{year:04d}-{month:02d}"
                else:
                    first, last, label = date(year, 1, 1), date(year + 1, 1, 1), f"@{year:04d}"
            except ValueError:  # 31 February: not a date, and not a month either
                taken.append((m.start(), m.end()))
                continue
            taken.append((m.start(), m.end()))
            found.setdefault(label, DateSpan(label, _ms(first, offset), _ms(last, offset)))
    return list(found.values())[:limit]
