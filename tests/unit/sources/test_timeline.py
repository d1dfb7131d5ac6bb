from __future__ import annotations

import json
from collections import Counter
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.models import Message, ReadResult
from convmem_graph.sources import merge_timeline, normalize_text, read_payload, timeline
from tests.conftest import load_fixture

ALL = (
    "agora_history_response.json",
    "agora_webhook_103_agent_history.json",
    "agora_custom_llm_request.json",
    "tencent_im_roammsg_exchange.json",
    "trtc_callbacks_one_call.json",
)


def _msg(
    id_: str, ts: int, text: str, *, role: str = "user", channel: str = "im", turn: int | None = None
) -> Message:
    return Message(
        id=id_,
        role=role,
        content=text,
        channel=channel,
        source="message",
        timestamp_ms=ts,
        turn_id=turn,
    )


def test_all_fixtures_merge_into_one_timeline() -> None:
    results = [read_payload(load_fixture(name)) for name in ALL]
    messages, skipped = merge_timeline(results)
    # 11 Agora (history; 103 and custom-LLM copies collapse into it) + 11 IM + 7 TRTC
    assert len(messages) == 29
    ts = [m.timestamp_ms for m in messages]
    assert ts == sorted(ts)
    dup = [s for s in skipped if s.reason == "duplicate"]
    assert len(dup) == 12
    assert {s.path for s in dup} >= {"payload.contents[0]", "messages[7]"}
    agora = [m for m in messages if m.id.startswith("ag_")]
    # the history copies win: they carry turn_id (and the interruption)
    assert all(m.turn_id is not None for m in agora)
    assert sum(m.interrupted for m in agora) == 1
    assert Counter(s.reason for s in skipped)["event_type_ignored"] == 8


def test_reading_twice_changes_nothing() -> None:
    results = [read_payload(load_fixture(name)) for name in ALL]
    once, _ = merge_timeline(results)
    twice, skipped = merge_timeline(results + [read_payload(load_fixture(name)) for name in ALL])
    assert [m.id for m in twice] == [m.id for m in once]
    assert [m.content for m in twice] == [m.content for m in once]
    assert Counter(s.reason for s in skipped)["duplicate"] > 12


def test_ties_keep_input_order() -> None:
    a = ReadResult(source="openai", messages=[_msg("a", 5, "one"), _msg("b", 5, "two")])
    b = ReadResult(source="openai", messages=[_msg("c", 5, "three"), _msg("d", 1, "zero")])
    messages, _ = merge_timeline([a, b])
    assert [m.content for m in messages] == ["zero", "one", "two", "three"]


def test_cross_payload_duplicates_and_window() -> None:
    im = ReadResult(
        source="tencent_im", messages=[_msg("im1", 1_000_000, "好的，明早 7 点叫你！", role="assistant")]
    )
    near = ReadResult(
        source="trtc",
        messages=[_msg("v1", 1_009_000, "好的 明早7点叫你", role="assistant", channel="voice", turn=3)],
    )
    far = ReadResult(
        source="trtc", messages=[_msg("v2", 1_030_000, "好的 明早7点叫你", role="assistant", channel="voice")]
    )
    messages, skipped = merge_timeline([im, near, far])
    # the voice copy within 10 s has a turn id: it is kept; the one 30 s later is a real repeat
    assert [m.id for m in messages] == ["v1", "v2"]
    assert [(s.reason, s.detail) for s in skipped] == [("duplicate", "im1 duplicates v1 (im)")]
    narrow, _ = merge_timeline([im, near, far], dedupe_window_ms=1000)
    assert len(narrow) == 3


def test_repeats_inside_one_payload_and_other_roles_are_kept() -> None:
    one = ReadResult(source="openai", messages=[_msg("a", 1000, "好"), _msg("b", 2000, "好")])
    other_role = ReadResult(source="openai", messages=[_msg("c", 1500, "好", role="assistant")])
    messages, skipped = merge_timeline([one, other_role])
    assert [m.id for m in messages] == ["a", "c", "b"]
    assert skipped == []


def test_same_id_prefers_finished_state() -> None:
    partial = _msg("x", 1000, "太棒了").model_copy(update={"partial": True})
    final = _msg("x", 1000, "太棒了！今晚去吃火锅吧")
    messages, skipped = merge_timeline(
        [
            ReadResult(source="tencent_im", messages=[partial]),
            ReadResult(source="tencent_im", messages=[final]),
        ]
    )
    assert [(m.content, m.partial) for m in messages] == [("太棒了！今晚去吃火锅吧", False)]
    assert [s.reason for s in skipped] == ["duplicate"]


def test_trtc_turn_split_across_payloads_is_rejoined() -> None:
    wrapper = load_fixture("trtc_callbacks_one_call.json")
    bodies = [json.loads(d["raw_body"]) for d in wrapper["deliveries"]]
    whole = read_payload(wrapper)
    pieces = [read_payload(b, bot_ids=["ai_xiaoyu_bot"]) for b in reversed(bodies)]
    messages, skipped = merge_timeline(pieces)
    assert [(m.id, m.role, m.content) for m in messages] == [
        (m.id, m.role, m.content) for m in whole.messages
    ]
    # read alone, the welcome turn cannot be told from a reply
    assert [m.source for m in messages] == ["llm", "asr", "llm", "asr", "llm", "asr", "llm"]
    r2 = next(m for m in messages if m.round_id == "r-0002" and m.role == "user")
    assert r2.content == "我刚跑完步回来。今天跑了八公里，配速六分半。"
    assert r2.timestamp_ms == 1767272406850
    assert Counter(s.reason for s in skipped)["duplicate"] == 1  # the retried delivery


def test_normalize_text() -> None:
    assert normalize_text("Hello, World!") == normalize_text("hello world")
    assert normalize_text("ＡＢＣ１２３") == "abc123"
    assert normalize_text("？！") == ""  # nothing but punctuation: never collapsed by the merge


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["user", "assistant"]),
                st.sampled_from(["ok", "OK!", "hello there", "好的", "see you"]),
                st.integers(min_value=0, max_value=60_000),
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([0, 5_000, 10_000]),
)
def test_skipping_isolated_messages_changes_nothing(
    payloads: list[list[tuple[str, str, int]]], window: int
) -> None:
    """Only messages near another payload's are compared; the result equals comparing all."""
    results = [
        ReadResult(
            source="openai",
            messages=[
                _msg(f"p{p}m{i}", 1_767_268_800_000 + ts, text, role=role, channel=("im", "voice")[p % 2])
                for i, (role, text, ts) in enumerate(items)
            ],
        )
        for p, items in enumerate(payloads)
    ]
    fast = merge_timeline(results, dedupe_window_ms=window)
    with patch.object(timeline, "_near_other_payloads", lambda entries, _window: entries):
        full = merge_timeline(results, dedupe_window_ms=window)
    assert fast == full
