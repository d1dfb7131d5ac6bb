"""A multi-line query searched by meaning line by line: the lines, their ranks fused, the turns found."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from convmem_graph.memory import ConvMemory
from convmem_graph.payloads.query_lines import LINE_VECTORS, fuse_line_ranks, query_lines


@pytest.mark.parametrize(
    ("query", "lines"),
    [
        # A dialogue's user lines: every line, newest last.
        (
            "I'm running my first half marathon on Sunday!\nMy knees hurt a bit.\nShould I rest tomorrow?",
            [
                "I'm running my first half marathon on Sunday!",
                "My knees hurt a bit.",
                "Should I rest tomorrow?",
            ],
        ),
        ("我下周要去杭州出差。\n那边冷不冷？", ["我下周要去杭州出差。", "那边冷不冷？"]),
        # Blank lines, layout and a repeated line do not make vectors of their own.
        ("  Our cat   is ill \n\n\t\nOur cat is ill\nwhat now?", ["Our cat is ill", "what now?"]),
        ("奶奶住院了\n\n奶奶住院了\n我很担心", ["奶奶住院了", "我很担心"]),
        # One line (a LoCoMo question, a user's last message): searched by its one vector.
        ("What did Melanie paint last week?", []),
        ("我的猫生病了，怎么办？", []),
        ("only this line\n\n   \n", []),
        ("", []),
    ],
)
def test_the_lines_of_a_query(query: str, lines: list[str]) -> None:
    assert query_lines(query) == lines


def test_only_the_newest_lines_get_a_vector() -> None:
    query = "\n".join(f"Line {n} about the garden." for n in range(10))
    assert query_lines(query) == [f"Line {n} about the garden." for n in range(10 - LINE_VECTORS, 10)]
    assert query_lines(query, most=2) == ["Line 8 about the garden.", "Line 9 about the garden."]
    assert query_lines(query, most=0) == []
    assert query_lines("上周六我们去爬山了\n山顶风很大\n我感冒了", most=2) == ["山顶风很大", "我感冒了"]


def test_a_turn_near_several_lines_outranks_one_near_a_single_line() -> None:
    whole = {1: 0.91, 2: 0.90, 3: 0.80}
    fruit_line = {4: 0.95, 2: 0.70}
    fused = fuse_line_ranks([whole, fruit_line])
    assert sorted(fused, key=lambda s: (-fused[s], s)) == [2, 1, 4, 3]
    # The first of a list scores the same in any list: a turn only one line finds is still found.
    assert fused[4] == fused[1] == pytest.approx(1 / 60)
    assert fuse_line_ranks([]) == {}
    assert fuse_line_ranks([{}, {}]) == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 12), st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9]), max_size=8),
        min_size=1,
        max_size=5,
    ),
    st.randoms(use_true_random=False),
)
def test_fused_ranks_do_not_depend_on_the_order_of_lists_or_entries(
    lists: list[dict[int, float]], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    shuffled = [dict(rnd.sample(sorted(d.items()), len(d))) for d in lists]
    rnd.shuffle(shuffled)
    assert fuse_line_ranks(shuffled) == pytest.approx(fuse_line_ranks(lists))


_CONCEPTS = (("fruit", "mango", "kiwi"), ("coffee", "tea", "espresso"), ("city", "hangzhou", "lisbon"))


class CountedConcepts(Embeddings):
    """Concept axes weighted by how often the text names them: a query's majority topic dominates."""

    model = "counted-concepts"

    def __init__(self) -> None:
        self.queries: list[str] = []

    def _vector(self, text: str) -> list[float]:
        words = [w.strip(".,!?") for w in text.lower().split()]
        return [float(sum(w in axis for w in words)) for axis in _CONCEPTS] + [0.01]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


@pytest.fixture
def emb() -> CountedConcepts:
    return CountedConcepts()


@pytest.fixture
def mem(tmp_path: Path, emb: CountedConcepts) -> Iterator[ConvMemory]:
    m = ConvMemory.open(str(tmp_path / "lines.db"), embeddings=emb)
    turns = [{"role": "user", "content": f"Morning number {n}: espresso before work."} for n in range(30)]
    turns.append({"role": "user", "content": "I planted mango trees in the garden."})
    m.ingest("u1", turns, source="openai")
    m.embed_turns("u1")
    yield m
    m.close()


def _found(mem: ConvMemory, query: str) -> list[str]:
    snap = mem.query_snapshot("u1", query, budget_tokens=300)
    episodes = snap.episodes
    assert episodes is not None
    return [h.message.content for h in episodes.hits]


def test_a_turn_near_one_line_of_a_long_query_becomes_a_candidate(
    mem: ConvMemory, emb: CountedConcepts
) -> None:
    # Three of four lines are about coffee: the whole query's vector points at the 30 espresso
    # turns, and the 25 nearest it are all espresso. The first line asks for fruit, and the
    # mango turn shares no word with any line: only that line's own vector finds it.
    query = "Any fruit for the picnic?\nI'd like coffee.\nTea is fine too.\nOr an espresso."
    found = _found(mem, query)
    assert "I planted mango trees in the garden." in found
    assert emb.queries == [query, *query_lines(query)]
    snap = mem.query_snapshot("u1", query, budget_tokens=300)
    assert snap.episodes is not None
    mango = next(h.seq for h in snap.episodes.hits if "mango" in h.message.content)
    assert snap.episodes.dense[mango] > 0


def test_a_one_line_query_is_searched_by_one_vector(mem: ConvMemory, emb: CountedConcepts) -> None:
    query = "I'd like coffee or tea or an espresso, and fruit."
    found = _found(mem, query)
    assert emb.queries == [query]
    assert "I planted mango trees in the garden." not in found
    snap = mem.query_snapshot("u1", query, budget_tokens=300)
    assert snap.episodes is not None
    # Its dense scores are the cosines themselves, as before line vectors.
    assert all(-1.0 <= v <= 1.0 for v in snap.episodes.dense.values())
    assert max(snap.episodes.dense.values()) == pytest.approx(3 / (10**0.5), rel=1e-3)


def test_a_call_opening_with_no_query_searches_its_context_by_one_vector(
    mem: ConvMemory, emb: CountedConcepts
) -> None:
    # The query a call start builds from the newest turns has several lines; its line vectors
    # are not searched (not measured at call start, and each costs a model call and a scan).
    mem.payload("u1", "openai", budget_tokens=300, recent_turns=0)
    assert len(emb.queries) == 1
    assert len(query_lines(emb.queries[0])) > 1
