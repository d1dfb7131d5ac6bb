"""A kept :class:`LexicalIndex` finds word terms through its word index: the same scores, in the same order.

``FactOrder`` (kept with the parsed snapshot, one per version of it) indexes the facts' words once,
so a word term (an English stem) costs a few look-ups of its inflected forms instead of a walk of
its occurrences with :func:`relevance._word_hit` at each. These tests hold every score (the float
and the dict's order) equal to the one-shot :func:`lexical_scores` (which walks the occurrences),
on texts hypothesis draws from inflections, look-alike words (``mangolian``), doubled
consonants, digits and underscores glued to words, CJK runs around words, a character whose
lower case is longer (``İ``), ``\\x00`` inside a text, and on a corpus large enough for the
refining pass (past the first 1,024 matches).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.payloads import relevance
from convmem_graph.payloads.relevance import LexicalIndex, lexical_scores

PIECES = [
    "mango",
    "mangoes",
    "Mangolian",
    "run",
    "runs",
    "running",
    "runner",
    "stop",
    "stopped",
    "stopping",
    "chess",
    "pottery",
    "potter",
    "jazz",
    "jazzy",
    "Lisbon",
    "allergic",
    "allergy",
    "tea",
    "teas",
    "dance",
    "dancing",
    "user",
    "USER",
    "İstanbul",
    "x_y",
    "run_",
    "mango2",
    "成都",
    "喜欢running",
    "芒果",
    " ",
    ", ",
    "。",
    "-",
    "\x00",
    "'s",
]
QUERIES = [
    "mango",
    "Can I eat a mango?",
    "running stops",
    "chess pottery",
    "jazz Lisbon",
    "dances and teas",
    "allergy",
    "istanbul",
    "İstanbul",
    "user runs",
    "喜欢 running 成都",
    "x y",
    "mango2",
]


def _same(contents: list[str], query: str) -> None:
    kept = LexicalIndex(contents, index_words=True)
    # Twice: the first call builds the word index, the second reuses it.
    for _ in range(2):
        got = kept.scores(query)
        want = lexical_scores(query, contents)
        assert list(got.items()) == list(want.items()), query


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        # Pieces glued (a word then runs on into the next) or spaced (whole words).
        st.lists(st.sampled_from(PIECES), max_size=12).flatmap(
            lambda pieces: st.sampled_from(["", " "]).map(lambda sep: sep.join(pieces))
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(QUERIES),
)
def test_kept_index_scores_equal_the_walk(contents: list[str], query: str) -> None:
    _same(contents, query)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from(QUERIES))
def test_refining_pass_past_the_match_budget(seed: int, query: str) -> None:
    """Over 1,024 matches: frequent terms only refine the scores of documents already matched."""
    import random

    rng = random.Random(seed)
    words = ["mango", "mangoes", "running", "run", "teas", "tea", "Lisbon", "chess", "jazz", "成都"]
    # Common words in most documents, rarer ones in a few: every term path (skipped as too
    # common, full pass, refining pass) is taken by some query.
    contents = [
        " ".join(rng.choice(words[: rng.choice([2, 4, 10])]) for _ in range(rng.randint(1, 8)))
        for _ in range(rng.randint(300, 900))
    ]
    _same(contents, query)


def test_the_word_index_is_what_answers() -> None:
    """A kept index does not walk the occurrences of a word term (it would not be faster otherwise)."""
    index = LexicalIndex(["User runs.", "User is running late.", "Mangolian runway"], index_words=True)
    calls: list[str] = []
    original = relevance._find_all

    def spy(text: str, term: str, is_word: bool):  # type: ignore[no-untyped-def]
        calls.append(term)
        return original(text, term, is_word)

    relevance._find_all = spy  # type: ignore[assignment]
    try:
        assert set(index.scores("running")) == {0, 1}
        assert set(lexical_scores("running", index.contents)) == {0, 1}
    finally:
        relevance._find_all = original
    assert calls == ["run"]  # the one-shot function only
