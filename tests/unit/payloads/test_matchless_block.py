"""A query that matches nothing reuses the block such a query got before, and changes no byte.

When no variable, summary sentence, fact (or joined piece of a long fact) or found turn holds a
term of the query and the facts' order holds no lexical match, ``_select`` and the rest of the
block are a function of the snapshot and the options alone; ``build_memory_block`` keeps that
block with the parsed snapshot. These tests build blocks on one snapshot in orders hypothesis
draws (the kept blocks shared across the calls) and hold each equal to the block of a fresh copy
of the snapshot (nothing kept), over budgets, fact caps, languages, clocks at and past expiry
times, part caps and summaries that hold a query term or not.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.models import EpisodeHit, EpisodeSearch, Fragment, MemorySnapshot, Message, VariableValue
from convmem_graph.payloads import memory_block
from convmem_graph.payloads.memory_block import MemoryBlockOptions, PartBudgets, build_memory_block
from convmem_graph.tokens import count_tokens
from tests.unit.payloads.matchless_snapshots import NOW, harbour_summary, random_facts

#: Queries matching nothing in the snapshots below, and queries matching one kind of text each:
#: a variable value (``Lisbon``), the model summary only (``harbour``), a long fact only when its
#: pieces are joined (``苏州``: the bigram across two pieces), facts (``mango``), found turns only
#: (``violin``).
QUERIES = [None, "", "jazz", "chess pottery", "饺子", "Lisbon", "harbour", "苏州", "mango", "violin", "zebra"]
CLOCKS = [None, NOW - 10, NOW, NOW + 5, NOW + 10**7]


def _snapshot(seed: int, *, summary: bool, turns: bool) -> MemorySnapshot:
    # With a long fact in two pieces: only the joined text holds the bigram "苏州".
    fragments = random_facts(random.Random(seed), [0, 3, 30, 90])
    variables = {
        "name": VariableValue(name="name", value="Lin", origin="manual"),
        # Two inferred values: one that a query holds goes before the other, which a tight
        # budget then leaves out.
        "hobbies": VariableValue(name="hobbies", value=["knitting", "rowing"], origin="inferred"),
        "city": VariableValue(name="city", value="Lisbon", origin="inferred"),
    }
    hits = [
        EpisodeHit(
            seq=s,
            message=Message(
                id=f"t{s}",
                memory_id="m",
                role="user",
                content="I play the violin on Sundays.",
                channel="im",
                source="message",
                timestamp_ms=NOW - s * 1000,
            ),
            terms=["violin"],
        )
        for s in (1, 2)
    ]
    return MemorySnapshot(
        memory_id="m",
        fragments=fragments,
        variables=variables,
        summary=harbour_summary() if summary else None,
        episodes=EpisodeSearch(terms=["violin"], document_frequency={"violin": 2}, total=40, hits=hits)
        if turns
        else None,
    )


_call = st.tuples(
    st.sampled_from(QUERIES),
    st.sampled_from([40, 45, 50, 60, 120, 300, 2000]),
    st.sampled_from([0, 2, 50]),
    st.sampled_from(CLOCKS),
    st.sampled_from(["auto", "en", "zh"]),
    st.sampled_from([None, 6, 10]),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    summary=st.booleans(),
    turns=st.booleans(),
    calls=st.lists(_call, min_size=2, max_size=14),
)
def test_blocks_in_any_order_equal_blocks_built_from_nothing_kept(
    seed: int,
    summary: bool,
    turns: bool,
    calls: list[tuple[str | None, int, int, int | None, str, int | None, bool]],
) -> None:
    snap = _snapshot(seed, summary=summary, turns=turns)
    for query, budget, cap, now, language, summary_cap, listed in calls:
        options = MemoryBlockOptions(
            query=query,
            budget_tokens=budget,
            max_fragments=cap,
            now_ms=now,
            language=language,
            part_budgets=PartBudgets(summary=summary_cap),
        )
        # First a query matching nothing with the same options: the drawn query then finds its
        # block kept, and must not take it unless it matches nothing either.
        quiet = options.model_copy(update={"query": "zebra"})
        assert build_memory_block(snap, quiet, list_all_dropped=listed).model_dump() == (
            build_memory_block(snap.model_copy(deep=True), quiet, list_all_dropped=listed).model_dump()
        )
        kept = build_memory_block(snap, options, list_all_dropped=listed)
        fresh = build_memory_block(snap.model_copy(deep=True), options, list_all_dropped=listed)
        assert kept.model_dump() == fresh.model_dump(), (
            query,
            budget,
            cap,
            now,
            language,
            summary_cap,
            listed,
        )
        # The caller's lists are its own: changing them changes no later block.
        kept.included_fragment_ids.append("changed")
        kept.dropped_fragment_ids.clear()
        kept.part_tokens["header"] = -1


def test_a_query_matching_nothing_reuses_the_kept_block() -> None:
    snap = _snapshot(7, summary=True, turns=False)
    options = {"budget_tokens": 300, "now_ms": NOW}
    first = build_memory_block(snap, MemoryBlockOptions(query="jazz", **options))
    kept = snap.derived()["matchless"]
    assert len(kept) == 1
    (entry,) = kept.values()
    # Another query that matches nothing gets the very selection kept, not a new one.
    second = build_memory_block(snap, MemoryBlockOptions(query="chess pottery", **options))
    assert second.model_dump() == first.model_dump()
    assert list(kept.values()) == [entry] and entry.blocks
    # A query a variable holds is not one of them.
    build_memory_block(snap, MemoryBlockOptions(query="Lisbon", **options))
    assert list(kept.values()) == [entry]


def test_a_new_fact_list_is_not_served_the_kept_block() -> None:
    snap = _snapshot(3, summary=False, turns=False)
    options = MemoryBlockOptions(query="jazz", budget_tokens=300)
    build_memory_block(snap, options)
    tea = Fragment(id="new", memory_id="m", content="User drinks oolong.", key="drink", updated_at=99)
    # Assigned (the derived cache stays with the object): the kept block was made from other facts.
    snap.fragments = [tea, *snap.fragments]
    assert "User drinks oolong." in build_memory_block(snap, options).text


def test_the_key_holds_what_the_selection_depends_on() -> None:
    snap = _snapshot(11, summary=True, turns=False)
    facts = memory_block._facts(snap, memory_block._term_stats(snap))
    ranking = facts.order.ranking("jazz")
    keys = {
        memory_block._matchless_key(
            MemoryBlockOptions(query="jazz", budget_tokens=b, max_fragments=c, now_ms=t),
            "en",
            count_tokens,
            facts,
            ranking,
            "m",
        )
        for b in (100, 300)
        for c in (0, 50)
        for t in (NOW - 10, NOW + 10**7)
    }
    assert len(keys) == 8
    # The facts' order holds a lexical match: no key, the block walks the facts.
    ours = facts.order.ranking("我们去了")
    assert ours.matched
    assert (
        memory_block._matchless_key(
            MemoryBlockOptions(query="我们去了"), "en", count_tokens, facts, ours, "m"
        )
        is None
    )


def blocks_after_a_query_matching_nothing(seed: int, turns: bool, budgets: range) -> None:
    """Each budget's blocks after a matchless query equal blocks built with nothing kept.

    A sweep of budgets meets those where only some of the inferred values, summary sentences or
    quoted turns fit: where a query a value, the summary or a found turn holds would get a block
    other than the one kept for queries matching nothing.
    """
    snap = _snapshot(seed, summary=True, turns=turns)
    for budget in budgets:
        for summary_cap in (None, 10):
            for query in QUERIES:
                options = MemoryBlockOptions(
                    query=query,
                    budget_tokens=budget,
                    now_ms=NOW,
                    part_budgets=PartBudgets(summary=summary_cap),
                )
                build_memory_block(snap, options.model_copy(update={"query": "zebra"}))
                kept = build_memory_block(snap, options).model_dump()
                assert kept == build_memory_block(snap.model_copy(deep=True), options).model_dump(), (
                    query,
                    budget,
                    summary_cap,
                )


@pytest.mark.parametrize(("seed", "turns"), [(1, False), (1, True), (0, False), (2, True)])
def test_every_budget_after_a_query_matching_nothing(seed: int, turns: bool) -> None:
    # Every third even budget here; tests/integration/test_matchless_block_full.py runs all of them.
    blocks_after_a_query_matching_nothing(seed, turns, range(30, 130, 6))
