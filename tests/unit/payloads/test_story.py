"""The story memory of 林晓 used by the payload tests, and isolation tests across all builders.

Other payload test modules import the builders below; the fixtures in tests/fixtures carry the
expected vendor shapes.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from convmem_graph.models import Fragment, MemorySnapshot, Message, Summary, VariableValue
from convmem_graph.payloads import (
    AgoraOptions,
    MemoryBlockOptions,
    TRTCOptions,
    build_custom_llm_messages,
    build_join_body,
    build_langchain_messages,
    build_memory_block,
    build_openai_messages,
    build_start_ai_conversation,
    build_update_body,
)

MEMORY_ID = "mem_u10086"
PERSONA = (
    "你是「小雨」，一个温柔、幽默的 AI 陪伴伙伴。用简短口语化的中文回答，用户说英文时可以用英文回答。"
    "每次回复不超过三句话。"
)
SUMMARY = "最近一周用户经常加班到很晚，情绪有些疲惫，上次聊到想周末去西湖边跑步。"
TRIP_EXPIRES = 1771084800000  # 2026-02-15 00:00 +08:00


def story_variables() -> dict[str, VariableValue]:
    return {
        "name": VariableValue(name="name", value="林晓", origin="manual"),
        "city": VariableValue(name="city", value="杭州", origin="inferred"),
        "occupation": VariableValue(name="occupation", value="产品经理", origin="inferred"),
        "birth_year": VariableValue(name="birth_year", value=1996, origin="inferred"),
    }


def story_fragments(memory_id: str = MEMORY_ID) -> list[Fragment]:
    # Rank (recency) order: mango, trip, cat, noodle; the block renders facts then recent facts.
    return [
        Fragment(
            id="f_cat",
            memory_id=memory_id,
            content="用户喜欢跑步，养了一只叫「年糕」的橘猫。",
            category="hobby",
            key="hobby:running",
            updated_at=1767000000000,
        ),
        Fragment(
            id="f_trip",
            memory_id=memory_id,
            content="用户 2026-02-10 至 02-14 去成都出差。",
            category="plan",
            key="trip:chengdu",
            transient=True,
            expires_at=TRIP_EXPIRES,
            updated_at=1767268828000,
        ),
        Fragment(
            id="f_mango",
            memory_id=memory_id,
            content="用户对芒果过敏。",
            category="health",
            key="allergy:mango",
            updated_at=1767268830000,
        ),
        Fragment(
            id="f_noodle",
            memory_id=memory_id,
            content="用户吃面不放香菜。",
            category="food",
            key="food:coriander",
            updated_at=1766900000000,
        ),
    ]


def story_messages(memory_id: str = MEMORY_ID) -> list[Message]:
    """The Agora call of agora_custom_llm_request.json as normalized messages."""

    def msg(i: int, role: str, content: str, turn: int, ts: int, source: str, **kw: Any) -> Message:
        speaker = "10086" if role == "user" else None
        return Message(
            id=f"ag_{i}",
            memory_id=memory_id,
            role=role,  # type: ignore[arg-type]
            content=content,
            channel="voice",
            source=source,
            timestamp_ms=ts,
            turn_id=turn,
            speaker_id=speaker,
            **kw,
        )

    return [
        msg(0, "assistant", "晚上好呀林晓，我是小雨。今天过得怎么样？", 0, 1767268801250, "greeting"),
        msg(1, "user", "还行吧，就是今天又加班到九点，有点累。", 1, 1767268809870, "asr"),
        msg(2, "assistant", "辛苦啦！加班到这么晚，晚饭吃了吗？", 1, 1767268811420, "llm"),
        msg(
            3,
            "user",
            "吃了，点了一份不放香菜的牛肉面。By the way, I'm allergic to mango, remember that.",
            2,
            1767268822030,
            "asr",
        ),
        msg(
            4,
            "assistant",
            "好的，我记住了，你对芒果过敏，以后推荐水果时我会避开",
            2,
            1767268824110,
            "llm",
            interrupted=True,
            original="好的，我记住了，你对芒果过敏，以后推荐水果时我会避开芒果和芒果做的甜品。周末要不要试试草莓蛋糕？",
            metadata={"interrupt_timestamp_ms": 1767268827390, "agent_id": "A42"},
        ),
        msg(5, "user", "对对，还有我下个月要去成都出差。", 3, 1767268827800, "asr"),
    ]


def story_snapshot(memory_id: str = MEMORY_ID) -> MemorySnapshot:
    return MemorySnapshot(
        memory_id=memory_id,
        variables=story_variables(),
        fragments=story_fragments(memory_id),
        summary=Summary(text=SUMMARY, tokens=38, covers_until_ms=1767268800000),
        recent=story_messages(memory_id),
    )


def all_payloads(snapshot: MemorySnapshot) -> dict[str, Any]:
    """Every payload shape built from ``snapshot``."""
    llm = {"LLMType": "openai", "Model": "qwen-plus", "APIKey": "sk-t"}
    trtc = TRTCOptions(persona="你是小雨。", llm=llm)
    agora = AgoraOptions(persona="你是小雨。", params={"model": "qwen-plus"}, llm={"url": "https://x/v1"})
    props = {"channel": "c", "token": "t", "agent_rtc_uid": "9001", "remote_rtc_uids": ["10086"]}
    return {
        "block": build_memory_block(snapshot).text,
        "trtc": build_start_ai_conversation(
            snapshot,
            trtc,
            sdk_app_id=1400000000,
            room_id="r1",
            agent_config={"UserId": "bot", "UserSig": "sig", "TargetUserId": "u"},
            tts_config={"TTSType": "flow"},
        ),
        "join": build_join_body(snapshot, agora, name="n", properties=props),
        "update": build_update_body(snapshot, agora),
        "custom": build_custom_llm_messages(snapshot, agora),
        "openai": build_openai_messages(snapshot, persona="p"),
        "langchain": [m.model_dump() for m in build_langchain_messages(snapshot, persona="p")],
    }


def _other_memory() -> MemorySnapshot:
    other = "mem_other"
    return MemorySnapshot(
        memory_id=other,
        variables={"name": VariableValue(name="name", value="王秘密", origin="manual")},
        fragments=[Fragment(id="f_secret", memory_id=other, content="用户的保险箱密码是秘密B。", key="k")],
        summary=Summary(text="秘密B的摘要。", tokens=6, covers_until_ms=1),
        recent=[
            Message(
                id="o1",
                memory_id=other,
                role="user",
                content="秘密B的消息",
                channel="im",
                source="message",
                timestamp_ms=1,
            )
        ],
    )


def test_story_snapshot_keeps_active_fragments_only() -> None:
    snap = story_snapshot()
    assert [f.id for f in snap.fragments] == ["f_cat", "f_trip", "f_mango", "f_noodle"]


def test_payloads_contain_only_the_given_memory() -> None:
    mine = json.dumps(all_payloads(story_snapshot()), ensure_ascii=False)
    theirs = json.dumps(all_payloads(_other_memory()), ensure_ascii=False)
    assert "秘密B" not in mine and "王秘密" not in mine
    assert "芒果" not in theirs and "林晓" not in theirs
    assert "秘密B" in theirs


def test_builders_keep_no_state_between_memories() -> None:
    first = all_payloads(story_snapshot())
    all_payloads(_other_memory())
    again = all_payloads(story_snapshot())
    assert again == first


def test_builders_do_not_modify_the_snapshot() -> None:
    snap = story_snapshot()
    before = snap.model_dump()
    all_payloads(snap)
    build_memory_block(snap, MemoryBlockOptions(query="芒果", budget_tokens=60, now_ms=TRIP_EXPIRES + 1))
    assert snap.model_dump() == before


def test_fragment_of_another_memory_is_refused() -> None:
    snap = story_snapshot()
    foreign = Fragment(id="f_x", memory_id="mem_other", content="别人的事实。", key="x", updated_at=10**13)
    bad = snap.model_copy(update={"fragments": [*snap.fragments, foreign]})
    with pytest.raises(ValueError, match="f_x.*mem_other"):
        build_memory_block(bad)


def test_message_of_another_memory_is_refused() -> None:
    snap = story_snapshot()
    bad = snap.model_copy(update={"recent": [*snap.recent, *_other_memory().recent]})
    with pytest.raises(ValueError, match=r"MemorySnapshot\.recent\[6\]\.memory_id"):
        build_openai_messages(bad)


def _large_snapshot(n: int) -> MemorySnapshot:
    base = story_snapshot()
    topics = ["跑步", "游泳", "咖啡", "猫", "加班", "旅行", "电影", "读书"]
    noise = [
        Fragment(
            id=f"n{i}",
            memory_id=MEMORY_ID,
            content=f"用户提到第{i}件事：喜欢{topics[i % len(topics)]}，编号{i}。",
            key=f"k{i}",
            updated_at=(i * 7919) % 1_000_003,
            transient=i % 10 == 0,
            expires_at=((i * 104729) % 2_000_000) if i % 10 == 0 else None,
        )
        for i in range(n)
    ]
    return base.model_copy(update={"fragments": noise + list(base.fragments)})


def test_call_start_path_is_linear_for_10k_fragments() -> None:
    # Catches accidental quadratic work: CPU time (the process's own, so a loaded host does not
    # fail it) of a call start at 10k fragments against 1k; linear work is ~10x, quadratic ~100x.
    options = TRTCOptions(persona="你是小雨。", block=MemoryBlockOptions(now_ms=1_000_000))
    agent = {"UserId": "bot", "UserSig": "sig", "TargetUserId": "u"}

    def cpu_per_call(snap: MemorySnapshot) -> tuple[float, dict[str, str]]:
        best, body = float("inf"), {}
        for _ in range(3):
            started = time.process_time()
            build_memory_block(snap, options.block)
            body = build_start_ai_conversation(
                snap, options, sdk_app_id=1, room_id="r", agent_config=agent, tts_config="{}"
            )
            best = min(best, time.process_time() - started)
        return best, body

    small, _ = cpu_per_call(_large_snapshot(1_000))
    large, body = cpu_per_call(_large_snapshot(10_000))
    assert large < 0.25 and large < 30 * max(small, 0.002), (small, large)
    assert "用户对芒果过敏。" in json.loads(body["LLMConfig"])["SystemPrompt"]
