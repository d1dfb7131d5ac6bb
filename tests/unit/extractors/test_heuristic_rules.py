"""Single statements through the heuristic extractor: what comes out, in which words, and what not."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import FragmentCandidate, Message

CST = timezone(timedelta(hours=8))
# Thursday 2026-01-01 12:00 +08:00 (04:00 UTC: the same date in both time zones used below).
TS = int(datetime(2026, 1, 1, 12, tzinfo=CST).timestamp() * 1000)
WEEK = 7 * 86_400_000


def run(text: str, *, role: str = "user", source: str = "message", ts: int = TS) -> list[FragmentCandidate]:
    msg = Message(id="m1", role=role, content=text, channel="im", source=source, timestamp_ms=ts)
    return HeuristicExtractor().extract([msg], [], [], now_ms=ts).candidates


def facts(text: str) -> list[tuple[str, str]]:
    return [(c.key, c.content) for c in run(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我叫林晓", [("profile:name", "用户叫林晓。")]),
        ("我的名字是王小明", [("profile:name", "用户叫王小明。")]),
        ("我今年29岁", [("profile:birth_year", "用户1997年出生（2026年时29岁）。")]),
        ("我是96年的", [("profile:birth_year", "用户1996年出生。")]),
        ("我是男生", [("profile:gender", "用户是男性。")]),
        ("我已经结婚了", [("profile:marital", "用户已婚。")]),
        (
            "我在杭州做产品经理",
            [("profile:city", "用户在杭州工作。"), ("profile:occupation", "用户是产品经理。")],
        ),
        (
            "我在腾讯做产品经理",
            [("profile:workplace", "用户在腾讯工作。"), ("profile:occupation", "用户是产品经理。")],
        ),
        ("我住在上海", [("profile:city", "用户住在上海。")]),
        ("我搬到深圳了", [("profile:city", "用户搬到了深圳。")]),
        ("我是成都人", [("profile:hometown", "用户来自成都。")]),
        ("我是一名护士", [("profile:occupation", "用户是护士。")]),
        ("我是做设计的", [("profile:occupation", "用户从事设计工作。")]),
        ("我在浙江大学读书", [("profile:school", "用户在浙江大学上学。")]),
        ("我对芒果过敏", [("allergy:芒果", "用户对芒果过敏。")]),
        ("我花粉过敏", [("allergy:花粉", "用户对花粉过敏。")]),
        ("记住，我对海鲜过敏", [("allergy:海鲜", "用户对海鲜过敏。")]),
        ("我不吃香菜", [("food:香菜", "用户不吃香菜。")]),
        ("我不喜欢吃香菜", [("food:香菜", "用户不喜欢吃香菜。")]),
        ("点了一份不加葱的拉面", [("food:葱", "用户吃拉面不放葱。")]),
        ("我吃素", [("food:素食", "用户吃素。")]),
        ("我喜欢跑步", [("pref:跑步", "用户喜欢跑步。")]),
        ("我平时喜欢跑步", [("pref:跑步", "用户平时喜欢跑步。")]),
        ("我特别爱吃火锅", [("food:火锅", "用户爱吃火锅。")]),
        (
            "我喜欢跑步、游泳和看书",
            [
                ("pref:跑步", "用户喜欢跑步。"),
                ("pref:游泳", "用户喜欢游泳。"),
                ("pref:看书", "用户喜欢看书。"),
            ],
        ),
        ("我讨厌下雨天", [("pref:下雨天", "用户讨厌下雨天。")]),
        ("我对摄影很感兴趣", [("pref:摄影", "用户对摄影感兴趣。")]),
        ("我最喜欢的颜色是蓝色", [("pref:最喜欢的颜色", "用户最喜欢的颜色是蓝色。")]),
        ("我每天早上在西湖边跑步", [("habit:跑步", "用户每天早上在西湖边跑步。")]),
        ("我周末都去爬山", [("habit:爬山", "用户周末都爬山。")]),
        ("我习惯早起", [("habit:早起", "用户习惯早起。")]),
        ("我养了两只猫", [("pet:猫", "用户养了两只猫。")]),
        ("我家有一条狗叫旺财", [("pet:旺财", "用户养了一条叫旺财的狗。")]),
        ("我给我的小狗起名叫贝贝", [("pet:贝贝", "用户的小狗叫贝贝。")]),
        ("我有一个女儿", [("family:女儿", "用户有一个女儿。")]),
        ("我妈妈是老师", [("family:母亲", "用户的妈妈是老师。")]),
        ("我想学吉他", [("goal:学吉他", "用户想学吉他。")]),
        ("My name is Lin Xiao", [("profile:name", "User's name is Lin Xiao.")]),
        ("I was born in 1990", [("profile:birth_year", "User was born in 1990.")]),
        ("I'm married", [("profile:marital", "User is married.")]),
        (
            "I work as a product manager in Hangzhou",
            [
                ("profile:occupation", "User works as a product manager."),
                ("profile:city", "User works in Hangzhou."),
            ],
        ),
        ("I'm a nurse", [("profile:occupation", "User works as a nurse.")]),
        ("I work at Google", [("profile:workplace", "User works at Google.")]),
        ("I live in Shanghai", [("profile:city", "User lives in Shanghai.")]),
        ("I moved to Berlin last year", [("profile:city", "User moved to Berlin.")]),
        ("I'm from Chengdu", [("profile:hometown", "User is from Chengdu.")]),
        ("I'm allergic to mango", [("allergy:mango", "User is allergic to mango.")]),
        ("I have a peanut allergy", [("allergy:peanut", "User is allergic to peanut.")]),
        ("I don't eat pork", [("food:pork", "User doesn't eat pork.")]),
        ("I'm vegetarian", [("food:vegetarian", "User is vegetarian.")]),
        ("I love hiking", [("pref:hiking", "User loves hiking.")]),
        (
            "I like hiking, swimming, and reading",
            [
                ("pref:hiking", "User likes hiking."),
                ("pref:swimming", "User likes swimming."),
                ("pref:reading", "User likes reading."),
            ],
        ),  # fmt: skip
        ("I don't like coffee", [("food:coffee", "User doesn't like coffee.")]),
        ("I hate spiders", [("pref:spiders", "User hates spiders.")]),
        ("I am afraid of heights", [("pref:heights", "User is afraid of heights.")]),
        ("I'm a big fan of jazz", [("pref:jazz", "User is a big fan of jazz.")]),
        ("My favorite color is green", [("pref:favorite_color", "User's favorite color is green.")]),
        (
            "I usually go running by the lake",
            [("habit:go_running", "User usually goes running by the lake.")],
        ),
        ("I go to the gym every morning", [("habit:go_to_the_gym", "User goes to the gym every morning.")]),
        ("I have a cat named Mochi", [("pet:mochi", "User has a cat named Mochi.")]),
        ("I have two kids", [("family:child", "User has two kids.")]),
        ("My wife is a teacher", [("family:wife", "User's wife is a teacher.")]),
        (
            "By the way, I'm allergic to mango, remember that.",
            [("allergy:mango", "User is allergic to mango.")],
        ),
    ],
)
def test_statement(text: str, expected: list[tuple[str, str]]) -> None:
    assert facts(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "今天杭州下雨了，好冷",
        "谢谢你",
        "不好意思，刚才没听清",
        "你好呀",
        "晚上好呀，今天加班到九点，好累",
        "有什么好吃的推荐吗？",
        "你喜欢什么颜色？",
        "你喜欢什么颜色",
        "提醒我明天早上去跑步",
        "我喜欢你",
        "我今天去钓鱼了",
        "我觉得这部电影很好看",
        "我刚跑完步回来。",
        "今天跑了八公里，配速六分半。",
        "Wait, 我记得你上次说过钟水饺？",
        "他喜欢打篮球",
        "我们都喜欢吃火锅",
        "It's raining today",
        "Thanks a lot!",
        "Sorry, I didn't catch that",
        "Hello there",
        "Do you like pizza?",
        "Do you like pizza",
        "Can you remind me to call my mom?",
        "I love it",
        "I love your painting",
        "I went to the park yesterday",
        "She loves hiking",
        "[app] 用户切换到了文字模式",
        "[think API injected] 我对芒果过敏",
        "[image]",
    ],
)
def test_non_facts_yield_nothing(text: str) -> None:
    assert run(text) == []


def test_polarity_and_single_valued_flags() -> None:
    (allergy,) = run("我对芒果不过敏")
    assert (allergy.key, allergy.polarity, allergy.single_valued) == ("allergy:芒果", -1, False)
    (not_allergic,) = run("I'm not allergic to peanuts")
    assert (not_allergic.content, not_allergic.polarity) == ("User is not allergic to peanuts.", -1)
    (city,) = run("我住在上海")
    assert (city.value, city.single_valued) == ("上海", True)
    (coffee,) = run("我不太喜欢咖啡")
    assert (coffee.key, coffee.polarity, coffee.category) == ("food:咖啡", -1, "diet")


def test_temporary_states_are_transient_for_the_ttl() -> None:
    for text, key, content in [
        ("这周在试着吃素", "state:吃素", "用户这周在尝试吃素。"),
        ("我最近胃不好，不吃辣", "food:辣", "用户最近胃不好，不吃辣。"),
        ("最近在减肥", "state:在减肥", "用户最近在减肥。"),
        ("我感冒了", "state:感冒", "用户感冒了。"),
        (
            "This week I'm trying vegetarian food",
            "state:vegetarian_food",
            "User is trying vegetarian food this week.",
        ),
        ("I've been sleeping badly lately", "state:sleeping_badly", "User has been sleeping badly lately."),
        ("I have a cold", "state:cold", "User has a cold."),
    ]:
        (c,) = run(text)
        assert (c.key, c.content, c.transient, c.expires_at) == (key, content, True, TS + WEEK), text


def test_ttl_is_configurable() -> None:
    msg = Message(
        id="m", role="user", content="这周在试着吃素", channel="im", source="message", timestamp_ms=TS
    )
    (c,) = HeuristicExtractor(transient_ttl_days=3).extract([msg], [], [], now_ms=TS).candidates
    assert c.expires_at == TS + 3 * 86_400_000
    with pytest.raises(ValueError, match="transient_ttl_days"):
        HeuristicExtractor(transient_ttl_days=0)


def test_the_same_sentence_in_both_languages_keeps_separate_keys() -> None:
    assert run("我对芒果过敏")[0].key == "allergy:芒果"
    assert run("I'm allergic to mango")[0].key == "allergy:mango"


def test_fragments_stay_within_200_characters() -> None:
    long_like = "我喜欢" + "跑步" * 150
    for c in run(long_like) + run("I love " + "very long hiking trips " * 20):
        assert len(c.content) <= 200


def test_only_user_messages_count() -> None:
    assert run("我对芒果过敏", role="assistant") == []
    assert run("我对芒果过敏", source="greeting") == []
    assert run("我对芒果过敏", source="llm_failure") == []


def test_every_message_reports_its_own_source_id() -> None:
    msgs = [
        Message(id="a", role="user", content="我叫林晓", channel="im", source="message", timestamp_ms=TS),
        Message(
            id="b", role="assistant", content="你好林晓", channel="im", source="llm", timestamp_ms=TS + 1
        ),
        Message(
            id="c", role="user", content="I'm a nurse", channel="voice", source="asr", timestamp_ms=TS + 2
        ),
    ]
    out = HeuristicExtractor().extract(msgs, [], [], now_ms=TS).candidates
    assert [(c.key, c.source_message_ids) for c in out] == [
        ("profile:name", ["a"]),
        ("profile:occupation", ["c"]),
    ]
