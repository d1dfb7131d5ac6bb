"""Patterns rewritten so a scan skips what cannot start a match keep their matches (issue 24 item 3).

``_EN_PERIOD`` looks behind for titles from after the period instead of before it; ``_EN_TAIL``
opens with a look-ahead for the space or comma every branch starts with; ``_EN_HOME_GATE``,
``_EN_OUR_PET_GATE`` and ``_EN_RELATIVE_IS`` are tried only when a substring every match holds is
there; ``_en_family``'s eleven ``^I`` patterns only on a clause opening with what ``^I`` matches.
Each is checked against its earlier form (written out here, or the gate held open) on texts built
from the patterns' own words and odd characters, and on LoCoMo's real lines.
"""

from __future__ import annotations

import re
from re import _constants, _parser  # type: ignore[attr-defined]
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.extractors import _clauses, _families
from convmem_graph.text import scripts
from tests.unit.extractors.locomo_lines import locomo_lines

#: ``_EN_PERIOD`` as it was: the eight look-behinds tried before the period, at every character.
OLD_EN_PERIOD = re.compile(
    r"(?<!\bSt)(?<!\bMt)(?<!\bDr)(?<!\bMr)(?<!\bMs)(?<!\bMrs)(?<!\bJr)(?<!\bSr)"
    r"\.(?<=[A-Za-z0-9)\"']\.)(?:\s+|(?=[\u4e00-\u9fff]))(?=[A-Z\"'\u4e00-\u9fff])"
)
_PREFIX = r"(?=[\s,])(?:"


def _old_tail() -> re.Pattern[str]:
    """``_EN_TAIL`` without its leading look-ahead: the alternation as it was."""
    pattern = _clauses._EN_TAIL.pattern
    assert pattern.startswith(_PREFIX) and pattern.endswith(")")
    return re.compile(pattern[len(_PREFIX) : -1], _clauses._EN_TAIL.flags)


OLD_EN_TAIL = _old_tail()

WORDS = [
    "St",
    "Mt",
    "Dr",
    "Mr",
    "Ms",
    "Mrs",
    "Jr",
    "Sr",
    "ASt",
    "Mrs.",
    "Dr.",
    "I",
    "We",
    "we",
    "My",
    "my",
    "Our",
    "our",
    "OUR",
    "wife",
    "wife's",
    "sister's",
    "and I",
    "'ve",
    "have",
    "just",
    "now",
    "still",
    "moved",
    "lived",
    "live",
    "living",
    "are living",
    "settled",
    "relocated",
    "to",
    "in",
    "Leeds",
    "dog",
    "cat",
    "husky",
    "Luna",
    "really",
    "into",
    "a",
    "pottery",
    "which is",
    "though",
    "anyway",
    "at all",
    "too",
    "it's",
    "and the",
    "mostly blues",
    "for health reasons",
    "going on",
    "years",
    "nothing too serious",
    "no big deal",
    "tbh",
    "成都",
    "我",
    '"',
    "'",
    ")",
    "7",
]
ODD = [".", ". ", ".\n", ",", ", ", " ", "  ", "\n", "\t", "\u3000", "ſ", "K", "İ", "ı", "é", "!"]
piece = st.one_of(st.sampled_from(WORDS), st.sampled_from(ODD), st.text(max_size=3))
joined = st.lists(piece, max_size=16).map(lambda parts: " ".join(parts))
glued = st.lists(piece, max_size=16).map("".join)


def _same(text: str) -> None:
    assert scripts._EN_PERIOD.split(text) == OLD_EN_PERIOD.split(text), text
    assert _clauses._EN_TAIL.sub("", text) == OLD_EN_TAIL.sub("", text), text
    assert [m.span() for m in _clauses._EN_TAIL.finditer(text)] == [
        m.span() for m in OLD_EN_TAIL.finditer(text)
    ], text
    if _families._EN_HOME_GATE.search(text) is not None:
        assert _families._may_home(text), text
    if _families._EN_OUR_PET_GATE.search(text) is not None:
        assert _families._may_our_pet(text), text
    if _clauses._EN_RELATIVE_IS.search(text) is not None:
        assert text.startswith(("My ", "my ")), text


@settings(max_examples=3000, deadline=None)
@given(st.one_of(joined, glued))
def test_rewritten_scans_match_as_before(text: str) -> None:
    _same(text)


@pytest.mark.parametrize(
    "text",
    [
        "I saw Dr. Lee. Then St. Mary's. Mrs. Smith left.",
        "We met at Mt. Fuji. It was cold.",
        "ASt. Bob is here. Mr.Lee",
        "I moved to Leeds.我很开心",
        "We've just moved to Leeds",
        "We live in Raleigh now",
        "We are living in Leeds",
        "We relocated to Leeds",
        "our cat Pumpkin ate it",
        "My wife's really into pottery",
        "I don't eat pork, for religious reasons",
        "I quit smoking anyway",
        "I like jazz, which is odd",
    ],
)
def test_examples_match_as_before(text: str) -> None:
    _same(text)


def test_the_gated_patterns_still_match_their_examples() -> None:
    assert _families.could_state_family("We've just moved to Leeds")
    assert _families.could_state_family("our cat Pumpkin ate it")
    assert not _families.could_state_family("The weather was lovely")
    assert (
        _clauses.normalize_clause("My wife's really into pottery", zh=False)
        == "My wife is really into pottery"
    )
    assert scripts._EN_PERIOD.split("I saw Dr. Lee. Then we left.") == ["I saw Dr. Lee", "Then we left."]


def test_real_lines_match_as_before() -> None:
    lines = locomo_lines()
    assert len(lines) > 5000
    for line in lines:
        for part in [line, *scripts._EN_CLAUSE.split(line), *line.split(". ")]:
            _same(part)


class _Every:
    """A set holding every character: ``_en_family`` with its first-character gate open."""

    def __contains__(self, item: object) -> bool:
        return True


def _opens_with_caret_i(items: list[tuple[Any, Any]]) -> bool:
    """Whether every way through a parsed pattern starts with ``^`` then ``I``."""
    if not items:
        return False
    op, av = items[0]
    if op is _constants.BRANCH:
        return all(_opens_with_caret_i(list(branch)) for branch in av[1])
    if op is _constants.SUBPATTERN:
        return _opens_with_caret_i(list(av[3]))
    return (
        op is _constants.AT
        and av is _constants.AT_BEGINNING
        and len(items) > 1
        and items[1] == (_constants.LITERAL, ord("I"))
    )


def test_every_family_pattern_opens_with_caret_i() -> None:
    assert len(_families.EN_I_PATTERNS) == 11
    for pattern in _families.EN_I_PATTERNS:
        assert _opens_with_caret_i(list(_parser.parse(pattern.pattern, pattern.flags))), pattern.pattern[:60]
    folded = {chr(c) for c in range(0x110000) if re.match("I", chr(c), re.IGNORECASE)}
    assert folded == set(_families._I_FIRST)


STATED = st.tuples(
    st.sampled_from(["I", "i", "ı", "İ", " I", "We", "My", "", "ſ"]),
    st.sampled_from(
        [
            "'m lactose intolerant",
            " quit smoking",
            " play the guitar",
            " go hiking on weekends",
            "'ve gotten really into bouldering",
            " am vegan",
            " have a severe peanut allergy",
            " eat meat again",
            "'m on a local soccer team",
        ]
    ),
).map("".join)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(joined, glued, STATED))
def test_the_family_gate_refuses_no_clause_a_pattern_reads(text: str) -> None:
    gated = _families._en_family(text)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_families, "_I_FIRST", _Every())
        assert _families._en_family(text) == gated


def test_the_family_gate_on_real_clauses(monkeypatch: pytest.MonkeyPatch) -> None:
    clauses = [c.text for line in locomo_lines() for c in scripts.split_clauses(scripts.clean_text(line))]
    gated = [_families._en_family(c) for c in clauses]
    refused = sum(1 for c in clauses if c.strip()[:1] not in _families._I_FIRST)
    monkeypatch.setattr(_families, "_I_FIRST", _Every())
    assert [_families._en_family(c) for c in clauses] == gated
    assert sum(1 for facts in gated if facts) >= 3  # real clauses the patterns read
    assert refused > 10_000  # and the many the gate refuses
