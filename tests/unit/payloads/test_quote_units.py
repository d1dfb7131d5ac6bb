"""Quotes that carry more evidence per token: clause excerpts, question-answer units, one date a day."""

from __future__ import annotations

import pytest

from convmem_graph.models import EpisodeHit, EpisodeSearch, MemorySnapshot, Message
from convmem_graph.payloads._clauses import ELLIPSIS, clause_excerpt, question_clause, split_units
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.payloads.ranker import Scorer
from convmem_graph.tokens import count_tokens

# 2023-05-08 13:56 UTC
T0 = 1_683_554_160_000
DAY = 86_400_000


def _msg(mid: str, content: str, ts: int = T0, role: str = "user") -> Message:
    return Message(
        id=mid, memory_id="m", role=role, content=content, channel="im", source="message", timestamp_ms=ts
    )  # type: ignore[arg-type]


def _score(query: str) -> Scorer:
    return Scorer(query, None, ["a b c"])


# -- clause excerpts ----------------------------------------------------------------------------

EN_TURN = (
    "Honestly the week was a blur of meetings and late trains and cold coffee. "
    "On Saturday I finally repaired the old canoe with my brother in his garage. "
    "Then we argued about football for hours, as usual, until everyone went home."
)
ZH_TURN = (
    "这周一直在加班，每天都很晚才到家，累得不想说话。"
    "周六终于和表哥一起把那条旧独木舟修好了。"
    "后来我们又聊了很久的足球，一直到半夜才散。"
)


@pytest.mark.parametrize(
    ("turn", "query", "kept", "dropped"),
    [
        (EN_TURN, "canoe repair", "repaired the old canoe", "cold coffee"),
        (ZH_TURN, "独木舟", "旧独木舟修好了", "加班"),
    ],
)
def test_a_long_turn_is_cut_to_the_sentence_that_matches(
    turn: str, query: str, kept: str, dropped: str
) -> None:
    cap = 24
    excerpt = clause_excerpt(turn, _score(query).score, cap, count_tokens)
    assert kept in excerpt and dropped not in excerpt
    assert excerpt.startswith(ELLIPSIS) and count_tokens(excerpt) <= cap


def test_a_short_turn_is_quoted_whole() -> None:
    said = "I repaired the canoe. It floats!"
    assert clause_excerpt(said, _score("canoe").score, 40, count_tokens) == said


def test_the_excerpt_grows_with_the_next_sentence_when_there_is_room() -> None:
    excerpt = clause_excerpt(EN_TURN, _score("canoe").score, 40, count_tokens)
    assert "repaired the old canoe" in excerpt and "argued about football" in excerpt
    assert "cold coffee" not in excerpt and excerpt.startswith(ELLIPSIS)


@pytest.mark.parametrize(
    ("sentence", "query", "kept", "dropped"),
    [
        (
            "After the long drive north through the hills, past the lake and the old mill, "
            "we reached the cabin where grandpa kept his fishing rods, and we stayed two nights",
            "fishing rods",
            "fishing rods",
            "long drive north",
        ),
        (
            "开了很久的车，穿过山谷，经过湖边和老磨坊，我们终于到了爷爷放钓鱼竿的小木屋，在那里住了两晚",
            "钓鱼竿",
            "钓鱼竿",
            "穿过山谷",
        ),
    ],
)
def test_one_sentence_over_the_cap_is_cut_to_its_matching_clause(
    sentence: str, query: str, kept: str, dropped: str
) -> None:
    excerpt = clause_excerpt(sentence, _score(query).score, 16, count_tokens)
    assert kept in excerpt and dropped not in excerpt
    assert excerpt.startswith(ELLIPSIS) and excerpt.endswith(ELLIPSIS)
    assert count_tokens(excerpt) <= 16


def test_without_a_match_the_excerpt_is_the_turns_start() -> None:
    excerpt = clause_excerpt(EN_TURN, _score("volcano").score, 24, count_tokens)
    assert excerpt.startswith("Honestly the week") and excerpt.endswith(ELLIPSIS)


def test_split_units_and_question_clause() -> None:
    assert "".join(split_units(EN_TURN)) == EN_TURN
    assert question_clause("Nice photo! Where was it taken?") == "Where was it taken?"
    assert question_clause("你去哪儿了？我在家。") is None
    assert question_clause("I stayed home.") is None


# -- question-answer units ------------------------------------------------------------------------


def _block(hits: list[EpisodeHit], query: str, budget: int = 300) -> tuple[str, list[str]]:
    snap = MemorySnapshot(memory_id="m", episodes=EpisodeSearch(total=100, hits=hits))
    block = build_memory_block(snap, MemoryBlockOptions(query=query, language="en", budget_tokens=budget))
    assert block.tokens <= budget
    return block.text, block.included_turn_ids


def test_a_found_question_and_its_reply_are_one_line_under_one_date() -> None:
    asked = _msg("q", "That cake looks amazing! Which bakery in Porto made it?", role="assistant")
    reply = _msg("r", "Oh, my aunt baked it, she runs a tiny place near the river.", ts=T0 + 30_000)
    text, ids = _block(
        [EpisodeHit(seq=10, message=asked, terms=["bakery"]), EpisodeHit(seq=11, message=reply, reply_to=10)],
        "Which bakery made the cake?",
    )
    lines = [line for line in text.splitlines() if "bakery" in line]
    assert lines == [
        "2023-05-08 Assistant: That cake looks amazing! Which bakery in Porto made it? "
        "User: Oh, my aunt baked it, she runs a tiny place near the river."
    ]
    assert ids == ["q", "r"]


def test_a_found_answer_comes_with_the_question_it_answers() -> None:
    asked = _msg("q", "Long time no see! How was the trip, what did you do there?", role="assistant")
    reply = _msg("r", "We hiked up the volcano at dawn, then swam in the hot springs.", ts=T0 + 30_000)
    text, ids = _block(
        [EpisodeHit(seq=11, message=reply, terms=["volcano"]), EpisodeHit(seq=10, message=asked, terms=[])],
        "When did the user hike the volcano?",
    )
    assert "Assistant: How was the trip, what did you do there? User: We hiked up the volcano" in text
    assert "Long time no see" not in text  # the question only, not the small talk before it
    assert text.count("2023-05-08 ") == 1 and sorted(ids) == ["q", "r"]


def test_turns_that_are_not_a_question_and_its_answer_stay_apart() -> None:
    first = _msg("a", "I adopted a second cat named Miso.", role="assistant")
    second = _msg("b", "Miso sounds adorable, what a name for a cat.", ts=T0 + 30_000)
    text, ids = _block(
        [EpisodeHit(seq=1, message=first, terms=["cat"]), EpisodeHit(seq=2, message=second, terms=["cat"])],
        "cat",
    )
    assert sorted(ids) == ["a", "b"]
    assert "Assistant: I adopted a second cat named Miso." in text.splitlines()[2]


def test_a_unit_that_does_not_fit_falls_back_to_the_turn_alone() -> None:
    asked = _msg("q", "Which bakery made it?", role="assistant")
    reply = _msg("r", " ".join(["My aunt, she bakes every single morning before dawn."] * 12), ts=T0 + 30_000)
    text, ids = _block(
        [EpisodeHit(seq=10, message=asked, terms=["bakery"]), EpisodeHit(seq=11, message=reply, reply_to=10)],
        "Which bakery?",
        budget=60,
    )
    assert ids[0] == "q" and "Which bakery made it?" in text


# -- one date a day -------------------------------------------------------------------------------


def test_quotes_of_one_day_share_its_date_and_the_budget_holds() -> None:
    hits = [
        EpisodeHit(seq=1, message=_msg("a", "The kayak trip starts at the north pier.")),
        EpisodeHit(seq=3, message=_msg("b", "Bring a dry bag for the kayak.", ts=T0 + 60_000)),
        EpisodeHit(seq=9, message=_msg("c", "The kayak got a new paddle.", ts=T0 + 3 * DAY)),
    ]
    text, ids = _block(hits, "kayak")
    assert sorted(ids) == ["a", "b", "c"]
    lines = text.splitlines()
    assert lines[1].endswith("Quotes with no speaker are the user's.")
    assert lines[2] == "2023-05-08 The kayak trip starts at the north pier."
    assert lines[3] == "Bring a dry bag for the kayak."
    assert lines[4] == "2023-05-11 The kayak got a new paddle."
    for budget in range(30, 90, 3):
        _block(hits, "kayak", budget)  # a day's date is paid by its first quote: within budget


# -- the speaker's name ---------------------------------------------------------------------------


def test_the_named_persons_own_turn_outranks_turns_that_address_them() -> None:
    own = _msg("own", "I painted the lake at dawn.").model_copy(update={"speaker_id": "Caroline"})
    other = _msg(
        "other", "Caroline, your painting is lovely, really.", ts=T0 + 30_000, role="assistant"
    ).model_copy(update={"speaker_id": "Melanie"})
    hits = [EpisodeHit(seq=1, message=other, terms=["caroline", "paint"]), EpisodeHit(seq=3, message=own)]
    _, ids = _block(hits, "What did Caroline paint?")
    assert ids[0] == "own"
    # Without names the turn that says "Caroline" wins: the name is all that changed.
    anonymous = [
        EpisodeHit(seq=h.seq, message=h.message.model_copy(update={"speaker_id": None})) for h in hits
    ]
    assert _block(anonymous, "What did Caroline paint?")[1][0] == "other"
