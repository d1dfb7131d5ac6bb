"""The CJK-aware token counter: short texts answered from a per-process memo, with the same counts."""

from __future__ import annotations

import math
import re

from hypothesis import given
from hypothesis import strategies as st

from convmem_graph import tokens
from convmem_graph.text.cjk import WIDE
from convmem_graph.tokens import count_tokens

_WIDE = re.compile(f"[{WIDE}]")


def _reference(text: str) -> int:
    """The rule, written out: one token a wide character, one per four other characters."""
    wide = sum(1 for ch in text if _WIDE.fullmatch(ch))
    return wide + math.ceil((len(text) - wide) / 4)


_TEXT = st.text(alphabet=st.sampled_from("ab ,.。，用户喜欢芒果가나カナ１２\n😀"), max_size=600)


@given(texts=st.lists(_TEXT, min_size=1, max_size=12))
def test_counts_equal_the_rule_in_any_order_of_repeats(texts: list[str]) -> None:
    # Asked in order, then again in reverse: answers from the memo equal the first ones and the rule.
    first = [count_tokens(t) for t in texts]
    again = [count_tokens(t) for t in reversed(texts)]
    assert first == [_reference(t) for t in texts]
    assert again == first[::-1]


def test_short_texts_are_counted_once() -> None:
    text = "用户最近特别喜欢榴莲，每周都去。"  # a fact sentence the summary counts every turn
    assert count_tokens(text) == 16
    before = tokens._count_short.cache_info().hits
    assert count_tokens(text) == 16
    assert tokens._count_short.cache_info().hits == before + 1


def test_long_texts_are_not_kept() -> None:
    long = "芒果" * tokens._MEMO_CHARS
    size = tokens._count_short.cache_info().currsize
    assert count_tokens(long) == 2 * tokens._MEMO_CHARS
    assert tokens._count_short.cache_info().currsize == size
    assert count_tokens("") == 0
