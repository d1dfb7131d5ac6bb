"""Regression table for the heuristic extractor's quality: what a single utterance yields, or nothing.

Each row is one user message said on Thursday 2026-01-01 12:00 in Beijing (04:00 UTC, the same
date in both time zones), with the exact candidates expected: (key, content, transient, polarity).
The rows cover the extractor's policy (see :mod:`convmem_graph.extractors.heuristic`): momentary
wants, cravings and reminder requests are not facts; plans need a date after today or a firm
word; ongoing activities are temporary states; statements about relatives are about them;
questions, greetings, weather, thanks and statements about other people yield nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import FragmentCandidate, Message
from convmem_graph.text.keys import normalize_key

CST = timezone(timedelta(hours=8))
TS = int(datetime(2026, 1, 1, 12, tzinfo=CST).timestamp() * 1000)

Row = tuple[str, str, bool, int]


def run(text: str) -> list[FragmentCandidate]:
    msg = Message(id="m1", role="user", content=text, channel="im", source="message", timestamp_ms=TS)
    return HeuristicExtractor().extract([msg], [], [], now_ms=TS).candidates


def rows(text: str) -> list[Row]:
    return [(c.key, c.content, c.transient, c.polarity) for c in run(text)]


TABLE: list[tuple[str, list[Row]]] = [
    # -- momentary wants, cravings and requests: nothing
    ("今晚想吃点水果，有什么推荐？", []),
    ("明天早上 7 点提醒我去跑步", []),
    ("帮我定个明早7点的闹钟", []),
    ("明天想吃火锅", []),
    ("我今晚要早点睡", []),
    ("I want to grab a coffee now", []),
    ("I'm going to the gym tonight", []),
    ("Remind me to call my mom tomorrow", []),
    ("I want to eat sushi tonight, any recommendations?", []),
    # -- plans and wishes with a date after today
    ("我下个月要去成都出差", [("plan:去成都出差", "用户计划2026年2月去成都出差。", True, 1)]),
    (
        "我周末想在西湖边跑个 10 公里",
        [("plan:在西湖边跑个10公里", "用户想2026年1月3日至4日（周末）在西湖边跑个10公里。", True, 1)],
    ),
    ("我下周三要考试", [("plan:考试", "用户计划2026年1月7日考试。", True, 1)]),
    (
        "I'm flying to Chengdu next month",
        [("plan:fly_to_chengdu", "User plans to fly to Chengdu in February 2026.", True, 1)],
    ),
    ("I have an exam on March 3rd", [("plan:exam", "User has an exam on 3 March 2026.", True, 1)]),
    # -- temporary states and ongoing activities
    (
        "最近在学吉他，周末想去爬山",
        [
            ("state:学吉他", "用户最近在学吉他。", True, 1),
            ("plan:去爬山", "用户想2026年1月3日至4日（周末）去爬山。", True, 1),
        ],
    ),
    ("这周在试着吃素", [("state:吃素", "用户这周在尝试吃素。", True, 1)]),
    ("我在学日语", [("state:学日语", "用户在学日语。", True, 1)]),
    ("最近在看三体", [("state:看三体", "用户最近在看三体。", True, 1)]),
    ("我在看电视", []),
    (
        "I've been learning Spanish lately",
        [("state:learning_spanish", "User has been learning Spanish lately.", True, 1)],
    ),
    (
        "this week I'm trying vegetarian food",
        [("state:vegetarian_food", "User is trying vegetarian food this week.", True, 1)],
    ),
    (
        "I just started taking guitar lessons",
        [("state:taking_guitar_lessons", "User started taking guitar lessons.", True, 1)],
    ),
    ("I'm watching TV", []),
    # -- relatives are not the user; anyone else yields nothing
    ("我妈妈喜欢跳舞", [("family:母亲:跳舞", "用户的妈妈喜欢跳舞。", False, 1)]),
    (
        "我妈妈对花粉过敏，也不吃辣",
        [
            ("family:母亲:花粉", "用户的妈妈对花粉过敏。", False, 1),
            ("family:母亲:辣", "用户的妈妈不吃辣。", False, 1),
        ],
    ),
    ("我爸今年60岁", [("family:父亲:age", "用户的爸爸2026年时60岁。", False, 1)]),
    ("My mom loves dancing", [("family:mother:dancing", "User's mom loves dancing.", False, 1)]),
    ("我朋友对花生过敏", []),
    ("他喜欢打篮球", []),
    ("My friend is allergic to peanuts", []),
    ("She loves hiking", []),
    # -- negations
    ("我不喜欢下雨天", [("pref:下雨天", "用户不喜欢下雨天。", False, -1)]),
    ("我不再吃肉了", [("food:肉", "用户不再吃肉。", False, -1)]),
    ("我对芒果不过敏", [("allergy:芒果", "用户对芒果不过敏。", False, -1)]),
    ("I no longer eat meat", [("food:meat", "User doesn't eat meat.", False, -1)]),
    (
        "I'm not a fan of horror movies",
        [("pref:horror_movies", "User is not a fan of horror movies.", False, -1)],
    ),
    ("我以前喜欢游泳", []),
    # -- numbers and dates
    ("我今年35了", [("profile:birth_year", "用户1991年出生（2026年时35岁）。", False, 1)]),
    ("我3月5号生日", [("profile:birthday", "用户的生日是3月5日。", False, 1)]),
    ("I'm 30 years old", [("profile:birth_year", "User was born in 1996 (age 30 in 2026).", False, 1)]),
    ("My birthday is on May 3rd", [("profile:birthday", "User's birthday is on 3 May.", False, 1)]),
    ("出差是 2 月 10 号到 14 号", []),  # a date for a plan nobody mentioned
    # -- questions, greetings, weather, thanks
    ("你喜欢吃什么？", []),
    ("今天天气真好", []),
    ("早上好呀", []),
    ("谢谢你的建议", []),
    ("What's the weather like tomorrow?", []),
    ("It's freezing today", []),
    ("Good morning!", []),
    ("Thanks so much for the tips", []),
    # -- plain statements, for contrast
    ("我养了一只白色的泰迪", [("pet:泰迪", "用户养了一只白色的泰迪。", False, 1)]),
    ("My favorite band is Coldplay", [("pref:favorite_band", "User's favorite band is Coldplay.", False, 1)]),
]


@pytest.mark.parametrize(("text", "expected"), TABLE, ids=[t for t, _ in TABLE])
def test_regression_table(text: str, expected: list[Row]) -> None:
    assert rows(text) == expected


def test_the_table_covers_both_languages_and_both_outcomes() -> None:
    zh = [t for t, _ in TABLE if any("\u4e00" <= ch <= "\u9fff" for ch in t)]
    assert len(TABLE) >= 40 and len(zh) >= 20 and len(TABLE) - len(zh) >= 20
    assert sum(1 for _, e in TABLE if not e) >= 20


@pytest.mark.parametrize(("text", "expected"), [r for r in TABLE if r[1]], ids=[t for t, e in TABLE if e])
def test_every_key_is_in_the_shared_spelling(text: str, expected: list[Row]) -> None:
    for c in run(text):
        assert normalize_key(c.key) == c.key
        assert " " not in c.key and c.key == c.key.lower()


def test_transient_facts_carry_an_expiry_after_the_message() -> None:
    for text, _ in TABLE:
        for c in run(text):
            assert (c.expires_at is not None) == c.transient, text
            if c.expires_at is not None:
                assert c.expires_at > TS, text


def test_a_relative_clause_does_not_leak_into_the_users_profile() -> None:
    keys = [c.key for c in run("我妈妈是老师，喜欢跳舞。我是护士")]
    assert keys == ["family:母亲", "family:母亲:跳舞", "profile:occupation"]
    assert [c.key for c in run("我妈说我太胖了，我要减肥")] == ["goal:减肥"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我养了一只猫，叫豆豆。", [("pet:豆豆", "用户养了一只叫豆豆的猫。")]),
        ("我有个弟弟，叫小明。", []),
        ("你好，我叫王芳。", [("profile:name", "用户叫王芳。")]),
    ],
)
def test_a_subject_less_name_names_what_was_just_introduced(
    text: str, expected: list[tuple[str, str]]
) -> None:
    from convmem_graph.extractors.heuristic import HeuristicExtractor
    from convmem_graph.models import Message

    msg = Message(
        id="m", role="user", content=text, channel="im", source="message", timestamp_ms=1_767_268_800_000
    )
    got = HeuristicExtractor().extract([msg], [], [], now_ms=1_767_268_800_000).candidates
    assert [(c.key, c.content) for c in got] == expected


def test_a_key_whose_subject_is_only_particles_keeps_it() -> None:
    from convmem_graph.text.keys import normalize_key

    assert normalize_key("event:哈哈") == "event:哈哈"
    assert normalize_key("pref:跑步了") == "pref:跑步"
