"""The clause normalizer's gates skip only texts their pattern cannot match (issue 24 item 3).

``_clauses.GATED`` pairs each scanning pattern with a cheap gate; a refused text skips the
pattern. Soundness: every text holding a match of the pattern passes its gate. Checked on texts
built from the patterns' own words, commas, newlines and the characters Python's case-insensitive
matching folds onto ASCII letters (``ſ``, ``K``, ``İ``, ``ı``), and on LoCoMo's real lines.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.extractors import _clauses
from convmem_graph.extractors._clauses import GATED, fold_lower, mark_discourse, normalize_clause, strip_tails
from tests.unit.extractors.locomo_lines import locomo_lines

#: Pieces the gated patterns are made of, in several cases, and what sits around them.
WORDS = [
    "I",
    "we",
    "We",
    "my",
    "our",
    "and",
    "but",
    "so",
    "also",
    "plus",
    "though",
    "now",
    "then",
    "these days",
    "nowadays",
    "anyway",
    "anyways",
    "regardless",
    "nonetheless",
    "nevertheless",
    "too",
    "as well",
    "by the way",
    "btw",
    "at all",
    "which is",
    "to be honest",
    "tbh",
    "haha",
    "for health reasons",
    "for my health",
    "it's",
    "that",
    "they're",
    "nothing too serious",
    "no big deal",
    "mostly blues",
    "going on",
    "years",
    "months",
    "on my days off",
    "on weekends",
    "on the weekend",
    "in my free time",
    "when I have time",
    "whenever I can",
    "because",
    "since",
    "cause",
    "'cause",
    "of",
    "the",
    "a",
    "call",
    "calls",
    "called",
    "named",
    "name",
    "names",
    "him",
    "her",
    "it",
    "them",
    "his",
    "its",
    "their",
    "is",
    "are",
    "dog",
    "cat",
    "husky",
    "Luna",
    "Olive",
    "Biscuit",
    "last year",
    "recently",
    "in Paris",
    "two weeks ago",
    "when we got home",
    "the kids",
    "my wife",
    "who",
    "which",
    "NOW",
    "Anyway",
    "BECAUSE",
    "Since",
    "WEEKEND",
    "Too",
]
ODD = ["ſ", "K", "İ", "ı", "\n", ",", " ", "  ", ", ", ".", "!", "é", "我", "7"]
piece = st.one_of(st.sampled_from(WORDS), st.sampled_from(ODD), st.text(max_size=3))
joined = st.lists(piece, max_size=14).map(lambda parts: " ".join(parts))
glued = st.lists(piece, max_size=14).map("".join)


def _sound(text: str) -> None:
    for pattern, gate in GATED:
        if pattern.search(text) is not None:
            assert gate(text), (pattern.pattern[:60], text)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(joined, glued))
def test_no_gate_refuses_a_text_its_pattern_matches(text: str) -> None:
    _sound(text)
    with pytest.MonkeyPatch.context() as m:
        for name in GATES:
            m.setattr(_clauses, name, lambda text: True)
        want = _outputs(text)
    assert _outputs(text) == want


@pytest.mark.parametrize("end", ["", "\n", " ", ".", "ſ", "\n\n"])
@pytest.mark.parametrize("head", ["", "I like jazz", "I like jazz,", "ſ"])
def test_end_anchored_gates_read_enough_of_the_end(head: str, end: str) -> None:
    # Every word after every head and before every end: a gate reading too few of the last
    # characters refuses the longest closing words ("nevertheless" and a final newline).
    for word in WORDS:
        for text in (f"{head} {word}{end}", f"{head}, {word}{end}", f"{head}{word}{end}"):
            _sound(text)


GATES = [
    "_may_tail",
    "_may_leisure",
    "_may_now",
    "_may_because",
    "_may_call",
    "_may_called_name",
    "_may_marker",
]


def _outputs(text: str) -> tuple[str, str, str]:
    return normalize_clause(text, zh=False), strip_tails(text), mark_discourse(text)


def _ungated(monkeypatch: pytest.MonkeyPatch, texts: list[str]) -> list[tuple[str, str, str]]:
    """The three functions' outputs with every gate open (each pattern always tried)."""
    with monkeypatch.context() as m:
        for name in GATES:
            m.setattr(_clauses, name, lambda text: True)
        return [_outputs(t) for t in texts]


@pytest.mark.parametrize(
    "text",
    [
        "I have a mild shellfish allergy, nothing too serious",
        "I've been dairy-free for a year because of my skin",
        "We adopted a husky called Luna who howls at every siren",
        "We got a puppy last month, and we call her Olive",
        "I go bouldering on weekends",
        "I live in Denver now",
        "I don't drink alcohol at all",
        "I quit smoking anyway",
        "I used to live in Boston but now I live in Denver",
        "I LIKE JAZZ ANYWAYſ",
        "I like jazz, though",
    ],
)
def test_gated_output_equals_the_ungated_output(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _sound(text)
    assert [_outputs(text)] == _ungated(monkeypatch, [text])


def test_documented_rewrites_hold() -> None:
    assert (
        strip_tails("I have a mild shellfish allergy, nothing too serious")
        == "I have a mild shellfish allergy"
    )
    assert mark_discourse("I used to live in Boston but now I live in Denver") == (
        "I used to live in Boston, but I live in Denver"
    )
    assert normalize_clause("I go bouldering on weekends", zh=False) == "I go bouldering"


def test_no_gate_refuses_a_real_line_its_pattern_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = locomo_lines()
    assert len(lines) > 5000
    parts = [p for line in lines for p in [line, *line.replace("!", ".").replace("?", ".").split(".")]]
    matched = 0
    for part in parts:
        _sound(part)
        matched += any(p.search(part) is not None for p, _ in GATED)
    assert matched > 100  # the real lines exercise the patterns, not only the refusals
    assert [_outputs(p) for p in parts] == _ungated(monkeypatch, parts)


#: The letters the case-insensitive end and word gates read through ``str.lower``.
_FOLDED_LETTERS = sorted(
    set("anywaysregardlessnonethelessneverthelessthoughtooaswellbythewaybtwatall")
    | set("offweekendstimecan")
    | set("sincecause")
    | set("usedto")
)


def test_lower_case_reads_every_letter_as_case_insensitive_matching_does() -> None:
    # Soundness of ``_last_two``, ``_may_because`` and ``_may_used_to``: every code point that
    # ``re.IGNORECASE`` matches to one of their letters folds to it (``ſ``, ``ı``, ``İ`` included).
    every = "".join(map(chr, range(0x110000)))
    for letter in _FOLDED_LETTERS:
        matched = {m.group(0) for m in re.finditer(letter, every, re.IGNORECASE)}
        assert letter.upper() in matched  # the search itself works
        for ch in matched:
            assert fold_lower(ch) == letter, (letter, hex(ord(ch)))


@pytest.mark.parametrize("gate", ["_may_tail", "_may_leisure", "_may_now", "_may_because"])
def test_end_and_word_gates_pass_every_closing_word_in_every_case(gate: str) -> None:
    pattern = dict((g.__name__, p) for p, g in GATED)[gate]
    for word in WORDS:
        for variant in (
            word,
            word.upper(),
            word.title(),
            word.replace("s", "\u017f"),
            word.replace("i", "\u0130"),
        ):
            for text in (f"I like it {variant}", f"I like it, {variant}\n", variant, f"{variant}\n\n"):
                if pattern.search(text) is not None:
                    assert getattr(_clauses, gate)(text), (gate, text)
