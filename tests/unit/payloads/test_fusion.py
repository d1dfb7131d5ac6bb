"""Fusing lexical and dense scores of candidate turns onto the block's one (BM25) scale."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.payloads.fusion import DENSE_WEIGHT, DENSE_WEIGHT_LINES, dense_weight, fuse, meaning_query


def test_without_dense_scores_the_lexical_ones_stand() -> None:
    assert fuse({1: 2.0, 2: 0.5}, {}) == {1: 2.0, 2: 0.5}


@pytest.mark.parametrize("method", ["rrf", "sum"])
def test_a_turn_found_only_by_meaning_becomes_a_candidate(method: str) -> None:
    fused = fuse({1: 4.0, 2: 1.0}, {3: 0.95, 1: 0.60, 2: 0.50}, method=method)  # type: ignore[arg-type]
    assert fused[3] > 0
    assert set(fused) == {1, 2, 3}


def test_rrf_keeps_the_bm25_scale() -> None:
    lexical = {1: 6.0, 2: 3.0, 3: 1.0}
    fused = fuse(lexical, {3: 0.9, 2: 0.8, 4: 0.7})
    # The scores handed out are the lexical ones (then lower ones for extra candidates), so a
    # fact scored by BM25 competes with the fused turns on the same scale.
    assert sorted(fused.values(), reverse=True)[:3] == [6.0, 3.0, 1.0]
    assert max(fused.values()) == max(lexical.values())
    # Found by both sides beats found by one.
    assert fused[2] > fused[4] and fused[3] > fused[4]


def test_calibrated_sum_adds_at_most_a_share_of_the_best_lexical_score() -> None:
    fused = fuse({1: 2.0, 2: 1.0}, {1: 0.2, 2: 0.9, 3: 0.5}, method="sum")
    assert fused[2] == pytest.approx(
        1.0 + DENSE_WEIGHT * 2.0
    )  # the best cosine adds its share of the best BM25
    assert fused[1] == pytest.approx(2.0)  # below the median cosine: nothing added
    assert fused[3] == pytest.approx(0.0)  # the median itself adds 0


def test_the_calibrated_sum_takes_its_weight() -> None:
    fused = fuse({1: 2.0, 2: 1.0}, {1: 0.2, 2: 0.9, 3: 0.5}, method="sum", weight=1.5)
    assert fused[2] == pytest.approx(1.0 + 1.5 * 2.0)
    assert fused[3] == pytest.approx(0.0)


def _facts_block(order: list[int], query: str, max_fragments: int) -> list[str]:
    from convmem_graph.models import Fragment, MemorySnapshot
    from convmem_graph.payloads import MemoryBlockOptions, build_memory_block
    from tests.unit.payloads.test_relevance import KeywordEmbeddings

    facts = [
        Fragment(id="mango", memory_id="m", content="User is allergic to mango.", key="mango", updated_at=1),
        Fragment(id="crowds", memory_id="m", content="User avoids crowds.", key="crowds", updated_at=2),
        Fragment(id="cat", memory_id="m", content="User has a cat.", key="cat", updated_at=3),
        Fragment(id="noise", memory_id="m", content="User avoids noise.", key="noise", updated_at=4),
    ]
    snap = MemorySnapshot(memory_id="m", fragments=[facts[i] for i in order])
    options = MemoryBlockOptions(query=query, max_fragments=max_fragments)
    return build_memory_block(snap, options, embeddings=KeywordEmbeddings()).included_fragment_ids


def test_a_fact_found_by_meaning_alone_competes_with_facts_found_by_words() -> None:
    # "mango" shares no word with the query, "crowds" and "noise" share "avoid". Before the
    # facts' cosines were fused, a fact with no shared word came only after every one with one.
    top_two = _facts_block([0, 1, 2, 3], "Which fruit should I avoid?", 2)
    assert "mango" in top_two
    # Without meaning in the query the lexical order stands.
    assert "mango" not in _facts_block([0, 1, 2, 3], "What should I avoid?", 2)


@settings(max_examples=40, deadline=None)
@given(st.permutations([0, 1, 2, 3]))
def test_fused_facts_do_not_depend_on_the_order_they_are_stored_in(order: list[int]) -> None:
    assert _facts_block(order, "Which fruit should I avoid?", 2) == _facts_block(
        [0, 1, 2, 3], "Which fruit should I avoid?", 2
    )


@pytest.mark.parametrize(
    ("query", "weight"),
    [
        ("What did Caroline paint last summer?", DENSE_WEIGHT),
        ("上周六我们去哪儿吃的火锅？", DENSE_WEIGHT),
        ("  \nWhat did Caroline paint?\n\n", DENSE_WEIGHT),  # blank lines are not lines
        (None, DENSE_WEIGHT),
        ("", DENSE_WEIGHT),
        ("I'm going to a party tonight.\nWhat should I wear?", DENSE_WEIGHT_LINES),
        ("user: 我下周要去成都出差。\nassistant: 听起来不错！\nuser: 那边冷吗？", DENSE_WEIGHT_LINES),
    ],
)
def test_a_query_of_several_lines_gives_meaning_the_heavier_weight(query: str | None, weight: float) -> None:
    assert dense_weight(query) == weight


_TURNS = {
    "en": (
        "We adopted a puppy from the shelter last week.",  # no word of the query: found by meaning
        "The party at the office was loud, I left early.",  # one word of the query: "party"
        "Tonight's party will be loud!",  # two: "party", "tonight"
        "I'm going to a party tonight.\nWhat pet should we get for the kids?",
    ),
    "zh": (
        "上周我们从收容所领养了一只小狗。",
        "公司的聚会太吵了，我早早就走了。",
        "今晚的聚会会很热闹！",
        "我今晚要去参加聚会。\n我们该给孩子们养什么宠物？",
    ),
}


def _turn_order(lang: str, query: str) -> list[str]:
    from convmem_graph.models import EpisodeHit, EpisodeSearch, MemorySnapshot, Message
    from convmem_graph.payloads import MemoryBlockOptions, build_memory_block

    meaning, words, more_words, _ = _TURNS[lang]
    texts = {1: meaning, 2: words, 3: more_words, 4: "Noted." if lang == "en" else "好的。"}
    hits = [
        EpisodeHit(
            seq=s,
            message=Message(
                id=f"t{s}",
                memory_id="m",
                role="user",
                content=text,
                channel="im",
                source="message",
                timestamp_ms=1_700_000_000_000 + s * 60_000,
            ),
        )
        for s, text in texts.items()
    ]
    # By meaning the puppy turn is second to a turn not quoted (6): it adds 0.625 of the weight
    # times the best lexical score; the party turns lie below the median cosine (0.55).
    episodes = EpisodeSearch(
        total=40, hits=hits, dense={1: 0.80, 2: 0.30, 3: 0.20, 4: 0.60, 5: 0.50, 6: 0.95}
    )
    snap = MemorySnapshot(memory_id="m", episodes=episodes)
    block = build_memory_block(snap, MemoryBlockOptions(query=query, budget_tokens=400))
    return [t for t in block.included_turn_ids if t in ("t1", "t2")]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_meaning_outranks_a_shared_word_for_a_query_of_several_lines(lang: str) -> None:
    query = _TURNS[lang][3]
    # Two lines: the turn found by meaning alone comes before the one sharing a word.
    assert _turn_order(lang, query) == ["t1", "t2"]
    # The same words on one line: the shared word still leads.
    assert _turn_order(lang, " ".join(query.splitlines())) == ["t2", "t1"]


@pytest.mark.parametrize(
    ("query", "embedded"),
    [
        # A transcript: the other speakers' lines, one per line, without their names.
        (
            "Bart: I'm doing a magic trick!\nAssistant: Fantastic, good luck.\nBart: What should I wear?",
            "I'm doing a magic trick!\nWhat should I wear?",
        ),
        ("用户：我下周去成都。\n助手：听起来不错！\n\n用户：那边冷吗？", "我下周去成都。\n那边冷吗？"),
        ("Mary Ann Lee: Rain again.\nAI: Take an umbrella.", "Rain again."),
    ],
)
def test_a_transcript_query_is_embedded_as_the_users_lines(query: str, embedded: str) -> None:
    assert meaning_query(query) == embedded


@pytest.mark.parametrize(
    "query",
    [
        "What did Caroline paint?",
        "Assistant: Hello!",  # one line
        "Bart: Hi.\nLisa: Hi, Bart.",  # no assistant line
        "Assistant: Hi.\nAI: Hello.",  # only the assistant's
        "Bart: Hi.\nwhat a day\nAssistant: Indeed.",  # a line with no name
        "Note to self, buy milk: now\nAssistant: Ok.",  # not a name: a comma
        "The plan for the day: rest\nAssistant: Ok.",  # not a name: five words
        "I'm going to a party tonight.\nWhat should I wear?",
    ],
)
def test_other_queries_are_embedded_as_they_are(query: str) -> None:
    assert meaning_query(query) == query


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab :：\n助手Assistant"), max_size=40))
def test_meaning_query_keeps_or_shortens_the_query(query: str) -> None:
    # Never invents text: the query itself, or some of its lines' text in their order.
    out = meaning_query(query)
    assert out == query or all(line.strip() and line.strip() in query for line in out.splitlines())
