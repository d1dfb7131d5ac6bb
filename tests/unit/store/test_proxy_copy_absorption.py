"""Issue 20, item 3: a proxy copy absorbed by the voice copy hands over what only it knew.

The memory proxy's copy of a TRTC bot turn knows the answer was cut (its client, TRTC, hung up
on an interruption) even when no 906/908 interruption metric reached the store. The voice copy
wins (spoken text, round id); ``interrupted`` from either copy ends on it and the generated text
is kept as ``original`` (the voice copy's own generated sentences when they differ from what was
spoken, else the proxy's streamed text), in every order and split of the two copies.
"""

from __future__ import annotations

import pytest

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore

T = 1_767_300_000_000
SENTENCES = ["从前有座山，", "山里有座庙。"]
STREAMED = "从前有座山，山里有座庙。庙里有个老和尚"


def _voice(final: str | None) -> Message:
    meta: dict[str, object] = {"task_id": "task-1", "sentences": [[T, SENTENCES[0]], [T + 800, SENTENCES[1]]]}
    if final is not None:
        meta["final_text"] = final
    return Message(
        id="voice-r1",
        role="assistant",
        content=final or "".join(SENTENCES),
        channel="voice",
        source="llm",
        timestamp_ms=T,
        round_id="r-001",
        speaker_id="bot",
        metadata=meta,
    )


def _proxy(interrupted: bool) -> Message:
    return Message(
        id="proxy-req-1-assistant",
        role="assistant",
        content=STREAMED,
        channel="api",
        source="llm",
        timestamp_ms=T - 400,
        interrupted=interrupted,
        metadata={"task_id": "task-1", "proxy_request_id": "req-1"},
    )


def _store(arrangement: str, voice: Message, proxy: Message) -> list[Message]:
    store = MemoryStore("sqlite:///:memory:")
    try:
        batches = {
            "together": [[voice, proxy]],
            "voice first": [[voice], [proxy]],
            "proxy first": [[proxy], [voice]],
        }[arrangement]
        for batch in batches:
            store.add_messages("m", batch)
        return store.recent_messages("m", 10)
    finally:
        store.close()


@pytest.mark.parametrize("arrangement", ["together", "voice first", "proxy first"])
def test_the_proxys_interruption_ends_on_the_voice_copy_with_the_streamed_text_as_original(
    arrangement: str,
) -> None:
    # Every generated sentence was spoken as far as the voice channel tells (no 905, no 906).
    [stored] = _store(arrangement, _voice(None), _proxy(True))
    assert (stored.id, stored.content, stored.channel, stored.round_id) == (
        "voice-r1",
        "从前有座山，山里有座庙。",
        "voice",
        "r-001",
    )
    assert (stored.interrupted, stored.original) == (True, STREAMED)


@pytest.mark.parametrize("arrangement", ["together", "voice first", "proxy first"])
def test_the_voice_copys_own_generated_sentences_come_first(arrangement: str) -> None:
    # The 905 says only the first sentence was spoken: the 903 sentences are the generated text.
    [stored] = _store(arrangement, _voice(SENTENCES[0]), _proxy(True))
    assert (stored.content, stored.interrupted, stored.original) == (SENTENCES[0], True, "".join(SENTENCES))


@pytest.mark.parametrize("arrangement", ["together", "voice first", "proxy first"])
def test_a_whole_answer_adds_nothing(arrangement: str) -> None:
    [stored] = _store(arrangement, _voice(None), _proxy(False))
    assert (stored.id, stored.interrupted, stored.original) == ("voice-r1", False, None)
