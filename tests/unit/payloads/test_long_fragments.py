"""A fact longer than a fragment holds: split at sentence ends, stored linked, injected whole."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph import ConvMemory
from convmem_graph.models import FRAGMENT_MAX_CHARS, Fragment, MemorySnapshot
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.text.sentences import join_sentences, split_to_fit

EN_STORY = (
    "Tom trained for the Lisbon half marathon all spring, running before work three days a week. "
    "In the race his knee started to hurt after fifteen kilometres, but he walked and jogged the "
    "rest and crossed the line in two hours and ten minutes. He wants to try again next year."
)
ZH_STORY = (
    "小林去年冬天第一次去哈尔滨看冰雕，零下二十多度，她穿了三层羽绒服还是冻得直跺脚。"
    "晚上在中央大街吃了马迭尔冰棍和锅包肉，觉得特别值得。"
    "她说以后每年冬天都想去一个新的北方城市看雪，明年打算去长白山滑雪，顺便泡温泉。" * 2
)


def _fold(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("story", [EN_STORY, ZH_STORY])
def test_pieces_fit_end_at_sentences_and_join_back(story: str) -> None:
    pieces = split_to_fit(story, FRAGMENT_MAX_CHARS)
    assert len(pieces) >= 2
    assert all(0 < len(p) <= FRAGMENT_MAX_CHARS for p in pieces)
    assert all(p[-1] in ".。" for p in pieces)  # every cut here falls at a sentence end
    assert _fold(join_sentences(pieces)) == _fold(story)


def test_a_sentence_longer_than_the_limit_is_cut_at_a_clause_then_a_space() -> None:
    sentence = "We drove north along the coast, stopping at every small harbour we passed on the way home"
    pieces = split_to_fit(sentence, 40)
    assert pieces[0] == "We drove north along the coast,"
    assert all(len(p) <= 40 for p in pieces)
    assert _fold(" ".join(pieces)) == _fold(sentence)
    assert split_to_fit("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split_to_fit("  short  ", 10) == ["short"] and split_to_fit("   ", 10) == []
    with pytest.raises(ValueError, match="limit"):
        split_to_fit("text", 0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from("ab 你好，。.!?,"), min_size=1, max_size=40), min_size=1, max_size=12
    ),
    st.integers(min_value=1, max_value=60),
)
def test_split_never_exceeds_the_limit_or_loses_text(parts: list[str], limit: int) -> None:
    text = "".join(parts)
    pieces = split_to_fit(text, limit)
    assert all(0 < len(p) <= limit for p in pieces)
    assert _fold("".join(pieces)) == _fold(text)


def test_add_long_fragment_links_the_pieces_and_add_fragment_points_to_it() -> None:
    with ConvMemory.open(":memory:") as mem:
        with pytest.raises(ValueError, match="add_long_fragment"):
            mem.add_fragment("u1", EN_STORY)
        pieces = mem.add_long_fragment("u1", EN_STORY, category="event")
        assert len(pieces) == 2
        assert {(f.part_of, f.part) for f in mem.fragments("u1")} == {(pieces[0].id, 0), (pieces[0].id, 1)}
        with pytest.raises(ValueError, match="2000"):
            mem.add_long_fragment("u1", "Long. " * 400)
        with pytest.raises(ValueError, match="non-empty"):
            mem.add_long_fragment("u1", "  ")
        again = asyncio.run(mem.aadd_long_fragment("u1", EN_STORY, category="event"))
        assert again == pieces


def _snapshot(*facts: Fragment) -> MemorySnapshot:
    return MemorySnapshot(memory_id="u1", fragments=list(facts))


def _pieces(story: str, first: str = "p0") -> list[Fragment]:
    parts = split_to_fit(story, FRAGMENT_MAX_CHARS)
    ids = [first, *(f"{first}-{i}" for i in range(1, len(parts)))]
    return [
        Fragment(id=i, memory_id="u1", content=c, key=f"event:{i}", part_of=first, part=n)
        for n, (i, c) in enumerate(zip(ids, parts, strict=True))
    ]


def test_the_block_injects_a_long_fact_whole_on_one_line() -> None:
    pieces = _pieces(EN_STORY)
    other = Fragment(id="f1", memory_id="u1", content="Tom likes green tea.", key="preference:tea")
    # Pieces listed out of order and apart: the block still puts them together, in order.
    snap = _snapshot(pieces[1], other, pieces[0])
    block = build_memory_block(snap, MemoryBlockOptions(query="How did the knee hold up in the race?"))
    lines = [line for line in block.text.splitlines() if "Lisbon" in line or "knee" in line]
    assert len(lines) == 1 and _fold(lines[0]) == _fold("[fact] " + EN_STORY)
    assert set(block.included_fragment_ids) >= {pieces[0].id, pieces[1].id}


def test_a_long_fact_that_does_not_fit_is_left_out_whole() -> None:
    pieces = _pieces(EN_STORY)
    short = Fragment(id="f1", memory_id="u1", content="Tom ran a race in Lisbon.", key="event:race")
    snap = _snapshot(*pieces, short)
    block = build_memory_block(snap, MemoryBlockOptions(query="Lisbon race knee", budget_tokens=60))
    assert "Tom ran a race in Lisbon." in block.text
    assert not any(p.content in block.text for p in pieces)
    assert {p.id for p in pieces} <= set(block.dropped_fragment_ids)


def test_an_older_database_gains_the_piece_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with ConvMemory.open(str(db)) as mem:
        mem.add_fragment("u1", "Ana owns a sailing boat.")
    with sqlite3.connect(db) as conn:  # as a version before linked pieces left it
        conn.execute("ALTER TABLE cm_fragments DROP COLUMN part_of")
        conn.execute("ALTER TABLE cm_fragments DROP COLUMN part")
        conn.execute("PRAGMA user_version = 0")  # versions before the schema stamp set none
        conn.execute("DROP TABLE cm_schema_migrations")  # nor a record of migrations
    with ConvMemory.open(str(db)) as mem:
        assert [f.part_of for f in mem.fragments("u1")] == [None]
        assert len(mem.add_long_fragment("u1", EN_STORY)) == 2
