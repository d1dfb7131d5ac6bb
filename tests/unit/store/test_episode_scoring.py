"""The episodic search's candidate scoring: the same IDF sums, ranking and matched terms as the plain loop.

``collect`` sums each candidate's IDF with ``dict.update`` over ``map`` and asks which terms a turn
holds of the hits only. These tests hold both equal to the loop over every posting they replaced
(floats compared exactly, in the order the postings come), for postings hypothesis draws: terms
sharing seqs, empty terms, a seq repeated within a term, date-span labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.store import _episode_search
from convmem_graph.store._episode_search import collect

LABELS = ["mango", "芒果", "run", "@2024-03-07", "@2024-03", "tea"]


def _reference(postings: dict[str, list[int]], n: int) -> tuple[dict[int, float], dict[int, set[str]]]:
    """The loop ``collect`` ran before: every posting adds its term's IDF and records the term."""
    scores: dict[int, float] = {}
    held: dict[int, set[str]] = {}
    for term, seqs in postings.items():
        df = len(seqs)
        if not df:
            continue
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        for seq in seqs:
            scores[seq] = scores.get(seq, 0.0) + idf
            held.setdefault(seq, set()).add(term)
    return scores, held


postings_strategy = st.dictionaries(
    st.sampled_from(LABELS), st.lists(st.integers(min_value=1, max_value=80), max_size=40), max_size=6
)


@settings(max_examples=300, deadline=None)
@given(postings_strategy, st.integers(min_value=1, max_value=1_000))
def test_idf_sums_equal_the_loop(postings: dict[str, list[int]], n: int) -> None:
    want, _ = _reference(postings, n)
    got = _episode_search._idf_sums(postings, n)
    assert list(got.items()) == list(want.items())


def _rows(seqs: Iterable[int]) -> dict[int, list[Any]]:
    # Alternating speakers, every text distinct: no duplicate is skipped.
    return {
        s: [s, "m", f"id{s}", "user" if s % 2 else "assistant", f"turn {s}", "im", "message", s * 1000]
        + [None, None, None, 0, 0, None, "{}"]
        for s in seqs
    }


@settings(max_examples=200, deadline=None)
@given(postings_strategy, st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=2_000))
def test_hits_rank_and_terms_equal_the_loop(postings: dict[str, list[int]], limit: int, total: int) -> None:
    postings = {t: list(dict.fromkeys(s)) for t, s in postings.items()}  # an index lists a seq once
    stored = _rows(range(0, 90))

    def run(sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        if "count" in sql or "OFFSET" in sql:
            return [(min(total, 1_000),)]
        wanted = [int(p) for p in params[1:]]
        return [stored[s] for s in wanted if s in stored]

    found = collect(run, "?", "m", [t for t in postings if not t.startswith("@")], postings, limit=limit)
    n = max(found.total, 1)
    scores, held = _reference(postings, n)
    ranked = sorted(scores, key=lambda s: (-scores[s], -s))
    best = [h for h in found.hits if h.reply_to is None]
    assert [h.seq for h in best] == ranked[:limit]
    for hit in best:
        assert hit.terms == sorted(held[hit.seq])
