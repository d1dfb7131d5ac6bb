"""Dates named in a query, read as time spans for the episodic search."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from convmem_graph._query_dates import date_spans


def _ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("query", "labels"),
    [
        ("What did Priya bake on 3 March 2024?", ["@2024-03-03"]),
        ("what happened on the 3rd of March, 2024", ["@2024-03-03"]),
        ("Who called on March 3rd, 2024 and in April 2024?", ["@2024-03-03", "@2024-04"]),
        ("notes from 2024-03-03", ["@2024-03-03"]),
        ("我2024年3月3日在哪里", ["@2024-03-03"]),
        ("2024年3月的账单", ["@2024-03"]),
        ("How often did she swim in 2021?", ["@2021"]),
        ("Call me at 5551234 about room 2044b", []),  # numbers that are no year
        ("What did I eat on 31 February 2024?", []),  # no such day
        ("上周六我去了哪里", []),  # relative: needs the asking time
    ],
)
def test_absolute_dates_become_spans(query: str, labels: list[str]) -> None:
    assert [s.label for s in date_spans(query)] == labels


def test_a_span_covers_the_day_in_the_query_time_zone() -> None:
    (day,) = date_spans("on 3 March 2024")
    assert (day.start_ms, day.end_ms) == (_ms(2024, 3, 3), _ms(2024, 3, 4))
    (zh,) = date_spans("2024年3月3日")  # Chinese text: read at UTC+8
    assert zh.start_ms == _ms(2024, 3, 2, 16)
    (month,) = date_spans("in December 2023")
    assert (month.start_ms, month.end_ms) == (_ms(2023, 12, 1), _ms(2024, 1, 1))
