from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from convmem_graph.errors import SourceFormatError
from convmem_graph.sources import read_payload
from convmem_graph.sources.trtc import join_sentences
from tests.conftest import load_fixture

CALLS = "trtc_callbacks_one_call.json"
R2_USER = "我刚跑完步回来。今天跑了八公里，配速六分半。"
R2_BOT = "哇，八公里！六分半的配速很稳呀，跑完记得拉伸一下腿。"


def _wrapper() -> Any:
    return load_fixture(CALLS)


def _bodies() -> list[dict[str, Any]]:
    return [json.loads(d["raw_body"]) for d in _wrapper()["deliveries"]]


def _event(event: int, ms: int, payload: dict[str, Any], task: str = "t1") -> dict[str, Any]:
    return {
        "EventGroupId": 9,
        "EventType": event,
        "CallbackTs": ms + 40,
        "EventInfo": {"EventMsTs": ms, "TaskId": task, "RoomId": "room", "RoomIdType": 1, "Payload": payload},
    }


def test_fixture_turns_roles_and_order() -> None:
    r = read_payload(_wrapper())
    assert r.source == "trtc"
    assert r.user_id == "u_10086"
    assert [(m.round_id, m.role, m.content) for m in r.messages] == [
        ("r-0001-welcome", "assistant", "林晓，我在呢～今天想聊点什么？"),
        ("r-0002", "user", R2_USER),
        ("r-0002", "assistant", R2_BOT),
        ("r-0003", "user", "对了，下周我要去成都出差，有什么好吃的推荐吗？不要辣的，我最近胃不好。"),
        ("r-0003", "assistant", "成都不辣的也很多！"),
        ("r-0004", "user", "Wait, 我记得你上次说过钟水饺？"),
        ("r-0004", "assistant", "对，钟水饺可以选不加红油的版本。"),
    ]
    assert [m.source for m in r.messages] == ["greeting", "asr", "llm", "asr", "llm", "asr", "llm"]
    assert all(m.channel == "voice" for m in r.messages)
    assert r.messages[1].timestamp_ms == 1767272406850
    assert r.messages[1].speaker_id == "u_10086" and r.messages[2].speaker_id == "ai_xiaoyu_bot"
    assert r.messages[1].metadata["sentences"] == [
        [1767272406850, "我刚跑完步回来。"],
        [1767272409520, "今天跑了八公里，配速六分半。"],
    ]


def test_barged_in_round_is_interrupted() -> None:
    r = read_payload(_wrapper())
    assert [(m.round_id, m.interrupted) for m in r.messages if m.interrupted] == [("r-0003", True)]
    assert all(not m.partial for m in r.messages)


def test_skipped_by_reason() -> None:
    r = read_payload(_wrapper())
    assert Counter(s.reason for s in r.skipped) == {"event_type_ignored": 8, "duplicate_delivery": 1}
    dup = next(s for s in r.skipped if s.reason == "duplicate_delivery")
    assert dup.path == "deliveries[6].raw_body"
    details = [s.detail for s in r.skipped if s.reason == "event_type_ignored"]
    assert details[0] == "901 EVENT_TYPE_AI_SERVICE_START"
    assert "908 EVENT_TYPE_AI_ERROR_METRIC_CALLBACK (interruption of round r-0003)" in details


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_any_delivery_order_gives_the_same_turns(seed: int) -> None:
    reference = read_payload(_wrapper())
    wrapper = _wrapper()
    random.Random(seed).shuffle(wrapper["deliveries"])
    shuffled = read_payload(wrapper)
    assert [(m.id, m.content, m.role, m.source) for m in shuffled.messages] == [
        (m.id, m.content, m.role, m.source) for m in reference.messages
    ]


def test_bodies_raw_strings_and_single_body() -> None:
    bodies = _bodies()
    # Without the wrapper the bot is recognized from its 905 events.
    by_dicts = read_payload(bodies)
    assert by_dicts.source == "trtc"
    assert [m.content for m in by_dicts.messages][1:3] == [R2_USER, R2_BOT]
    assert [m.role for m in by_dicts.messages] == [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    raw = [d["raw_body"] for d in _wrapper()["deliveries"]]
    by_raw = read_payload(raw)
    assert [m.id for m in by_raw.messages] == [m.id for m in by_dicts.messages]
    # One 903 alone names no bot: its speaker is not guessed to be the user.
    alone = read_payload(bodies[4])
    assert alone.messages == [] and [i.reason for i in alone.skipped] == ["speaker_unknown"]
    one = read_payload(bodies[4], bot_ids=["ai_xiaoyu_bot"])
    assert [(m.role, m.content) for m in one.messages] == [("user", "我刚跑完步回来。")]
    assert read_payload(raw[4], bot_ids=["ai_xiaoyu_bot"]).messages[0].id == one.messages[0].id


def test_a_904_names_the_human_so_the_other_speaker_is_the_bot() -> None:
    events = [
        _event(904, 1767272404000, {"UserId": "u_1", "RoundId": "r1"}),
        _event(903, 1767272405000, {"UserId": "u_1", "Text": "我到家了。", "RoundId": "r1"}),
        _event(903, 1767272406000, {"UserId": "bot_x", "Text": "欢迎回来！", "RoundId": "r1"}),
    ]
    result = read_payload(events)
    assert [(m.role, m.speaker_id) for m in result.messages] == [("user", "u_1"), ("assistant", "bot_x")]


def test_bot_ids_decide_roles_without_905() -> None:
    events = [
        _event(903, 1767272403000, {"UserId": "bot", "Text": "Hi there.", "RoundId": "r1"}),
        _event(903, 1767272404000, {"UserId": "human", "Text": "Hello.", "RoundId": "r2"}),
        _event(903, 1767272405000, {"UserId": "human", "Text": "How are you", "RoundId": "r2"}),
    ]
    # Without the bot's id nothing tells who is who: no turn is guessed to be the user's.
    unknown = read_payload(events)
    assert unknown.messages == []
    assert [s.reason for s in unknown.skipped] == ["speaker_unknown", "speaker_unknown"]
    r = read_payload(events, bot_ids=["bot"])
    assert [(m.role, m.source, m.content) for m in r.messages] == [
        ("assistant", "greeting", "Hi there."),
        ("user", "asr", "Hello. How are you"),
    ]
    assert r.user_id == "human"


def test_905_text_wins_and_generated_text_is_original_when_interrupted() -> None:
    events = [
        _event(903, 1767272404000, {"UserId": "u", "Text": "讲个故事", "RoundId": "r1"}),
        _event(903, 1767272405000, {"UserId": "bot", "Text": "从前有座山，", "RoundId": "r1"}),
        _event(903, 1767272406000, {"UserId": "bot", "Text": "山里有座庙。", "RoundId": "r1"}),
        _event(905, 1767272407000, {"UserId": "bot", "Text": "从前有座山，", "RoundId": "r1"}),
        _event(908, 1767272407100, {"Metric": "interruption", "Tag": {"RoundId": "r1", "Code": 0}}),
    ]
    bot = read_payload(events).messages[1]
    assert (bot.role, bot.content, bot.interrupted, bot.original) == (
        "assistant",
        "从前有座山，",
        True,
        "从前有座山，山里有座庙。",
    )


def test_semantic_duplicate_with_new_callback_ts_is_dropped() -> None:
    first = _event(903, 1767272404000, {"UserId": "u", "Text": "你好", "RoundId": "r1"})
    retry = json.loads(json.dumps(first))
    retry["CallbackTs"] += 10_000
    r = read_payload([first, retry], bot_ids=["bot"])
    assert [s.reason for s in r.skipped] == ["duplicate_delivery"]
    assert [m.content for m in r.messages] == ["你好"]


def test_other_event_group_is_ignored() -> None:
    body = _event(1501, 1767272404000, {"UserId": "u"})
    body["EventGroupId"] = 15
    r = read_payload([body], "trtc")
    assert [(s.reason, s.path) for s in r.skipped] == [("event_type_ignored", "[0].EventGroupId")]


def test_bad_callbacks_lenient_and_strict() -> None:
    wrapper = _wrapper()
    wrapper["deliveries"][4]["raw_body"] = '{"EventGroupId": 9, "EventType": 903, "EventInfo": '
    body = json.loads(wrapper["deliveries"][8]["raw_body"])
    body["EventInfo"]["Payload"]["Text"] = ["not", "text"]
    wrapper["deliveries"][8]["raw_body"] = json.dumps(body)
    r = read_payload(wrapper)
    assert [(s.reason, s.path) for s in r.skipped if s.reason == "invalid"] == [
        ("invalid", "deliveries[4].raw_body"),
        ("invalid", "deliveries[8].raw_body.EventInfo.Payload.Text"),
    ]
    assert (
        next(m for m in r.messages if m.round_id == "r-0002" and m.role == "user").content
        == "今天跑了八公里，配速六分半。"
    )
    # The 905 text still gives the bot's full round.
    assert next(m for m in r.messages if m.round_id == "r-0002" and m.role == "assistant").content == R2_BOT
    with pytest.raises(SourceFormatError) as err:
        read_payload(wrapper, lenient=False)
    assert err.value.path == "deliveries[4].raw_body"


def test_wrong_structure_raises() -> None:
    with pytest.raises(SourceFormatError):
        read_payload({"deliveries": "x"}, "trtc")
    with pytest.raises(SourceFormatError):
        read_payload(3.5, "trtc")


@pytest.mark.parametrize(
    ("parts", "joined"),
    [
        (["我刚跑完步回来。", "今天跑了八公里。"], "我刚跑完步回来。今天跑了八公里。"),
        (["Hello.", "How are you?"], "Hello. How are you?"),
        (["Wait,", "我记得"], "Wait,我记得"),
        (["ok ", " ", "fine"], "ok fine"),
        ([], ""),
    ],
)
def test_join_sentences(parts: list[str], joined: str) -> None:
    assert join_sentences(parts) == joined
