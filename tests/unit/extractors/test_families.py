"""Families from the taxonomy, clauses at discourse markers, the precision floor (our own sentences)."""

from __future__ import annotations

import pytest

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message


def _facts(text: str) -> list[tuple[str, str, int]]:
    m = Message(
        id="m", role="user", content=text, channel="im", source="message", timestamp_ms=1_767_268_822_030
    )
    return [
        (c.key, c.content, c.polarity) for c in HeuristicExtractor().extract([m], [], [], now_ms=0).candidates
    ]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("My cousin Lena lives in Oslo.", "family:cousin:lena"),
        ("Oh and my nephew is a firefighter.", "family:nephew"),
        ("我表妹住在厦门。", "family:表妹"),
        ("嗯，然后我表妹下个月要搬到厦门去了。", "family:表妹"),
        ("对了我舅舅是医生", "family:舅舅"),
        ("我外甥女喜欢画画", "family:外甥女:画画"),
        ("I've been gluten-free since 2020.", "food:gluten-free"),
        ("I keep kosher.", "food:kosher"),
        ("I'm on a keto diet.", "food:keto"),
        ("我是清真饮食", "food:清真"),
        ("我不吃牛肉", "food:牛肉"),
        ("We adopted two kittens, Miso and Tofu, last month.", "pet:miso"),
        ("我领养了一只狗叫豆包", "pet:豆包"),
        ("I have a severe peanut allergy.", "allergy:peanut"),
        ("我对青霉素过敏", "allergy:青霉素"),
        ("Um, so I play the cello.", "pref:play_the_cello"),
        ("我会拉二胡", "pref:拉二胡"),
        ("I play badminton.", "pref:play_badminton"),
        ("我会踢足球", "pref:踢足球"),
    ],
)
def test_a_family_covers_its_class(text: str, key: str) -> None:
    assert key in {k for k, _, _ in _facts(text)}


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("我喜欢打羽毛球而且我对花生过敏", {"pref:打羽毛球", "allergy:花生"}),
        ("I play the viola and also I love hiking.", {"pref:play_the_viola", "pref:hiking"}),
        ("I used to live in Leeds but now I live in York.", {"profile:city"}),
    ],
)
def test_clauses_break_at_discourse_markers(text: str, keys: set[str]) -> None:
    assert {k for k, _, _ in _facts(text)} == keys


@pytest.mark.parametrize(
    ("text", "key", "polarity", "word"),
    [
        ("我现在吃香菜了。", "food:香菜", 1, "现在吃香菜"),
        ("我已经不抽烟了", "habit:抽烟", -1, "不再抽烟"),
        ("我戒酒了", "habit:喝酒", -1, "不再喝酒"),
        ("I'm not vegan any more.", "food:vegan", -1, "no longer vegan"),
        ("I quit smoking two years ago.", "habit:smoke", -1, "no longer smokes"),
        ("I eat fish again now.", "food:fish", 1, "eats fish again"),
        ("我对虾严重过敏", "allergy:虾", 1, "严重过敏"),
    ],
)
def test_changes_keep_the_old_facts_key_with_the_new_polarity(
    text: str, key: str, polarity: int, word: str
) -> None:
    found = _facts(text)
    assert [(k, p) for k, _, p in found] == [(key, polarity)]
    assert word in found[0][1]


@pytest.mark.parametrize(
    "text",
    [
        "每周去两次",
        "我每天下班回来",
        "I used to live in Leeds.",
        "我妈妈要是知道了会生气",
        "I play it every day.",
    ],
)
def test_fragments_carrying_no_fact_are_dropped(text: str) -> None:
    assert _facts(text) == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        # Kinship generated from the taxonomy: a spouse's siblings, 表/堂 of every generation,
        # godchildren, ordinals on any sibling; in-law, step, half, great-, grand- and ex- in English.
        ("我大伯子在部队当兵。", "family:大伯子"),
        ("我堂侄女住在武汉。", "family:堂侄女"),
        ("我干女儿今年上初中了。", "family:干女儿"),
        ("我四哥在广州工作。", "family:哥哥"),
        ("My great-uncle lives in Dublin.", "family:great-uncle"),
        ("My stepson is a plumber.", "family:stepson"),
        ("My half-brother works at a bank.", "family:half-brother"),
        ("My ex-girlfriend lives in Toronto.", "family:ex-girlfriend"),
        # Anything said about the user's own relative says at least that the user has them.
        ("我大姨子明年要去留学深造。", "family:小姨子"),
        # A relative's age in tens, said without 岁; "still lives" with 还是.
        ("我姥爷都九十多了。", "family:外公:age"),
        ("我奶奶还是住在村里。", "family:奶奶"),
        # A relative placed by name, whatever the rest of the sentence says.
        ("My nephew in Boston texts me every morning.", "family:nephew"),
        # A frequency word after a time of day or week still makes a habit.
        ("我睡前一般会泡个脚。", "habit:泡个脚"),
        # A habit named in a past clause and given up in a later one; a food quit is a food.
        ("我年轻的时候天天喝酒，后来就戒了。", "habit:喝酒"),
        ("我戒奶茶一年多了。", "food:奶茶"),
        ("I used to smoke two packs a day, but I quit years ago.", "habit:smoke"),
        ("I don't drink alcohol.", "habit:drink"),
        ("I gave up carbs in 2023.", "food:carbs"),
        # A reason or another clause after the statement is not part of it.
        ("I've been gluten-free for years because of my stomach.", "food:gluten-free"),
        ("I quit caffeine, and it was hard.", "food:caffeine"),
        # "called" names a pet as "named" does; a relative clause after the name is about the pet.
        ("I have a terrier called Rocket who barks at the mailman.", "pet:rocket"),
        # Breed nicknames are species; a date word after a verb of liking is part of its object.
        ("我家养了一只二哈。", "pet:二哈"),
        ("我很喜欢五月天。", "pref:五月天"),
    ],
)
def test_families_cover_their_class_in_longer_turns(text: str, key: str) -> None:
    assert key in {k for k, _, _ in _facts(text)}


@pytest.mark.parametrize(
    "text",
    [
        # Someone else's relative, habit or quitting is not the user's.
        "孩子们还是喜欢去公园。",
        "我同事以前天天喝酒，后来戒了。",
        # Having parents is no news: a clause about them that says nothing yields nothing.
        "我妈妈说让我多穿点。",
        # "我干儿子" is a godson, never a job ("干" is not "do").
        "我干儿子在北京工作。",
    ],
)
def test_families_stay_out_of_what_is_not_the_users(text: str) -> None:
    keys = {k for k, _, _ in _facts(text)}
    assert not any(k.startswith(("habit:", "profile:", "family:母亲", "family:孩子")) for k in keys), keys
