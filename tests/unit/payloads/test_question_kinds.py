"""Questions that ask *when* or *how many* prefer the found turn that holds a time or a number."""

from __future__ import annotations

import pytest

from convmem_graph.models import EpisodeHit, EpisodeSearch, MemorySnapshot, Message
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.payloads.ranker import Scorer, question_kind

# 2023-05-08 13:56 UTC
T0 = 1_683_554_160_000


def _msg(mid: str, content: str, ts: int = T0) -> Message:
    return Message(
        id=mid, memory_id="m", role="user", content=content, channel="im", source="message", timestamp_ms=ts
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("When did you repair the canoe?", "when"),
        ("what year did she start running?", "when"),
        ("How many kids does Ann have?", "count"),
        ("How often do you swim?", "count"),
        ("你什么时候修好的独木舟？", "when"),
        ("她养了几只猫？", "count"),
        ("你上周去了多少次健身房？", "count"),
        ("What did Ann paint?", None),
        ("你最喜欢什么颜色？", None),
        # A conversation so far: the current (last) line is the question.
        ("When did we last talk?\nWhat colour is your canoe?", None),
        ("What colour is your canoe?\nWhen did you paint it?", "when"),
    ],
)
def test_question_kind_reads_the_current_line(query: str, kind: str | None) -> None:
    assert question_kind(query) == kind


@pytest.mark.parametrize(
    ("query", "holds", "lacks"),
    [
        ("When did you repair the canoe?", "I repaired it last Saturday.", "I repaired the canoe."),
        ("When did you repair the canoe?", "Fixed it on 3 June 2023.", "It floats again."),
        ("How many cats does Ann have?", "Ann has three cats.", "Ann loves her cats."),
        ("你什么时候修好的独木舟？", "上周六修好了。", "修好了，能下水了。"),
        ("她养了几只猫？", "她养了两只猫。", "她很喜欢猫。"),
    ],
)
def test_a_turn_holding_what_is_asked_gains_one_terms_worth(query: str, holds: str, lacks: str) -> None:
    scorer = Scorer(query, None, [holds, lacks, "x"])
    mean = sum(scorer.weights.values()) / len(scorer.weights)
    assert scorer.kind_bonus(holds) == pytest.approx(mean)
    assert scorer.kind_bonus(lacks) == 0.0


def test_other_questions_and_no_query_gain_nothing() -> None:
    assert Scorer("What did you repair?", None, ["x"]).kind_bonus("I repaired it on Saturday.") == 0.0
    assert Scorer(None, None, ["x"]).kind_bonus("on Saturday, three times") == 0.0


def _best_quote(hits: list[EpisodeHit], query: str) -> str:
    snap = MemorySnapshot(memory_id="m", episodes=EpisodeSearch(total=100, hits=hits))
    block = build_memory_block(snap, MemoryBlockOptions(query=query, budget_tokens=300))
    return block.included_turn_ids[0]


@pytest.mark.parametrize(
    ("query", "wordy", "answer"),
    [
        (
            "When did you repair the canoe?",
            "Repairing the canoe, repairing the canoe, what a job.",
            "I repaired the canoe last Saturday.",
        ),
        (
            "How many canoes did your club repair?",
            "Our club repairs canoes; the club repairs canoes.",
            "The club repaired twelve canoes.",
        ),
        (
            "你什么时候修好的独木舟？",
            "独木舟修好了，独木舟真不好修，修好独木舟太难了。",
            "上周六修好了独木舟。",
        ),
        (
            "你们俱乐部修好了几条独木舟？",
            "俱乐部修好了独木舟，俱乐部修好独木舟，俱乐部修好独木舟。",
            "俱乐部修好了十二条独木舟。",
        ),
    ],
)
def test_the_turn_with_the_time_or_number_is_quoted_first(query: str, wordy: str, answer: str) -> None:
    wordy_turn = _msg("wordy", wordy)
    answer_turn = _msg("answer", answer, ts=T0 - 86_400_000)
    hits = [EpisodeHit(seq=2, message=wordy_turn), EpisodeHit(seq=1, message=answer_turn)]
    # The turn that repeats the question's words scores higher on words alone.
    words = Scorer(query, EpisodeSearch(total=100, hits=hits), [wordy, answer])
    assert words.score(wordy) > words.score(answer)
    assert _best_quote(hits, query) == "answer"
