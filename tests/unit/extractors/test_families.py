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
