"""``stemmed_terms``: the one-pass path with its word cache answers as the three passes do.

The PostgreSQL episodic index stores these terms for every turn, so they must not change: each
answer is compared with :func:`search_terms` + :func:`stem` + first occurrences, in any order of
calls, with the cache empty, warm, or starting over at its cap.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem_graph.store.postgres import pg_index_prefix, pg_index_terms
from convmem_graph.text import terms as T

PIECES = [
    "Running",
    "runs",
    "the",
    "THE",
    "a",
    "I",
    "don't",
    "snake_case",
    "e-mail",
    "2023",
    "5k",
    "Ünïcode",
    "İstanbul",
    "ΟΔΟΣ",
    "naïve",
    "café",
    "成都",
    "朋友吗",
    "かな",
    "!",
    "...",
    "\t",
    "\n",
    "x",
    "Caroline's",
    "pottery",
]
texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=30).map(" ".join),
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.text(max_size=60),
)


def reference(text: str) -> list[str]:
    """The three passes :func:`stemmed_terms` replaced for texts without CJK runs."""
    return list(dict.fromkeys(T.stem(T.search_terms(text, max_terms=None))))


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    kept, cap = dict(T._STEMS), T._STEMS_MAX
    T._STEMS.clear()
    yield
    T._STEMS.clear()
    T._STEMS.update(kept)
    T._STEMS_MAX = cap


@given(st.lists(texts, min_size=1, max_size=15), st.sampled_from([3, 8, 20_000]))
def test_stemmed_terms_are_the_three_passes_in_any_order_of_calls(calls: list[str], cap: int) -> None:
    T._STEMS.clear()
    T._STEMS_MAX = cap
    for text in calls:
        assert T.stemmed_terms(text) == reference(text)


@given(st.lists(texts, min_size=1, max_size=15))
def test_the_index_terms_join_the_stems_behind_the_memorys_prefix(calls: list[str]) -> None:
    prefix = pg_index_prefix("m1")
    for text in calls:
        assert pg_index_terms("m1")(text) == " ".join(prefix + t for t in reference(text))


def test_a_turn_of_words_seen_before_stems_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    stemmed: list[list[str]] = []

    def counting_stem(terms: list[str]) -> list[str]:
        stemmed.append(list(terms))
        return T._stem_words()(terms) if terms else []

    monkeypatch.setattr(T, "stem", counting_stem)
    assert T.stemmed_terms("Caroline went running, running again") == ["carolin", "went", "run", "again"]
    assert stemmed == [["caroline", "went", "running", "again"]]
    assert T.stemmed_terms("Running again, Caroline went!") == ["run", "again", "carolin", "went"]
    assert T.stemmed_terms("the a I") == []
    assert stemmed == [["caroline", "went", "running", "again"]]  # every word was known
    assert T.stemmed_terms("Caroline paints") == ["carolin", "paint"]
    assert stemmed[1:] == [["paints"]]  # only the new word


def test_the_cache_starts_over_at_its_cap() -> None:
    T._STEMS_MAX = 6
    for k in range(50):
        words = [f"w{k}a", f"w{k}b", f"w{k}c"]
        assert T.stemmed_terms(" ".join(words)) == reference(" ".join(words))
        assert len(T._STEMS) <= 6
