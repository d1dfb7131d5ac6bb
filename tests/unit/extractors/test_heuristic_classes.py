"""Whole classes of phrasings through the heuristic extractor (issue 9, part 3), zh and en.

Each class has several sentences of different shapes (names, cities, numbers, pets, dishes) and
negative cases that must not produce the fact. None of these sentences comes from a dataset.
"""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime, timedelta, timezone

import pytest

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.extractors.reconcile import reconcile
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables
from convmem_graph.models import Fragment, FragmentCandidate, Message

CST = timezone(timedelta(hours=8))
# Wednesday 2026-06-17 12:00 +08:00 (04:00 UTC: the same date for zh and en messages).
TS = int(datetime(2026, 6, 17, 12, tzinfo=CST).timestamp() * 1000)


def run(text: str, existing: list[Fragment] | None = None) -> list[FragmentCandidate]:
    msg = Message(id="m1", role="user", content=text, channel="im", source="message", timestamp_ms=TS)
    return HeuristicExtractor().extract([msg], existing or [], [], now_ms=TS).candidates


def facts(text: str) -> list[tuple[str, str]]:
    return [(c.key, c.content) for c in run(text)]


def as_fragments(candidates: list[FragmentCandidate]) -> list[Fragment]:
    return [
        Fragment(
            id=f"f{i}",
            memory_id="m",
            content=c.content,
            key=c.key,
            category=c.category,
            transient=c.transient,
            expires_at=c.expires_at,
        )
        for i, c in enumerate(candidates)
    ]


# ----------------------------------------------------------------- exact facts per class

CASES = [
    # self-introductions give the name
    ("我是赵明", [("profile:name", "用户叫赵明。")]),
    ("你好，我是欧阳小雅", [("profile:name", "用户叫欧阳小雅。")]),
    ("我是小雨，今年上高二", [("profile:name", "用户叫小雨。"), ("profile:grade", "用户上高二。")]),
    ("我叫陈思远", [("profile:name", "用户叫陈思远。")]),
    ("你好，叫我阿杰就行", [("profile:name", "用户叫阿杰。")]),
    ("I'm Keiko", [("profile:name", "User's name is Keiko.")]),
    ("Hi there, I'm Mateo Alvarez, nice to meet you", [("profile:name", "User's name is Mateo Alvarez.")]),
    ("I go by Jules", [("profile:name", "User's name is Jules.")]),
    ("my name is Ingrid", [("profile:name", "User's name is Ingrid.")]),
    # can't stand X is said as it is
    (
        "I can't stand pineapple on pizza",
        [("pref:pineapple_on_pizza", "User can't stand pineapple on pizza.")],
    ),
    ("I cannot stand cilantro", [("food:cilantro", "User can't stand cilantro.")]),
    ("I really can't stand loud music", [("pref:loud_music", "User can't stand loud music.")]),
    ("I just can't bear horror films", [("pref:horror_films", "User can't bear horror films.")]),
    # a diet since some time
    ("I've been vegan since 2017", [("food:vegan", "User has been vegan since 2017.")]),
    ("I went pescatarian three years ago", [("food:pescatarian", "User went pescatarian in 2023.")]),
    (
        "I've been vegetarian for six years",
        [("food:vegetarian", "User has been vegetarian for six years (as of June 2026).")],
    ),
    ("I stopped eating red meat in 2021", [("food:red_meat", "User stopped eating red meat in 2021.")]),
    ("我从前年开始吃素", [("food:素食", "用户从2024年开始吃素。")]),
    ("我已经吃素五年了", [("food:素食", "用户吃素。")]),
    # an age reached gives the birth year, dated by its own time words
    ("I turned 34 last month", [("profile:birth_year", "User was born in 1992 (turned 34 in May 2026).")]),
    ("I just turned forty-one", [("profile:birth_year", "User was born in 1985 (turned 41).")]),
    ("I'm turning 25 next month", [("profile:birth_year", "User was born in 2001 (turns 25 in July 2026).")]),
    ("I turned 50 in August", [("profile:birth_year", "User was born in 1975 (turned 50 in August 2025).")]),
    ("我上个月刚满33岁", [("profile:birth_year", "用户1993年出生（2026年满33岁）。")]),
    ("我下个月就满40岁了", [("profile:birth_year", "用户1986年出生（2026年满40岁）。")]),
    ("我去年过了60岁生日", [("profile:birth_year", "用户1965年出生（2025年满60岁）。")]),
    # a named relative is a relation fact under the relative's name
    (
        "My younger brother Tomas lives in Madrid",
        [("family:brother:tomas", "User's brother Tomas lives in Madrid.")],
    ),
    (
        "I have a sister, Hana, who teaches piano",
        [("family:sister:hana", "User's sister Hana teaches piano.")],
    ),
    (
        "My daughter Ella just started school",
        [("family:daughter:ella", "User's daughter Ella just started school.")],
    ),
    ("我弟弟小凯在南京上大学", [("family:弟弟:小凯", "用户的弟弟小凯在南京上大学。")]),
    # a relative's job and place
    ("我哥哥在广州做律师", [("family:哥哥", "用户的哥哥在广州做律师。")]),
    ("我爸爸在银行当经理", [("family:父亲", "用户的爸爸在银行当经理。")]),
    ("我妹妹在北京读大学", [("family:妹妹", "用户的妹妹在北京读大学。")]),
    # pets with their names
    (
        "I just adopted three kittens, Mochi, Tofu and Bean",
        [
            ("pet:mochi", "User adopted a kitten named Mochi."),
            ("pet:tofu", "User adopted a kitten named Tofu."),
            ("pet:bean", "User adopted a kitten named Bean."),
        ],
    ),
    ("I rescued a dog named Blue", [("pet:blue", "User rescued a dog named Blue.")]),
    ("I adopted two hamsters", [("pet:hamster", "User adopted two hamsters.")]),
    (
        "我领养了两只猫，叫芝麻和汤圆",
        [("pet:芝麻", "用户养了一只叫芝麻的猫。"), ("pet:汤圆", "用户养了一只叫汤圆的猫。")],
    ),
    ("我收养了一条狗，叫阿黄", [("pet:阿黄", "用户养了一只叫阿黄的狗。")]),
    # habits, even with a pronoun object
    ("我每天晚上七点带它去江边散步", [("habit:散步", "用户每天晚上七点带它去江边散步。")]),
    (
        "我家有一只狗叫可乐，每周六早上带它去河边散步",
        [("pet:可乐", "用户养了一只叫可乐的狗。"), ("habit:散步", "用户每周六早上带可乐去河边散步。")],
    ),
    ("I take him for a swim every Sunday", [("habit:swim", "User takes him for a swim every Sunday.")]),
    # the city from where the user works or is
    ("我现在在成都上班", [("profile:city", "用户在成都工作。")]),
    ("我在苏州工作五年了", [("profile:city", "用户在苏州工作。")]),
    ("我是在厦门工作的", [("profile:city", "用户在厦门工作。")]),
    ("我们重庆这边天气太热了", [("profile:city", "用户在重庆。")]),
    ("It's freezing here in Glasgow today", [("profile:city", "User is based in Glasgow.")]),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_class_gives_the_fact(text: str, expected: list[tuple[str, str]]) -> None:
    assert facts(text) == expected


# ----------------------------------------------------------------- temporary facts and plans

TRANSIENT = [
    ("I'm on early shifts this week", "state:on_early_shifts", "User is on early shifts this week.", "state"),
    ("I'm on paternity leave", "state:on_paternity_leave", "User is on paternity leave.", "state"),
    (
        "I'm working nights next week",
        "state:working_nights",
        "User is working nights in the week of 22 June 2026.",
        "state",
    ),
    ("我这周值夜班", "state:值夜班", "用户这周值夜班。", "state"),
    ("我下周请假", "state:请假", "用户2026年6月22日至28日请假。", "state"),
    (
        "I registered for the Leeds 10K in October",
        "plan:leeds_10k",
        "User registered for the Leeds 10K in October 2026.",
        "plan",
    ),
    (
        "I've booked a cooking class for next Saturday",
        "plan:cooking_class",
        "User booked a cooking class on 27 June 2026.",
        "plan",
    ),
    (
        "I entered the city chess tournament on July 12",
        "plan:city_chess_tournament",
        "User entered the city chess tournament on 12 July 2026.",
        "plan",
    ),
    ("我报名了下个月的成都马拉松", "plan:成都马拉松", "用户报名了2026年7月的成都马拉松。", "plan"),
    ("我报名参加了八月的钢琴比赛", "plan:钢琴比赛", "用户报名参加了2026年8月的钢琴比赛。", "plan"),
]


@pytest.mark.parametrize(
    ("text", "key", "content", "category"), TRANSIENT, ids=[t[0][:40] for t in TRANSIENT]
)
def test_temporary_class_is_transient(text: str, key: str, content: str, category: str) -> None:
    (c,) = run(text)
    assert (c.key, c.content, c.category, c.transient) == (key, content, category, True)
    assert c.expires_at is not None and c.expires_at > TS


def test_a_plan_expires_after_its_date() -> None:
    (c,) = run("I signed up for a pottery workshop next month")
    july_end = int(datetime(2026, 8, 1, tzinfo=UTC).timestamp() * 1000)
    assert c.expires_at is not None and c.expires_at > july_end


# ----------------------------------------------------------------- what must not come out

NOTHING = [
    # naming a dish or a thing is not a name
    "我昨天学了一道川菜，叫做鱼香肉丝",
    "我做了一道菜，叫番茄炒蛋",
    "这家店叫做老地方",
    "We made a cocktail, it's called Blue Lagoon",
    "I cooked a dish called shakshuka",
    # words after 我是 / I'm that are not names
    "我是认真的",
    "我是王者",
    "我是安静",
    "明天早上叫我起床",
    "他们都叫我胖子",
    "I'm Canadian",
    "I'm Sorry",
    "I'm Going Home",
    "I'm OK",
    # reported speech is about someone else
    "我知道她特别喜欢吃榴莲，也喜欢喝奶茶",
    "我听说老李对海鲜过敏",
    "我记得他每天都去游泳",
    "我觉得小张喜欢钓鱼，周末都去水库",
    "I heard Tom can't stand cats",
    "She told me she's vegetarian",
    "I think my neighbour loves opera",
    # someone else's relatives, pets and habits
    "My friend Omar lives in Cairo",
    "My coworker Jen is a nurse",
    "我同事在杭州当老师",
    "我朋友养了两只猫，叫芝麻和汤圆",
    "My neighbour adopted two cats, Tom and Jerry",
    "他每天早上带它去跑步",
    "She takes him for a walk every day",
    # signing up without a date, or for the past
    "I signed up for the newsletter",
    "I signed up for the race last year",
    "我买了下周的菜",
    # visiting is not living there; a question is not a statement
    "I'm visiting my aunt here in Dublin",
    "Is it sunny here in Oslo?",
    "我在杭州出差",
    # empty and junk objects
    "喜欢吃",
    "我喜欢吃",
    "我叫是有",
    "我喜欢了是",
    "我叫叫吃",
]


@pytest.mark.parametrize("text", NOTHING)
def test_not_a_fact_about_the_user(text: str) -> None:
    assert facts(text) == []


def test_reported_speech_keeps_the_user_facts_that_follow_an_explicit_me() -> None:
    assert facts("我发现我喜欢上了攀岩") == [("pref:攀岩", "用户喜欢攀岩。")]
    assert facts("我知道他喜欢爬山，我喜欢游泳") == [("pref:游泳", "用户喜欢游泳。")]


def test_relatives_facts_are_not_the_users() -> None:
    keys = [k for k, _ in facts("My dad can't stand jazz")]
    assert keys == ["family:father:jazz"]
    assert all(not k.startswith("food:") for k, _ in facts("My sister has been vegan since 2015"))


# ----------------------------------------------------------------- a stored name is never overridden


def test_naming_a_dish_never_overrides_a_stored_name() -> None:
    name = Fragment(id="f1", memory_id="m", content="用户叫林晓。", key="profile:name")
    for text in (
        "我做了一道菜，叫做宫保鸡丁",
        "我最近迷上了一道菜，叫水煮鱼",
        "I baked a cake called Lemon Drizzle",
    ):
        candidates = run(text, [name])
        assert all(c.key != "profile:name" for c in candidates), text
        assert all(op.op != "supersede" for op in reconcile(candidates, [name]))


def test_a_self_introduction_replaces_the_stored_name() -> None:
    name = Fragment(id="f1", memory_id="m", content="用户叫林晓。", key="profile:name")
    (op,) = reconcile(run("我是周杰"), [name])
    assert (op.op, op.candidate.content) == ("supersede", "用户叫周杰。")


# ----------------------------------------------------------------- variables


@pytest.mark.parametrize(
    ("text", "city"),
    [
        ("我现在在成都上班", "成都"),
        ("我在苏州工作五年了", "苏州"),
        ("我们重庆这边天气太热了", "重庆"),
        ("It's freezing here in Glasgow today", "Glasgow"),
        ("Life here in Cape Town is good, I love the sea", "Cape Town"),
    ],
)
def test_city_variable_is_inferred(text: str, city: str) -> None:
    guesses = infer_variables(DEFAULT_VARIABLE_SPECS, as_fragments(run(text)), now_ms=TS)
    assert guesses["city"].value == city


@pytest.mark.parametrize(
    ("text", "variable", "value"),
    [
        ("I've been vegan since 2017", "diet", "vegan"),
        ("我从前年开始吃素", "diet", "吃素"),
        ("I turned 34 last month", "birth_year", 1992),
        ("我上个月刚满33岁", "birth_year", 1993),
        ("I'm Keiko", "name", "Keiko"),
        ("我是赵明", "name", "赵明"),
    ],
)
def test_variables_from_the_classes(text: str, variable: str, value: object) -> None:
    guesses = infer_variables(DEFAULT_VARIABLE_SPECS, as_fragments(run(text)), now_ms=TS)
    assert guesses[variable].value == value


# ----------------------------------------------------------------- noise

_COMMON = (
    "的一是不了在人有我他这个们中来上大为和国地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道"
    "行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实日军者意"
    "无力它与长把机十民第公此已工使情明性知全三又关点正业外将两高间由问很最重并物手应战向头文体政美相见被利什"
    "喜欢吃喝玩叫做爱"
)


def _noise(alphabet: str, size: int, seed: int) -> str:
    return "".join(random.Random(seed).choices(alphabet, k=size))


@pytest.mark.parametrize(
    "text",
    [
        _noise(_COMMON + "，。！？", 200_000, 1),
        _noise("我喜欢吃你是的了，。在去有叫", 200_000, 2),
        _noise("我喜欢吃你是的了，。在去有叫", 600, 3),
        _noise(string.printable, 50_000, 4),
        "".join(chr(random.Random(5).randint(0x4E00, 0x9FA5)) for _ in range(20_000)),
        "喜欢吃，" * 50_000,
        "我我我我我我" * 2_000,
        "asdf jkl; " * 5_000,
    ],
    ids=[
        "common-chars-200k",
        "small-alphabet-200k",
        "small-alphabet-600",
        "ascii",
        "cjk",
        "repeat",
        "me",
        "mash",
    ],
)
def test_noise_yields_nothing(text: str) -> None:
    assert run(text) == []


def test_a_long_real_message_still_yields_its_facts() -> None:
    text = (
        "上周末我们一家去了趟郊外，天气特别好，孩子们在草地上跑来跑去，玩得很开心。中午在农家乐吃的饭，"
        "老板做的土鸡汤味道很鲜，就是有点咸。下午本来想去爬山，结果下起了小雨，只好在附近的茶馆坐了一会儿，"
        "听老板讲了很多以前村里的故事。对了，顺便说一下，我对花生过敏，以后推荐菜的时候帮我注意一点。"
        "回来的路上有点堵车，到家已经快九点了，不过大家都觉得这次出去玩很值得，下个月还想再去一次。"
    )
    assert ("allergy:花生", "用户对花生过敏。") in facts(text)
