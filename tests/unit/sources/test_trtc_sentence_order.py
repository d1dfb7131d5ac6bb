"""Issue 10, finding 9: TRTC sentences of a round end in ``EventMsTs`` order, whatever the order and
batching of the deliveries (property test through the reader and the store, as the webhook path
stores them).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.sources import read_payload
from convmem_graph.store import MemoryStore

T0 = 1_767_272_400_000


def body(ts: int, text: str) -> dict[str, object]:
    return {
        "EventGroupId": 9,
        "EventType": 903,
        "CallbackTs": ts + 40,
        "EventInfo": {
            "EventMsTs": ts,
            "TaskId": "task-prop",
            "RoomId": "room-1",
            "RoomIdType": 1,
            "Payload": {"UserId": "u_prop", "Text": text, "RoundId": "r-1"},
        },
    }


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[str], list[list[dict[str, object]]]]:
    n = draw(st.integers(min_value=2, max_value=7))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=5000), min_size=n, max_size=n))
    sentences = [f"第{i}句话。" for i in range(n)]
    bodies = []
    ts = T0
    for gap, text in zip(gaps, sentences, strict=True):
        ts += gap
        bodies.append(body(ts, text))
    order = draw(st.permutations(bodies))
    retries = draw(st.lists(st.sampled_from(bodies), max_size=3))  # exact retries change nothing
    stream = list(order) + retries
    cuts = sorted(
        draw(st.sets(st.integers(min_value=1, max_value=len(stream) - 1), max_size=len(stream) - 1))
    )
    batches = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    return sentences, batches


@settings(max_examples=60, deadline=None)
@given(case=deliveries())
def test_sentences_end_in_event_order_whatever_the_arrival(
    case: tuple[list[str], list[list[dict[str, object]]]],
) -> None:
    sentences, batches = case
    store = MemoryStore.from_url(":memory:")
    try:
        for batch in batches:
            result = read_payload(batch, "trtc", bot_ids=["bot"])
            store.add_messages("m", result.messages)
        assert [m.content for m in store.recent_messages("m", 10)] == ["".join(sentences)]
    finally:
        store.close()
