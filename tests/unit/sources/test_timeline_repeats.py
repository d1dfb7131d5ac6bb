"""Issue 20, item 1: same words without a shared identity are two messages.

People say "好的" twice in ten seconds. Six proxy turns whose reply is the same "好的", delivered
one webhook at a time or batched into one run, in any order and with retried deliveries, store
six user and six assistant messages; a retry of one turn (same request, same ids) stores nothing.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.memory import ConvMemory
from convmem_graph.models import Message, ReadResult
from convmem_graph.sources import merge_timeline
from convmem_graph.state import RawInput

T0 = 1_767_268_800_000


def _proxy_turn(k: int) -> ReadResult:
    """What the memory proxy records for request ``k``: the user's text and the model's answer."""
    request = f"req-{k}"
    meta = {"proxy_request_id": request}
    return ReadResult(
        source="openai",
        messages=[
            Message(
                id=f"px_{request}_u",
                role="user",
                content="好的",
                channel="api",
                source="message",
                timestamp_ms=T0 + k * 1_500,
                metadata=meta,
            ),
            Message(
                id=f"px_{request}_a",
                role="assistant",
                content="好的。",
                channel="api",
                source="llm",
                timestamp_ms=T0 + k * 1_500 + 400,
                metadata=meta,
            ),
        ],
    )


def test_one_batch_keeps_every_repeat() -> None:
    messages, skipped = merge_timeline([_proxy_turn(k) for k in range(6)])
    assert len(messages) == 12 and not skipped


def test_copies_across_channels_without_ids_still_merge() -> None:
    """The narrow documented case: an IM copy and an API copy of one utterance, no shared id."""
    im = Message(id="im_1", role="user", content="明天见", channel="im", source="message", timestamp_ms=T0)
    api = Message(
        id="api_1", role="user", content="明天见！", channel="api", source="message", timestamp_ms=T0 + 900
    )
    messages, skipped = merge_timeline(
        [ReadResult(source="x", messages=[im]), ReadResult(source="y", messages=[api])]
    )
    assert [m.id for m in messages] == ["im_1"] and skipped[0].reason == "duplicate"


def six_replies_stored_in_any_order(data: st.DataObject) -> None:
    """The property of ``test_six_identical_replies_store_six_in_any_order`` (also run at full size)."""
    deliveries = list(range(6)) + data.draw(st.lists(st.integers(0, 5), max_size=3))  # retries
    order = data.draw(st.permutations(deliveries))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(order) - 1), max_size=4)))
    runs = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    mem = ConvMemory.open(":memory:")
    try:
        for run in runs:
            mem.lifecycle.run("u_px", [RawInput(_proxy_turn(k), "openai") for k in run])
        stored = mem.store.recent_messages("u_px", 100)
        assert [m.role for m in stored].count("assistant") == 6
        assert [m.role for m in stored].count("user") == 6
        assert sorted(m.id for m in stored) == sorted(m.id for k in range(6) for m in _proxy_turn(k).messages)
    finally:
        mem.close()


# 15 examples here; tests/integration/test_timeline_repeats_any_order_full.py runs 60.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_six_identical_replies_store_six_in_any_order(data: st.DataObject) -> None:
    six_replies_stored_in_any_order(data)


def test_a_line_typed_in_im_and_said_in_a_call_are_two_messages() -> None:
    """Both copies carry their vendor's identity (an IM MsgKey, a TRTC round): two things said."""
    typed = Message(
        id="im_k1",
        role="user",
        content="好的",
        channel="im",
        source="message",
        timestamp_ms=T0,
        metadata={"msg_key": "k1"},
    )
    said = Message(
        id="trtc_r7",
        role="user",
        content="好的。",
        channel="voice",
        source="asr",
        timestamp_ms=T0 + 3_000,
        round_id="r7",
        metadata={"task_id": "t1", "sentences": [[T0 + 3_000, "好的。"]]},
    )
    messages, skipped = merge_timeline(
        [ReadResult(source="tencent_im", messages=[typed]), ReadResult(source="trtc", messages=[said])]
    )
    assert [m.id for m in messages] == ["im_k1", "trtc_r7"] and not skipped
    mem = ConvMemory.open(":memory:")
    try:
        for result in (
            ReadResult(source="trtc", messages=[said]),
            ReadResult(source="tencent_im", messages=[typed]),
        ):
            mem.ingest("u_1", [RawInput(result, result.source, name=result.source)])
        assert sorted(m.id for m in mem.store.recent_messages("u_1", 10)) == ["im_k1", "trtc_r7"]
    finally:
        mem.close()
