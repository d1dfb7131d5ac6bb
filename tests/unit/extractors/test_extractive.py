"""The model-free extractive summary: content, language, ranking, and the budget for any input."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.extractors.base import Summarizer
from convmem_graph.extractors.extractive import ExtractiveSummarizer
from convmem_graph.models import Fragment, Message, Summary, VariableValue
from convmem_graph.tokens import count_tokens

NOW = 1_767_272_500_000


def frag(fid: str, content: str, key: str, **kw: Any) -> Fragment:
    return Fragment(id=fid, memory_id="mem", content=content, key=key, **kw)


def msg(text: str, role: str = "user") -> Message:
    return Message(
        id=text[:8], role=role, content=text, channel="im", source="message", timestamp_ms=NOW - 1000
    )


def var(name: str, value: Any, origin: str = "inferred") -> VariableValue:
    return VariableValue(name=name, value=value, origin=origin)


FRAGMENTS = [
    frag("f1", "用户叫林晓。", "profile:name", updated_at=1),
    frag("f2", "用户对芒果过敏。", "allergy:芒果", confidence=0.9, updated_at=3),
    frag("f3", "用户吃牛肉面不放香菜。", "food:香菜", updated_at=3),
    frag("f4", "用户平时喜欢跑步。", "pref:跑步", updated_at=2),
    frag(
        "f5", "用户最近胃不好，不吃辣。", "food:辣", transient=True, expires_at=NOW + 86_400_000, updated_at=4
    ),
    frag("f6", "用户这周在尝试吃素。", "state:吃素", transient=True, expires_at=NOW - 1, updated_at=4),
    frag("f7", "用户住在北京。", "profile:city", status="superseded", updated_at=0),
]
VARIABLES = {
    "name": var("name", "林晓"),
    "city": var("city", "杭州", origin="manual"),
    "hobbies": var("hobbies", ["跑步", "游泳"]),
    "language": var("language", "zh"),
}


def summarize(
    fragments: list[Fragment],
    variables: dict[str, VariableValue],
    messages: list[Message],
    budget: int,
    **kw: Any,
) -> str:
    return ExtractiveSummarizer().summarize(
        kw.get("previous"),
        messages,
        variables,
        fragments,
        budget_tokens=budget,
        counter=kw.get("counter", count_tokens),
        now_ms=NOW,
    )


def test_implements_the_summarizer_protocol() -> None:
    s = ExtractiveSummarizer()
    assert isinstance(s, Summarizer)
    assert (s.name, s.uses_messages) == ("extractive", False)


def test_chinese_summary_from_variables_and_fragments() -> None:
    text = summarize(FRAGMENTS, VARIABLES, [msg("今天杭州下雨了，好冷")], 300)
    assert text == (
        "用户画像：城市：杭州；姓名：林晓；爱好：跑步、游泳。\n"
        "已知事实：用户吃牛肉面不放香菜。用户平时喜欢跑步。用户对芒果过敏。\n"
        "近期：用户最近胃不好，不吃辣。"
    )


def test_facts_only_never_transcript_lines() -> None:
    chatter = [msg("今天杭州下雨了，好冷"), msg("要不要早点休息？", role="assistant")]
    text = summarize(FRAGMENTS, VARIABLES, chatter, 300)
    assert "下雨" not in text and "休息" not in text
    previous = Summary(text="用户说今天下雨了", tokens=8, covers_until_ms=NOW)
    assert "下雨" not in summarize(FRAGMENTS, VARIABLES, chatter, 300, previous=previous)


def test_expired_superseded_and_variable_restating_fragments_are_left_out() -> None:
    text = summarize(FRAGMENTS, VARIABLES, [], 300)
    assert "吃素" not in text and "北京" not in text and "用户叫林晓" not in text


def test_english_when_most_user_messages_are_english() -> None:
    fragments = [
        frag("a", "User is allergic to mango.", "allergy:mango", updated_at=2),
        frag("b", "用户不吃香菜。", "food:香菜", updated_at=1),
        frag(
            "c",
            "User is trying vegetarian food this week.",
            "state:vegetarian",
            transient=True,
            expires_at=NOW + 1,
        ),
    ]
    messages = [msg("I'm allergic to mango"), msg("I like hiking"), msg("不放香菜")]
    text = summarize(fragments, {"occupation": var("occupation", "nurse")}, messages, 300)
    assert text == (
        "Profile: Occupation: nurse.\n"
        "Facts: User is allergic to mango. 用户不吃香菜。\n"
        "Currently: User is trying vegetarian food this week."
    )


def test_language_from_fragments_when_there_are_no_user_messages() -> None:
    assert summarize(FRAGMENTS, {}, [msg("ok", role="assistant")], 300).startswith("已知事实：")
    english = [frag("a", "User loves hiking.", "pref:hiking")]
    assert summarize(english, {}, [], 300) == "Facts: User loves hiking."


def test_ranking_confidence_then_recency_then_durable_before_temporary() -> None:
    fragments = [
        frag("low", "用户喜欢猫。", "pref:猫", confidence=0.5, updated_at=9),
        frag("old", "用户喜欢狗。", "pref:狗", confidence=0.9, updated_at=1),
        frag("new", "用户喜欢鸟。", "pref:鸟", confidence=0.9, updated_at=5),
        frag(
            "tmp",
            "用户最近很忙。",
            "state:很忙",
            confidence=1.0,
            transient=True,
            expires_at=NOW + 1,
            updated_at=9,
        ),
    ]
    assert (
        summarize(fragments, {}, [], 300)
        == "已知事实：用户喜欢鸟。用户喜欢狗。用户喜欢猫。\n近期：用户最近很忙。"
    )
    # With room for only one fact, the strongest durable one is kept.
    assert summarize(fragments, {}, [], 12) == "已知事实：用户喜欢鸟。"


def test_manual_variables_come_first_when_the_budget_is_tight() -> None:
    text = summarize([], VARIABLES, [], 12)
    assert text == "用户画像：城市：杭州。"


@pytest.mark.parametrize("budget", [0, 1, 2, 5, 8, 13, 20, 50, 120, 300, 1000])
def test_ten_thousand_fragments_fit_any_budget(budget: int) -> None:
    fragments = [
        frag(f"f{i:05d}", f"用户喜欢第{i}种运动，每周练习{i % 7 + 1}次。", f"pref:sport{i}", updated_at=i)
        for i in range(10_000)
    ]
    variables = {f"v{i}": var(f"v{i}", "值" * (i % 9 + 1)) for i in range(50)}
    start = time.perf_counter()
    text = summarize(fragments, variables, [msg("我喜欢运动")], budget)
    elapsed = time.perf_counter() - start
    assert count_tokens(text) <= budget
    assert elapsed < 5
    if budget >= 50:
        assert text.startswith("用户画像：")


def test_non_positive_budget_gives_an_empty_summary() -> None:
    assert summarize(FRAGMENTS, VARIABLES, [], 0) == ""
    assert summarize(FRAGMENTS, VARIABLES, [], -5) == ""


def _word_counter(text: str) -> int:
    return len(text.split())


def _superadditive_counter(text: str) -> int:
    # Not additive over concatenation: long texts cost extra.
    n = count_tokens(text)
    return n + math.isqrt(n) * 2


_texts = st.one_of(
    st.text(alphabet=st.sampled_from(list("用户喜欢跑步芒果过敏很abc xyz.，。")), min_size=1, max_size=80),
    st.sampled_from(["User likes hiking.", "用户对芒果过敏。", "x" * 199]),
).filter(lambda t: t.strip() != "")


@settings(max_examples=150, deadline=None)
@given(
    contents=st.lists(_texts, max_size=40),
    values=st.lists(st.one_of(_texts, st.integers(0, 3000), st.lists(_texts, max_size=4)), max_size=6),
    budget=st.integers(-3, 200),
    counter=st.sampled_from([count_tokens, len, _word_counter, _superadditive_counter]),
)
def test_budget_holds_for_any_input_and_counter(
    contents: list[str], values: list[Any], budget: int, counter: Any
) -> None:
    fragments = [
        frag(
            f"f{i}",
            c,
            f"k:{i}",
            transient=i % 3 == 0,
            expires_at=NOW + 1 if i % 3 == 0 else None,
            updated_at=i,
        )
        for i, c in enumerate(contents)
    ]
    variables = {f"v{i}": var(f"v{i}", v) for i, v in enumerate(values)}
    text = summarize(fragments, variables, [], budget, counter=counter)
    assert counter(text) <= max(budget, 0) or text == ""
    assert text == summarize(fragments, variables, [], budget, counter=counter)
