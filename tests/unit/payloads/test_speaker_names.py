"""A person the query names counts by who said a turn, not by the names a turn says."""

from __future__ import annotations

from convmem_graph.models import EpisodeHit, EpisodeSearch, MemorySnapshot, Message
from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block
from convmem_graph.payloads.ranker import Scorer

# 2023-05-08 13:56 UTC
T0 = 1_683_554_160_000


def _turn(mid: str, content: str, speaker: str | None, seq: int) -> EpisodeHit:
    message = Message(
        id=mid,
        memory_id="m",
        role="user" if speaker in ("Caroline", "Ines") else "assistant",
        content=content,
        channel="im",
        source="message",
        timestamp_ms=T0 + seq * 30_000,
        speaker_id=speaker,
    )  # type: ignore[arg-type]
    return EpisodeHit(seq=seq, message=message)


def _order(hits: list[EpisodeHit], query: str) -> list[str]:
    snap = MemorySnapshot(memory_id="m", episodes=EpisodeSearch(total=100, hits=hits))
    block = build_memory_block(snap, MemoryBlockOptions(query=query, language="en", budget_tokens=300))
    return block.included_turn_ids


def test_turns_that_greet_the_named_person_do_not_outrank_their_own_answer() -> None:
    hits = [
        _turn("greet", "Caroline, that book shelf of yours looks great!", "Melanie", 1),
        _turn("thanks", "Thanks Caroline, I will look for the book soon.", "Melanie", 3),
        _turn("own", "I loved the book Becoming Nicole, I recommend it to everyone.", "Caroline", 5),
    ]
    query = "What book did Caroline recommend to Melanie?"
    assert _order(hits, query)[0] == "own"
    # The same turns from speakers without names (opaque ids): the words decide, as before.
    anonymous = [_turn(h.message.id, h.message.content, f"u_{h.seq}", h.seq) for h in hits]
    assert set(_order(anonymous, query)) == {"greet", "thanks", "own"}


def test_a_name_that_is_no_speaker_still_counts_in_the_text() -> None:
    # "Lisbon" names no speaker: a turn saying it is found by it, as any word.
    hits = [
        _turn("city", "We finally moved to Lisbon last spring.", "Ines", 1),
        _turn("other", "We finally moved the sofa last spring.", "Ines", 3),
    ]
    assert _order(hits, "When did Ines move to Lisbon?")[0] == "city"
    scorer = Scorer("When did Ines move to Lisbon?", None, ["x"])
    names = scorer.speaker_terms(["Ines", "Lisbon Bot 2", None])
    assert names == scorer.speaker_terms(["Ines"])  # "Lisbon Bot 2" has a digit: an id, not a name
    assert scorer.turn_score("We moved to Lisbon.", names) == scorer.score("We moved to Lisbon.") > 0.0
    assert scorer.turn_score("Ines moved.", names) < scorer.score("Ines moved.")
