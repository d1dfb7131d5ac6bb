"""``search_terms`` keeps its last split: any order of calls answers as a fresh split would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convmem_graph.text import terms as T

PIECES = ["chess", "pottery", "the", "running", "成都", "朋友", "吗", "Lisbon", "jazz", "2023", "羽毛球", "a"]
queries = st.lists(st.sampled_from(PIECES), max_size=40).map(" ".join)
caps = st.sampled_from([None, 1, 2, 3, 5, 32, 128])


@given(st.lists(st.tuples(queries, caps), min_size=1, max_size=12))
def test_kept_splits_answer_as_fresh_ones_in_any_order(calls: list[tuple[str, int | None]]) -> None:
    T._LAST[0] = None
    for query, cap in calls:
        got = T.search_terms(query, max_terms=cap)
        assert got == T._split(query, cap)
        got.append("changed by the caller")  # a fresh list each time: the kept split stays
        assert T.search_terms(query, max_terms=cap) == T._split(query, cap)


def test_a_cut_split_does_not_answer_a_larger_cap() -> None:
    query = " ".join(f"w{k}x" for k in range(10))
    assert len(T.search_terms(query, max_terms=3)) == 3
    assert T.search_terms(query, max_terms=128) == T._split(query, 128) and len(T._split(query, 128)) == 10
