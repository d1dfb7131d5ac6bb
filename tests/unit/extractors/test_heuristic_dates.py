"""Dates in the heuristic extractor: relative expressions, birth years, plan follow-ups, time zones."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Fragment, FragmentCandidate, Message
from convmem_graph.text.timeexpr import Period, cn_int, find_en, find_zh, render_en, render_zh

CST = timezone(timedelta(hours=8))
THU = date(2026, 1, 1)  # a Thursday
TS = int(datetime(2026, 1, 1, 12, tzinfo=CST).timestamp() * 1000)


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, tz: timezone = CST) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=tz).timestamp() * 1000)


def run(
    texts: list[str], existing: list[Fragment] | None = None, *, ts: int = TS, **meta: object
) -> list[FragmentCandidate]:
    msgs = [
        Message(
            id=f"m{i}",
            role="user",
            content=t,
            channel="im",
            source="message",
            timestamp_ms=ts + i,
            metadata=meta,
        )
        for i, t in enumerate(texts)
    ]
    return HeuristicExtractor().extract(msgs, existing or [], [], now_ms=ts).candidates


@pytest.mark.parametrize(
    ("text", "start", "end", "kind"),
    [
        ("我下个月要去成都出差", date(2026, 2, 1), date(2026, 2, 28), "month"),
        ("出差是2月10号到14号", date(2026, 2, 10), date(2026, 2, 14), "range"),
        ("我周末想去爬山", date(2026, 1, 3), date(2026, 1, 4), "weekend"),
        ("下周我要去成都", date(2026, 1, 5), date(2026, 1, 11), "week"),
        ("下周三开会", date(2026, 1, 7), date(2026, 1, 7), "day"),
        ("明天见", date(2026, 1, 2), date(2026, 1, 2), "day"),
        ("3月份去", date(2026, 3, 1), date(2026, 3, 31), "month"),
        ("十二月25号", date(2026, 12, 25), date(2026, 12, 25), "day"),
        ("明年", date(2027, 1, 1), date(2027, 12, 31), "year"),
    ],
)
def test_find_zh(text: str, start: date, end: date, kind: str) -> None:
    m = find_zh(text, THU)
    assert m is not None
    assert m.period == Period(start, end, kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "start", "end", "kind"),
    [
        ("the trip is Feb 10 to 14", date(2026, 2, 10), date(2026, 2, 14), "range"),
        ("next week", date(2026, 1, 5), date(2026, 1, 11), "week"),
        ("this weekend", date(2026, 1, 3), date(2026, 1, 4), "weekend"),
        ("in March", date(2026, 3, 1), date(2026, 3, 31), "month"),
        ("on Friday", date(2026, 1, 2), date(2026, 1, 2), "day"),
        ("in two weeks", date(2026, 1, 12), date(2026, 1, 18), "week"),
        ("10th of March", date(2026, 3, 10), date(2026, 3, 10), "day"),
        ("March 3rd-5th", date(2026, 3, 3), date(2026, 3, 5), "range"),
        ("tomorrow", date(2026, 1, 2), date(2026, 1, 2), "day"),
    ],
)
def test_find_en(text: str, start: date, end: date, kind: str) -> None:
    m = find_en(text, THU)
    assert m is not None
    assert m.period == Period(start, end, kind)  # type: ignore[arg-type]


def test_no_time_expression() -> None:
    assert find_zh("我喜欢跑步", THU) is None
    assert find_en("I like running", THU) is None


def test_dates_said_without_a_year_in_december_roll_over() -> None:
    m = find_zh("2月10号", date(2025, 12, 27))
    assert m is not None and m.period.start == date(2026, 2, 10)


def test_render() -> None:
    assert render_zh(Period(date(2026, 2, 10), date(2026, 2, 14), "range")) == "2026年2月10日至14日"
    assert render_zh(Period(date(2026, 1, 30), date(2026, 2, 2), "range")) == "2026年1月30日至2月2日"
    assert render_zh(Period(date(2026, 1, 3), date(2026, 1, 4), "weekend")) == "2026年1月3日至4日（周末）"
    assert render_en(Period(date(2026, 2, 1), date(2026, 2, 28), "month")) == "in February 2026"
    assert render_en(Period(date(2026, 2, 10), date(2026, 2, 14), "range")) == "from 10 to 14 February 2026"
    assert render_en(Period(date(2026, 1, 5), date(2026, 1, 11), "week")) == "in the week of 5 January 2026"


def test_cn_int() -> None:
    assert [cn_int(x) for x in ("29", "二十九", "两", "十", "一百零五", "x")] == [29, 29, 2, 10, 105, None]


def test_birth_year_uses_the_message_date() -> None:
    (c,) = run(["I'm 29 this year."], ts=_ms(2025, 12, 27, 18))
    assert (c.key, c.value, c.content) == (
        "profile:birth_year",
        "1996",
        "User was born in 1996 (age 29 in 2025).",
    )
    (c,) = run(["我今年29岁"], ts=_ms(2025, 12, 27, 18))
    assert (c.value, c.content) == ("1996", "用户1996年出生（2025年时29岁）。")


def test_chinese_text_resolves_dates_in_china_time() -> None:
    # 2026-01-01 00:30 in Beijing is still 2025-12-31 in UTC.
    ts = _ms(2026, 1, 1, 0, 30)
    (c,) = run(["我今年29岁"], ts=ts)
    assert c.value == "1997"
    (c,) = run(["I'm 29 this year"], ts=ts)
    assert c.value == "1996"
    (c,) = run(["I'm 29 this year"], ts=ts, utc_offset_minutes=480)
    assert c.value == "1997"
    msg = Message(
        id="m", role="user", content="I'm 29 this year", channel="im", source="message", timestamp_ms=ts
    )
    (c,) = HeuristicExtractor(utc_offset_minutes=480).extract([msg], [], [], now_ms=ts).candidates
    assert c.value == "1997"


def test_plan_and_its_dates_in_one_batch() -> None:
    plan, dated = run(["对对，还有我下个月要去成都出差。", "（文字）出差是 2 月 10 号到 14 号"])
    assert (plan.key, plan.content, plan.expires_at) == (
        "plan:去成都出差",
        "用户计划2026年2月去成都出差。",
        _ms(2026, 3, 2),
    )
    assert (dated.key, dated.content, dated.expires_at) == (
        "plan:去成都出差",
        "用户计划2026年2月10日至14日去成都出差。",
        _ms(2026, 2, 16),
    )
    assert dated.source_message_ids == ["m1"]


def test_plan_follow_up_refers_to_a_stored_plan() -> None:
    stored = Fragment(
        id="f1",
        memory_id="m",
        content="用户计划2026年2月去成都出差。",
        key="plan:去成都出差",
        transient=True,
        expires_at=_ms(2026, 3, 2),
    )
    (c,) = run(["出差是 2 月 10 号到 14 号"], [stored])
    assert (c.key, c.content) == ("plan:去成都出差", "用户计划2026年2月10日至14日去成都出差。")
    superseded = stored.model_copy(update={"status": "superseded"})
    assert run(["出差是 2 月 10 号到 14 号"], [superseded]) == []


def test_english_plan_follow_up() -> None:
    stored = Fragment(
        id="f1",
        memory_id="m",
        content="User plans to go to Chengdu in February 2026.",
        key="plan:go to chengdu",
        transient=True,
    )
    (c,) = run(["The trip is from Feb 10 to 14."], [stored], utc_offset_minutes=0)
    assert (c.key, c.content) == (
        "plan:go to chengdu",
        "User plans to go to Chengdu from 10 to 14 February 2026.",
    )
    assert c.expires_at == _ms(2026, 2, 16, tz=UTC)


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("I'm going to Chengdu next month", "User plans to go to Chengdu in February 2026."),
        ("I want to visit Japan next year", "User wants to visit Japan in 2027."),
        ("I'm planning to learn Spanish", "User plans to learn Spanish."),
        ("I have a dentist appointment tomorrow", "User has a dentist appointment on 2 January 2026."),
        (
            "I'm visiting my parents next week",
            "User is visiting their parents in the week of 5 January 2026.",
        ),
        ("I'll be in Tokyo on March 3rd", "User plans to be in Tokyo on 3 March 2026."),
        ("我明天要去北京", "用户计划2026年1月2日去北京。"),
        ("我打算明年换工作", "用户计划2027年换工作。"),
        ("我周末想在西湖边跑个 10 公里", "用户想2026年1月3日至4日（周末）在西湖边跑个10公里。"),
    ],
)
def test_plans(text: str, content: str) -> None:
    (c,) = run([text])
    assert (c.content, c.category, c.transient) == (content, "plan", True)
    assert c.expires_at is not None and c.expires_at > TS


@pytest.mark.parametrize("text", ["I'll be fine tomorrow", "我今天去钓鱼了", "我要睡了", "I want to sleep"])
def test_not_plans(text: str) -> None:
    assert run([text]) == []


def test_pet_age_about_a_known_pet() -> None:
    stored = Fragment(id="f1", memory_id="m", content="用户养了一只叫年糕的橘猫。", key="pet:年糕")
    (c,) = run(["年糕三岁了"], [stored])
    assert (c.key, c.content, c.value) == ("pet:年糕:age", "用户的橘猫年糕三岁了（2026年1月）。", "3岁")
    assert run(["年糕三岁了"]) == []  # unknown name: nothing
    dog = Fragment(id="f2", memory_id="m", content="User has a dog named Rex.", key="pet:rex")
    (c,) = run(["Rex is 3 years old"], [dog])
    assert (c.key, c.content) == ("pet:rex:age", "User's dog Rex is 3 years old (as of January 2026).")
