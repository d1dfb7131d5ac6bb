"""Issue 20, item 3: what a TRTC proxy copy absorbed by a voice copy may hand over, and what not.

The voice copy wins (spoken text, round id) in every order and split of the copies. The proxy
copy's own ``interrupted`` is not carried over: TRTC's LLM request names no round, and when a
call repeats its words the proxy copy of one round's cut answer also matches another round's
voice copy, which must not become interrupted (the live property test found exactly this when
the flag was carried over). The round's interruption comes from its 906/908
(``tests/unit/store/test_round_interruptions.py``).
"""

from __future__ import annotations

import pytest

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

T = 1_767_300_000_000


def _voice(round_id: str, ts: int, sentences: list[str], final: str | None = None) -> Message:
    meta: dict[str, object] = {
        "task_id": "task-1",
        "sentences": [[ts + 800 * k, text] for k, text in enumerate(sentences)],
    }
    if final is not None:
        meta["final_text"] = final
    return Message(
        id=f"voice-{round_id}",
        role="assistant",
        content=final or "".join(sentences),
        channel="voice",
        source="llm",
        timestamp_ms=ts,
        round_id=round_id,
        speaker_id="bot",
        metadata=meta,
    )


def _proxy(text: str, ts: int, interrupted: bool) -> Message:
    return Message(
        id=f"proxy-{ts}-assistant",
        role="assistant",
        content=text,
        channel="api",
        source="llm",
        timestamp_ms=ts,
        interrupted=interrupted,
        metadata={"task_id": "task-1", "proxy_request_id": f"req-{ts}"},
    )


ARRANGEMENTS = {
    "together": [[0, 1, 2]],
    "voice first": [[0], [1], [2]],
    "proxy first": [[2], [0], [1]],
    "proxy between": [[0], [2], [1]],
}


@pytest.mark.parametrize("arrangement", list(ARRANGEMENTS))
def test_a_cut_proxy_answer_never_marks_a_round_with_the_same_words(arrangement: str) -> None:
    # Round 1 said "好的。" whole; round 2 generated "好的。好的。" and was cut after "好的。"
    # (its 905; its 906 is not here). The proxy's copy of round 2 streamed "好的。好的。".
    copies = [
        _voice("r-1", T, ["好的。"]),
        _voice("r-2", T + 3_000, ["好的。", "好的。"], final="好的。"),
        _proxy("好的。好的。", T + 2_700, interrupted=True),
    ]
    store = MemoryStore("sqlite:///:memory:")
    try:
        for batch in ARRANGEMENTS[arrangement]:
            store.add_messages("m", [copies[i] for i in batch])
        rows = [(m.round_id, m.content, m.channel, m.interrupted) for m in store.recent_messages("m", 10)]
    finally:
        store.close()
    assert rows == [("r-1", "好的。", "voice", False), ("r-2", "好的。", "voice", False)]
