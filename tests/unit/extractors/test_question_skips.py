"""Work skipped where its result is never read, proven equal to doing it (issue 24 item 3).

- ``heuristic._facts_of`` leaves an English question clause unnormalized (the rules return at a
  question, and no other clause reads it);
- ``clause_family_facts`` passes an English question without "used to" by (nothing it does
  there but ``used_to`` changes anything);
- ``split_clauses`` tries ``_EN_CLAUSE`` only on a sentence holding one of its pieces.

Each is compared with the exhaustive form (written out here, or the gate opened) on LoCoMo's
lines, every sentence of them, and hypothesis texts of the rules' words, question marks and the
characters case-insensitive matching folds (``ſ``, ``İ``, ``ı``).
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.extractors import _families, heuristic
from convmem_graph.extractors._clauses import mark_discourse, normalize_clause
from convmem_graph.extractors._facts import RuleContext
from convmem_graph.extractors._families import clause_family_facts, could_state_family, merge_family_facts
from convmem_graph.extractors._rules_en import could_state
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message
from convmem_graph.text import scripts
from convmem_graph.text.scripts import _EN_CLAUSE, _EN_CLAUSE_PIECES, contains_any, split_clauses
from tests.unit.extractors.locomo_lines import locomo_lines


def _exhaustive_facts_of(text: str, ctx: Any, cjk: bool) -> list[Any]:
    """``_facts_of`` as it was before the question skip: every clause normalized."""
    text = mark_discourse(text)
    clauses = split_clauses(text, lambda s: could_state(s, ctx) or could_state_family(s), cjk=cjk)
    extra = clause_family_facts(clauses, ctx)
    for n, clause in enumerate(clauses):
        clauses[n] = clause._replace(text=normalize_clause(clause.text, zh=clause.zh))
    return heuristic.split_allergy_lists(merge_family_facts(heuristic._rule_facts(clauses, ctx, cjk), extra))


def _candidates(texts: list[str]) -> list[list[dict[str, Any]]]:
    extractor = HeuristicExtractor()
    out = []
    for i, text in enumerate(texts):
        message = Message(
            id=f"m{i}",
            role="user",
            content=text,
            channel="im",
            source="message",
            timestamp_ms=1_700_000_000_000,
        )
        result = extractor.extract([message], [], [], now_ms=1_600_000_000_000)
        out.append([c.model_dump() for c in result.candidates])
    return out


def _exhaustive(monkeypatch: pytest.MonkeyPatch, texts: list[str]) -> list[list[dict[str, Any]]]:
    with monkeypatch.context() as m:
        m.setattr(heuristic, "_facts_of", _exhaustive_facts_of)
        m.setattr(_families, "_may_used_to", lambda text: True)
        m.setattr(scripts, "_EN_CLAUSE_PIECES", ("",))  # "" is in every text: always split
        return _candidates(texts)


WORDS = [
    "I",
    "I'm",
    "I've",
    "my",
    "My",
    "we",
    "used to",
    "USED TO",
    "u\u017fed to",
    "smoke",
    "drink",
    "vape",
    "stopped",
    "quit",
    "gave up",
    "and",
    "but",
    "so",
    "because",
    "cause",
    "plus",
    "-",
    "he",
    "she",
    "they",
    "love",
    "jazz",
    "allergic to",
    "peanuts",
    "live in",
    "Denver",
    "usually",
    "every day",
    "When",
    "when",
    "if",
    "name is",
    "Sam",
    "dog",
    "named",
    "Luna",
    "?",
    "? ",
    ".",
    ",",
    ";",
    ":",
    "!",
    "\n",
    "\u017f",
    "\u0130",
    "\u0131",
    "我",
    "喜欢",
    "猫",
    "吗",
    "？",
    "anyway",
    "now",
    "lately",
]
piece = st.one_of(st.sampled_from(WORDS), st.text(max_size=2))
texts = st.lists(piece, max_size=16).map(" ".join)


@settings(max_examples=600, deadline=None)
@given(st.lists(texts, min_size=1, max_size=4))
def test_skips_equal_the_exhaustive_extraction_on_generated_texts(texts_: list[str]) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(heuristic, "_facts_of", _exhaustive_facts_of)
        m.setattr(_families, "_may_used_to", lambda text: True)
        m.setattr(scripts, "_EN_CLAUSE_PIECES", ("",))
        want = _candidates(texts_)
    assert _candidates(texts_) == want


@pytest.mark.parametrize(
    "said", ["I used to smoke", "I USED TO SMOKE", "I u\u017fed to smoke", "i Used To smoke"]
)
def test_a_question_that_says_used_to_still_sets_what_a_later_quit_gives_up(said: str) -> None:
    # The question is read for ``used_to`` only: "I used to smoke? I quit." quits smoking.
    ctx = RuleContext(0, date(2026, 1, 1), 0, 7 * 86_400_000)
    clauses = split_clauses(f"{said}? I quit.")
    assert clauses[0].question
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_families, "_may_used_to", lambda text: True)
        want = [f.content for f in clause_family_facts(clauses, ctx)]
    assert [f.content for f in clause_family_facts(clauses, ctx)] == want == ["User no longer smokes."]


@pytest.mark.parametrize(
    "text",
    [
        "Did you know I used to smoke? I quit last year",
        "I used to smoke? I quit.",
        "I used to smoke a pack a day? I stopped in 2019",
        "When I'm there? I usually bring a book",
        "Is it true I love jazz? My dog is named Luna",
        "I like jazz and I'm allergic to peanuts - and my name is Sam",
    ],
)
def test_skips_equal_the_exhaustive_extraction_on_edge_lines(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _candidates([text]) == _exhaustive(monkeypatch, [text])


def test_skips_equal_the_exhaustive_extraction_on_locomo(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = locomo_lines()
    sentences = [p for line in lines for p in line.replace("!", "!\n").replace("?", "?\n").split("\n") if p]
    got = _candidates(lines + sentences)
    assert sum(map(len, got)) > 100  # the lines exercise the rules, not only the skips
    assert got == _exhaustive(monkeypatch, lines + sentences)


@settings(max_examples=2000, deadline=None)
@given(texts)
def test_no_english_clause_split_is_refused_by_its_gate(text: str) -> None:
    if _EN_CLAUSE.search(text) is not None:
        assert contains_any(text, _EN_CLAUSE_PIECES), text


def test_no_real_sentence_split_is_refused_by_its_gate() -> None:
    split = 0
    for line in locomo_lines():
        if _EN_CLAUSE.search(line) is not None:
            split += 1
            assert contains_any(line, _EN_CLAUSE_PIECES), line
    assert split > 500


@pytest.mark.parametrize("sep", ["", " ", ",", ", ", ";", ":", " - ", " -- ", "\n"])
def test_every_split_point_of_the_patterns_own_words_passes_the_gate(sep: str) -> None:
    # Each conjunction, adverb and subject of ``_EN_CLAUSE`` after each separator: a piece left
    # out of ``_EN_CLAUSE_PIECES`` refuses a sentence the pattern splits.
    conjunctions = ["", "and ", "but ", "so ", "because ", "cause ", "plus ", "also "]
    adverbs = ["", "honestly ", "then "]
    subjects = ["I", "my", "My", "he", "she", "they", "we", "it", "please", "no", "he's", "cheese", "much"]
    split = 0
    for conjunction in conjunctions:
        for adverb in adverbs:
            for subject in subjects:
                text = f"I like jazz{sep}{conjunction}{adverb}{subject} goes on"
                if _EN_CLAUSE.search(text) is not None:
                    split += 1
                    assert contains_any(text, _EN_CLAUSE_PIECES), text
    assert split or sep in ("", "\n", ":")
